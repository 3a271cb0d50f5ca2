#!/usr/bin/env bash
# bench/seed_experiments: the four seed tables on the built-in engine (see README.md here).
#   bash bench/seed_experiments/run.sh [--threads N] [--experiments 1,2,3,4]
#                                      [--lengths 500,1000,2000] [--reps 3]
set -euo pipefail
cd "$(dirname "$0")/../.."
# The experiments need the kvgate binary, the offload bench and the bundled model; setup.sh
# installs and builds whatever is missing (it skips what is there).
if [ ! -x build/bin/kvgate ] || [ ! -x build/bin/kvgate_bench_offload ] ||
   [ ! -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  bash scripts/setup.sh
fi
# -u: each table shows as it is measured, also when the output goes to a file.
exec python3 -u bench/seed_experiments/run.py "$@"
