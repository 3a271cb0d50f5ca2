#!/usr/bin/env python3
"""Prefix caching in kvgate's built-in engine, measured through the gateway (see README.md here).

1. Time to first token for a ~2,000-token prompt, cold and then warm (the same prompt again).
2. The eviction experiment: a KV pool of ~4.4 sessions' worth of tokens, eight ~1,024-token
   sessions opened one after another, then how much of each is still cached (/api/engine/lookup).
   Expected: the four newest fully cached, the three oldest gone, one in between kept its start.
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def start(binary, kv_tokens, threads, tmp, name, kv_dtype="f16"):
    cfg = os.path.join(tmp, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server: {{listen: 127.0.0.1:0}}
storage: {{sqlite: {tmp}/{name}.db}}
providers:
  - {{name: local, type: local, model_path: {MODEL}, kv_cache_tokens: {kv_tokens}, threads: {threads},
     kv_cache_dtype: {kv_dtype}}}
models:
  - {{name: smollm2, provider: local}}
""")
    log = open(os.path.join(tmp, f"{name}.log"), "w+")
    proc = subprocess.Popen([binary, "serve", "--config", cfg], stdout=log, stderr=log)
    deadline = time.time() + 60
    while time.time() < deadline:
        log.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            return proc, int(m.group(1))
        time.sleep(0.05)
    proc.kill()
    sys.exit("kvgate did not start:\n" + open(log.name).read())


def post(port, path, body, stream=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def ttft(port, messages):
    """Seconds from sending the request to the first content chunk, and the usage."""
    t0 = time.perf_counter()
    conn, resp = post(port, "/v1/chat/completions",
                      {"model": "smollm2", "messages": messages, "stream": True, "max_tokens": 4,
                       "temperature": 0, "stream_options": {"include_usage": True}})
    first, usage = None, None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
            first = time.perf_counter() - t0
        if chunk.get("usage"):
            usage = chunk["usage"]
    conn.close()
    return first, usage


def lookup(port, messages):
    key = "prompt" if isinstance(messages, str) else "messages"
    conn, resp = post(port, "/api/engine/lookup", {"model": "smollm2", key: messages})
    body = json.loads(resp.read())
    conn.close()
    return body


def words(seed, n):
    # Distinct, tokenizer-friendly text per session: ~1 token per word.
    return " ".join(f"w{(seed * 7919 + k * 104729) % 9973}" for k in range(n))


# The eviction experiment's shape: ~1,024-token sessions into a pool of 4.4 sessions' worth
# (each session counted with 32 tokens of slack for its generated token and block rounding).
SESSION_TOKENS = 1024
POOL_SESSIONS = 4.4
EVICTION_POOL_TOKENS = int(POOL_SESSIONS * (SESSION_TOKENS + 32))


def cold_warm(binary, threads, tmp):
    """1. Cold vs warm TTFT at ~2,000 prompt tokens; prints the table, returns the numbers."""
    proc, port = start(binary, 8192, threads, tmp, "ttft")
    try:
        messages = [{"role": "user", "content": words(1, 600) + " Summarize."}]
        n = lookup(port, messages)["prompt_tokens"]
        # Scale the text to ~2,000 tokens.
        messages = [{"role": "user", "content": words(1, int(600 * 2000 / n)) + " Summarize."}]
        cold, cold_usage = ttft(port, messages)
        warm, warm_usage = ttft(port, messages)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(f"\nTime to first token, {cold_usage['prompt_tokens']}-token prompt, {threads} threads")
    print(f"  cold: {cold * 1000:9.1f} ms  (cached {cold_usage['prompt_tokens_details']['cached_tokens']})")
    print(f"  warm: {warm * 1000:9.1f} ms  (cached {warm_usage['prompt_tokens_details']['cached_tokens']})")
    print(f"  warm / cold = {warm / cold:.4f}  (target <= 0.05)")
    return {"prompt_tokens": cold_usage["prompt_tokens"], "cold_s": cold, "warm_s": warm}


def eviction(binary, threads, tmp, kv_dtype="f16", pool_tokens=EVICTION_POOL_TOKENS, count=8):
    """2. Eviction order; prints the table, returns [(cached, cacheable)] oldest session first.

    `count` sessions into a pool of `pool_tokens` tokens of `kv_dtype` (the capacity table sends
    an 8-bit pool of the same bytes more sessions than it holds)."""
    # Raw prompts (/v1/completions): with the chat template every session would share its first
    # block (the default system message), which rightly stays cached and would blur the pattern.
    session_tokens = SESSION_TOKENS
    proc, port = start(binary, pool_tokens, threads, tmp, f"evict_{kv_dtype}", kv_dtype)
    rows = []
    try:
        sessions = []
        for i in range(count):
            scale = session_tokens / lookup(port, words(100 + i, session_tokens))["prompt_tokens"]
            messages = words(100 + i, int(session_tokens * scale))
            conn, resp = post(port, "/v1/completions",
                              {"model": "smollm2", "prompt": messages, "max_tokens": 1,
                               "temperature": 0})
            resp.read()
            conn.close()
            sessions.append(messages)
        print(f"\nEviction order: pool of {pool_tokens / (SESSION_TOKENS + 32):.1f} sessions "
              f"({pool_tokens} {kv_dtype} tokens), {count} sessions of ~{session_tokens} tokens, "
              "oldest first")
        for i, messages in enumerate(sessions):
            r = lookup(port, messages)
            full = (r["prompt_tokens"] - 1) // 16 * 16
            rows.append((r["cached_tokens"], full))
            print(f"  session {i}: {r['cached_tokens']:5d} / {full:5d} cacheable tokens cached "
                  f"({r['cached_tokens'] / full:6.1%})")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvgate", default=os.path.join(ROOT, "build", "bin", "kvgate"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"model missing: {MODEL} (bash scripts/fetch_model.sh)")
    tmp = tempfile.mkdtemp(prefix="kvgate-prefix-")
    cold_warm(args.kvgate, args.threads, tmp)
    eviction(args.kvgate, args.threads, tmp)

if __name__ == "__main__":
    main()
