#!/usr/bin/env python3
"""bench/router_replay: what routing saves, billed by kvgate's own telemetry.

Replays synthetic multi-turn sessions (a long system prompt and tools, 10-60 turns of growing
history, idle gaps some of which outlast the cache TTL, provider outages, and turns that need the
premium model) through a real kvgate against the provider simulator, once per strategy:

  premium      every turn on claude-sonnet-4-5 (falling back only while it is down)
  cache-blind  strategy cost, cache_aware false: the cheapest eligible target at list price
  kvgate       strategy cost, cache_aware true: the planner that prices the cached prefix

and computes a hindsight oracle: per session, the cheapest assignment of turns to targets
knowing every future turn (dynamic programming over which targets' caches are warm), under the
simulator's caching rules and the same constraints. Prints one table: billed cost of each, its
ratio to the oracle, the cache hit rate, and the planner's prediction error (estimated vs billed
cost per turn).

Time is scaled: cache TTLs are 2 s (5-minute entries) and 24 s (1-hour entries) in the simulator
and in kvgate's caching rules; gaps are scaled alike.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
sys.path.insert(0, str(REPO / "bench"))
from simctl import SimProcess  # noqa: E402
from kvgate_proc import Kvgate  # noqa: E402

import openai  # noqa: E402

TTL_S = 2           # the simulator's and kvgate's TTL of 5-minute cache entries, scaled
LONG_TTL_S = 24     # of 1-hour entries
OUTPUT_TOKENS = 60  # agent turns: a tool call or a short answer
ADMIN = "bench-admin"

# Three price points (USD per 1M tokens: input, cache read, 5-minute cache write, output). The
# premium model caches at breakpoints; the mid model reads its cache at a tenth of its input price
# (Gemini 2.5 Flash's rates, served here by the simulator's OpenAI endpoint and its caching
# rules); the budget model is the cheapest at list price, from a host that does not discount
# cache reads (Llama 3.3 70B at a typical open-model host's rates).
PREMIUM, MID, BUDGET = "sonnet", "flash", "llama"
TARGETS = [PREMIUM, MID, BUDGET]
UPSTREAM = {PREMIUM: "claude-sonnet-4-5", MID: "gemini-2.5-flash", BUDGET: "llama-3.3-70b"}
KIND = {PREMIUM: "anthropic", MID: "openai", BUDGET: "openai"}
PRICES = {PREMIUM: ("3", "0.30", "3.75", "15"), MID: ("0.30", "0.03", "0.30", "2.50"),
          BUDGET: ("0.23", "0.23", "0.23", "0.40")}


# -- sessions --------------------------------------------------------------------------------

@dataclass
class Turn:
    user: str
    assistant: str  # the scripted answer the client keeps in its history (a replay)
    gap: float      # seconds after the previous turn's answer
    premium: bool   # needs the premium model (a when: rule)
    down: str | None = None  # a target that is down for this turn


@dataclass
class Session:
    sid: int
    system: str
    tools: list
    turns: list[Turn] = field(default_factory=list)
    # A cold-start session: every turn before its first long gap needs the premium model, and its
    # cheaper targets are models of its own (per strategy) that no request has reached before:
    # after the expiry the planner meets them with no learned bytes-per-token ratio.
    cold: bool = False


def words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(50_000)}" for _ in range(n))


def make_sessions(n: int, seed: int, cold_share: float = 0.0) -> list[Session]:
    rng = random.Random(seed)
    # A generator of its own, so that the sessions stay those of the same seed without cold ones.
    cold_rng = random.Random(seed * 1_000_003 + 1)
    sessions = []
    for sid in range(n):
        system = f"session {sid} agent instructions: " + words(rng, rng.randint(3000, 15000))
        tools = [{"type": "function", "function": {
            "name": f"tool_{k}", "description": words(rng, 60),
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
            for k in range(2)]
        s = Session(sid, system, tools)
        n_turns = rng.randint(10, 60)
        outage = None
        if rng.random() < 0.2:
            start = rng.randrange(1, n_turns)
            outage = (rng.choice(TARGETS), start, start + rng.randint(3, 6))
        for i in range(n_turns):
            long_gap = i > 0 and rng.random() < 0.1
            gap = rng.uniform(2.8, 4.0) if long_gap else rng.uniform(0.1, 1.0)
            down = outage[0] if outage and outage[1] <= i < outage[2] else None
            premium = i > 0 and rng.random() < 0.05 and down != PREMIUM
            # The user side of an agent's turn is mostly tool output: a file, a search result.
            s.turns.append(Turn(words(rng, rng.randint(30, 1200)), words(rng, rng.randint(20, 200)),
                                0.0 if i == 0 else gap, premium, down))
        if cold_rng.random() < cold_share:
            make_cold(s, cold_rng)
        sessions.append(s)
    return sessions


def make_cold(s: Session, rng: random.Random):
    """Turns the session into a cold-start one: premium until its first gap past the TTL (one is
    placed after turn 2-5 when it has none there), free to move after it."""
    expiry = next((i for i, t in enumerate(s.turns) if i >= 2 and t.gap > TTL_S), None)
    if expiry is None:
        expiry = min(len(s.turns) - 1, rng.randint(2, 5))
        s.turns[expiry].gap = rng.uniform(2.8, 4.0)
    for i, t in enumerate(s.turns):
        t.premium = i < expiry
        if t.premium and t.down == PREMIUM:
            t.down = None  # the premium model must serve these
    s.cold = True


def base_target(name: str) -> str:
    """sonnet, flash or llama: a cold-start session's own models are named <base>-<run>-c<sid>."""
    return name.split("-", 1)[0]


def router_of(s: Session, strategy: str) -> str:
    """The router a session's turns name: a cold-start session has its own cost routers."""
    return f"{strategy}-c{s.sid}" if s.cold and strategy != "premium" else strategy


def body_of(s: Session, i: int, model: str, thread: str) -> dict:
    """The client's request for turn i: the whole history, cache breakpoints on the system prompt
    and on the newest user message (what Claude Code and similar agents send)."""
    system = {"role": "system", "content": [
        {"type": "text", "text": s.system, "cache_control": {"type": "ephemeral"}}]}
    messages = [system]
    # Earlier user messages keep their form (content parts); only the breakpoint moves.
    for k in range(i):
        messages += [{"role": "user", "content": [{"type": "text", "text": s.turns[k].user}]},
                     {"role": "assistant", "content": s.turns[k].assistant}]
    messages.append({"role": "user", "content": [
        {"type": "text", "text": s.turns[i].user, "cache_control": {"type": "ephemeral"}}]})
    extra = {"thread_identifier": thread}
    t = s.turns[i]
    if t.premium:
        extra["metadata"] = {"needs": "premium"}
    if t.down:
        extra["user"] = f"down-{t.down}"
    return {"model": model, "messages": messages, "tools": s.tools, "extra_body": extra}


# -- processes -------------------------------------------------------------------------------

def kvgate_config(sim_port: int, db: Path, horizon: str, cold: list[Session]) -> str:
    sim = f"http://127.0.0.1:{sim_port}"
    when = "    when:\n      - {match: {metadata.needs: premium}, targets: [sonnet]}\n"
    provider = {PREMIUM: "anthropic", MID: "openai", BUDGET: "openai"}

    def model(name: str, base: str) -> str:
        p = PRICES[base]
        return (f"  - {{name: {name}, provider: {provider[base]}, upstream_model: {UPSTREAM[base]}, "
                f"pricing: {{input: \"{p[0]}\", cached_input: \"{p[1]}\", "
                f"cache_write_5m: \"{p[2]}\", output: \"{p[3]}\"}}}}\n")

    models = "models:\n" + "".join(model(t, t) for t in PRICES)
    # Each cold-start session's own cheaper models and cost routers, per strategy.
    cold_routers = ""
    for s in cold:
        for strategy, aware in (("cache-blind", "false"), ("kvgate", "true")):
            own = [f"{t}-{strategy}-c{s.sid}" for t in (MID, BUDGET)]
            models += "".join(model(name, base_target(name)) for name in own)
            cold_routers += (f"  - name: {router_of(s, strategy)}\n    strategy: cost\n"
                             f"    cache_aware: {aware}\n    targets: [sonnet, {', '.join(own)}]\n"
                             f"    retries: 0\n    horizon_turns: {horizon}\n{when}")
    return f"""\
server: {{listen: 127.0.0.1:0, admin_token: {ADMIN}, threads: 2}}
storage: {{sqlite: {db}}}
pricing:
  caching_rules:
    openai: {{min_cacheable_tokens: 1024, granularity_tokens: 128, ttl_seconds: {TTL_S},
             max_ttl_seconds: {LONG_TTL_S}}}
    anthropic: {{automatic: false, min_cacheable_tokens: 1024, granularity_tokens: 1,
                ttl_seconds: {TTL_S}, max_ttl_seconds: {LONG_TTL_S}}}
providers:
  - {{name: openai, type: openai, base_url: {sim}/openai/v1, api_key: sk-openai-sim}}
  - {{name: anthropic, type: anthropic, base_url: {sim}/anthropic, api_key: sk-ant-test}}
{models}routers:
  - {{name: premium, strategy: fallback, targets: [sonnet, flash, llama], retries: 0, affinity: none}}
  - name: cache-blind
    strategy: cost
    cache_aware: false
    targets: [sonnet, flash, llama]
    retries: 0
{when}  - name: kvgate
    strategy: cost
    cache_aware: true
    targets: [sonnet, flash, llama]
    retries: 0
    horizon_turns: {horizon}
{when}{cold_routers}# The replay's outages are per-request faults, not provider-wide: the breaker stays closed so
# one session's outage does not move the others.
routing:
  health: {{failures_to_open: 1000, error_rate_to_open: 1.0, min_requests: 100000}}
"""


# -- replay ----------------------------------------------------------------------------------

def replay(gw: Kvgate, sessions: list[Session], model: str, run: str, concurrency: int) -> dict:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="unused",
                           max_retries=0, timeout=60)
    errors = []

    def one(s: Session):
        thread = f"{run}-{s.sid}"
        for i, t in enumerate(s.turns):
            time.sleep(t.gap)
            b = body_of(s, i, router_of(s, model), thread)
            try:
                client.chat.completions.create(**b)
            except openai.APIError as e:
                errors.append((thread, i, str(e)[:200]))
        return thread

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        threads = list(pool.map(one, sessions))
    return {"threads": threads, "errors": errors, "seconds": time.monotonic() - t0}


def collect(gw: Kvgate, threads: list[str], expected_turns: dict[str, int]) -> dict[str, list]:
    """Each thread's turns from kvgate's read API, once all are stored."""
    out = {}
    for thread in threads:
        deadline = time.monotonic() + 30
        while True:
            body = gw.get(f"/api/threads/{thread}")
            turns = body.get("turns", [])
            if len(turns) >= expected_turns[thread] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out[thread] = turns
    return out


# -- the oracle -------------------------------------------------------------------------------

def micro(v: str) -> int:
    """USD per 1M tokens -> micro-USD per 1M = pico-USD per token, exactly."""
    whole, _, frac = v.partition(".")
    return int(whole) * 1_000_000 + int((frac + "000000")[:6])


def load_rates() -> dict[str, dict[str, int]]:
    return {t: {"input": micro(p[0]), "cached": micro(p[1]), "w5m": micro(p[2]),
                "output": micro(p[3])} for t, p in PRICES.items()}


def openai_cached(common: int) -> int:
    return 0 if common < 1024 else 1024 + 128 * ((common - 1024) // 128)


def turn_cost(rates, target: str, prompt: dict, i: int, j: int | None, times: list[float],
              output: int) -> int:
    """The simulator's bill for turn i on `target` when its cache last held turn j's prompt
    (append-only histories: turn j's prompt is a prefix of turn i's)."""
    r = rates[target]
    p_i = prompt[KIND[target]][i]
    live = j is not None and times[i] - times[j] < TTL_S
    if KIND[target] == "openai":
        cached = openai_cached(min(prompt["openai"][j], p_i)) if live else 0
        return (p_i - cached) * r["input"] + cached * r["cached"] + output * r["output"]
    # Anthropic: the newest breakpoint closes the last user block (the primer follows it).
    read = prompt["anthropic"][j] - 1 if live else 0
    written = (p_i - 1) - read
    return 1 * r["input"] + read * r["cached"] + written * r["w5m"] + output * r["output"]


def oracle_session(rates, s: Session, prompt: dict, output: list[int], times: list[float]) -> int:
    states = {(None, None, None): 0}
    for i, turn in enumerate(s.turns):
        allowed = [PREMIUM] if turn.premium else [t for t in TARGETS if t != turn.down]
        nxt: dict[tuple, int] = {}
        for state, cost in states.items():
            # Entries older than the TTL are gone for good: forget them (keeps the state small).
            state = tuple(j if j is not None and times[i] - times[j] < TTL_S else None
                          for j in state)
            for target in allowed:
                k = TARGETS.index(target)
                c = cost + turn_cost(rates, target, prompt, i, state[k], times, output[i])
                new = list(state)
                new[k] = i
                key = tuple(new)
                if key not in nxt or c < nxt[key]:
                    nxt[key] = c
        states = nxt
    return min(states.values())


def model_cost(rates, s: Session, prompt: dict, output: list[int], assignment: list[str],
               times: list[float]) -> int:
    """The oracle's cost model applied to a run's actual assignment (checks the model)."""
    last: dict[str, int | None] = {t: None for t in TARGETS}
    total = 0
    for i, target in enumerate(assignment):
        j = last[target]
        if j is not None and times[i] - times[j] >= TTL_S:
            j = None
        total += turn_cost(rates, target, prompt, i, j, times, output[i])
        last[target] = i
    return total


# -- report ------------------------------------------------------------------------------------

def rfc3339_seconds(text: str) -> float:
    # "2026-12-01T20:08:35.123456Z"
    import datetime
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


TURN_KINDS = ("warm", "after_expiry", "first_use")


def totals(turns_by_thread: dict[str, list]) -> dict:
    cost = read = write = uncached = 0
    errors = []
    by_kind: dict[str, list[float]] = {k: [] for k in TURN_KINDS}
    for turns in turns_by_thread.values():
        for t in turns:
            cost += t["cost_pico_usd"]["total"]
            u = t["usage"]
            read += u["cache_read"] or 0
            write += (u["cache_write_5m"] or 0) + (u["cache_write_1h"] or 0)
            uncached += u["uncached"] or 0
            if t["route"]:
                chosen = next((c for c in t["route"]["candidates"] if c["target"] == t["target"]),
                              None)
                billed = t["cost_pico_usd"]["total"]
                if chosen and chosen["est_cost_pico"] is not None and billed > 0:
                    error = abs(chosen["est_cost_pico"] - billed) / billed
                    errors.append(error)
                    if chosen.get("turn") in by_kind:
                        by_kind[chosen["turn"]].append(error)
    total_in = read + write + uncached
    return {"cost": cost, "hit": read / total_in if total_in else 0.0, "errors": errors,
            "by_kind": by_kind}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--horizon", default="auto", help="the kvgate router's horizon_turns")
    ap.add_argument("--cold-share", type=float, default=0.25,
                    help="share of cold-start sessions (premium until the first expiry, then "
                         "cheaper targets that never had traffic); 0 for none")
    ap.add_argument("--kvgate", default=str(REPO / "build" / "bin" / "kvgate"))
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "router_replay"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kvgate-router-replay-"))
    sessions = make_sessions(args.sessions, args.seed, args.cold_share)
    cold = [s for s in sessions if s.cold]
    n_turns = sum(len(s.turns) for s in sessions)
    print(f"{len(sessions)} sessions, {n_turns} turns; "
          f"{sum(t.premium for s in sessions for t in s.turns)} premium turns, "
          f"{sum(1 for s in sessions if any(t.down for t in s.turns))} sessions with an outage, "
          f"{sum(t.gap > TTL_S for s in sessions for t in s.turns)} gaps past the TTL, "
          f"{len(cold)} cold-start sessions", flush=True)

    sim = SimProcess(openai_key="sk-openai-sim", extra_args=["--output-tokens", str(OUTPUT_TOKENS)],
                     log_dir=str(work))
    results = {}
    try:
        sim.client.config(openai_ttl=TTL_S, anthropic_ttl_5m=TTL_S, anthropic_ttl_1h=LONG_TTL_S)
        gw = Kvgate(args.kvgate, work,
                    kvgate_config(sim.port, work / "router.db", args.horizon, cold), ADMIN)
        try:
            for name in ("premium", "cache-blind", "kvgate"):
                sim.client.reset()  # every strategy starts with cold provider caches
                for target in TARGETS:
                    sim.client.add_faults({"model": UPSTREAM[target], "user": f"down-{target}",
                                           "status": 503, "count": 0})
                run = replay(gw, sessions, name, f"{name}-{args.seed}", args.concurrency)
                expected = {f"{name}-{args.seed}-{s.sid}": len(s.turns) for s in sessions}
                turns = collect(gw, run["threads"], expected)
                results[name] = {"run": run, "turns": turns}
                print(f"  {name}: {run['seconds']:.0f} s, {len(run['errors'])} client errors",
                      flush=True)
        finally:
            gw.stop()
    finally:
        sim.stop()

    # Token counts per turn and tokenizer, from the runs (premium: Anthropic's, the others:
    # OpenAI's); output tokens as billed.
    rates = load_rates()
    oracle = cold_oracle = 0
    checks = {name: [0, 0] for name in results}
    for s in sessions:
        prompt = {"openai": {}, "anthropic": {}}
        output = [OUTPUT_TOKENS] * len(s.turns)
        for name, res in results.items():
            for i, t in enumerate(res["turns"][f"{name}-{args.seed}-{s.sid}"]):
                u = t["usage"]
                if u["uncached"] is None:
                    continue
                total = u["cache_read"] + u["cache_write_5m"] + u["cache_write_1h"] + u["uncached"]
                prompt[KIND[base_target(t["target"])]][i] = total
                output[i] = u["output"]
        # A turn's count is missing for a tokenizer only where no run could send it there (a
        # premium turn for the OpenAI models, a premium outage for Anthropic's): the oracle never
        # prices those.
        def times_of(turns):
            return [rfc3339_seconds(t["created_at"]) for t in turns]

        # The oracle meets the turns when the kvgate run sent them (the gaps as they really were,
        # latency included).
        kv_turns = results["kvgate"]["turns"][f"kvgate-{args.seed}-{s.sid}"]
        best = oracle_session(rates, s, prompt, output, times_of(kv_turns))
        oracle += best
        if s.cold:
            cold_oracle += best
        for name, res in results.items():
            turns = res["turns"][f"{name}-{args.seed}-{s.sid}"]
            if len(turns) != len(s.turns):
                continue
            checks[name][0] += model_cost(rates, s, prompt, output,
                                          [base_target(t["target"]) for t in turns],
                                          times_of(turns))
            checks[name][1] += sum(t["cost_pico_usd"]["total"] for t in turns)

    rows = []
    summary = {"sessions": len(sessions), "turns": n_turns, "oracle_usd": oracle / 1e12}
    kv = totals(results["kvgate"]["turns"])
    for name in ("premium", "cache-blind", "kvgate"):
        t = totals(results[name]["turns"])
        rows.append((name, t["cost"] / 1e12, t["cost"] / oracle, t["cost"] / kv["cost"], t["hit"],
                     len(results[name]["run"]["errors"]), checks[name][0] / max(1, checks[name][1])))
        summary[name] = {"usd": t["cost"] / 1e12, "x_oracle": t["cost"] / oracle,
                         "x_kvgate": t["cost"] / kv["cost"], "hit_rate": t["hit"],
                         "client_errors": len(results[name]["run"]["errors"]),
                         "oracle_model_vs_billed": checks[name][0] / max(1, checks[name][1])}
    summary["prediction_error_median"] = pct(kv["errors"], 0.5)
    summary["prediction_error_p95"] = pct(kv["errors"], 0.95)
    summary["prediction_error_by_turn"] = {
        k: {"turns": len(v), "median": pct(v, 0.5), "p95": pct(v, 0.95)}
        for k, v in kv["by_kind"].items()}
    # The cold-start sessions alone: what each strategy billed for them against their oracle.
    cold_rows = []
    if cold:
        summary["cold_start"] = {"sessions": len(cold), "oracle_usd": cold_oracle / 1e12}
        for name in ("premium", "cache-blind", "kvgate"):
            threads = {f"{name}-{args.seed}-{s.sid}" for s in cold}
            t = totals({k: v for k, v in results[name]["turns"].items() if k in threads})
            cold_rows.append((name, t["cost"] / 1e12, t["cost"] / cold_oracle))
            summary["cold_start"][name] = {"usd": t["cost"] / 1e12,
                                           "x_oracle": t["cost"] / cold_oracle}
    print()
    print(f"| strategy | billed USD | x oracle | x kvgate | cache hit rate | client errors | "
          f"oracle model / billed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, usd, xo, xk, hit, errs, check in rows:
        print(f"| {name} | {usd:.4f} | {xo:.3f} | {xk:.3f} | {hit:.3f} | {errs} | {check:.4f} |")
    print(f"| hindsight oracle | {oracle / 1e12:.4f} | 1.000 | {oracle / kv['cost']:.3f} | | | |")
    print()
    print(f"planner prediction error (kvgate, |estimated - billed| / billed per turn): "
          f"median {summary['prediction_error_median']:.4f}, "
          f"p95 {summary['prediction_error_p95']:.4f} over {len(kv['errors'])} turns")
    print()
    print("| turn on the chosen target | turns | median error | p95 error |")
    print("| --- | --- | --- | --- |")
    for k, v in summary["prediction_error_by_turn"].items():
        print(f"| {k} | {v['turns']} | {v['median']:.4f} | {v['p95']:.4f} |")
    if cold_rows:
        print()
        print(f"cold-start sessions ({len(cold)}): billed against their hindsight oracle")
        print("| strategy | billed USD | x oracle |")
        print("| --- | --- | --- |")
        for name, usd, xo in cold_rows:
            print(f"| {name} | {usd:.4f} | {xo:.3f} |")
        print(f"| hindsight oracle | {cold_oracle / 1e12:.4f} | 1.000 |")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"(summary in {out / 'summary.json'}; logs in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
