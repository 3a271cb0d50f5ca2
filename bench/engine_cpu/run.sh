#!/usr/bin/env bash
# One command: build kvgate_bench_engine and compare with llama.cpp (llama-cpp-python, installed
# by scripts/setup_llama_reference.sh when $LLAMA_PYTHON is not set).
#   bench/engine_cpu/run.sh [BUILD_DIR] [extra bench.py args, e.g. --threads 2 --reps 5]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
shift || true
# llama.cpp through llama-cpp-python, installed into .venv-llama on first use.
PY=${LLAMA_PYTHON:-$(bash "$ROOT/scripts/setup_llama_reference.sh" | tail -n 1)}
# A fresh checkout: the project's own setup (packages, model, build) first.
[ -f "$BUILD/CMakeCache.txt" ] || bash "$ROOT/scripts/setup.sh" >&2
cmake --build "$BUILD" --target kvgate_bench_engine -j"$(nproc)" >/dev/null
exec "$PY" "$ROOT/bench/engine_cpu/bench.py" --bench "$BUILD/bin/kvgate_bench_engine" "$@"
