#!/usr/bin/env bash
# bench/soak: a bounded mixed load (three provider types through the simulator and the built-in
# engine, injected faults, clients that leave), then an audit of the store against what the
# clients saw. Sets up what it needs (the build, the model, the Python environment of
# scripts/setup.sh) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x build/bin/kvgate ] || [ ! -x .venv/bin/python ] || [ ! -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  bash scripts/setup.sh
fi
exec .venv/bin/python bench/soak/run.py "$@"
