"""The cost router on a target it has never used (issue 38, item 4), against the provider
simulator with its cache TTLs scaled to 2 s (5-minute entries) and 24 s (1-hour ones), kvgate's
caching rules alike.

A conversation pinned to an Anthropic-style model (sonnet) for its first turn stays there while
its cache is warm; once the cache expired, the cheaper OpenAI-style model (mini), which has never
served a request, is cheaper over the horizon and the router moves the thread there. Its prompt
is estimated at the ratio the thread's text showed on sonnet (ratio_source "thread"), not at the
default 4 bytes per token, and both the move and a stay after an expiry are estimated within 5%
of what they are billed."""

from __future__ import annotations

import random
import re
import time
import urllib.request
import uuid

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY
from simctl import SimProcess

TTL_S = 2
LONG_TTL_S = 24
OUTPUT = 20


def tid(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def scaled_sim(tmp_path):
    """A simulator of its own: the scaled TTLs must not reach the other tests' shared one."""
    sim = SimProcess(openai_key="sk-openai-sim", log_dir=str(tmp_path))
    try:
        sim.client.config(openai_ttl=TTL_S, anthropic_ttl_5m=TTL_S, anthropic_ttl_1h=LONG_TTL_S)
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def cold_gw(kvgate_bin, scaled_sim, tmp_path, kvgate_process_class):
    class ColdStart(kvgate_process_class):
        def _write_config(self):
            sim = f"http://127.0.0.1:{self.sim_port}"
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
pricing:
  caching_rules:
    openai: {{min_cacheable_tokens: 1024, granularity_tokens: 128, ttl_seconds: {TTL_S},
             max_ttl_seconds: {LONG_TTL_S}}}
    anthropic: {{automatic: false, min_cacheable_tokens: 1024, granularity_tokens: 1,
                ttl_seconds: {TTL_S}, max_ttl_seconds: {LONG_TTL_S}}}
providers:
  - {{name: openai, type: openai, base_url: {sim}/openai/v1, api_key: sk-openai-sim}}
  - {{name: claude, type: anthropic, base_url: {sim}/anthropic, api_key: sk-ant-test}}
models:
  - {{name: sonnet, provider: claude, upstream_model: claude-sonnet-4-5, pricing: {{input: "3",
     cached_input: "0.30", cache_write_5m: "3.75", cache_write_1h: "6", output: "15"}}}}
  - {{name: mini, provider: openai, upstream_model: gpt-4o-mini, pricing: {{input: "2",
     cached_input: "0.20", cache_write_5m: "2", cache_write_1h: "2", output: "8"}}}}
routers:
  - {{name: cheap, strategy: cost, cache_aware: true, horizon_turns: 4,
     targets: [{{model: sonnet}}, {{model: mini}}]}}
  # The stay alone, so that its estimate after an expiry is billed.
  - {{name: stay, strategy: cost, cache_aware: true, horizon_turns: 4,
     targets: [{{model: sonnet}}]}}
""")

    kg = ColdStart(kvgate_bin, tmp_path / "cold", scaled_sim.port, name="cold").start()
    yield kg
    if kg.alive:
        assert kg.terminate() == 0, kg.stderr_tail()


class Conversation:
    """An agent's conversation: a long system prompt of identifiers (about 10 bytes per token,
    2.5 times the default ratio), breakpoints on it and on the newest user message."""

    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.system = " ".join(f"id_{rng.randrange(16**6):06x}" for _ in range(6000))
        self.rng = rng
        self.messages: list[dict] = []

    def ask(self) -> list[dict]:
        question = " ".join(f"q{self.rng.randrange(50_000)}" for _ in range(40))
        for m in self.messages:  # only the newest user message keeps its breakpoint
            if m["role"] == "user":
                m["content"] = [{"type": "text", "text": m["content"][0]["text"]}]
        self.messages.append({"role": "user", "content": [
            {"type": "text", "text": question, "cache_control": {"type": "ephemeral"}}]})
        system = {"role": "system", "content": [
            {"type": "text", "text": self.system, "cache_control": {"type": "ephemeral"}}]}
        return [system, *self.messages]

    def answered(self, text: str):
        self.messages.append({"role": "assistant", "content": text})


def turn_of(gw, client, conv: Conversation, model: str, thread: str, n: int, **kw) -> dict:
    r = client.chat.completions.create(model=model, messages=conv.ask(), max_tokens=OUTPUT,
                                       extra_body={"thread_identifier": thread}, **kw)
    conv.answered(r.choices[0].message.content)
    return gw.wait_turns(thread, n)[-1]


def candidate(turn: dict, target: str) -> dict:
    return next(c for c in turn["route"]["candidates"] if c["target"] == target)


def off(estimate: int, billed: int) -> float:
    return abs(estimate - billed) / billed


def test_after_the_expiry_the_thread_moves_to_the_cheaper_target_it_never_used(cold_gw):
    gw = cold_gw.gateway()
    client = gw.client()
    pinned = gw.client(default_headers={"x-kvgate-route-target": "sonnet"})
    thread = tid("cold")
    conv = Conversation(1)

    first = turn_of(gw, pinned, conv, "cheap", thread, 1)
    assert first["target"] == "sonnet" and first["route"]["pinned"], first["route"]
    assert first["usage"]["cache_write_5m"] > 5000, first["usage"]

    warm = turn_of(gw, client, conv, "cheap", thread, 2)
    assert warm["target"] == "sonnet", warm["route"]
    assert warm["route"]["reason_code"] == "stayed_warm", warm["route"]
    assert candidate(warm, "sonnet")["turn"] == "warm"
    assert candidate(warm, "sonnet")["ratio_source"] == "learned"
    unused = candidate(warm, "mini")
    assert unused["turn"] == "first_use" and unused["ratio_source"] == "thread", unused
    # The warm stay was estimated as billed.
    assert off(candidate(warm, "sonnet")["est_cost_pico"], warm["cost_pico_usd"]["total"]) < 0.05

    time.sleep(TTL_S + 0.8)  # sonnet's cache of the thread expires
    moved = turn_of(gw, client, conv, "cheap", thread, 3)
    assert moved["target"] == "mini", moved["route"]
    assert moved["route"]["reason_code"] == "switched", moved["route"]
    assert moved["route"]["moved"] is True
    stay, move = candidate(moved, "sonnet"), candidate(moved, "mini")
    assert stay["turn"] == "after_expiry" and stay["est_cached_tokens"] == 0, stay
    assert move["turn"] == "first_use" and move["ratio_source"] == "thread", move
    # mini's prompt at the thread's ratio, against what mini counted.
    billed_prompt = moved["usage"]["uncached"] + moved["usage"]["cache_read"]
    assert off(move["est_prompt_tokens"], billed_prompt) < 0.05, (move, moved["usage"])
    assert off(move["est_cost_pico"], moved["cost_pico_usd"]["total"]) < 0.05, (
        move, moved["cost_pico_usd"])
    # At 4 bytes per token the system prompt alone would have been more than twice as long.
    assert move["est_prompt_tokens"] * 2 < len(conv.system) / 4


def test_a_stay_after_an_expiry_is_priced_with_its_re_write(cold_gw):
    gw = cold_gw.gateway()
    client = gw.client()
    thread = tid("stay")
    conv = Conversation(2)
    turn_of(gw, client, conv, "stay", thread, 1)
    time.sleep(TTL_S + 0.8)
    after = turn_of(gw, client, conv, "stay", thread, 2)
    assert after["target"] == "sonnet"
    stay = candidate(after, "sonnet")
    assert stay["turn"] == "after_expiry", stay
    usage = after["usage"]
    assert usage["cache_read"] == 0 and usage["cache_write_5m"] > 5000, usage
    # The re-write is billed at the 5-minute write rate, and estimated so.
    assert off(stay["est_cost_pico"], after["cost_pico_usd"]["total"]) < 0.05, (
        stay, after["cost_pico_usd"])

    # The prediction error is reported per kind of turn.
    req = urllib.request.Request(f"http://127.0.0.1:{cold_gw.port}/metrics")
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    counts = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'kvgate_route_prediction_error_ratio_count\{router="stay",turn="(\w+)"\} (\S+)', text)}
    assert counts.get("first_use") == 1 and counts.get("after_expiry") == 1, counts
