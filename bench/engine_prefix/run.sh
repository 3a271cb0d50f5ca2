#!/usr/bin/env bash
# bench/engine_prefix: cold vs warm TTFT and the eviction experiment (needs scripts/setup.sh first).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 bench/engine_prefix/run.py "$@"
