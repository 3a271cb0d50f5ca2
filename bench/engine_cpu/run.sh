#!/usr/bin/env bash
# One command: build kvgate_bench_engine and compare with llama.cpp (llama-cpp-python).
#   bench/engine_cpu/run.sh [BUILD_DIR] [extra bench.py args, e.g. --threads 2 --reps 5]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
shift || true
PY=${LLAMA_PYTHON:-$ROOT/.venv-llama/bin/python}
cmake --build "$BUILD" --target kvgate_bench_engine -j"$(nproc)" >/dev/null
exec "$PY" "$ROOT/bench/engine_cpu/bench.py" --bench "$BUILD/bin/kvgate_bench_engine" "$@"
