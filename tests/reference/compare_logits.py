"""ctest: the C++ forward pass (kvgate_logits_dump) vs the NumPy reference, on several prompts.

Prompts are token ids (independent of the tokenizer). The C++ side runs them as one continuous
batch in several chunkings (one prefill, chunks of 5, one token per step = the decode path) and with
the scalar kernels. Pass criteria (activations are quantized to 8 bits inside every matmul, as in llama.cpp, while the
reference is float64; on this model that noise alone reaches max|diff|/std ~ 0.5 (2 on prompts of
random tokens, whose activations are extreme), KL ~ 0.005 on text (0.14 worst on random tokens)):
  * per position: KL(reference || engine) <= KL_MAX_TOL, mean over a prompt <= KL_MEAN_TOL,
    max |logit - reference| <= REL_TOL * std(reference logits);
  * identical argmax wherever the reference's top-1/top-2 gap exceeds 2 * that position's max error;
  * position 0 (no attention, no RoPE) against the reference that emulates the engine's rounding:
    max|diff|/std <= EXACT_TOL (this pins embedding, norms, matmuls, SwiGLU and the output head;
    not zero: float32 vs float64 sums flip a few 8-bit roundings, and this model's outlier
    channels make one flip worth up to ~0.1 std; measured up to 0.26, while a wrong op gives
    errors of several std);
  * every AVX2 chunking (prefill, chunks, decode) agrees with the single prefill to CHUNK_TOL * std.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_llama import ReferenceLlama  # noqa: E402

REL_TOL = 2.5
KL_MAX_TOL = 0.2
KL_MEAN_TOL = 0.02
EXACT_TOL = 0.3
CHUNK_TOL = 0.01

PROMPTS = [
    # ChatML-shaped: <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n
    [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198],
    [504, 3575, 282, 4649, 314],  # a 5-token prompt
    list(np.random.default_rng(7).integers(3, 49152, size=37)),  # crosses two block boundaries
    list(np.random.default_rng(8).integers(3, 49152, size=21)),
]


def run_dump(dump, model, out, chunk, extra=()):
    args = [dump, "--model", model, "--out", out, "--chunk", str(chunk), *extra]
    args += [",".join(str(int(t)) for t in p) for p in PROMPTS]
    subprocess.run(args, check=True)
    hdr = np.fromfile(out, dtype=np.int32, count=2 + len(PROMPTS))
    vocab, lens = int(hdr[1]), [int(x) for x in hdr[2:]]
    flat = np.fromfile(out, dtype=np.float32, offset=4 * len(hdr))
    res, off = [], 0
    for n in lens:
        res.append(flat[off:off + n * vocab].reshape(n, vocab))
        off += n * vocab
    return res


def log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--workdir", default=".")
    a = ap.parse_args()
    ref = ReferenceLlama(a.model)
    refs = [ref.logits([int(t) for t in p]) for p in PROMPTS]
    emu = ReferenceLlama(a.model, emulate_engine_rounding=True)
    emu_first = [emu.logits([int(p[0])])[0] for p in PROMPTS]
    failures = 0
    worst = worst_kl = 0.0
    prefill = None
    for name, chunk, extra in [("prefill", 1 << 20, ()), ("chunk5", 5, ()), ("decode", 1, ()),
                               ("scalar-chunk7", 7, ("--scalar",))]:
        got = run_dump(a.dump, a.model, os.path.join(a.workdir, f"logits_{name}.bin"), chunk, extra)
        if prefill is None:
            prefill = got
        for i, (g, r) in enumerate(zip(got, refs)):
            kl = (np.exp(log_softmax(r)) * (log_softmax(r) - log_softmax(g))).sum(axis=1)
            worst_kl = max(worst_kl, float(kl.max()))
            exact = float(np.abs(g[0] - emu_first[i]).max() / emu_first[i].std())
            chunk_dev = 0.0
            if not extra:
                chunk_dev = float((np.abs(g - prefill[i]).max(axis=1) / r.std(axis=1)).max())
            err = np.abs(g - r).max(axis=1)
            rel = err / r.std(axis=1)
            worst = max(worst, float(rel.max()))
            top2 = np.sort(r, axis=1)[:, -2:]
            gap = top2[:, 1] - top2[:, 0]
            decisive = gap > 2 * err
            argmax_bad = int(((g.argmax(1) != r.argmax(1)) & decisive).sum())
            argmax_same = int((g.argmax(1) == r.argmax(1)).sum())
            ok = (rel.max() <= REL_TOL and argmax_bad == 0 and kl.max() <= KL_MAX_TOL and
                  kl.mean() <= KL_MEAN_TOL and exact <= EXACT_TOL and chunk_dev <= CHUNK_TOL)
            failures += not ok
            print(f"{name:14s} prompt {i} len {len(r):3d}: max|diff|/std = {rel.max():.4f} "
                  f"(mean {rel.mean():.4f}), max|diff| = {err.max():.4f}, "
                  f"KL max {kl.max():.4f} mean {kl.mean():.4f}, pos0 vs emulated {exact:.4f}, "
                  f"vs prefill {chunk_dev:.4f}, argmax equal {argmax_same}/{len(r)} "
                  f"{'OK' if ok else 'FAIL'}")
    print(f"worst max|diff|/std = {worst:.4f} (tolerance {REL_TOL}), worst KL = {worst_kl:.4f} "
          f"(tolerance {KL_MAX_TOL})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
