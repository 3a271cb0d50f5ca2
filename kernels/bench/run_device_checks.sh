#!/usr/bin/env bash
# The GPU check of kernels/cuda, in one call on a machine with an H100/H200 (sm_90a):
#   1. configures and builds kernels/bench standalone (only CUDA, CMake and a C++20 compiler are
#      needed, not the gateway's dependencies), Release, -DCMAKE_CUDA_ARCHITECTURES=90a;
#   2. saves the kernels' register/shared-memory/spill report and a SASS instruction census;
#   3. runs kvgate_cuda_checks: every kernel against its CPU reference on random inputs (seed
#      printed), timed with CUDA events, one table with the fraction of the measured ceilings, then
#      the Qwen3-8B-shaped end-to-end timings. Each row is printed ("row: ...") and flushed as soon
#      as it is measured, so a run cut short (timeout, fault) still leaves every finished row in
#      checks.log; the script then prints those rows again.
# Needs only what a clean checkout has (no build tree, no model, no .venv): CMake >= 3.24, nvcc 12+
# and a C++20 host compiler.
# Exit status: that of kvgate_cuda_checks (0 pass, 1 a correctness failure, 2 a CUDA failure), 3 when
# the build fails, 124 when the checks outrun CHECK_TIMEOUT.
# Environment: OUT (logs; default build-device/out), SEED, CHECK_TIMEOUT (s, default 420),
# BUILD_DIR (default /tmp/kvgate-device-build), CHECK_ARGS (e.g. "--quick" or "--no-e2e").
# Budget: about 1-2 min to build on 16 cores, 3-5 min of checks (predicted; see kernels/NOTES.md),
# inside one 600 s call with CHECK_TIMEOUT's default.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/build-device/out}
BUILD_DIR=${BUILD_DIR:-/tmp/kvgate-device-build}
SEED=${SEED:-$(date +%s)}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-420}
mkdir -p "$OUT"
start=$(date +%s)
echo "== kvgate device checks: seed $SEED, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,driver_version \
  --format=csv 2>&1 | tee "$OUT/nvidia-smi.csv"
nvcc --version | tail -2
cmake --version | head -1

gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
echo "== build"
if ! cmake -S "$ROOT/kernels/bench" -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/build.log" 2>&1 ||
   ! cmake --build "$BUILD_DIR" -j "$(nproc)" >> "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 3
fi
echo "built in $(( $(date +%s) - start )) s"

lib=$(find "$BUILD_DIR" -name 'libkvgate_kernels_cuda.a' | head -1)
if command -v cuobjdump >/dev/null 2>&1 && [ -n "$lib" ]; then
  cuobjdump --dump-resource-usage "$lib" > "$OUT/resource_usage.txt" 2>&1 || true
  cuobjdump --dump-sass "$lib" > "$OUT/sass.txt" 2>&1 || true
  # The prefill kernels must use tensor-core MMA (HMMA); loads should be 128-bit (LDG.E.128).
  # Prefill v2 adds ldmatrix (LDSM) and cp.async (LDGSTS), decode v2 cp.async (LDGSTS); neither
  # may touch local memory (LDL/STL: all of it v1 decode's group-8 spill).
  echo "SASS census: HMMA $(grep -c HMMA "$OUT/sass.txt"), LDG.E.128 $(grep -c 'LDG.E.128' "$OUT/sass.txt")," \
       "LDSM $(grep -c LDSM "$OUT/sass.txt"), LDGSTS $(grep -c LDGSTS "$OUT/sass.txt")," \
       "local memory LDL/STL $(grep -cE '\bLDL|\bSTL' "$OUT/sass.txt")," \
       "prefill v3's wgmma HGMMA $(grep -c HGMMA "$OUT/sass.txt"), TMA UTMALDG $(grep -c UTMALDG "$OUT/sass.txt")"
  awk '/Function .*PrefillV2Kernel/ { n = $0; sub(/.*PrefillV2KernelI/, "", n); sub(/EEEvNS.*/, "", n);
         getline; print "prefill v2 " n ": " $1, $2, $3, $4 }' "$OUT/resource_usage.txt" || true
  # Decode v2 (cp.async ring; expect REG <= 128 for group <= 4, STACK 0, LOCAL 0 everywhere; SHARED
  # is the static merge arrays only, the ring is dynamic: DecodeV2SmemBytes).
  awk '/Function .*PrefillV3Kernel/ { n = $0; sub(/.*PrefillV3KernelI/, "", n); sub(/EEEvNS.*/, "", n);
         getline; print "prefill v3 " n ": " $1, $2, $3, $4 }' "$OUT/resource_usage.txt" || true
  awk '/Function .*DecodeV2Kernel/ { n = $0; sub(/.*DecodeV2KernelI/, "", n); sub(/EEEvNS.*/, "", n);
         getline; print "decode v2 " n ": " $1, $2, $3, $4 }' "$OUT/resource_usage.txt" || true
  gzip -f "$OUT/sass.txt" || true
fi

echo "== checks"
timeout "$CHECK_TIMEOUT" "$BUILD_DIR/bin/kvgate_cuda_checks" --seed "$SEED" ${CHECK_ARGS:-} 2>&1 | tee "$OUT/checks.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && ! grep -q '^seed=.*rows=' "$OUT/checks.log"; then
  echo "== the checks stopped early (exit $rc); rows measured before that:"
  grep '^row: ' "$OUT/checks.log" || echo "(none)"
fi
echo "== exit $rc after $(( $(date +%s) - start )) s (seed $SEED)"
exit "$rc"
