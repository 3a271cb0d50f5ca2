#!/usr/bin/env python3
"""Gateway overhead, side by side in one run (README.md in this folder says how to run it).

nginx serves a fixed chat.completion (and a 50-event SSE stream); wrk drives the direct path,
nginx itself as a reverse proxy (the floor any proxy can reach on this machine), kvgate (full
telemetry on: SQLite, metrics, threads) and LiteLLM's proxy at c=1 and c=64.
Prints one table: p50/p99 latency, added latency vs direct, req/s and the ratio to direct,
kvgate's telemetry rows written / requests answered, and peak RSS.

Machines here are shared and their speed drifts by 2x within minutes, so every case runs once per
round for every target, in alternating order, and the table gives medians over the rounds (with the
added p50 of each round, to show the spread). kvgate's CPU time per request at c=64 is read from
/proc per thread (event loops vs the telemetry writer): unlike req/s it does not depend on how much
of the machine the other processes got.

  python3 bench/gateway_overhead/run.py [--rounds 5] [--seconds 3] [--no-litellm]
"""
import argparse
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

COMPLETION = {
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1767225600,
    "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello! How can I help you today?", "refusal": None},
                 "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 9, "total_tokens": 1209,
              "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
              "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
    "service_tier": "default",
}


def sse_body(n=50):
    events = []
    for i in range(n):
        chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1767225600,
                 "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}],
                 "usage": None}
        events.append("data: " + json.dumps(chunk, separators=(",", ":")) + "\n\n")
    final = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1767225600, "model": "gpt-4o-mini",
             "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None}
    events.append("data: " + json.dumps(final, separators=(",", ":")) + "\n\n")
    usage = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1767225600, "model": "gpt-4o-mini",
             "choices": [], "usage": COMPLETION["usage"]}
    events.append("data: " + json.dumps(usage, separators=(",", ":")) + "\n\n")
    events.append("data: [DONE]\n\n")
    return "".join(events)


def anthropic_sse_body(n=50):
    """The same 50-token answer as an Anthropic Messages stream (message_start .. message_stop)."""
    def event(name, data):
        return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
    usage = {"input_tokens": 176, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1024, "output_tokens": 1}
    out = event("message_start", {"type": "message_start", "message": {
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-bench", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})
    out += event("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}})
    for i in range(n):
        out += event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": f"tok{i} "}})
    out += event("content_block_stop", {"type": "content_block_stop", "index": 0})
    out += event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                   "usage": {"output_tokens": n}})
    out += event("message_stop", {"type": "message_stop"})
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return True
        except Exception:
            time.sleep(0.1)
    return False


def nginx_escape(text):
    return text.replace("\\", "\\\\").replace("'", "\\'")


def run_nginx(tmp, name, http_block, health_port, workers=1):
    conf = f"""
worker_processes {workers};
pid {tmp}/{name}.pid;
error_log {tmp}/{name}-error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/{name}-body;
  proxy_temp_path {tmp}/{name}-proxy;
  keepalive_requests 1000000;
{http_block}
}}
"""
    path = os.path.join(tmp, f"{name}.conf")
    with open(path, "w") as f:
        f.write(conf)
    proc = subprocess.Popen(["nginx", "-c", path, "-g", "daemon off;"], stderr=subprocess.DEVNULL)
    if not wait_http(f"http://127.0.0.1:{health_port}/health"):
        sys.exit(f"{name} did not start: " + open(os.path.join(tmp, f"{name}-error.log")).read()[-2000:])
    return proc


def start_nginx(tmp, port):
    # The fixed-response upstream: `return 200` with the canned completion (with
    # usage.prompt_tokens_details.cached_tokens, as a real one has). The 50-event stream is
    # longer than nginx's 4 KB limit on a config string, so it is a static file; POST to a static
    # file is a 405, which error_page turns back into the file.
    www = os.path.join(tmp, "www")
    os.makedirs(os.path.join(www, "sse", "v1", "chat"), exist_ok=True)
    with open(os.path.join(www, "sse", "v1", "chat", "completions"), "w") as f:
        f.write(sse_body())
    os.makedirs(os.path.join(www, "anthropic-sse", "v1"), exist_ok=True)
    with open(os.path.join(www, "anthropic-sse", "v1", "messages"), "w") as f:
        f.write(anthropic_sse_body())
    completion = nginx_escape(json.dumps(COMPLETION, separators=(",", ":")))
    return run_nginx(tmp, "upstream", f"""
  server {{
    listen 127.0.0.1:{port} reuseport;
    root {www};
    location = /v1/chat/completions {{ default_type application/json; return 200 '{completion}'; }}
    location /sse/ {{ default_type text/event-stream; error_page 405 =200 $uri; }}
    location /anthropic-sse/ {{ default_type text/event-stream; error_page 405 =200 $uri; }}
    location = /health {{ return 200 'ok'; }}
  }}""", port)


def start_nginx_proxy(tmp, port, upstream_port):
    # The floor for any proxy on this machine: nginx itself as a keep-alive reverse proxy (no
    # parsing of bodies, no telemetry), one worker per core like kvgate's one thread per core.
    return run_nginx(tmp, "proxy", f"""
  upstream canned {{ server 127.0.0.1:{upstream_port}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port} reuseport;
    location = /health {{ return 200 'ok'; }}
    location / {{
      proxy_pass http://canned;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}""", port, workers=os.cpu_count())


def start_kvgate(tmp, binary, upstream_port, name="kvgate", journal=True, postgres=None):
    """A kvgate on a SQLite file in `tmp`, or on the PostgreSQL database `postgres` names."""
    db = os.path.join(tmp, f"{name}.db")
    cfg = os.path.join(tmp, f"{name}.yaml")
    if postgres:
        store = (f"postgres: '{postgres}', journal_path: {os.path.join(tmp, name + '-journal')}, "
                 f"journal: {'true' if journal else 'false'}")
    else:
        store = f"sqlite: {db}, journal: {'true' if journal else 'false'}"
    with open(cfg, "w") as f:
        f.write(f"""server: {{listen: 127.0.0.1:0}}
storage: {{{store}}}
providers:
  - {{name: nginx, type: openai, base_url: http://127.0.0.1:{upstream_port}/v1, api_key: sk-upstream}}
  - {{name: nginx-sse, type: openai, base_url: http://127.0.0.1:{upstream_port}/sse/v1, api_key: sk-upstream}}
  - {{name: nginx-anthropic-sse, type: anthropic, base_url: http://127.0.0.1:{upstream_port}/anthropic-sse, api_key: sk-upstream}}
models:
  - {{name: gpt-4o-mini, provider: nginx, upstream_model: gpt-4o-mini}}
  - {{name: gpt-4o-mini-sse, provider: nginx-sse, upstream_model: gpt-4o-mini}}
  - {{name: claude-sse, provider: nginx-anthropic-sse, upstream_model: claude-bench}}
  - {{name: gpt-4o-mini-b, provider: nginx, upstream_model: gpt-4o-mini}}
  - {{name: gpt-4o, provider: nginx, upstream_model: gpt-4o}}
routers:
  # What routing costs on the request path: the cost planner over two targets, with the thread's
  # fingerprint, its memory and the estimates of every candidate.
  - {{name: bench-router, strategy: cost, targets: [gpt-4o, gpt-4o-mini, gpt-4o-mini-b]}}
""")
        # More config for a comparison run, e.g. KVGATE_BENCH_CONFIG_TAIL=$'telemetry:\n  otlp:
        # {endpoint: http://127.0.0.1:4318}\n' for the cost of OpenTelemetry export.
        f.write(os.environ.get("KVGATE_BENCH_CONFIG_TAIL", ""))
    log = open(os.path.join(tmp, f"{name}.log"), "w+")
    proc = subprocess.Popen([binary, "serve", "--config", cfg], stderr=log, stdout=log)
    deadline = time.time() + 120  # under valgrind on a busy machine, startup takes a while
    port = None
    while time.time() < deadline and port is None:
        log.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            port = int(m.group(1))
        else:
            time.sleep(0.05)
    if port is None:
        proc.kill()
        sys.exit("kvgate did not start; log:\n" + open(log.name).read())
    return proc, port, db


def start_litellm(tmp, upstream_port):
    litellm = os.environ.get("LITELLM_BIN", os.path.join(ROOT, ".venv-litellm", "bin", "litellm"))
    if not os.path.exists(litellm):
        return None, None
    cfg = os.path.join(tmp, "litellm.yaml")
    with open(cfg, "w") as f:
        f.write(f"""model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: http://127.0.0.1:{upstream_port}/v1
      api_key: sk-upstream
  - model_name: gpt-4o-mini-sse
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: http://127.0.0.1:{upstream_port}/sse/v1
      api_key: sk-upstream
""")
    port = free_port()
    env = dict(os.environ, LITELLM_LOG="ERROR", LITELLM_MASTER_KEY="sk-bench")  # post.lua's key
    proc = subprocess.Popen([litellm, "--config", cfg, "--port", str(port), "--num_workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "litellm.log"), "w"), env=env)
    if not wait_http(f"http://127.0.0.1:{port}/health/liveliness", timeout=120):
        proc.kill()
        return None, None
    return proc, port


UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def parse_duration(text):
    m = re.match(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * UNITS[m.group(2)]


def run_wrk(port, body_path, conns, seconds, path="/v1/chat/completions"):
    threads = 1 if conns == 1 else 2
    env = dict(os.environ, BENCH_BODY=body_path)
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency",
                          "-s", os.path.join(HERE, "post.lua"), f"http://127.0.0.1:{port}{path}"],
                         capture_output=True, text=True, env=env).stdout
    res = {}
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", out, re.M)
        res[f"p{pct}"] = parse_duration(m.group(1)) if m else float("nan")
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    res["rps"] = float(m.group(1)) if m else 0.0
    m = re.search(r"(\d+) requests in", out)
    res["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    res["non2xx"] = int(m.group(1)) if m else 0
    return res


def peak_rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_ticks_by_thread(pid):
    """{thread name: user+system clock ticks} of a process (kvgate names its threads: http-N,
    telemetry-write, ...); http-N are summed as 'event loops'."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread exited
        name = "event loops" if name.startswith("http-") else name
        ticks[name] = ticks.get(name, 0) + int(fields[11]) + int(fields[12])
    return ticks


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def write_bodies(tmp):
    """The request bodies: kvgate's carry a thread id; the peers reject kvgate's own fields."""
    body = {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are a helpful assistant. " * 40},
                                                 {"role": "user", "content": "Say hello."}],
            "thread_identifier": "bench-thread"}
    plain = {k: v for k, v in body.items() if k != "thread_identifier"}
    variants = {"kvgate": body, "kvgate-stream": dict(body, stream=True, model="gpt-4o-mini-sse"),
                "kvgate-router": dict(body, model="bench-router"),
                "peer": plain, "peer-stream": dict(plain, stream=True, model="gpt-4o-mini-sse")}
    paths = {}
    for name, data in variants.items():
        paths[name] = os.path.join(tmp, f"body-{name}.json")
        with open(paths[name], "w") as f:
            json.dump(data, f)
    return paths


class Target:
    """One gateway under test (or the direct path), with every run's results."""

    def __init__(self, name, port, body, stream_body, proc=None, sse_path="/v1/chat/completions"):
        self.name, self.port, self.body, self.stream_body = name, port, body, stream_body
        self.proc, self.sse_path = proc, sse_path
        self.runs = {}  # (c, "json" | "sse") -> [wrk result per round]
        self.answered = 0  # every request wrk saw answered, warm-ups too
        self.cpu_ticks = {}  # kvgate targets: thread name -> ticks during their measured runs
        self.measured_requests = 0
        self.rss = float("nan")  # peak RSS in MB, when known

    def warm_up(self):
        for conns in (1, 64):
            self.answered += run_wrk(self.port, self.body, conns, 2)["requests"]

    def measure(self, kind, conns, seconds):
        before = cpu_ticks_by_thread(self.proc.pid) if self.name.startswith("kvgate") else None
        if kind == "json":
            r = run_wrk(self.port, self.body, conns, seconds)
        else:
            r = run_wrk(self.port, self.stream_body, conns, seconds, self.sse_path)
        if before is not None and kind == "json" and conns == 64:
            after = cpu_ticks_by_thread(self.proc.pid)
            for name, t in after.items():
                self.cpu_ticks[name] = self.cpu_ticks.get(name, 0) + t - before.get(name, 0)
            self.measured_requests += r["requests"]
        self.answered += r["requests"]
        self.runs.setdefault((conns, kind), []).append(r)
        return r

    def med(self, conns, kind, key):
        return median([r[key] for r in self.runs[(conns, kind)]])


def measure_rounds(targets, rounds, seconds):
    """Every round runs every target once per case, in alternating order, so that a machine that
    slows down or speeds up during the benchmark moves all of them alike; medians are reported."""
    for i in range(rounds):
        order = targets if i % 2 == 0 else targets[::-1]
        for kind, conns in (("json", 1), ("json", 64), ("sse", 1)):
            for t in order:
                t.measure(kind, conns, seconds)


def print_report(targets, direct, rounds, seconds, kv, rows, ok_rows, answered):
    print(f"\nGateway overhead, {os.cpu_count()} cores, upstream nginx (fixed JSON); medians of {rounds} "
          f"interleaved rounds of {seconds}s per case\n")
    print(f"{'gateway':<13} {'c':>3} {'p50 µs':>9} {'p99 µs':>9} {'+p50 µs':>9} {'+p99 µs':>9} "
          f"{'req/s':>10} {'÷direct':>8} {'RSS MB':>8}  +p50 per round")
    for t in targets:
        for c in (1, 64):
            p50, p99, rps = (t.med(c, "json", k) for k in ("p50", "p99", "rps"))
            d50, d99, drps = (direct.med(c, "json", k) for k in ("p50", "p99", "rps"))
            per_round = [round((a["p50"] - b["p50"]) * 1e6)
                         for a, b in zip(t.runs[(c, "json")], direct.runs[(c, "json")])]
            non2xx = sum(r["non2xx"] for r in t.runs[(c, "json")])
            rss = t.rss
            print(f"{t.name:<13} {c:>3} {p50*1e6:>9.1f} {p99*1e6:>9.1f} "
                  f"{(p50 - d50) * 1e6 if t is not direct else 0:>9.1f} "
                  f"{(p99 - d99) * 1e6 if t is not direct else 0:>9.1f} "
                  f"{rps:>10.0f} {rps / drps:>8.3f} {rss:>8.1f}  "
                  + (" ".join(map(str, per_round)) if t is not direct else "")
                  + (f"  non-2xx: {non2xx}" if non2xx else ""))
    print("\nStreaming (50 SSE events), c=1: time to full response, p50")
    for t in targets:
        p50 = t.med(1, "sse", "p50")
        print(f"{t.name:<13} p50 {p50*1e6:>9.1f} µs  added {(p50 - direct.med(1, 'sse', 'p50'))*1e6:>8.1f} µs  "
              f"req/s {t.med(1, 'sse', 'rps'):>9.0f}")
    print()
    for t in targets:
        if not t.measured_requests:
            continue
        tck = os.sysconf("SC_CLK_TCK")
        per = {name: 1e6 * ticks / tck / t.measured_requests for name, ticks in t.cpu_ticks.items()}
        per = {name: v for name, v in per.items() if v >= 0.05}  # idle threads
        print(f"{t.name} CPU per request at c=64 (user+sys, all rounds): {sum(per.values()):.1f} µs = "
              + ", ".join(f"{name} {v:.1f}" for name, v in sorted(per.items(), key=lambda x: -x[1])))
    # wrk counts a request when its response completed; requests still in flight when wrk
    # stops are answered by kvgate but not counted by wrk, so ok rows >= answered.
    print(f"kvgate telemetry: {ok_rows} ok rows ({rows} rows in all) for {answered} "
          f"requests wrk saw answered: ok rows ÷ answered = {ok_rows / max(1, answered):.4f}")
    nojournal = next((t for t in targets if t.name == "kvgate-nojrnl"), None)
    if nojournal is not None:
        for c in (1, 64):
            print(f"crash journal (kvgate - kvgate-nojrnl) at c={c}: p50 "
                  f"{(kv.med(c, 'json', 'p50') - nojournal.med(c, 'json', 'p50')) * 1e6:+.1f} µs, "
                  f"req/s {kv.med(c, 'json', 'rps') / nojournal.med(c, 'json', 'rps'):.3f}x")
    on_pg = next((t for t in targets if t.name == "kvgate-pg"), None)
    if on_pg is not None:
        for c in (1, 64):
            print(f"PostgreSQL store (kvgate-pg - kvgate) at c={c}: p50 "
                  f"{(on_pg.med(c, 'json', 'p50') - kv.med(c, 'json', 'p50')) * 1e6:+.1f} µs, "
                  f"+p50 ratio {(on_pg.med(c, 'json', 'p50') - direct.med(c, 'json', 'p50')) / max(1e-9, kv.med(c, 'json', 'p50') - direct.med(c, 'json', 'p50')):.3f}x, "
                  f"req/s {on_pg.med(c, 'json', 'rps') / kv.med(c, 'json', 'rps'):.3f}x")
    routed = next((t for t in targets if t.name == "kvgate-router"), None)
    if routed is not None:
        per_round = [round((a["p50"] - b["p50"]) * 1e6, 1)
                     for a, b in zip(routed.runs[(1, "json")], kv.runs[(1, "json")])]
        print(f"routing (kvgate-router - kvgate) at c=1: p50 "
              f"{(routed.med(1, 'json', 'p50') - kv.med(1, 'json', 'p50')) * 1e6:+.1f} µs "
              f"(per round: {' '.join(map(str, per_round))})")


def measure_litellm(tmp, nginx_port, paths, direct, seconds):
    """LiteLLM runs alone after the rounds: an idle Python proxy still burns CPU (background
    tasks) and would slow every other measurement on a 2-core machine. Compared with the direct
    medians of the rounds."""
    ll, port = start_litellm(tmp, nginx_port)
    if not ll:
        print("\nnote: LiteLLM proxy not available (install: python3 -m venv .venv-litellm && "
              ".venv-litellm/bin/pip install 'litellm[proxy]')", file=sys.stderr)
        return
    try:
        t = Target("litellm", port, paths["peer"], paths["peer-stream"], ll)
        t.warm_up()
        for kind, conns in (("json", 1), ("json", 64), ("sse", 1)):
            t.measure(kind, conns, seconds)
        print("\nLiteLLM proxy, measured alone after the rounds (one run per case):")
        for c in (1, 64):
            r = t.runs[(c, "json")][0]
            print(f"litellm     {c:>3} p50 {r['p50']*1e6:>9.1f} µs  added {(r['p50'] - direct.med(c, 'json', 'p50'))*1e6:>9.1f} µs  "
                  f"req/s {r['rps']:>8.0f}  ÷direct {r['rps'] / direct.med(c, 'json', 'rps'):.4f}  "
                  f"RSS {peak_rss_mb(ll.pid):.1f} MB")
        r = t.runs[(1, "sse")][0]
        print(f"litellm     streaming p50 {r['p50']*1e6:.1f} µs, added {(r['p50'] - direct.med(1, 'sse', 'p50'))*1e6:.1f} µs")
    finally:
        ll.terminate()
        try:
            ll.wait(timeout=10)
        except subprocess.TimeoutExpired:
            ll.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvgate", default=os.path.join(ROOT, "build", "bin", "kvgate"))
    ap.add_argument("--seconds", type=int, default=3, help="per run; each case runs once per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-litellm", action="store_true")
    ap.add_argument("--postgres", metavar="CONNINFO",
                    help="also measure a kvgate whose store is this (empty) PostgreSQL database "
                         "(kvgate-pg), beside the one on SQLite; bench/store/run.sh starts one")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="kvgate-bench-")
    os.chmod(tmp, 0o755)  # nginx's workers (not root) read the canned responses from here
    paths = write_bodies(tmp)
    nginx_port = free_port()
    nginx = start_nginx(tmp, nginx_port)
    procs = [nginx]
    try:
        kv_proc, kv_port, db = start_kvgate(tmp, args.kvgate, nginx_port)
        procs.append(kv_proc)
        proxy_port = free_port()
        procs.append(start_nginx_proxy(tmp, proxy_port, nginx_port))
        direct = Target("direct", nginx_port, paths["peer"], paths["peer-stream"], sse_path="/sse/v1/chat/completions")
        proxy = Target("nginx-proxy", proxy_port, paths["peer"], paths["peer-stream"], sse_path="/sse/v1/chat/completions")
        kv = Target("kvgate", kv_port, paths["kvgate"], paths["kvgate-stream"], kv_proc)
        # The same kvgate, the same upstream, through a router (streams stay plain).
        routed = Target("kvgate-router", kv_port, paths["kvgate-router"], paths["kvgate-stream"], kv_proc)
        # A second kvgate without the crash journal: what the journal costs.
        nj_proc, nj_port, _ = start_kvgate(tmp, args.kvgate, nginx_port, "kvgate-nojournal", False)
        procs.append(nj_proc)
        nojournal = Target("kvgate-nojrnl", nj_port, paths["kvgate"], paths["kvgate-stream"], nj_proc)
        targets = [direct, proxy, kv, routed, nojournal]
        if args.postgres:
            pg_proc, pg_port, _ = start_kvgate(tmp, args.kvgate, nginx_port, "kvgate-pg",
                                               postgres=args.postgres)
            procs.append(pg_proc)
            targets.append(Target("kvgate-pg", pg_port, paths["kvgate"], paths["kvgate-stream"],
                                  pg_proc))
        for t in targets:
            t.warm_up()  # connections, pools, caches
        measure_rounds(targets, args.rounds, args.seconds)

        # Telemetry completeness: stop kvgate (flush) and count rows.
        kv.rss = peak_rss_mb(kv_proc.pid)  # before it exits
        kv_proc.send_signal(signal.SIGTERM)
        kv_proc.wait(timeout=60)
        con = sqlite3.connect(db)
        rows = con.execute("select count(*) from requests").fetchone()[0]
        ok_rows = con.execute("select count(*) from requests where status = 'ok'").fetchone()[0]
        con.close()
        print_report(targets, direct, args.rounds, args.seconds, kv, rows, ok_rows,
                     kv.answered + routed.answered)
        if not args.no_litellm:
            measure_litellm(tmp, nginx_port, paths, direct, args.seconds * 2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
