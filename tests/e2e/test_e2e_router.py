"""Routers end to end: the OpenAI SDK sends `model: <router>`, kvgate picks targets across the
simulated providers, falls back on the configured failure classes before the first byte, records
the route and every attempt with exact usage, opens and closes circuits, keeps a thread on its
target across a restart, and sends turns to the engine replica that holds their prefix."""

from __future__ import annotations

import json
import socket
import time
import uuid

import openai
import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, normalized_from_sim

CHAT = "/v1/chat/completions"


def tid(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


ROUTERS = """\
routers:
  - name: chain
    strategy: fallback
    targets: [{model: gpt-4o-mini}, {model: claude-sonnet-4-5}, {model: deepseek-chat}]
    fallback_on: [429, 500, 502, 503, 504, 529, timeout, connect]
    retries: 0
    affinity: none
  - name: retrying
    strategy: fallback
    targets: [{model: gpt-4o-mini}, {model: deepseek-chat}]
    retries: 1
    affinity: none
  - name: dead-first
    strategy: fallback
    targets: [{model: dead}, {model: deepseek-chat}]
    affinity: none
  - name: sticky
    strategy: weighted
    targets: [{model: gpt-4o-mini, weight: 1}, {model: deepseek-chat, weight: 1}]
    affinity: thread
  - name: cheap
    strategy: cost
    targets: [{model: claude-sonnet-4-5}, {model: gpt-4o-mini}, {model: deepseek-chat}]
  - name: windows
    strategy: fallback
    targets: [{model: tiny-window}, {model: gpt-4o-mini}]
    affinity: none
routing:
  health: {failures_to_open: 2, cooldown_ms: 1500, backoff_ms: 10}
"""


@pytest.fixture
def router_gw(kvgate_bin, sim, tmp_path, kvgate_process_class):
    dead = closed_port()

    class RouterKvgate(kvgate_process_class):
        def _write_config(self):
            super()._write_config()
            text = self.config_path.read_text()
            text = text.replace("server:   {", "server:   {upstream_timeout_ms: 1500, ")
            text = text.replace("providers:\n", "providers:\n  - {name: nowhere, type: openai, "
                                f"base_url: http://127.0.0.1:{dead}/v1, api_key: k}}\n")
            text = text.replace("models:\n", "models:\n  - {name: dead, provider: nowhere, "
                                "upstream_model: gpt-4o-mini}\n  - {name: tiny-window, provider: "
                                "openai, upstream_model: gpt-4o-mini, context_window: 50}\n")
            self.config_path.write_text(text + ROUTERS)

    kg = RouterKvgate(kvgate_bin, tmp_path / "router", sim.port, name="router").start()
    kg.kvgate_class = RouterKvgate
    yield kg
    if kg.alive:
        assert kg.terminate() == 0, kg.stderr_tail()


def ask(gw, model: str, thread: str, content: str = "route me", stream: bool = False, **kw):
    client = gw.client()
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], stream=stream,
        extra_body={"thread_identifier": thread}, **kw)


def turns_of(gw, thread: str, n: int, **kw):
    return gw.wait_turns(thread, n, **kw)


def test_a_router_is_a_model_and_every_turn_shows_its_route(router_gw, sim):
    gw = router_gw.gateway()
    st, _, models = gw.request("GET", "/v1/models", headers={"Authorization": f"Bearer {GATEWAY_KEY}"})
    ids = {m["id"]: m for m in models["data"]}
    assert "chain" in ids and ids["chain"]["owned_by"] == "kvgate-router"
    thread = tid("route")
    r = ask(gw, "chain", thread)
    assert r.choices[0].message.content
    turn = turns_of(gw, thread, 1)[0]
    assert turn["model"] == "chain" and turn["target"] == "gpt-4o-mini"
    assert turn["provider"] == "openai"
    route = turn["route"]
    assert route["router"] == "chain" and route["strategy"] == "fallback"
    assert route["target"] == "gpt-4o-mini" and route["reason"]
    assert [c["target"] for c in route["candidates"]] == ["gpt-4o-mini", "claude-sonnet-4-5",
                                                          "deepseek-chat"]
    assert len(turn["attempts"]) == 1 and turn["attempts"][0]["status"] == "ok"
    # Exact usage, as the provider reported it.
    sim_entry = sim.client.usage_log()[-1]
    expected = normalized_from_sim("openai", sim_entry["usage"])
    for key, value in expected.items():
        assert turn["usage"][key] == value, (key, turn["usage"], expected)
    st, _, routes = gw.admin_get("/api/routes")
    assert st == 200 and {t["target"] for t in routes["targets"]} >= {"gpt-4o-mini", "dead"}


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 529])
@pytest.mark.parametrize("stream", [False, True])
def test_each_status_class_falls_back_before_the_first_byte(router_gw, sim, status, stream):
    gw = router_gw.gateway()
    sim.client.add_faults({"path": "/openai/", "status": status})
    thread = tid(f"fb{status}")
    r = ask(gw, "chain", thread, stream=stream)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in r if c.choices)
    else:
        text = r.choices[0].message.content
    assert text
    turn = turns_of(gw, thread, 1)[0]
    assert turn["status"] == "ok" and turn["target"] == "claude-sonnet-4-5", turn
    assert [a["target"] for a in turn["attempts"]] == ["gpt-4o-mini", "claude-sonnet-4-5"]
    assert turn["attempts"][0]["http_status"] == status
    assert turn["attempts"][1]["status"] == "ok"
    # One record for the client's one request.
    st, _, listed = gw.admin_get(f"/api/requests?thread_id={thread}")
    assert len(listed["requests"]) == 1


def test_timeout_and_connect_fall_back(router_gw, sim):
    gw = router_gw.gateway()
    sim.client.add_faults({"path": "/openai/", "latency_ms": 3000})
    thread = tid("timeout")
    assert ask(gw, "chain", thread).choices[0].message.content
    turn = turns_of(gw, thread, 1)[0]
    assert turn["attempts"][0]["status"] == "timeout" and turn["target"] == "claude-sonnet-4-5"
    thread = tid("connect")
    assert ask(gw, "dead-first", thread).choices[0].message.content
    turn = turns_of(gw, thread, 1)[0]
    assert turn["attempts"][0]["target"] == "dead"
    assert turn["attempts"][0]["status"] == "upstream_error"
    assert turn["target"] == "deepseek-chat"


def test_a_stream_that_fails_after_its_first_byte_is_not_retried(router_gw, sim):
    gw = router_gw.gateway()
    sim.client.add_faults({"path": "/openai/", "stream": True, "reset_after_chunks": 2})
    thread = tid("midstream")
    with pytest.raises(openai.APIError):
        for _ in ask(gw, "chain", thread, stream=True):
            pass
    turn = turns_of(gw, thread, 1)[0]
    assert turn["status"] == "upstream_error"
    assert len(turn["attempts"]) == 1 and turn["target"] == "gpt-4o-mini"
    assert len([r for r in sim.client.requests() if "/anthropic/" in r["path"]]) == 0


def test_a_client_error_is_not_tried_elsewhere(router_gw, sim):
    gw = router_gw.gateway()
    sim.client.add_faults({"path": "/openai/", "status": 400})
    with pytest.raises(openai.BadRequestError):
        ask(gw, "chain", tid("400"))
    assert not [r for r in sim.client.requests() if "/anthropic/" in r["path"]]


def test_retries_on_the_same_target_before_falling_back(router_gw, sim):
    gw = router_gw.gateway()
    sim.client.add_faults({"path": "/openai/", "status": 503})
    thread = tid("retry")
    assert ask(gw, "retrying", thread).choices[0].message.content
    turn = turns_of(gw, thread, 1)[0]
    assert [a["target"] for a in turn["attempts"]] == ["gpt-4o-mini", "gpt-4o-mini"]
    assert turn["target"] == "gpt-4o-mini"


def test_a_circuit_opens_and_closes(router_gw, sim):
    gw = router_gw.gateway()
    sim.client.add_faults({"path": "/openai/", "status": 503, "count": 2})
    for i in range(2):
        assert ask(gw, "chain", tid(f"open{i}")).choices[0].message.content
    thread = tid("skipped")
    assert ask(gw, "chain", thread).choices[0].message.content
    turn = turns_of(gw, thread, 1)[0]
    first = turn["route"]["candidates"][-1]
    assert first["target"] == "gpt-4o-mini" and not first["eligible"], turn["route"]
    assert "circuit open" in first["why_not"]
    assert [a["target"] for a in turn["attempts"]] == ["claude-sonnet-4-5"]
    st, _, metrics = gw.request("GET", "/metrics")
    assert 'kvgate_circuit_open{target="gpt-4o-mini"} 1' in metrics.decode()
    time.sleep(1.7)  # the cool-down: one probe goes to gpt-4o-mini and closes the circuit
    thread = tid("probe")
    assert ask(gw, "chain", thread).choices[0].message.content
    assert turns_of(gw, thread, 1)[0]["target"] == "gpt-4o-mini"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        metrics = gw.request("GET", "/metrics")[2].decode()
        if 'kvgate_circuit_open{target="gpt-4o-mini"} 0' in metrics:
            break
        time.sleep(0.05)
    assert 'kvgate_circuit_open{target="gpt-4o-mini"} 0' in metrics


def test_the_context_window_decides_eligibility(router_gw, sim):
    gw = router_gw.gateway()
    thread = tid("window")
    assert ask(gw, "windows", thread, content="word " * 400).choices[0].message.content
    turn = turns_of(gw, thread, 1)[0]
    assert turn["target"] == "gpt-4o-mini"
    tiny = next(c for c in turn["route"]["candidates"] if c["target"] == "tiny-window")
    assert not tiny["eligible"] and "context window" in tiny["why_not"]


def test_a_pinned_target_and_a_bad_pin(router_gw, sim):
    gw = router_gw.gateway()
    thread = tid("pin")
    client = gw.client(default_headers={"x-kvgate-route-target": "deepseek-chat"})
    client.chat.completions.create(model="chain", messages=[{"role": "user", "content": "x"}],
                                   extra_body={"thread_identifier": thread})
    turn = turns_of(gw, thread, 1)[0]
    assert turn["target"] == "deepseek-chat" and turn["route"]["pinned"] is True
    bad = gw.client(default_headers={"x-kvgate-route-target": "nope"})
    with pytest.raises(openai.BadRequestError) as e:
        bad.chat.completions.create(model="chain", messages=[{"role": "user", "content": "x"}])
    assert "x-kvgate-route-target" in str(e.value)


def test_thread_affinity_survives_a_restart(router_gw, sim):
    gw = router_gw.gateway()
    threads = [tid(f"aff{i}") for i in range(6)]
    first = {}
    for t in threads:
        ask(gw, "sticky", t)
        first[t] = turns_of(gw, t, 1)[0]["target"]
    assert len(set(first.values())) == 2, "weighted 1:1 over six threads used one target only"
    for t in threads:
        ask(gw, "sticky", t, content="again")
    for t in threads:
        assert {x["target"] for x in turns_of(gw, t, 2)} == {first[t]}
    assert router_gw.terminate() == 0
    router_gw.start()
    gw = router_gw.gateway()
    for t in threads:
        ask(gw, "sticky", t, content="after the restart")
    for t in threads:
        turns = turns_of(gw, t, 3)
        assert turns[-1]["target"] == first[t], (t, [x["target"] for x in turns])
        assert turns[-1]["route"]["reason_code"] == "affinity"


def test_the_cost_router_goes_cheap_and_says_why(router_gw, sim):
    gw = router_gw.gateway()
    thread = tid("cost")
    ask(gw, "cheap", thread, content="what is cheapest? " * 50)
    turn = turns_of(gw, thread, 1)[0]
    assert turn["target"] == "deepseek-chat", turn["route"]
    assert turn["route"]["reason_code"] == "cheapest"
    assert "cheapest over the next 4 turns" in turn["route"]["reason"]
    by_target = {c["target"]: c for c in turn["route"]["candidates"]}
    assert by_target["claude-sonnet-4-5"]["est_cost_usd"] > by_target["deepseek-chat"]["est_cost_usd"]


@pytest.mark.parametrize("stream", [False, True])
def test_every_answer_names_the_model_that_served_it(router_gw, sim, stream):
    gw = router_gw.gateway()
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}

    def post(model: str, thread: str):
        body = {"model": model, "stream": stream, "thread_identifier": thread,
                "messages": [{"role": "user", "content": "who answers?"}]}
        st, h, _ = gw.request("POST", "/v1/chat/completions", json.dumps(body), headers=headers)
        assert st == 200, (model, st)
        return h

    # The first target fails before its first byte: the answer names the fallback that served it.
    sim.client.add_faults({"path": "/openai/", "status": 503})
    thread = tid("served")
    h = post("chain", thread)
    assert h["x-kvgate-router"] == "chain" and h["x-kvgate-target"] == "claude-sonnet-4-5", h
    assert turns_of(gw, thread, 1)[0]["target"] == h["x-kvgate-target"]
    # A plain model names itself.
    h = post("gpt-4o-mini", tid("plain"))
    assert h["x-kvgate-target"] == "gpt-4o-mini" and "x-kvgate-router" not in h, h
