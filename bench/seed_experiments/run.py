#!/usr/bin/env python3
"""The seed experiments on kvgate's built-in engine (CPU, bundled SmolLM2-135M); see README.md.

1. cold vs warm time to first token, one ~2,000-token prompt (bench/engine_prefix, via the gateway);
2. eviction: eight ~1,024-token sessions into a pool of ~4.4 sessions (bench/engine_prefix);
3. time to first token from the pool, the host-memory and disk offload tiers and recomputed, per
   prompt length
   (build/bin/kvgate_bench_offload, the engine in-process);
4. pool capacity in sessions, f16 vs 8-bit (int8) KV in the same memory: both measured (f16 from 2,
   int8 by the same experiment on an int8 pool) and computed (`kvgate kv-size`).

The experiments' code lives in those two benches; this script runs them and prints the tables.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BLOCK_TOKENS = 16  # the engine's KV block (kv_cache_tokens is rounded up to whole blocks)


def load_engine_prefix():
    # Imported by path: bench/ is not a package, and both scripts are called run.py.
    path = os.path.join(ROOT, "bench", "engine_prefix", "run.py")
    spec = importlib.util.spec_from_file_location("engine_prefix_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def offload_ttft(bench, threads, tokens, reps, tmp):
    """Runs kvgate_bench_offload at one prompt length; returns its medians and per-kind tier hits."""
    cmd = [bench, "--model", MODEL, "--threads", str(threads), "--prompt-tokens", str(tokens),
           "--reps", str(reps), "--tier", os.path.join(tmp, f"offload_{tokens}.tier")]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    medians, from_tier = None, {}
    for line in out.splitlines():
        rec = json.loads(line)
        if "median_ttft_ms" in rec:
            medians = rec["median_ttft_ms"]
        elif "kind" in rec:
            # The smallest count over the repetitions: a disk row that did not come from the tier
            # shows here instead of hiding behind a median.
            prev = from_tier.get(rec["kind"])
            n = rec["cached_offload_tokens"]
            from_tier[rec["kind"]] = n if prev is None else min(prev, n)
    if medians is None:
        sys.exit(f"no medians from {' '.join(cmd)}:\n{out}")
    return medians, from_tier


def kv_size(kvgate, dtype, context, pool_bytes):
    """`kvgate kv-size` for the bundled model: (bytes per token, whole sessions in pool_bytes)."""
    # Utilization 1: the pool is all of pool_bytes (kv-size's default keeps vLLM's 10% back).
    cmd = [kvgate, "kv-size", "--gguf", MODEL, "--dtype", dtype, "--context", str(context),
           "--gpu-mem-gib", repr(pool_bytes / 2**30), "--weights-gib", "0",
           "--gpu-memory-utilization", "1"]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    # The model name has spaces; the numeric columns are counted from the right. Under the first
    # "model" header: ... B/token context GiB/session GB/session; under the second (capacity):
    # ... weights_GiB weights_GB kv_pool_GiB kv_pool_GB sessions
    headers = [i for i, line in enumerate(lines) if line.startswith("model ")]
    return int(lines[headers[0] + 1].split()[-4]), int(lines[headers[1] + 1].split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvgate", default=os.path.join(ROOT, "build", "bin", "kvgate"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "kvgate_bench_offload"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--experiments", default="1,2,3,4",
                    help="which tables, comma-separated (default 1,2,3,4)")
    ap.add_argument("--lengths", default="500,1000,2000",
                    help="prompt lengths in tokens for table 3, comma-separated (default 500,1000,2000)")
    ap.add_argument("--reps", type=int, default=3,
                    help="repetitions per length in table 3; the table shows medians (default 3)")
    args = ap.parse_args()
    which = {int(x) for x in args.experiments.split(",") if x}
    lengths = [int(x) for x in args.lengths.split(",") if x]
    for path in (MODEL, args.kvgate, args.bench):
        if not os.path.exists(path):
            sys.exit(f"missing: {path} (bash scripts/setup.sh)")

    # Scratch files (configs, logs, SQLite stores, tier files) stay inside the repository.
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="seed_experiments-", dir=out_dir)
    prefix = load_engine_prefix()
    load = os.getloadavg()
    print(f"kvgate seed experiments: {os.path.basename(MODEL)}, built-in engine on the CPU, "
          f"{args.threads} threads, {os.cpu_count()} cores, load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"scratch files: {os.path.relpath(tmp, ROOT)}")
    started = time.time()

    if 1 in which:
        print("\n== 1. Cold vs warm time to first token (through the gateway) ==")
        t0 = time.time()
        prefix.cold_warm(args.kvgate, args.threads, tmp)
        print(f"  ({time.time() - t0:.0f} s)")

    evicted = None
    if 2 in which:
        print("\n== 2. Eviction: fraction of each session still cached (POST /api/engine/lookup) ==")
        t0 = time.time()
        evicted = prefix.eviction(args.kvgate, args.threads, tmp)
        print(f"  ({time.time() - t0:.0f} s)")

    if 3 in which:
        print(f"\n== 3. Time to first token: pool, offload tier (host memory, disk), recomputed "
              f"(kvgate_bench_offload, median of {args.reps}) ==")
        print("  host: the host-memory tier; disk (page cache): tier file just written; "
              "disk (cold): its pages dropped first")
        print(f"  {'prompt':>7} {'pool ms':>9} {'host ms':>9} {'disk pc ms':>11} {'disk cold ms':>13} "
              f"{'recompute ms':>13} {'recomp/host':>12} {'recomp/disk pc':>15} "
              f"{'recomp/disk cold':>17} {'gap s':>7} {'from tier':>10}")
        t0 = time.time()
        for n in lengths:
            m, from_tier = offload_ttft(args.bench, args.threads, n, args.reps, tmp)
            tier_hits = min(from_tier.get(k, 0) for k in ("host", "disk_page_cache", "disk_cold"))
            print(f"  {n:7d} {m['pool']:9.1f} {m['host']:9.1f} {m['disk_page_cache']:11.1f} "
                  f"{m['disk_cold']:13.1f} {m['recompute']:13.1f} "
                  f"{m['recompute'] / m['host']:11.1f}x {m['recompute'] / m['disk_page_cache']:14.1f}x "
                  f"{m['recompute'] / m['disk_cold']:16.1f}x "
                  f"{(m['recompute'] - m['disk_cold']) / 1000:7.1f} {tier_hits:10d}", flush=True)
        print("  gap: recompute - disk cold, the time the tier saves")
        print("  from tier: the fewest prompt tokens a host or disk run read from its tier (the rest "
              "came from the pool or were recomputed)")
        print(f"  ({time.time() - t0:.0f} s)")

    if 4 in which:
        print("\n== 4. Pool capacity in sessions: f16 vs 8-bit (int8) KV, in the same memory ==")
        pool_tokens = -(-prefix.EVICTION_POOL_TOKENS // BLOCK_TOKENS) * BLOCK_TOKENS
        session = prefix.SESSION_TOKENS + 32  # as table 2 counts a session (its slack included)
        f16_bpt, _ = kv_size(args.kvgate, "f16", session, 1)
        pool_bytes = pool_tokens * f16_bpt
        print(f"  memory: table 2's pool, {pool_tokens} tokens x {f16_bpt} B/token (f16) = "
              f"{pool_bytes:,} bytes; a session = {session} tokens")
        print(f"  {'KV dtype':<10} {'B/token':>8} {'pool tokens':>12} {'measured sessions':>32} "
              f"{'computed (kv-size, whole)':>26}")
        t0 = time.time()
        for dtype in ("f16", "int8"):
            bpt, whole = kv_size(args.kvgate, dtype, session, pool_bytes)
            tokens = pool_bytes // bpt // BLOCK_TOKENS * BLOCK_TOKENS
            if dtype == "f16":
                rows = evicted  # table 2 is this measurement
            else:
                # More sessions than the pool holds, so that the count of cached ones is its
                # capacity, not the number sent.
                rows = prefix.eviction(args.kvgate, args.threads, tmp, kv_dtype=dtype,
                                       pool_tokens=tokens, count=int(whole) + 3)
            if rows:
                cached = sum(c for c, _ in rows)
                measured = f"{cached / session:.2f} ({cached} tokens cached)"
            else:
                measured = "run table 2 to measure"
            print(f"  {dtype:<10} {bpt:8d} {tokens:12d} {measured:>32} {whole:>26d}", flush=True)
        print("  measured: the tokens the eviction lookups still found cached (table 2's for f16; for")
        print("  int8 the same experiment on a pool of the same bytes, sent more sessions than it")
        print("  holds), / the session size. int8 keeps one f16 scale per block and head (B/token")
        print("  counts it).")
        print(f"  ({time.time() - t0:.0f} s)")

    print(f"\ntotal {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
