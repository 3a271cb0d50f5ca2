#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh) and runs the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${KVGATE_BUILD_DIR:-$PWD/build}
exec ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 600
