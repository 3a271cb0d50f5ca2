#!/usr/bin/env bash
# bench/keep_warm: keep-warm off vs on vs "always ping" vs a hindsight oracle, billed by kvgate's
# telemetry against the provider simulator. Sets up what it needs (the build and the Python
# environment of scripts/setup.sh) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x build/bin/kvgate ] || [ ! -x .venv/bin/python ]; then bash scripts/setup.sh; fi
exec .venv/bin/python bench/keep_warm/run.py "$@"
