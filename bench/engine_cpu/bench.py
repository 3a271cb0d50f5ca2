#!/usr/bin/env python3
"""Engine on the CPU vs llama.cpp, side by side in one run (README.md in this folder says how).

    .venv-llama/bin/python bench/engine_cpu/bench.py --bench BUILD/bin/kvgate_bench_engine \
        [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--threads 2] [--reps 3]

Both sides: same model file, same thread count, the same synthetic prompt, greedy,
end-of-generation ignored. For each prompt length N (--prompt-tokens 512,2048: the default measures
generation both early and at a 2K context): ppN = time to evaluate the prompt in one batch;
tgG@N = time for the next G single-token steps after it. Repetitions alternate kvgate / llama.cpp so both see the same machine load;
the best repetition of each is reported (the least disturbed by other processes).
llama.cpp runs through llama-cpp-python (Llama.eval + argmax over the last logits row).
"""
import argparse
import json
import os
import subprocess
import time

import numpy as np


def last_logits(llm):
    """The logits row of the last evaluated token (llama-cpp-python >= 0.3 no longer copies it into
    Llama.scores unless logits_all)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))


def synthetic_prompt(n, vocab):
    return [100 + (i * 7919) % (vocab - 200) for i in range(n)]


def llama_cpp_once(llm, prompt, gen):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    tok = int(np.argmax(last_logits(llm)))
    t1 = time.perf_counter()
    for _ in range(gen):
        llm.eval([tok])
        tok = int(np.argmax(last_logits(llm)))
    t2 = time.perf_counter()
    return len(prompt) / (t1 - t0), gen / (t2 - t1)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="path to kvgate_bench_engine")
    ap.add_argument("--model", default=os.path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", default="512,2048",
                    help="comma-separated prompt lengths; each gets a pp and a tg row")
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()

    from llama_cpp import Llama, __version__ as llama_version
    lengths = [int(x) for x in a.prompt_tokens.split(",")]
    longest = max(lengths)
    llm = Llama(model_path=a.model, n_ctx=longest + a.gen_tokens + 16, n_batch=longest,
                n_ubatch=longest, n_threads=a.threads, n_threads_batch=a.threads,
                logits_all=False, verbose=False)
    llama_cpp_once(llm, synthetic_prompt(32, llm.n_vocab()), 4)  # warm-up
    rows = []  # (name, kvgate reps, llama.cpp reps, target)
    backend = "?"
    for n in lengths:
        prompt = synthetic_prompt(n, llm.n_vocab())
        kv_pp, kv_tg, ll_pp, ll_tg = [], [], [], []
        for _ in range(a.reps):
            out = subprocess.run([a.bench, "--model", a.model, "--threads", str(a.threads),
                                  "--prompt-tokens", str(n), "--gen-tokens", str(a.gen_tokens),
                                  "--reps", "1"],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            kv_pp.append(r["pp_tok_s"])
            kv_tg.append(r["tg_tok_s"])
            backend = r["backend"]
            pp, tg = llama_cpp_once(llm, prompt, a.gen_tokens)
            ll_pp.append(pp)
            ll_tg.append(tg)
            # Flushed as measured: a long run cut short still shows what it had.
            print(f"rep  N={n}: kvgate pp {kv_pp[-1]:.1f} tg {kv_tg[-1]:.1f} | "
                  f"llama.cpp pp {pp:.1f} tg {tg:.1f}", flush=True)
        rows.append((f"pp{n}", kv_pp, ll_pp, 1.4))
        rows.append((f"tg{a.gen_tokens}@{n}", kv_tg, ll_tg, 1.2))
    print(f"model {os.path.basename(a.model)}, threads {a.threads}, reps {a.reps} (best of), "
          f"kvgate {backend}, llama.cpp (llama-cpp-python {llama_version})")
    print(f"{'test':<14}{'kvgate tok/s':>14}{'llama.cpp tok/s':>17}{'ratio':>8}{'target':>8}")
    for name, kv, ll, target in rows:
        print(f"{name:<14}{max(kv):>14.1f}{max(ll):>17.1f}{max(kv) / max(ll):>8.2f}{target:>8.2f}")

if __name__ == "__main__":
    main()
