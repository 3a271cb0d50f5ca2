#!/usr/bin/env bash
# bench/store: the telemetry store on SQLite and on PostgreSQL, side by side in one run.
#   1. rows per second the store's writer thread sustains (kvgate_bench_store's fill, then every
#      dashboard query's latency), on a SQLite file and on a PostgreSQL database;
#   2. the gateway overhead bench (bench/gateway_overhead) with a kvgate on each store, c=1 and 64.
# PostgreSQL is Debian's server, started here in a temporary directory on a free port (as `nobody`
# under root) and removed at the end, as the tests do; scripts/setup.sh installs it.
#   bench/store/run.sh [--requests N] [--threads N] [--seconds S] [--rounds R] [--no-gateway]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${KVGATE_BUILD_DIR:-$ROOT/build}
REQUESTS=200000 THREADS=20000 SECONDS_PER_RUN=3 ROUNDS=5 GATEWAY=1
while (($#)); do
  case "$1" in
    --requests) REQUESTS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --no-gateway) GATEWAY=0; shift ;;
    *) echo "usage: $0 [--requests N] [--threads N] [--seconds S] [--rounds R] [--no-gateway]" >&2; exit 2 ;;
  esac
done

BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$BIN/initdb" ] || { echo "bench/store: PostgreSQL's server is missing: bash scripts/setup.sh" >&2; exit 1; }
cmake --build "$BUILD" --target kvgate kvgate_bench_store -j"$(nproc)" > /dev/null

TMP=$(mktemp -d /tmp/kvgate-bench-store.XXXXXX)
chmod 755 "$TMP"
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi; }
if [ "$(id -u)" -eq 0 ]; then chown nobody "$TMP"; fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
stop() {
  as_pg "$BIN/pg_ctl" -D "$TMP/data" -m fast stop > /dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap stop EXIT
as_pg "$BIN/initdb" -D "$TMP/data" -U kvgate --auth=trust --encoding=UTF8 --locale=C.UTF-8 -N > /dev/null
# The server as a deployment would run it beside kvgate: durable commits (fsync on), defaults
# otherwise; the socket in the temporary directory, TCP on loopback only.
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/pg.log" -w \
  -o "-p $PORT -k $TMP -c listen_addresses=127.0.0.1" start > /dev/null
for db in fill gateway; do as_pg "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U kvgate "$db"; done
PG="postgresql://kvgate@127.0.0.1:$PORT"

echo "== store writer: $REQUESTS requests in $THREADS threads, SQLite file then PostgreSQL (same machine)"
"$BUILD/bin/kvgate_bench_store" --requests "$REQUESTS" --threads "$THREADS" --reps 5 \
  --db "$TMP/fill.db" | tee "$TMP/sqlite.txt"
"$BUILD/bin/kvgate_bench_store" --requests "$REQUESTS" --threads "$THREADS" --reps 5 \
  --db "$TMP/fill-pg.db" --postgres "$PG/fill" | tee "$TMP/pg.txt"
rate() { sed -nE 's/.*\(([0-9]+) requests\/s\).*/\1/p' "$1" | head -n 1; }
python3 - "$(rate "$TMP/sqlite.txt")" "$(rate "$TMP/pg.txt")" <<'EOF'
import sys
sqlite, pg = (float(x) for x in sys.argv[1:3])
print(f"\nwriter rows/s: sqlite {sqlite:.0f}, postgres {pg:.0f}, postgres ÷ sqlite {pg / sqlite:.3f}")
EOF

if [ "$GATEWAY" = 1 ]; then
  echo
  echo "== gateway overhead with each store (kvgate on SQLite, kvgate-pg on PostgreSQL)"
  bash "$ROOT/bench/gateway_overhead/run.sh" --kvgate "$BUILD/bin/kvgate" --no-litellm \
    --seconds "$SECONDS_PER_RUN" --rounds "$ROUNDS" --postgres "$PG/gateway"
fi
