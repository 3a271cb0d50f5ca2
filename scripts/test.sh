#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh), runs the CI stages (scripts/ci_stages.sh: the fuzzers, and
# the sanitizer builds when KVGATE_CI_STAGES names them; =main skips all) and then the whole suite.
# The main ctest runs last so that its summary ends the output; a failed stage is also a failed
# test there (`ci_stages`, which prints the end of that stage's log). The exit status is non-zero
# when a stage or the main run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${KVGATE_BUILD_DIR:-$PWD/build}
stages=0
KVGATE_CI_STAGES_DIR=$BUILD_DIR/ci-stages bash scripts/ci_stages.sh || stages=$?
main=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 600 || main=$?
if [ "$main" -ne 0 ]; then exit "$main"; fi
exit "$stages"
