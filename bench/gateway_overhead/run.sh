#!/usr/bin/env bash
# bench/gateway_overhead: kvgate vs direct vs LiteLLM, side by side. Needs nginx-light and wrk
# (installed below if missing) and a built kvgate (scripts/setup.sh). LiteLLM is optional: set
# LITELLM_BIN or install it into .venv-litellm at the repository root (see README.md here).
set -euo pipefail
cd "$(dirname "$0")/../.."
for p in nginx-light wrk; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p"; }
done
exec python3 bench/gateway_overhead/run.py "$@"
