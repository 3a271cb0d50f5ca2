#!/usr/bin/env python3
"""Generates tests/local_engine/data/greedy_refs.json: llama.cpp's greedy continuations.

    $(bash scripts/setup_llama_reference.sh | tail -n 1) scripts/gen_greedy_refs.py [MODEL] [OUT]

For each prompt, the prompt token ids (llama.cpp's own tokenizer; chat prompts through ChatML with
SmolLM2's default system message) and the first N greedy tokens (argmax of the last logits row after
each llama.cpp eval) with llama.cpp's top-1 minus top-2 logit margin at each step (a near-zero
margin is a tie that float summation order decides). The C++ engine test feeds the same prompt ids to kvgate, so the comparison does
not depend on kvgate's tokenizer. Needs llama-cpp-python; the test only needs the JSON.
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama, __version__ as llama_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests/local_engine/data/greedy_refs.json")
N = 24
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

CHAT = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "Explain what a CPU cache is in one sentence.",
]
RAW = [
    "The quick brown fox",
    "def fibonacci(n):\n",
    "Once upon a time, in a small village,",
]


def last_logits(llm):
    """The logits row of the last evaluated token (llama-cpp-python >= 0.3 no longer copies it into
    Llama.scores unless logits_all)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))


def chatml(user):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def main():
    llm = Llama(model_path=MODEL, n_ctx=512, n_threads=2, logits_all=False, verbose=False)
    cases = []
    for kind, text in [("chat", chatml(u)) for u in CHAT] + [("raw", t) for t in RAW]:
        prompt = llm.tokenize(text.encode(), add_bos=False, special=(kind == "chat"))
        llm.reset()
        llm.eval(prompt)
        out, margins = [], []
        for _ in range(N):
            logits = last_logits(llm)
            top2 = np.partition(logits, -2)[-2:]
            tok = int(np.argmax(logits))
            out.append(tok)
            margins.append(round(float(abs(top2[1] - top2[0])), 4))
            llm.eval([tok])
        cases.append({"kind": kind, "text": text, "prompt": prompt, "greedy": out, "top2_margin": margins,
                      "greedy_text": llm.detokenize(out).decode("utf-8", "replace")})
        print(kind, repr(text[-40:]), "->", repr(cases[-1]["greedy_text"]))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": f"llama-cpp-python {llama_version}, greedy (argmax), "
                                "scripts/gen_greedy_refs.py",
                   "model": os.path.basename(MODEL), "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
