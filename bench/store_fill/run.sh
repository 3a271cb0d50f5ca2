#!/usr/bin/env bash
# One command: build kvgate_bench_store, fill a fresh store with 100k threads and 1M requests
# through the store's own writer, then time every list query the dashboard runs.
#   bench/store_fill/run.sh [BUILD_DIR] [--threads N] [--requests N] [--db PATH] [--reps N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
shift || true
cmake --build "$BUILD" --target kvgate_bench_store -j"$(nproc)" >/dev/null
exec "$BUILD/bin/kvgate_bench_store" "$@"
