"""Independent NumPy reference of a GGUF Llama forward pass (float64, no KV cache, no batching).

Dequantizes every weight with the `gguf` package's own dequantizers (not kvgate code) and computes
logits for every position of a token sequence. Slow but simple: it is the oracle for the C++ engine.

    python reference_llama.py MODEL.gguf 1,2,3   -> prints argmax per position
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class ReferenceLlama:
    def __init__(self, path, emulate_engine_rounding=False):
        """emulate_engine_rounding: round matmul inputs to 8-bit blocks of 32 (scale max|x|/127 held
        in f16, round half to even) and K/V to float16, as the engine (and llama.cpp) do; the rest
        stays float64. This isolates real bugs from the expected quantization noise."""
        self.emulate = emulate_engine_rounding
        r = GGUFReader(path)
        self.meta = {}
        for f in r.fields.values():
            if f.types and f.types[0] != 9:  # scalars and strings only
                v = f.parts[f.data[0]]
                self.meta[f.name] = bytes(v).decode() if f.types[0] == 8 else v[0].item()
        self.tensors = {t.name: t for t in r.tensors}
        m = self.meta
        self.n_layers = m["llama.block_count"]
        self.d = m["llama.embedding_length"]
        self.heads = m["llama.attention.head_count"]
        self.kv_heads = m.get("llama.attention.head_count_kv", self.heads)
        self.dh = self.d // self.heads
        self.theta = m.get("llama.rope.freq_base", 10000.0)
        self.eps = m.get("llama.attention.layer_norm_rms_epsilon", 1e-5)
        self._cache = {}

    def w(self, name):
        """Tensor as float64 [ne1, ne0] (row-major, rows = output features)."""
        if name not in self._cache:
            t = self.tensors[name]
            a = dequantize(t.data, t.tensor_type)
            shape = tuple(reversed([int(x) for x in t.shape]))
            self._cache[name] = np.asarray(a, dtype=np.float64).reshape(shape)
        return self._cache[name]

    def mm(self, x, name):
        """x [T, K] @ W^T, W [N, K]."""
        if self.emulate:
            b = x.reshape(x.shape[0], -1, 32).astype(np.float32)
            amax = np.abs(b).max(axis=2, keepdims=True)
            ident = np.where(amax > 0, np.float32(127.0) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
            q = np.rint(b * ident)  # numpy rint rounds half to even
            d = (amax / np.float32(127.0)).astype(np.float16).astype(np.float32)  # f16 scale
            x = (q * d).reshape(x.shape).astype(np.float64)
        return x @ self.w(name).T

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, positions):
        """x [T, heads, dh]; rotates interleaved pairs (2i, 2i+1) by pos * theta^(-2i/dh)."""
        half = self.dh // 2
        inv = self.theta ** (-2.0 * np.arange(half) / self.dh)
        ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]  # [T, half]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    def logits(self, tokens):
        """All-position logits [T, V] for one sequence starting at position 0."""
        t = len(tokens)
        pos = np.arange(t)
        x = self.w("token_embd.weight")[np.asarray(tokens)]  # [T, D]
        group = self.heads // self.kv_heads
        mask = np.triu(np.full((t, t), -np.inf), k=1)
        for l in range(self.n_layers):
            p = f"blk.{l}."
            h = self.rmsnorm(x, self.w(p + "attn_norm.weight"))
            q = self.mm(h, p + "attn_q.weight").reshape(t, self.heads, self.dh)
            k = self.mm(h, p + "attn_k.weight").reshape(t, self.kv_heads, self.dh)
            v = self.mm(h, p + "attn_v.weight").reshape(t, self.kv_heads, self.dh)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if self.emulate:
                k = k.astype(np.float16).astype(np.float64)
                v = v.astype(np.float16).astype(np.float64)
            out = np.empty((t, self.heads, self.dh))
            for hh in range(self.heads):
                g = hh // group
                sc = q[:, hh, :] @ k[:, g, :].T / np.sqrt(self.dh) + mask  # [T, T]
                sc = np.exp(sc - sc.max(axis=1, keepdims=True))
                sc /= sc.sum(axis=1, keepdims=True)
                out[:, hh, :] = sc @ v[:, g, :]
            x = x + self.mm(out.reshape(t, -1), p + "attn_output.weight")
            h = self.rmsnorm(x, self.w(p + "ffn_norm.weight"))
            gate = self.mm(h, p + "ffn_gate.weight")
            up = self.mm(h, p + "ffn_up.weight")
            x = x + self.mm(gate / (1.0 + np.exp(-gate)) * up, p + "ffn_down.weight")
        head = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        return self.mm(self.rmsnorm(x, self.w("output_norm.weight")), head)


if __name__ == "__main__":
    model = ReferenceLlama(sys.argv[1])
    toks = [int(x) for x in sys.argv[2].split(",")]
    print(model.logits(toks).argmax(axis=1).tolist())
