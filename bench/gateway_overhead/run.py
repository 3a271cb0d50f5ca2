#!/usr/bin/env python3
"""Gateway overhead, side by side in one run (see BENCHMARKS.md).

nginx serves a fixed chat.completion (and a 50-event SSE stream); wrk drives the direct path,
nginx itself as a reverse proxy (the floor any proxy can reach on this machine), kvgate (full
telemetry on: SQLite, metrics, threads) and LiteLLM's proxy at c=1 and c=64.
Prints one table: p50/p99 latency, added latency vs direct, req/s and the ratio to direct,
kvgate's telemetry rows written / requests answered, and peak RSS.
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
    # The fixed-response upstream: `return 200` with the canned completion, as BENCHMARKS.md
    # describes. The 50-event stream is longer than nginx's 4 KB limit on a config string, so it is
    # a static file; POST to a static file is a 405, which error_page turns back into the file.
    www = os.path.join(tmp, "www")
    os.makedirs(os.path.join(www, "sse", "v1", "chat"), exist_ok=True)
    with open(os.path.join(www, "sse", "v1", "chat", "completions"), "w") as f:
        f.write(sse_body())
    completion = nginx_escape(json.dumps(COMPLETION, separators=(",", ":")))
    return run_nginx(tmp, "upstream", f"""
  server {{
    listen 127.0.0.1:{port} reuseport;
    root {www};
    location = /v1/chat/completions {{ default_type application/json; return 200 '{completion}'; }}
    location /sse/ {{ default_type text/event-stream; error_page 405 =200 $uri; }}
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


def start_kvgate(tmp, binary, upstream_port):
    db = os.path.join(tmp, "kvgate.db")
    cfg = os.path.join(tmp, "kvgate.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server: {{listen: 127.0.0.1:0}}
storage: {{sqlite: {db}}}
providers:
  - {{name: nginx, type: openai, base_url: http://127.0.0.1:{upstream_port}/v1, api_key: sk-upstream}}
  - {{name: nginx-sse, type: openai, base_url: http://127.0.0.1:{upstream_port}/sse/v1, api_key: sk-upstream}}
models:
  - {{name: gpt-4o-mini, provider: nginx, upstream_model: gpt-4o-mini}}
  - {{name: gpt-4o-mini-sse, provider: nginx-sse, upstream_model: gpt-4o-mini}}
""")
    log = open(os.path.join(tmp, "kvgate.log"), "w+")
    proc = subprocess.Popen([binary, "serve", "--config", cfg], stderr=log, stdout=log)
    deadline = time.time() + 30
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
    litellm = os.environ.get("LITELLM_BIN", "/work/venv-litellm/bin/litellm")
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvgate", default=os.path.join(ROOT, "build", "bin", "kvgate"))
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--no-litellm", action="store_true")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="kvgate-bench-")
    os.chmod(tmp, 0o755)  # nginx's workers (not root) read the canned responses from here
    body = {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are a helpful assistant. " * 40},
                                                 {"role": "user", "content": "Say hello."}],
            "thread_identifier": "bench-thread"}
    body_path = os.path.join(tmp, "body.json")
    with open(body_path, "w") as f:
        json.dump(body, f)
    stream_body_path = os.path.join(tmp, "body-stream.json")
    with open(stream_body_path, "w") as f:
        json.dump(dict(body, stream=True, model="gpt-4o-mini-sse"), f)
    direct_body_path = os.path.join(tmp, "body-direct.json")  # peers reject kvgate's own fields
    with open(direct_body_path, "w") as f:
        json.dump({k: v for k, v in body.items() if k != "thread_identifier"}, f)
    direct_stream_path = os.path.join(tmp, "body-direct-stream.json")
    with open(direct_stream_path, "w") as f:
        json.dump(dict({k: v for k, v in body.items() if k != "thread_identifier"}, stream=True,
                       model="gpt-4o-mini-sse"), f)

    nginx_port = free_port()
    nginx = start_nginx(tmp, nginx_port)
    procs = [nginx]
    try:
        kv, kv_port, db = start_kvgate(tmp, args.kvgate, nginx_port)
        procs.append(kv)
        proxy_port = free_port()
        procs.append(start_nginx_proxy(tmp, proxy_port, nginx_port))
        targets = [("direct", nginx_port, direct_body_path, direct_stream_path, None),
                   ("nginx-proxy", proxy_port, direct_body_path, direct_stream_path, None),
                   ("kvgate", kv_port, body_path, stream_body_path, kv)]
        # LiteLLM is started only when its turn comes: an idle Python proxy still burns CPU
        # (background tasks) and would slow every other measurement on a 2-core machine.
        if not args.no_litellm:
            targets.append(("litellm", None, direct_body_path, direct_stream_path, None))
        results = {}
        answered = {name: 0 for name, *_ in targets}  # every request wrk saw answered, warm-ups too
        for i, (name, port, bpath, spath, _) in enumerate(targets):
            if name == "litellm":
                ll, port = start_litellm(tmp, nginx_port)
                if not ll:
                    print("note: LiteLLM proxy not available (install: python3 -m venv /work/venv-litellm && "
                          "/work/venv-litellm/bin/pip install 'litellm[proxy]')", file=sys.stderr)
                    targets.pop(i)
                    break
                procs.append(ll)
                targets[i] = (name, port, bpath, spath, ll)
            for conns in (1, 64):
                warm = run_wrk(port, bpath, conns, 2)  # warm-up: connections, pools, caches
                results[(name, conns, "json")] = run_wrk(port, bpath, conns, args.seconds)
                answered[name] += warm["requests"] + results[(name, conns, "json")]["requests"]
            sse_path = "/sse/v1/chat/completions" if name in ("direct", "nginx-proxy") else "/v1/chat/completions"
            results[(name, 1, "sse")] = run_wrk(port, spath, 1, args.seconds, sse_path)
            answered[name] += results[(name, 1, "sse")]["requests"]
        rss = {name: peak_rss_mb(p.pid) if p else float("nan") for name, _, _, _, p in targets}

        # Telemetry completeness: stop kvgate (flush) and count rows.
        kv.send_signal(signal.SIGTERM)
        kv.wait(timeout=60)
        con = sqlite3.connect(db)
        rows = con.execute("select count(*) from requests").fetchone()[0]
        ok_rows = con.execute("select count(*) from requests where status = 'ok'").fetchone()[0]
        con.close()

        d = {c: results[("direct", c, "json")] for c in (1, 64)}
        print(f"\nGateway overhead, {os.cpu_count()} cores, {args.seconds}s per run, upstream nginx (fixed JSON)\n")
        print(f"{'gateway':<11} {'c':>3} {'p50 µs':>9} {'p99 µs':>9} {'+p50 µs':>9} {'+p99 µs':>9} {'req/s':>10} {'÷direct':>8} {'RSS MB':>8}")
        for name, *_ in targets:
            for c in (1, 64):
                r = results[(name, c, "json")]
                add50 = (r["p50"] - d[c]["p50"]) * 1e6
                add99 = (r["p99"] - d[c]["p99"]) * 1e6
                print(f"{name:<11} {c:>3} {r['p50']*1e6:>9.1f} {r['p99']*1e6:>9.1f} "
                      f"{(add50 if name != 'direct' else 0):>9.1f} {(add99 if name != 'direct' else 0):>9.1f} "
                      f"{r['rps']:>10.0f} {r['rps']/d[c]['rps']:>8.3f} {rss[name]:>8.1f}"
                      + (f"  non-2xx: {r['non2xx']}" if r["non2xx"] else ""))
        ds = results[("direct", 1, "sse")]
        print(f"\nStreaming (50 SSE events), c=1: time to full response p50")
        for name, *_ in targets:
            r = results[(name, 1, "sse")]
            print(f"{name:<11} p50 {r['p50']*1e6:>9.1f} µs  added {(r['p50']-ds['p50'])*1e6:>8.1f} µs  req/s {r['rps']:>9.0f}"
                  + (f"  non-2xx: {r['non2xx']}" if r["non2xx"] else ""))
        # wrk counts a request when its response completed; requests still in flight when wrk
        # stops are answered by kvgate but not counted by wrk, so ok rows >= answered.
        print(f"\nkvgate telemetry: {ok_rows} ok rows ({rows} rows in all) for {answered['kvgate']} "
              f"requests wrk saw answered: ok rows ÷ answered = {ok_rows / max(1, answered['kvgate']):.4f}")
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
