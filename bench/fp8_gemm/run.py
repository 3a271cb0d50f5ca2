#!/usr/bin/env python3
"""FP8 (E4M3) GEMMs' effect on the bundled model's output, emulated on the CPU (README.md).

Runs kvgate_fp8_gemm_eval once (every format: the text's scores and the prompts' greedy
completions) and prints one markdown table row per GEMM format against the first, the reference
(bf16: what the CUDA backend's MatMul computes today). Standard library only.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the CMake build dir")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default=os.path.join(ROOT, "bench", "kv_quant", "text.txt"))
    ap.add_argument("--prompts", default=os.path.join(ROOT, "bench", "kv_quant", "prompts.txt"))
    ap.add_argument("--formats", default="bf16,f32,fp8,fp8:bf16-head,fp8-row,fp8-row:bf16-head",
                    help="the first is the reference")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the raw per-position results here")
    a = ap.parse_args()
    tool = os.path.join(a.build, "bin", "kvgate_fp8_gemm_eval")
    if not os.access(tool, os.X_OK):
        sys.exit(f"run.py: {tool} not built (cmake --build {a.build} --target kvgate_fp8_gemm_eval)")
    if not os.path.exists(a.model):
        sys.exit(f"run.py: {a.model} missing (scripts/fetch_model.sh)")
    t0 = time.time()
    out = subprocess.run([tool, "--model", a.model, "--text", a.text, "--prompts", a.prompts,
                          "--formats", a.formats, "--max-tokens", str(a.max_tokens),
                          "--threads", str(a.threads)], check=True, capture_output=True, text=True).stdout
    runs = [json.loads(line) for line in out.splitlines() if line.strip()]
    ref = runs[0]
    completions = {r["format"]: dict(enumerate(r["completions"])) for r in runs}
    print(f"text: {ref['tokens']} tokens; prompts: {len(ref['completions'])} x {a.max_tokens} greedy "
          f"tokens; reference: {ref['format']} GEMMs; {time.time() - t0:.0f} s")
    print()
    print(f"| GEMM format | greedy tokens = {ref['format']} | tokens before first difference "
          f"| prompts identical | mean KL (nats) | max KL | top-1 = {ref['format']} "
          "| logit error (mean) | perplexity | change |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = {}
    for r in runs:
        row = summary_row(r, ref, completions[r["format"]], completions[ref["format"]])
        row["logit_err"] = sum(r["logit_err"]) / len(r["logit_err"])
        rows[r["format"]] = row
        print(f"| {r['format']} | {row['greedy_same']:.1%} | {row['greedy_prefix']:.1%} | "
              f"{row['prompts_identical']}/{row['prompts']} | {row['mean_kl']:.5f} | "
              f"{row['max_kl']:.4f} | {row['top1']:.1%} | {row['logit_err']:.4f} | "
              f"{row['perplexity']:.3f} | {row['perplexity_change']:+.2%} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": rows, "runs": runs}, f)


if __name__ == "__main__":
    main()
