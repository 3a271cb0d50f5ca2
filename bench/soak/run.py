#!/usr/bin/env python3
"""Soak: a bounded mixed load on one kvgate, then an audit of what it recorded.

Clients stream and don't, over three provider types (OpenAI, Anthropic, DeepSeek, served by the
provider simulator in tests/sim) and the built-in engine on the bundled model. Some requests meet
injected upstream faults (500s, 429s, resets mid-stream, slow answers, malformed SSE, hangs past
a short upstream timeout), some clients leave mid-request. Every request has a thread id of its
own, so the audit can tell a lost record from a doubled one.

Sampled every 10 s: kvgate's RSS, open file descriptors and threads. At the end (after a SIGTERM
drain): latency p50/p99 by kind, and the store compared with what the clients saw, request by
request. Then, idle, that pooled upstream connections are closed after their idle timeout.

  bench/soak/run.sh [--minutes 10] [--clients 12]     (run.sh sets up what this needs)
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "sim"))
from simctl import SimProcess  # noqa: E402

MODEL_PATH = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
KEY = "sk-soak"
ADMIN = "soak-admin"
POOL_IDLE_MS = 5000
# (model, share of requests): the engine is slow on 2 cores, so it gets a smaller share.
MODELS = [("gpt-4o-mini", 0.32), ("claude-sonnet-4-5", 0.28), ("deepseek-chat", 0.28),
          ("smollm2", 0.12)]
# End users the simulator treats specially (its faults match on `user`); 15% of the OpenAI and
# Anthropic requests. DeepSeek refuses a `user` argument, so its faults come in bursts instead
# (DEEPSEEK_BURST, every 20 s), met by whichever DeepSeek requests come next.
FAULTS = [
    {"user": "soak-500", "status": 500, "body": {"error": {"message": "boom"}}, "count": 0},
    {"user": "soak-429", "status": 429, "headers": {"retry-after": "1"},
     "body": {"error": {"message": "slow down", "type": "rate_limit_error"}}, "count": 0},
    {"user": "soak-reset", "stream": True, "reset_after_chunks": 2, "count": 0},
    {"user": "soak-slow", "latency_ms": 400, "count": 0},
    {"user": "soak-malformed", "stream": True, "malformed_sse": True, "count": 0},
    {"user": "soak-hang", "hang": True, "count": 0},
]

DEEPSEEK_BURST = [{"provider": "deepseek", "status": 503, "count": 4,
                   "body": {"error": {"message": "Server overloaded"}}},
                  {"provider": "deepseek", "stream": True, "reset_after_chunks": 2, "count": 4}]


def config_text(db: str, sim_port: int) -> str:
    sim = f"http://127.0.0.1:{sim_port}"
    return f"""\
server: {{listen: 127.0.0.1:0, admin_token: {ADMIN}, api_keys: [{KEY}], threads: 2,
          upstream_timeout_ms: 3000, upstream_pool_idle_timeout_ms: {POOL_IDLE_MS}}}
storage: {{sqlite: {db}}}
providers:
  - {{name: openai, type: openai, base_url: {sim}/openai/v1, api_key: sk-openai-sim}}
  - {{name: claude, type: anthropic, base_url: {sim}/anthropic, api_key: sk-ant-test}}
  - {{name: ds, type: deepseek, base_url: {sim}/deepseek/v1, api_key: sk-ds-test}}
  - {{name: local, type: local, model_path: {MODEL_PATH}, kv_cache_tokens: 4096, threads: 1}}
models:
  - {{name: gpt-4o-mini, provider: openai, upstream_model: gpt-4o-mini}}
  - {{name: claude-sonnet-4-5, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: deepseek-chat, provider: ds, upstream_model: deepseek-chat}}
  - {{name: smollm2, provider: local}}
"""


def start_kvgate(binary: str, workdir: str, sim_port: int):
    db = os.path.join(workdir, "soak.db")
    cfg = os.path.join(workdir, "soak.yaml")
    with open(cfg, "w") as f:
        f.write(config_text(db, sim_port))
    log = open(os.path.join(workdir, "kvgate.stderr.log"), "wb")
    proc = subprocess.Popen([binary, "serve", "--config", cfg], stdout=log,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    port = None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.write(line)
        m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit(f"kvgate did not start; see {log.name}")

    def pump():
        for line in iter(proc.stderr.readline, b""):
            log.write(line)
    threading.Thread(target=pump, daemon=True).start()
    return proc, port, db


class Outcome:
    __slots__ = ("thread", "kind", "request_id", "status", "complete", "left", "latency")

    def __init__(self, thread, kind):
        self.thread, self.kind = thread, kind
        self.request_id, self.status, self.complete, self.left, self.latency = None, 0, False, False, 0.0


def one_request(port: int, rng: random.Random, thread: str) -> Outcome:
    r = rng.random()
    model = next(m for m, share in _cumulative() if r < share)
    stream = rng.random() < 0.5
    local = model == "smollm2"
    user = None
    if not local and model != "deepseek-chat" and rng.random() < 0.15:
        fault = rng.choice(FAULTS)
        if not stream and ("reset_after_chunks" in fault or "malformed_sse" in fault):
            stream = True
        user = fault["user"]
    leave = rng.random() < 0.05  # the client goes away mid-request
    body = {"model": model, "stream": stream, "thread_identifier": thread,
            "max_tokens": 8 if local else 64,
            "messages": [{"role": "system", "content": "You are a terse assistant. " * 30},
                         {"role": "user", "content": f"Question {thread}: say something."}]}
    if user:
        body["user"] = user
    kind = f"{'engine' if local else model}/{'stream' if stream else 'json'}"
    out = Outcome(thread, kind + ("/fault" if user else "") + ("/left" if leave else ""))
    data = json.dumps(body).encode()
    start = time.perf_counter()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\n"
                     b"Content-Type: application/json\r\nAuthorization: Bearer " + KEY.encode() +
                     b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
        if leave:
            time.sleep(rng.uniform(0.0, 0.05))
            out.left = True
            return out  # closed below, perhaps before, perhaps after the head arrived
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        out.status = resp.status
        out.request_id = resp.getheader("x-request-id")
        payload = resp.read()
        out.latency = time.perf_counter() - start
        if resp.status == 200 and stream:
            out.complete = b"data: [DONE]" in payload and b'"code"' not in payload[-400:]
        else:
            out.complete = True  # a whole JSON answer (an error is an answer too)
    except (OSError, http.client.HTTPException):
        out.complete = False
    finally:
        sock.close()
    return out


def _cumulative():
    total = 0.0
    for model, share in MODELS:
        total += share
        yield model, total
    yield MODELS[-1][0], 2.0


def sample(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        status = f.read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return {"rss_mb": rss, "fds": fds, "threads": threads}


def upstream_connections(pid: int, sim_port: int) -> int:
    """kvgate's established TCP connections to the simulator (from /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            remote_port = int(parts[2].split(":")[1], 16)
            if remote_port == sim_port and parts[9] in inodes:
                count += 1
    return count


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvgate", default=os.path.join(ROOT, "build", "bin", "kvgate"))
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if not os.path.exists(MODEL_PATH):
        sys.exit(f"the bundled model is missing: {MODEL_PATH} (scripts/fetch_model.sh)")

    tmp = tempfile.mkdtemp(prefix="kvgate-soak-")
    sim = SimProcess(log_dir=tmp)
    sim.client.add_faults(*FAULTS)
    kv, port, db = start_kvgate(args.kvgate, tmp, sim.port)
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    deadline = time.monotonic() + args.minutes * 60
    samples = []

    def client(n: int):
        rng = random.Random(args.seed * 1000 + n)
        i = 0
        while time.monotonic() < deadline:
            o = one_request(port, rng, f"soak-{n}-{i}")
            i += 1
            with lock:
                outcomes.append(o)

    workers = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    last_burst = 0.0
    pooled_at_end = None
    while any(w.is_alive() for w in workers):
        if time.monotonic() - last_burst >= 20:
            sim.client.add_faults(*DEEPSEEK_BURST)
            last_burst = time.monotonic()
        s = sample(kv.pid)
        s["t"] = time.monotonic() - t0
        s["upstream"] = upstream_connections(kv.pid, sim.port)
        with lock:
            s["requests"] = len(outcomes)
        samples.append(s)
        print(f"  t={s['t']:6.0f}s  requests {s['requests']:7d}  RSS {s['rss_mb']:6.1f} MB  "
              f"fds {s['fds']:4d}  threads {s['threads']}  upstream connections {s['upstream']}",
              flush=True)
        step = time.monotonic()
        while time.monotonic() - step < 10 and any(w.is_alive() for w in workers):
            if time.monotonic() >= deadline and pooled_at_end is None:
                pooled_at_end = upstream_connections(kv.pid, sim.port)
            time.sleep(0.2)
        if time.monotonic() >= deadline and pooled_at_end is None:
            pooled_at_end = upstream_connections(kv.pid, sim.port)
    for w in workers:
        w.join()
    elapsed = time.monotonic() - t0

    # Idle: pooled upstream connections go after the pool's idle timeout.
    if pooled_at_end is None:
        pooled_at_end = upstream_connections(kv.pid, sim.port)
    time.sleep(POOL_IDLE_MS / 1000 * 2 + 1)
    pooled_after_idle = upstream_connections(kv.pid, sim.port)
    idle = sample(kv.pid)

    kv.send_signal(signal.SIGTERM)
    rc = kv.wait(timeout=120)
    sim.stop()

    con = sqlite3.connect(db)
    rows = con.execute("SELECT request_id, thread_id, status, http_status FROM requests").fetchall()
    con.close()
    by_thread = defaultdict(list)
    by_id = {}
    for request_id, thread, status, http_status in rows:
        by_thread[thread].append((status, http_status))
        by_id[request_id] = (thread, status, http_status)

    answered = [o for o in outcomes if o.request_id and o.complete]
    lost = [o for o in answered if o.request_id not in by_id]
    wrong = [o for o in answered if o.request_id in by_id and by_id[o.request_id][2] != o.status]
    doubled = [t for t, recs in by_thread.items() if t.startswith("soak-") and len(recs) > 1]
    left = [o for o in outcomes if o.left]
    unrecorded_left = [o for o in left if o.thread not in by_thread]

    print(f"\nSoak: {args.minutes:g} min, {args.clients} clients, {len(outcomes)} requests "
          f"({len(outcomes) / elapsed:.1f}/s), kvgate exit code {rc} after SIGTERM\n")
    print(f"{'kind':<34} {'n':>6} {'p50 ms':>8} {'p99 ms':>8}  statuses")
    kinds = defaultdict(list)
    for o in outcomes:
        kinds[o.kind].append(o)
    for kind in sorted(kinds):
        group = kinds[kind]
        lat = [o.latency * 1000 for o in group if o.complete and o.status == 200]
        statuses = Counter(o.status if not o.left else "left" for o in group)
        print(f"{kind:<34} {len(group):>6} {pct(lat, 0.5):>8.1f} {pct(lat, 0.99):>8.1f}  "
              + " ".join(f"{k}:{v}" for k, v in sorted(statuses.items(), key=str)))
    ok = [o.latency * 1000 for o in outcomes if o.complete and o.status == 200]
    print(f"{'all answered 200':<34} {len(ok):>6} {pct(ok, 0.5):>8.1f} {pct(ok, 0.99):>8.1f}")
    first = next((s for s in samples if s["t"] >= 60), samples[0])
    last = samples[-1]
    print(f"\nRSS: {first['rss_mb']:.1f} MB at {first['t']:.0f}s, {last['rss_mb']:.1f} MB at "
          f"{last['t']:.0f}s, peak {max(s['rss_mb'] for s in samples):.1f} MB; after idle "
          f"{idle['rss_mb']:.1f} MB")
    print(f"open fds: {first['fds']} at {first['t']:.0f}s, {last['fds']} at {last['t']:.0f}s, "
          f"peak {max(s['fds'] for s in samples)}; after idle {idle['fds']}")
    print(f"pooled upstream connections: {pooled_at_end} when the load stopped, "
          f"{pooled_after_idle} after {2 * POOL_IDLE_MS / 1000 + 1:.0f}s idle "
          f"(pool idle timeout {POOL_IDLE_MS / 1000:.0f}s)")
    statuses = Counter(s for _, s, _ in by_id.values())
    print(f"\ntelemetry rows: {len(rows)} for {len(outcomes)} requests sent; by status: "
          + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    print(f"answered (whole answer seen, any status): {len(answered)}; missing from the store: "
          f"{len(lost)}; recorded with another HTTP status: {len(wrong)}; threads recorded twice: "
          f"{len(doubled)}")
    print(f"clients that left mid-request: {len(left)}; of them with no record: "
          f"{len(unrecorded_left)} (a client gone before kvgate read its request is not a request)")
    failed = bool(lost or wrong or doubled or rc != 0)
    for o in (lost + wrong)[:10]:
        print(f"  problem: {o.kind} {o.request_id} status {o.status} -> {by_id.get(o.request_id)}")
    print("\nresult: " + ("FAILED" if failed else "ok: no answered request lost or doubled"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
