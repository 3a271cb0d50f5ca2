#!/usr/bin/env bash
# CI stage "fuzz" (docs/testing.md): builds every libFuzzer target in its own tree (build-fuzz,
# clang-16, ASan+UBSan) and runs each one from its committed seed corpus (fuzz/corpus/<target>)
# for a bounded time. Fails when a target crashes, leaks, hangs or trips a sanitizer, and then says
# where the failing input is.
#   KVGATE_FUZZ_SECONDS  seconds per target (default 20)
#   KVGATE_FUZZ_TARGETS  which targets (default: all), e.g. "raw_json config"
#   KVGATE_FUZZ_BUILD_DIR, KVGATE_CI_JOBS
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${KVGATE_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
SECS=${KVGATE_FUZZ_SECONDS:-20}
JOBS=${KVGATE_CI_JOBS:-$(nproc)}
read -r -a TARGETS <<< "${KVGATE_FUZZ_TARGETS:-gguf tokenizer raw_json http_session sse_stream event_stream usage config json_schema engine_request}"

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=clang-16 CXX=clang++-16 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKVGATE_FUZZ=ON -DKVGATE_TESTS=OFF -DKVGATE_CUDA=OFF
fi
cmake --build "$BUILD" --target kvgate_fuzzers -j"$JOBS"

# Findings abort (so libFuzzer saves the input); leaks count as findings.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if command -v llvm-symbolizer-16 > /dev/null; then  # Debian: llvm-16
  export ASAN_SYMBOLIZER_PATH="$(command -v llvm-symbolizer-16)"
fi

failed=()
for t in "${TARGETS[@]}"; do
  bin=$BUILD/bin/${t}_fuzz
  seeds=$ROOT/fuzz/corpus/$t
  # New inputs go to the first directory (in the build tree), never into the committed corpus.
  work=$BUILD/fuzz-work/$t
  artifacts=$BUILD/fuzz-artifacts/$t
  log=$BUILD/fuzz-logs/$t.log
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  rm -f "$artifacts"/*
  rc=0
  "$bin" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "$seeds" > "$log" 2>&1 || rc=$?
  stats=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 | sed -E 's/^#([0-9]+)[[:space:]]+DONE[[:space:]]+/execs: \1 /' || true)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz: $t ok (${SECS}s; ${stats:-no stats})"
    continue
  fi
  failed+=("$t")
  echo "fuzz: $t FAILED (exit $rc); the end of its log ($log):"
  tail -n 60 "$log" | sed 's/^/    /'
  for a in "$artifacts"/*; do
    [ -e "$a" ] || continue
    echo "fuzz: $t: the failing input is $a"
    echo "      reproduce it: $bin $a"
    echo "      fix the bug, then add the input to the seed corpus so every later run replays it:"
    echo "        cp $a fuzz/corpus/$t/ && git add fuzz/corpus/$t/$(basename "$a")"
  done
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#TARGETS[@]} targets ran ${SECS}s each without a finding"
