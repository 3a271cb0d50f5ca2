#!/usr/bin/env python3
"""The quantized KV cache's quality against the f16 cache, on the bundled model (README.md).

Runs kvgate_kv_quant_eval twice: `score` over text.txt (perplexity, KL divergence of the
next-token distributions vs f16, top-1 agreement) and `generate` over prompts.txt (greedy
agreement with f16), then prints one markdown table row per dtype. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "model_eval"))
from eval_summary import summary_row  # noqa: E402


def run_tool(tool, args):
    out = subprocess.run([tool] + args, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the CMake build dir")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default=os.path.join(HERE, "text.txt"))
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.txt"))
    ap.add_argument("--dtypes", default="f16,bf16,int8,fp8", help="f16 first: the reference")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the raw per-position results here")
    a = ap.parse_args()
    tool = os.path.join(a.build, "bin", "kvgate_kv_quant_eval")
    if not os.access(tool, os.X_OK):
        sys.exit(f"run.py: {tool} not built (cmake --build {a.build} --target kvgate_kv_quant_eval)")
    if not os.path.exists(a.model):
        sys.exit(f"run.py: {a.model} missing (scripts/fetch_model.sh)")
    if not a.dtypes.startswith("f16"):
        sys.exit("run.py: --dtypes must start with f16, the reference")
    common = ["--model", a.model, "--dtypes", a.dtypes, "--threads", str(a.threads)]

    t0 = time.time()
    scores = {r["dtype"]: r for r in run_tool(tool, ["score", "--text", a.text] + common)}
    t1 = time.time()
    gens = run_tool(tool, ["generate", "--prompts", a.prompts, "--max-tokens", str(a.max_tokens)]
                    + common)
    t2 = time.time()
    by_dtype = {}
    for g in gens:
        by_dtype.setdefault(g["dtype"], {})[g["prompt"]] = g["tokens"]

    ref = by_dtype["f16"]
    print(f"text: {scores['f16']['tokens']} tokens ({os.path.relpath(a.text, ROOT)}); "
          f"prompts: {len(ref)} x {a.max_tokens} greedy tokens ({os.path.relpath(a.prompts, ROOT)}); "
          f"score {t1 - t0:.0f} s, generate {t2 - t1:.0f} s")
    print()
    print("| kv_cache_dtype | KV bytes/token | greedy tokens = f16 | tokens before first difference "
          "| prompts identical | mean KL vs f16 (nats) | max KL | top-1 = f16 | perplexity | "
          "change |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = {}
    for dtype in a.dtypes.split(","):
        s = scores[dtype]
        row = {"kv_bytes_per_token": s["kv_bytes_per_token"]}
        row.update(summary_row(s, scores["f16"], by_dtype[dtype], ref))
        rows[dtype] = row
        print(f"| {dtype} | {row['kv_bytes_per_token']:,} | {row['greedy_same']:.1%} | "
              f"{row['greedy_prefix']:.1%} | {row['prompts_identical']}/{row['prompts']} | "
              f"{row['mean_kl']:.5f} | {row['max_kl']:.4f} | {row['top1']:.1%} | "
              f"{row['perplexity']:.3f} | {row['perplexity_change']:+.2%} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": rows, "score": scores, "generate": by_dtype}, f)


if __name__ == "__main__":
    main()
