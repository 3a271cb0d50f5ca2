#!/usr/bin/env python3
"""bench/keep_warm: what priced keep-warm pings save, billed by kvgate's own telemetry.

Replays synthetic chat sessions with human think-time gaps through a real kvgate against the
provider simulator (claude-sonnet-4-5 at catalog prices, Anthropic breakpoint caching), once per
mode, each on a fresh kvgate with cold provider caches:

  off     keep_warm off
  on      keep_warm on (kvgate's priced decision)
  always  keep_warm off, the client pings before every expiry (the same request with
          max_tokens 1, up to --max-pings times per gap, and after the session's last turn,
          which it cannot know is the last): the unpriced keep-alive users ask for

and a hindsight oracle computed offline from the off run: a gap gets pings exactly when the next
turn comes before expiry + TTL of the last one (at most --max-pings) and they cost less than the
re-write they avoid.

Time is scaled by --scale (default 100): the 5-minute TTL is 3 s in the simulator and in kvgate's
caching_rules, and every gap is divided alike. Two session sets: "think" (a seeded mixture of
short gaps, gaps of minutes and breaks; the sessions end after their last turn) and "short" (short
gaps only: keep-warm must not cost there).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import random
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
sys.path.insert(0, str(REPO / "bench"))
from simctl import SimProcess  # noqa: E402
from kvgate_proc import Kvgate  # noqa: E402

import openai  # noqa: E402

ADMIN = "bench-admin"
REAL_TTL_S = 300.0
MODEL_OFF, MODEL_ON, MODEL_ON_5M = "sonnet", "sonnet-warm", "sonnet-warm-5m"
# Anthropic's long TTL against its 5-minute one.
LONG_TTL_FACTOR = 12
# claude-sonnet-4-5's catalog rates, micro-USD per 1M tokens (the oracle's arithmetic).
READ, WRITE, OUTPUT = 300_000, 3_750_000, 15_000_000


# -- sessions --------------------------------------------------------------------------------

@dataclass
class Turn:
    user: str
    assistant: str  # the scripted answer the client keeps in its history
    gap: float      # real seconds of think time before this turn (0 for the first)


@dataclass
class Session:
    sid: int
    system: str
    turns: list[Turn] = field(default_factory=list)


def words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(50_000)}" for _ in range(n))


def think_gap(rng: random.Random, long_gaps: bool) -> float:
    """A human's think time, in real seconds: reading the answer and typing (5-60 s) most of the
    time; with long_gaps, one time in three a gap of minutes (4-12 min: a test run, a look at the
    docs) and one time in eight a break (20-60 min)."""
    r = rng.random()
    if long_gaps and r < 0.125:
        return rng.uniform(20 * 60, 60 * 60)
    if long_gaps and r < 0.125 + 0.33:
        return rng.uniform(4 * 60, 12 * 60)
    return rng.uniform(5, 60)


def make_sessions(n: int, seed: int, long_gaps: bool) -> list[Session]:
    rng = random.Random(seed)
    sessions = []
    for sid in range(n):
        s = Session(sid, f"session {sid} ({seed}) instructions: " + words(rng, rng.randint(2000, 5000)))
        for i in range(rng.randint(6, 12)):
            s.turns.append(Turn(words(rng, rng.randint(50, 400)), words(rng, rng.randint(20, 100)),
                                0.0 if i == 0 else think_gap(rng, long_gaps)))
        sessions.append(s)
    return sessions


def body_of(s: Session, i: int, model: str, thread: str, max_tokens: int | None = None) -> dict:
    """Turn i's request: the whole history, breakpoints on the system prompt and the newest
    message."""
    messages = [{"role": "system", "content": [
        {"type": "text", "text": s.system, "cache_control": {"type": "ephemeral"}}]}]
    for k in range(i):
        messages += [{"role": "user", "content": [{"type": "text", "text": s.turns[k].user}]},
                     {"role": "assistant", "content": s.turns[k].assistant}]
    messages.append({"role": "user", "content": [
        {"type": "text", "text": s.turns[i].user, "cache_control": {"type": "ephemeral"}}]})
    body = {"model": model, "messages": messages, "extra_body": {"thread_identifier": thread}}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


# -- processes -------------------------------------------------------------------------------

def kvgate_config(sim_port: int, db: Path, ttl: float, cap_usd: float, max_pings: int) -> str:
    sim = f"http://127.0.0.1:{sim_port}"
    return f"""\
server: {{listen: 127.0.0.1:0, admin_token: {ADMIN}, threads: 2}}
storage: {{sqlite: {db}}}
pricing:
  caching_rules:
    anthropic: {{automatic: false, min_cacheable_tokens: 1024, granularity_tokens: 1,
                ttl_seconds: {ttl:g}, max_ttl_seconds: {ttl * LONG_TTL_FACTOR:g}}}
providers:
  - {{name: anthropic, type: anthropic, base_url: {sim}/anthropic, api_key: sk-ant-test}}
models:
  - {{name: {MODEL_OFF}, provider: anthropic, upstream_model: claude-sonnet-4-5}}
  - {{name: {MODEL_ON}, provider: anthropic, upstream_model: claude-sonnet-4-5,
     keep_warm: {{enabled: true, max_usd_per_day: {cap_usd:g}, max_pings_per_thread: {max_pings}}}}}
  - {{name: {MODEL_ON_5M}, provider: anthropic, upstream_model: claude-sonnet-4-5,
     keep_warm: {{enabled: true, max_usd_per_day: {cap_usd:g}, max_pings_per_thread: {max_pings},
                 choose_write_ttl: false}}}}
"""


# -- replay ----------------------------------------------------------------------------------

def replay(gw: Kvgate, sessions: list[Session], mode: str, run: str, scale: float, ttl: float,
           max_pings: int) -> dict:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="unused",
                           max_retries=0, timeout=60)
    model = {"on": MODEL_ON, "on_5m": MODEL_ON_5M}.get(mode, MODEL_OFF)
    lead = min(ttl / 10, 30.0)
    errors = []

    def one(s: Session):
        thread = f"{run}-{s.sid}"
        for i, t in enumerate(s.turns):
            gap = t.gap / scale
            if mode == "always" and i > 0:
                # Ping before each expiry of the gap, up to max_pings, whatever comes next.
                waited, sent = 0.0, 0
                while sent < max_pings and waited + (ttl - lead) < gap:
                    time.sleep(ttl - lead)
                    waited += ttl - lead
                    try:
                        client.chat.completions.create(**body_of(s, i - 1, model, thread, 1))
                    except openai.APIError as e:
                        errors.append((thread, i, str(e)[:200]))
                    sent += 1
                time.sleep(max(0.0, gap - waited))
            else:
                time.sleep(gap)
            try:
                client.chat.completions.create(**body_of(s, i, model, thread))
            except openai.APIError as e:
                errors.append((thread, i, str(e)[:200]))
        if mode == "always":
            # The client cannot know the session is over: its keep-alive pings on.
            for _ in range(max_pings):
                time.sleep(ttl - lead)
                try:
                    client.chat.completions.create(
                        **body_of(s, len(s.turns) - 1, model, thread, 1))
                except openai.APIError as e:
                    errors.append((thread, len(s.turns), str(e)[:200]))
        return thread

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(sessions)) as pool:
        threads = list(pool.map(one, sessions))
    if mode in ("on", "on_5m"):
        # The last turns' pings: a thread stops being pinged within max_pings TTLs (the long
        # TTL's, for threads that write for an hour).
        time.sleep((max_pings + 1) * ttl * (LONG_TTL_FACTOR if mode == "on" else 1))
    return {"threads": threads, "errors": errors, "seconds": time.monotonic() - t0}


def collect(gw: Kvgate, threads: list[str], expected: dict[str, int]) -> dict[str, dict]:
    """Each thread as kvgate's read API shows it (its turns and pings), once all are stored."""
    out = {}
    deadline = time.monotonic() + 60
    for th in threads:
        while True:
            body = gw.get(f"/api/threads/{urllib.parse.quote(th, safe='')}")
            turns = [t for t in body["turns"] if t["purpose"] == "client"]
            if len(turns) >= expected[th] or time.monotonic() > deadline:
                out[th] = body
                break
            time.sleep(0.1)
    return out


def rfc3339_seconds(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def oracle_saving(threads: dict[str, dict], ttl: float, max_pings: int) -> tuple[int, int]:
    """From the off run: what pinging exactly the gaps whose next turn came before expiry + TTL
    would have saved (pico-USD), and how many pings that takes."""
    lead = min(ttl / 10, 30.0)
    saving = pings = 0
    for body in threads.values():
        turns = sorted(body["turns"], key=lambda t: t["created_at"])
        for prev, cur in zip(turns, turns[1:]):
            gap = rfc3339_seconds(cur["created_at"]) - rfc3339_seconds(prev["created_at"])
            if gap < ttl:
                continue
            n = math.floor((gap - ttl) / (ttl - lead)) + 1  # pings at k (ttl - lead), k = 1..n
            if n > max_pings:
                continue
            u = prev["usage"]
            prefix = (u["cache_read"] or 0) + (u["cache_write_5m"] or 0)
            if (cur["usage"]["cache_read"] or 0) >= prefix:
                continue  # it did not miss
            cost = n * (prefix * READ + OUTPUT)
            gain = prefix * (WRITE - READ)
            if gain > cost:
                saving += gain - cost
                pings += n
    return saving, pings


def billed(threads: dict[str, dict]) -> tuple[int, int, float, float, float]:
    """Total pico-USD of every row (pings included), kvgate pings, and keep_warm cost / saved /
    net (USD)."""
    total = pings = 0
    cost = saved = net = 0.0
    for body in threads.values():
        total += sum(t["cost_pico_usd"]["total"] for t in body["turns"])
        kw = body.get("keep_warm") or {}
        pings += kw.get("pings", 0)
        cost += kw.get("cost_usd", 0.0)
        saved += kw.get("saved_usd", 0.0)
        net += kw.get("net_usd", 0.0)
    return total, pings, cost, saved, net


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--scale", type=float, default=100.0, help="real seconds per bench second")
    ap.add_argument("--max-pings", type=int, default=3)
    ap.add_argument("--cap-usd", type=float, default=5.0, help="keep_warm.max_usd_per_day")
    ap.add_argument("--sets", default="think,short", help="which session sets to replay")
    ap.add_argument("--kvgate", default=str(REPO / "build" / "bin" / "kvgate"))
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "keep_warm"))
    ap.add_argument("--modes", default="off,on_5m,on,always", help="which modes to replay (off is needed "
                    "for the oracle and the comparison)")
    args = ap.parse_args()
    ttl = REAL_TTL_S / args.scale
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kvgate-keep-warm-"))
    sets = {"think": make_sessions(args.sessions, args.seed, True),
            "short": make_sessions(args.sessions, args.seed + 1, False)}
    sets = {k: v for k, v in sets.items() if k in args.sets.split(",")}
    for name, sessions in sets.items():
        gaps = [t.gap for s in sessions for t in s.turns[1:]]
        print(f"{name}: {len(sessions)} sessions, {len(gaps) + len(sessions)} turns, "
              f"{sum(g > REAL_TTL_S for g in gaps)} gaps past the 5-minute TTL", flush=True)

    sim = SimProcess(openai_key="sk-openai-sim", log_dir=str(work))
    summary = {"scale": args.scale, "ttl_s": ttl, "sessions": args.sessions, "seed": args.seed,
               "max_pings": args.max_pings, "cap_usd": args.cap_usd}
    try:
        sim.client.config(anthropic_ttl_5m=ttl, anthropic_ttl_1h=ttl * LONG_TTL_FACTOR)
        for set_name, sessions in sets.items():
            res = {}
            for mode in args.modes.split(","):
                sim.client.reset()
                gw = Kvgate(args.kvgate, work / f"{set_name}-{mode}",
                            kvgate_config(sim.port, work / f"{set_name}-{mode}" / "kw.db", ttl,
                                          args.cap_usd, args.max_pings), ADMIN)
                try:
                    run_id = f"{set_name}-{mode}-{args.seed}"
                    run = replay(gw, sessions, mode, run_id, args.scale, ttl, args.max_pings)
                    n = {f"{run_id}-{s.sid}": len(s.turns) for s in sessions}
                    threads = collect(gw, run["threads"], n)
                finally:
                    gw.stop()
                cost, pings, ping_usd, saved, net = billed(threads)
                if mode == "always":
                    pings = sum(1 for b in threads.values() for t in b["turns"]
                                if t["usage"]["output"] == 1)
                res[mode] = {"usd": cost / 1e12, "pings": pings, "ping_cost_usd": ping_usd,
                             "saved_usd": saved,
                             "net_usd": net, "errors": len(run["errors"]),
                             "seconds": run["seconds"], "threads": threads}
                print(f"  {set_name}/{mode}: {run['seconds']:.0f} s, {cost / 1e12:.4f} USD, "
                      f"{pings} pings, {len(run['errors'])} client errors", flush=True)
            gain, oracle_pings = oracle_saving(res["off"]["threads"], ttl, args.max_pings)
            res["oracle"] = {"usd": res["off"]["usd"] - gain / 1e12, "pings": oracle_pings}
            for r in res.values():
                r.pop("threads", None)
            summary[set_name] = res

    finally:
        sim.stop()

    print()
    print("| sessions | mode | billed USD (pings included) | vs off | pings | kvgate's keep_warm: "
          "ping cost / saved / net USD | client errors |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for set_name in sets:
        res = summary[set_name]
        off = res["off"]["usd"]
        for mode in ("off", "on_5m", "on", "always", "oracle"):
            if mode not in res:
                continue
            r = res[mode]
            net = (f"{r['ping_cost_usd']:.4f} / {r['saved_usd']:.4f} / {r['net_usd']:+.4f}"
                   if mode in ("on", "on_5m") else "")
            errs = r.get("errors", "")
            print(f"| {set_name} | {mode} | {r['usd']:.4f} | {100 * (r['usd'] / off - 1):+.1f}% | "
                  f"{r['pings']} | {net} | {errs} |")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\n(summary in {out / 'summary.json'}; logs in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
