#!/usr/bin/env bash
# CI stage "format" (docs/testing.md): every C++ and CUDA source in git is formatted by the
# committed .clang-format (clang-format-16), except the files named in .clang-format-pending, the
# sources from before this check that are not formatted yet. The list only shrinks: a pending file
# that is now formatted fails the stage until it is taken off the list, and a new file is never
# added to it (format it: clang-format-16 -i FILE). Prints each offending file with the command
# that fixes it.
set -uo pipefail
cd "$(dirname "$0")/.."
FORMAT=${CLANG_FORMAT:-clang-format-16}
if ! command -v "$FORMAT" > /dev/null; then
  echo "ci_format: $FORMAT is not installed (scripts/setup.sh installs it)"
  exit 1
fi
declare -A pending=()
while read -r f; do
  [ -n "$f" ] && [ "${f:0:1}" != "#" ] && pending["$f"]=1
done < .clang-format-pending
unformatted=() stale=() checked=0
while IFS= read -r f; do
  if "$FORMAT" --dry-run -Werror "$f" > /dev/null 2>&1; then
    [ -n "${pending[$f]:-}" ] && stale+=("$f")
  else
    [ -z "${pending[$f]:-}" ] && unformatted+=("$f")
  fi
  checked=$((checked + 1))
done < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
for f in "${!pending[@]}"; do
  [ -e "$f" ] || stale+=("$f")
done
echo "ci_format: $checked files checked, ${#pending[@]} pending, ${#unformatted[@]} unformatted," \
  "${#stale[@]} to take off the pending list"
for f in "${unformatted[@]}"; do echo "  not formatted: $f   (fix: $FORMAT -i $f)"; done
for f in "${stale[@]}"; do echo "  formatted or gone, take it off .clang-format-pending: $f"; done
[ ${#unformatted[@]} -eq 0 ] && [ ${#stale[@]} -eq 0 ]
