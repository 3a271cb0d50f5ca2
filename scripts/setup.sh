#!/usr/bin/env bash
# Installs everything kvgate needs on Debian 12 and builds it. Idempotent: each step is skipped when
# its result is already there. Used by both README commands (scripts/run.sh, scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# 1. Debian packages ------------------------------------------------------------------------------
APT_PACKAGES=(
  build-essential cmake ccache pkg-config ca-certificates
  libboost1.81-dev nlohmann-json3-dev libsqlite3-dev libyaml-cpp-dev libssl-dev
  libxxhash-dev libcurl4-openssl-dev libgtest-dev libgmock-dev libmimalloc-dev
  libpq-dev postgresql  # the PostgreSQL store (libpq) and the server its tests start themselves
  python3 python3-venv python3-pip unzip openssl
  prometheus  # promtool validates the /metrics exposition in the tests
  libjs-chart.js  # the dashboard's charts, compiled into the kvgate binary (web/CMakeLists.txt)
  chromium chromium-driver  # the dashboard's browser tests (tests/web), driven by Selenium
  # The fuzz stage (scripts/ci_fuzz.sh): clang with libFuzzer and the sanitizer runtimes, and
  # llvm-symbolizer for readable reports.
  clang-16 libclang-rt-16-dev llvm-16
  clang-format-16  # the format stage (scripts/ci_format.sh): the committed .clang-format
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# 2. Python environment for tests and benchmarks (never used by kvgate itself) --------------------
VENV=$ROOT/.venv
REQS=$ROOT/scripts/requirements-test.txt
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
stamp=$VENV/.requirements.sha256
want=$(sha256sum "$REQS" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python test dependencies"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS"
  echo "$want" > "$stamp"
fi

# 3. The bundled model ------------------------------------------------------------------------------
bash "$ROOT/scripts/fetch_model.sh"

# 4. Build ------------------------------------------------------------------------------------------
BUILD_DIR=${KVGATE_BUILD_DIR:-$ROOT/build}
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$BUILD_DIR" -j"$(nproc)"
