#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh) and runs the gateway with the built-in engine on the bundled
# model. Extra arguments go to `kvgate serve` (e.g. --config kvgate.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${KVGATE_BUILD_DIR:-$PWD/build}
exec "$BUILD_DIR/bin/kvgate" serve "$@"
