"""Routing and the cache: prefix affinity across two built-in engine replicas (a new conversation
with a known prefix goes where that prefix is cached), and the diagnosis naming a router's move
(routed_away) and an engine that restarted (engine_restarted)."""

from __future__ import annotations

import uuid

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY

SYSTEM = ("You are the help desk of a bicycle shop; answer briefly and politely. " * 40).strip()


def tid(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def replicas_gw(kvgate_bin, tmp_path, kvgate_process_class, bundled_model):
    class Replicas(kvgate_process_class):
        def _write_config(self):
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: r1, type: local, model_path: {bundled_model}, kv_cache_tokens: 4096, threads: 1}}
  - {{name: r2, type: local, model_path: {bundled_model}, kv_cache_tokens: 4096, threads: 1}}
models:
  - {{name: smol-1, provider: r1}}
  - {{name: smol-2, provider: r2}}
routers:
  - {{name: smol, affinity: prefix, targets: [{{model: smol-1}}, {{model: smol-2}}]}}
""")

    kg = Replicas(kvgate_bin, tmp_path / "replicas", sim_port=0, name="replicas").start(timeout=90)
    yield kg
    if kg.alive:
        assert kg.terminate() == 0, kg.stderr_tail()


def test_prefix_affinity_sends_a_known_prefix_to_the_replica_that_holds_it(replicas_gw):
    gw = replicas_gw.gateway()
    # Warm replica 2 (the second in order) with the shared system prompt.
    pinned = gw.client(timeout=120, default_headers={"x-kvgate-route-target": "smol-2"})
    first = tid("warm")
    pinned.chat.completions.create(
        model="smol", max_tokens=4, temperature=0,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}],
        extra_body={"thread_identifier": first})
    # A new conversation with the same system prompt goes to replica 2: it holds the prefix.
    client = gw.client(timeout=120)
    other = tid("follow")
    r = client.chat.completions.create(
        model="smol", max_tokens=4, temperature=0,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello?"}],
        extra_body={"thread_identifier": other})
    assert r.usage.prompt_tokens_details.cached_tokens > 300
    turn = gw.wait_turns(other, 1)[0]
    assert turn["target"] == "smol-2", turn["route"]
    assert turn["route"]["reason_code"] == "prefix_hit", turn["route"]
    assert turn["usage"]["cache_read"] == r.usage.prompt_tokens_details.cached_tokens
    by_target = {c["target"]: c for c in turn["route"]["candidates"]}
    assert by_target["smol-2"]["est_cached_tokens"] == turn["usage"]["cache_read"]
    assert by_target["smol-1"]["est_cached_tokens"] == 0
    # A prompt neither replica has seen goes to the least loaded, the first in order.
    fresh = tid("fresh")
    client.chat.completions.create(
        model="smol", max_tokens=4, temperature=0,
        messages=[{"role": "user", "content": "Something new entirely " * 30}],
        extra_body={"thread_identifier": fresh})
    assert gw.wait_turns(fresh, 1)[0]["route"]["reason_code"] == "least_loaded"


def test_an_engine_restart_is_named_in_the_diagnosis(kvgate_bin, tmp_path, local_kvgate_class,
                                                    bundled_model):
    kg = local_kvgate_class(kvgate_bin, tmp_path / "restart", sim_port=0, name="restart")
    kg.start(timeout=60)
    thread = tid("restart")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
    gw = kg.gateway()
    r = gw.client(timeout=120).chat.completions.create(
        model="smollm2", messages=messages, max_tokens=4, temperature=0,
        extra_body={"thread_identifier": thread})
    gw.wait_turns(thread, 1)
    assert kg.terminate() == 0
    kg.start(timeout=60)
    gw = kg.gateway()
    messages += [{"role": "assistant", "content": r.choices[0].message.content},
                 {"role": "user", "content": "And then?"}]
    gw.client(timeout=120).chat.completions.create(
        model="smollm2", messages=messages, max_tokens=4, temperature=0,
        extra_body={"thread_identifier": thread})
    turns = gw.wait_turns(thread, 2)
    assert turns[1]["usage"]["cache_read"] == 0
    diagnosis = turns[1]["cache_diagnosis"]
    assert diagnosis and diagnosis["cause"] == "engine_restarted", diagnosis
    assert "restarted" in diagnosis["detail"]
    assert kg.terminate() == 0


def test_a_router_move_is_named_routed_away(kvgate_bin, sim, tmp_path, kvgate_process_class):
    class Tiers(kvgate_process_class):
        def _write_config(self):
            super()._write_config()
            with open(self.config_path, "a") as f:
                f.write("""\
routers:
  - name: tiers
    targets: [{model: deepseek-chat}, {model: gpt-4o-mini}]
    affinity: none
    when:
      - {match: {metadata.tier: gold}, targets: [gpt-4o-mini]}
""")

    kg = Tiers(kvgate_bin, tmp_path / "tiers", sim.port, name="tiers").start()
    gw = kg.gateway()
    client = gw.client()
    thread = tid("moved")
    messages = [{"role": "system", "content": "w " * 1500}, {"role": "user", "content": "q1"}]
    client.chat.completions.create(model="tiers", messages=messages,
                                   metadata={"tier": "gold"},
                                   extra_body={"thread_identifier": thread})
    messages += [{"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    client.chat.completions.create(model="tiers", messages=messages,
                                   extra_body={"thread_identifier": thread})
    turns = gw.wait_turns(thread, 2)
    assert [t["target"] for t in turns] == ["gpt-4o-mini", "deepseek-chat"]
    assert turns[0]["route"]["reason"].startswith("first healthy target")
    diagnosis = turns[1]["cache_diagnosis"]
    assert diagnosis and diagnosis["cause"] == "routed_away", diagnosis
    assert diagnosis["router"] == "tiers" and diagnosis["previous_model"] == "gpt-4o-mini"
    assert kg.terminate() == 0
