#!/usr/bin/env bash
# The CI stages that run before the main test suite (scripts/test.sh; docs/testing.md):
#   fuzz       scripts/ci_fuzz.sh                 every libFuzzer target, 20 s each from its corpus
#   asan       scripts/ci_sanitizers.sh asan      the input-facing gtest binaries under ASan+UBSan
#   asan-full  scripts/ci_sanitizers.sh asan-full every gtest binary under ASan+UBSan
#   tsan       scripts/ci_sanitizers.sh tsan      the concurrency tests under TSan
#   tsa        scripts/ci_tsa.sh                  clang-16 -Wthread-safety -Werror over every source
#   format     scripts/ci_format.sh               clang-format-16 over every source (.clang-format-pending:
#                                                 the older files not formatted yet)
#                                                 (the GUARDED_BY / REQUIRES annotations)
# KVGATE_CI_STAGES picks them (default "fuzz asan tsan tsa"; "main" or "" runs none of them, for a
# quick local scripts/test.sh). asan-full is opt-in: its engine and kernel tests run forward passes
# under ASan, which would take CI past its time on 2 cores. Each stage's output streams as it runs;
# a summary follows. Exits non-zero when any stage failed, after running all of them.
# With KVGATE_CI_STAGES_DIR set (scripts/test.sh sets it inside the build tree), each stage's
# output is also kept there as <stage>.log and the summary as summary.txt: the main suite's test
# `ci_stages` (scripts/ci_stages_report.sh) fails on a failed stage and prints the end of its log,
# so the failure shows in the summary that ends CI's output, not only far above it.
set -uo pipefail
cd "$(dirname "$0")/.."
read -r -a STAGES <<< "${KVGATE_CI_STAGES-format fuzz asan tsan tsa}"
results=()
status=0
REPORT_DIR=${KVGATE_CI_STAGES_DIR-}
if [ -n "$REPORT_DIR" ]; then
  rm -rf "$REPORT_DIR" && mkdir -p "$REPORT_DIR" && : > "$REPORT_DIR/summary.txt"
fi
for stage in "${STAGES[@]}"; do
  case "$stage" in
    main) continue ;;
    fuzz) cmd=(bash scripts/ci_fuzz.sh) ;;
    asan|asan-full|tsan) cmd=(bash scripts/ci_sanitizers.sh "$stage") ;;
    tsa) cmd=(bash scripts/ci_tsa.sh) ;;
    format) cmd=(bash scripts/ci_format.sh) ;;
    *) echo "ci_stages: unknown stage '$stage' (format, fuzz, asan, asan-full, tsan, tsa, main)"; results+=("$stage: unknown"); status=1; continue ;;
  esac
  echo "==== stage $stage: ${cmd[*]}"
  start=$(date +%s)
  if [ -n "$REPORT_DIR" ]; then
    "${cmd[@]}" 2>&1 | tee "$REPORT_DIR/$stage.log"
    rc=${PIPESTATUS[0]}
  else
    rc=0
    "${cmd[@]}" || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then r=passed; else r=FAILED; status=1; fi
  results+=("$stage: $r in $(( $(date +%s) - start )) s")
  if [ -n "$REPORT_DIR" ]; then echo "$stage $r $(( $(date +%s) - start ))" >> "$REPORT_DIR/summary.txt"; fi
  echo "==== stage $stage: $r"
done
if ((${#results[@]})); then
  echo "==== CI stages before the main test suite:"
  printf '     %s\n' "${results[@]}"
fi
exit $status
