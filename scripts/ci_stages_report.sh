#!/usr/bin/env bash
# The main suite's test `ci_stages`: reports the CI stages that scripts/ci_stages.sh ran before
# it (their summary and logs in DIR, written when KVGATE_CI_STAGES_DIR is set, as scripts/test.sh
# does). Passes when every stage passed; fails on a failed stage and prints the end of its log,
# so the failure is in the main run's own summary. Skipped (77) when no stages ran: a local ctest.
set -uo pipefail
DIR=${1:?usage: ci_stages_report.sh DIR}
SUMMARY=$DIR/summary.txt
if [ ! -f "$SUMMARY" ] || [ ! -s "$SUMMARY" ]; then
  echo "ci_stages: no CI stages ran before this suite ($SUMMARY absent or empty)"
  exit 77
fi
failed=0
while read -r stage result seconds; do
  echo "stage $stage: $result in ${seconds} s"
  if [ "$result" != passed ]; then failed=1; fi
done < "$SUMMARY"
if [ "$failed" -eq 0 ]; then exit 0; fi
while read -r stage result _; do
  [ "$result" = passed ] && continue
  echo
  echo "==== the end of stage $stage's log ($DIR/$stage.log):"
  tail -n 80 "$DIR/$stage.log" 2>/dev/null || echo "(no log)"
done < "$SUMMARY"
exit 1
