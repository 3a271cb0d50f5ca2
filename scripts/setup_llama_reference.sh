#!/usr/bin/env bash
# Installs the llama.cpp reference (llama-cpp-python) that the engine benchmarks and the reference
# generators compare with, into .venv-llama at the repository root (ignored by git). Idempotent:
# does nothing when that venv already imports the pinned version. Not a project dependency: the
# build and the test suite never need it.
#
# llama.cpp is built from source (PyPI has no binary wheel of llama-cpp-python) without
# -march=native: GGML_NATIVE=OFF with AVX2, FMA and F16C on. The native build picks AMX on some
# Xeons, and that build crashes in llama_decode on some of the machines this was run on.
#   scripts/setup_llama_reference.sh        prints the venv's python on its last line
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv-llama
VERSION=0.3.36  # the version the committed reference vectors name (tests/*/data)
PY=$VENV/bin/python

have() { [ -x "$PY" ] && "$PY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; }
if ! have; then
  if ! command -v cmake > /dev/null || ! command -v g++ > /dev/null || ! python3 -m venv -h > /dev/null 2>&1; then
    bash scripts/setup.sh > /dev/null  # the compilers, cmake and python3-venv come from there
  fi
  [ -x "$PY" ] || python3 -m venv "$VENV"
  echo "setup_llama_reference: building llama-cpp-python $VERSION (llama.cpp from source; several minutes)" >&2
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_OPENMP=ON" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$VENV/bin/pip" install --quiet --no-cache-dir "llama-cpp-python==$VERSION" numpy jinja2 gguf >&2
  have || { echo "setup_llama_reference: llama_cpp $VERSION does not import from $VENV" >&2; exit 1; }
fi
echo "$PY"
