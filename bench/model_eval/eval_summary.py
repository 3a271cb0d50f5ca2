"""What the accuracy benchmarks' runners share (bench/kv_quant/run.py, bench/fp8_gemm/run.py):
one summary row of a run against the reference run. Standard library only."""
import math


def greedy_agreement(ref, cand):
    """(identical positions, tokens before the first difference) between two token lists."""
    same = sum(1 for a, b in zip(ref, cand) if a == b)
    prefix = 0
    for a, b in zip(ref, cand):
        if a != b:
            break
        prefix += 1
    return same, prefix


def summary_row(score, ref_score, completions, ref_completions):
    """The summary of a run: `score` and `ref_score` hold per-position "nll", "kl", "top1";
    `completions` and `ref_completions` map a prompt to its greedy token ids."""
    n = len(score["nll"])
    ppl = math.exp(sum(score["nll"]) / n)
    ref_ppl = math.exp(sum(ref_score["nll"]) / len(ref_score["nll"]))
    same = prefix = total = identical = 0
    for p, toks in ref_completions.items():
        cand = completions[p]
        sm, pr = greedy_agreement(toks, cand)
        same += sm
        prefix += pr
        total += len(toks)
        identical += sm == len(toks) == len(cand)
    return {
        "greedy_same": same / total,
        "greedy_prefix": prefix / total,
        "prompts_identical": identical,
        "prompts": len(ref_completions),
        "mean_kl": sum(score["kl"]) / n,
        "max_kl": max(score["kl"]),
        "top1": sum(score["top1"]) / n,
        "perplexity": ppl,
        "perplexity_change": ppl / ref_ppl - 1.0,
    }
