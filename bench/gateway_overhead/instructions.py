#!/usr/bin/env python3
"""CPU cost of one proxied request, counted rather than timed (so a loaded machine does not move it).

kvgate runs under valgrind's callgrind against the same nginx upstream as run.py; a keep-alive client
sends N requests, then 11 N, and the difference of the two instruction totals over 10 N is the cost of
one request (startup and shutdown cancel out). Reported per request: instructions in the event-loop
threads, in the request handler, in the telemetry writer, and in the whole process; then, from
runs under `strace -c`, the syscalls per request with one client at a time and under wrk load (64
connections). Needs valgrind, strace and wrk (Debian packages).

  python3 bench/gateway_overhead/instructions.py [--requests 200] [--stream | --anthropic]
      [--context-kb N] [--no-syscalls]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as bench  # noqa: E402  (nginx setup, kvgate startup, wrk)


def request_body(stream, anthropic, context_kb, model=None, thread=True):
    """The 1.2 KB chat request of run.py; with `context_kb`, that many KB of earlier turns before
    it (an agent's long conversation); `anthropic` sends it to the Anthropic-type upstream.
    Without `thread`, no thread id: kvgate infers the thread (an automatic thread)."""
    history = []
    turn = "Here is some context about the task. " * 27  # ~1 KB
    for i in range(context_kb):
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": turn})
    body = {"model": "claude-sse" if anthropic else ("gpt-4o-mini-sse" if stream else "gpt-4o-mini"),
            "messages": [{"role": "system", "content": "You are a helpful assistant. " * 40}] + history +
                        [{"role": "user", "content": "Say hello."}],
            "thread_identifier": "bench-thread"}
    if not thread:
        del body["thread_identifier"]
    if model:
        body["model"] = model
    if stream or anthropic:
        body["stream"] = True
    return json.dumps(body)


def drive(kvgate, wrapper, n, body, tmp, journal=True):
    """Starts nginx and `wrapper kvgate`, sends n requests, stops both. Returns kvgate's exit code."""
    os.makedirs(tmp, exist_ok=True)
    os.chmod(tmp, 0o755)
    nginx_port = bench.free_port()
    nginx = bench.start_nginx(tmp, nginx_port)
    script = os.path.join(tmp, "kvgate.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nexec " + " ".join(wrapper) + f" '{kvgate}' \"$@\"\n")
    os.chmod(script, 0o755)
    kv, port, _ = bench.start_kvgate(tmp, script, nginx_port, journal=journal)
    data = body
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        for _ in range(n):
            conn.request("POST", "/v1/chat/completions", data,
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200:
                sys.exit(f"request failed with {resp.status}: {answer[:300]!r}")
    finally:
        conn.close()
        # kvgate drains and exits on SIGTERM. Under strace it is strace's child (valgrind runs it
        # in its own process), and the signal must reach kvgate itself.
        target = kv.pid
        if wrapper[0] == "strace":
            with open(f"/proc/{kv.pid}/task/{kv.pid}/children") as f:
                children = f.read().split()
            target = int(children[0]) if children else kv.pid
        os.kill(target, signal.SIGTERM)
        try:
            kv.wait(timeout=300)
        except subprocess.TimeoutExpired:
            kv.kill()
        nginx.terminate()
    return kv.returncode


def syscalls_under_load(kvgate, body, tmp, conns=64, seconds=5):
    """strace -c attached to a running kvgate while wrk drives it at `conns` connections: syscalls
    per answered request at load, where group commits are large and event loops rarely sleep."""
    os.makedirs(tmp, exist_ok=True)
    os.chmod(tmp, 0o755)
    nginx_port = bench.free_port()
    nginx = bench.start_nginx(tmp, nginx_port)
    kv, port, _ = bench.start_kvgate(tmp, kvgate, nginx_port)
    body_path = os.path.join(tmp, "body.json")
    with open(body_path, "w") as f:
        f.write(body)
    summary = os.path.join(tmp, "strace-load.txt")
    try:
        bench.run_wrk(port, body_path, conns, 2)  # warm-up
        tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(kv.pid), "-o", summary],
                                  stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attached to every thread before the load starts
        answered = bench.run_wrk(port, body_path, conns, seconds)["requests"]
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=60)
    finally:
        kv.send_signal(signal.SIGTERM)
        kv.wait(timeout=120)
        nginx.terminate()
    return answered, summary


def print_syscalls(summary, requests):
    with open(summary) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                calls = int(parts[3])
                if calls >= requests / 20:
                    print(f"  {parts[-1]:<20} {calls / requests:8.2f}")


def inclusive(out_file):
    """{function: inclusive instructions} from callgrind_annotate."""
    text = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=yes", "--threshold=100",
                           out_file], capture_output=True, text=True).stdout
    costs, total = {}, 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if not m:
            continue
        value = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in m.group(2):
            total = value
        else:
            costs[m.group(2)] = max(costs.get(m.group(2), 0), value)
    return total, costs


def pick(costs, pattern):
    return max((v for k, v in costs.items() if re.search(pattern, k)), default=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvgate", default=os.path.join(bench.ROOT, "build", "bin", "kvgate"))
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--stream", action="store_true", help="a 50-event SSE stream per request")
    ap.add_argument("--anthropic", action="store_true",
                    help="the request goes to an Anthropic-type upstream (a 50-delta Messages stream)")
    ap.add_argument("--context-kb", type=int, default=0,
                    help="KB of earlier turns in each request (a long agent conversation)")
    ap.add_argument("--no-syscalls", action="store_true", help="instructions only (skip the strace runs)")
    ap.add_argument("--model", default=None,
                    help="the model requests name (bench-router: through the cost router)")
    ap.add_argument("--no-journal", action="store_true", help="kvgate without its crash journal")
    ap.add_argument("--no-thread-id", action="store_true",
                    help="requests name no thread: kvgate infers one (automatic threads)")
    args = ap.parse_args()
    body = request_body(args.stream, args.anthropic, args.context_kb, args.model,
                        thread=not args.no_thread_id)
    for tool in ("valgrind", "callgrind_annotate", "strace", "nginx", "wrk"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install valgrind strace nginx-light wrk)")

    tmp = tempfile.mkdtemp(prefix="kvgate-instr-")
    os.chmod(tmp, 0o755)  # nginx's workers (not root) read the canned SSE file from below here
    n_small, n_big = args.requests, 11 * args.requests
    results = {}
    for n in (n_small, n_big):
        out = os.path.join(tmp, f"callgrind.{n}")
        drive(args.kvgate, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"], n,
              body, os.path.join(tmp, f"run{n}"), journal=not args.no_journal)
        results[n] = inclusive(out)
    per = lambda a, b: (b - a) / (n_big - n_small)  # noqa: E731
    (t0, c0), (t1, c1) = results[n_small], results[n_big]
    rows = [
        ("event-loop threads", r"ServerImpl::Init\(\)::\{lambda\(\)#3\}.*_M_run"),
        # (The hall was proxy.cc before it became inference.cc: either, so that older builds compare.)
        ("request handler (HandleInference)",
         r"(?:proxy|inference)\.cc:kvgate::gateway::Gateway::HandleInference\(kvgate::gateway"),
        ("telemetry writer", r"(?:SqliteTelemetryStore|BatchWriter)::WriterLoop"),
    ]
    kind = ("Anthropic 50-delta stream" if args.anthropic else
            "50-event stream" if args.stream else "chat completion") + f", {len(body) / 1024:.1f} KB request"
    print(f"\nInstructions per proxied request ({kind}; {n_big - n_small} requests counted)\n")
    for label, pattern in rows:
        print(f"  {label:<36} {per(pick(c0, pattern), pick(c1, pattern)):>12,.0f}")
    print(f"  {'whole process':<36} {per(t0, t1):>12,.0f}")
    print("  (the writer's share depends on how many records each group commit carries, i.e. on the\n"
          "   request rate under valgrind)")

    if args.no_syscalls:
        return
    summary = os.path.join(tmp, "strace.txt")
    drive(args.kvgate, ["strace", "-f", "-c", "-o", summary], n_big, body, os.path.join(tmp, "strace"))
    print(f"\nSyscalls per request, one client at a time ({n_big} requests, startup and shutdown "
          "included)\n")
    print_syscalls(summary, n_big)

    answered, loaded = syscalls_under_load(args.kvgate, body, os.path.join(tmp, "load"))
    print(f"\nSyscalls per request under load (wrk, 64 connections, {answered} requests answered "
          "while traced; strace slows kvgate, so batches are smaller than untraced)\n")
    print_syscalls(loaded, answered)


if __name__ == "__main__":
    main()
