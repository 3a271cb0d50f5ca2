#!/usr/bin/env bash
# The engine's CUDA path on the lent GPU machine, in two `run` calls, from binaries built here.
#
# Why two calls: one call carries at most 64 MiB, and the bundled model alone is 98 MB. The model is
# split in two; the first call leaves its half in the machine's /tmp (kept while the machine stays
# warm, i.e. the second call must follow within the idle window), the second joins the halves
# (sha256 checked) and runs:
#   - kvgate_cuda_device_tests and kvgate_cuda_backend_tests (kernels and CudaBackend vs references),
#   - kvgate_engine_device_tests --gtest_filter='DeviceTest.Cuda*' (greedy tokens vs the CPU's),
#   - `kvgate generate` on cpu, on cuda, on cuda with --cuda-graphs and on cuda with --fp8-gemm for
#     a few prompts (text and tokens/s side by side; 1000 / tok/s is the decode step time in ms),
#     whether the graphs' text equals the eager cuda text, and the start of the FP8 text.
# The kvgate CLI's libraries (yaml-cpp, OpenSSL, SQLite, curl and its dependencies) travel as a
# tarball with LD_LIBRARY_PATH set; the device image (Ubuntu 24.04, glibc 2.39) runs Debian 12
# binaries as they are.
#
# Here, after `cmake --build build` (CUDA on):
#   kernels/bench/engine_device_carry.sh prepare      # writes .devcarry-a/ and .devcarry-b/
# Then, with the device tool, back to back:
#   run(command="bash .devcarry-a/first.sh",  carry=[".devcarry-a"], timeout_s=120)
#   run(command="bash .devcarry-b/second.sh", carry=[".devcarry-b"], timeout_s=420)
# and give_back. Both folders are added to .git/info/exclude, so nothing else carries them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
BIN=$ROOT/build/bin
A=$ROOT/.devcarry-a
B=$ROOT/.devcarry-b
HALF=50000000  # bytes in the first call's half

prepare() {
  [ -f "$MODEL" ] || { echo "no model at $MODEL (run scripts/setup first)" >&2; exit 1; }
  for f in kvgate libkvgate_cuda.so kvgate_cuda_device_tests kvgate_cuda_backend_tests \
           kvgate_engine_device_tests; do
    [ -f "$BIN/$f" ] || { echo "missing $BIN/$f: build with CUDA first" >&2; exit 1; }
  done
  mkdir -p "$ROOT/.git/info"
  for d in /.devcarry-a/ /.devcarry-b/; do
    grep -qxF "$d" "$ROOT/.git/info/exclude" 2>/dev/null || echo "$d" >> "$ROOT/.git/info/exclude"
  done
  rm -rf "$A" "$B"
  mkdir -p "$A" "$B"
  head -c "$HALF" "$MODEL" > "$A/model.part1"
  tail -c +"$((HALF + 1))" "$MODEL" > "$B/model.part2"
  sha256sum "$MODEL" | cut -d' ' -f1 > "$B/model.sha256"
  echo "$ROOT" > "$B/source_dir"  # KVGATE_SOURCE_DIR baked into the test binaries

  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  for f in kvgate libkvgate_cuda.so kvgate_cuda_device_tests kvgate_cuda_backend_tests \
           kvgate_engine_device_tests; do
    strip -o "$stage/bin/$f" "$BIN/$f"
  done
  # The CLI's shared libraries, except the C/C++ runtime the device image has.
  ldd "$BIN/kvgate" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  tar -C "$stage" -cJf "$B/binaries.tar.xz" bin lib
  rm -rf "$stage"

  cat > "$A/first.sh" <<'EOF'
#!/usr/bin/env bash
set -eu
cp "$(dirname "$0")/model.part1" /tmp/kvgate-model.part1
ls -la /tmp/kvgate-model.part1
EOF
  sed -n '/^# ---- second call ----$/,$p' "${BASH_SOURCE[0]}" | tail -n +2 > "$B/second.sh"
  du -sh "$A" "$B"
  echo "each folder must stay under 64 MiB together with the working tree"
}

case "${1:-}" in
  prepare) prepare ;;
  *) echo "usage: $0 prepare" >&2; exit 2 ;;
esac
exit 0

# ---- second call ----
#!/usr/bin/env bash
# Runs on the GPU machine (copied here as second.sh by `prepare`).
set -u
C=$(cd "$(dirname "$0")" && pwd)
WORK=/tmp/kvgate-engine
# The test binaries look for the model and the greedy references under the source tree they were
# built from (KVGATE_SOURCE_DIR), which need not be where the working tree landed on this machine.
SRC=$(cat "$C/source_dir")
mkdir -p "$WORK" "$SRC/models" "$SRC/tests/local_engine/data"
if [ "$SRC" != "$(pwd)" ]; then cp tests/local_engine/data/greedy_refs.json "$SRC/tests/local_engine/data/"; fi
cat /tmp/kvgate-model.part1 "$C/model.part2" > "$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
got=$(sha256sum "$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf" | cut -d' ' -f1)
[ "$got" = "$(cat "$C/model.sha256")" ] || { echo "model halves do not join (sha256 $got)"; exit 1; }
tar -C "$WORK" -xJf "$C/binaries.tar.xz"
export LD_LIBRARY_PATH=$WORK/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export KVGATE_CUDA_PLUGIN=$WORK/bin/libkvgate_cuda.so
nvidia-smi -L
echo "== kvgate_cuda_device_tests";  timeout 120 "$WORK/bin/kvgate_cuda_device_tests" 2>&1 | tail -6
echo "== kvgate_cuda_backend_tests"; timeout 120 "$WORK/bin/kvgate_cuda_backend_tests" 2>&1 | tail -6
echo "== DeviceTest.Cuda*"
timeout 240 "$WORK/bin/kvgate_engine_device_tests" --gtest_filter='DeviceTest.Cuda*' 2>&1 |
  grep -E "case|pool|OK|FAIL|PASSED|Failure|graphs"
M=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
for p in "1, 2, 3, 4, 5, 6," "Write a haiku about the sea." "Explain what a KV cache is."; do
  for run in cpu cuda cuda-graphs cuda-fp8; do
    flags=(--device "${run%%-*}")
    [ "$run" = cuda-graphs ] && flags+=(--cuda-graphs)
    [ "$run" = cuda-fp8 ] && flags+=(--fp8-gemm)
    timeout 120 "$WORK/bin/kvgate" generate --model "$M" --prompt "$p" --max-tokens 128 --ignore-eos \
      "${flags[@]}" > "$WORK/$run.txt" 2> "$WORK/$run.err"
    echo "$run: $(tail -1 "$WORK/$run.err")"
  done
  if cmp -s "$WORK/cpu.txt" "$WORK/cuda.txt"; then echo "-- '$p': cpu, cuda same text"; else echo "-- '$p': cpu, cuda texts differ"; fi
  if cmp -s "$WORK/cuda.txt" "$WORK/cuda-graphs.txt"; then echo "-- '$p': cuda, cuda-graphs same text"; else echo "-- '$p': cuda, cuda-graphs texts differ"; fi
  # fp8_gemm changes the numbers (docs/engine.md, "FP8 GEMMs"): the text may differ; it must be text.
  echo "-- '$p': cuda-fp8 text: $(head -c 160 "$WORK/cuda-fp8.txt" | tr '\n' ' ')"
done
