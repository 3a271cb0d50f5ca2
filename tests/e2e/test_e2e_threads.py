"""Multi-turn threads through kvgate with the official OpenAI SDK: telemetry must equal, token for
token and to the pico-dollar, what the provider simulator reported and what the SDK saw."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import pytest

from gwctl import (PROVIDER_OF_MODEL, SIM_KIND_OF_MODEL, expected_cost_pico, normalized_from_sim,
                   sdk_usage_expected)
from simctl import deepseek_cached_for_prefix, openai_cached_for_prefix

MODELS = ["gpt-4o-mini", "claude-sonnet-4-5", "deepseek-chat"]
MODES = ["plain", "stream_usage", "stream_nousage"]
GEN_PATHS = ("/chat/completions", "/completions", "/messages")
IDLE_GAP_S = 3700  # past OpenAI's/DeepSeek's 300 s idle TTL and Anthropic's 5m and 1h TTLs


def new_thread_id(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def long_text(n_words: int, tag: str) -> str:
    return " ".join(f"{tag}{i % 97}x{i}" for i in range(n_words))


@dataclass
class SentTurn:
    request_id: str | None
    response_id: str
    text: str
    sdk_usage: dict | None  # as the SDK saw it (None when the client did not ask for it)
    chunks: list = field(default_factory=list)


def build_messages(model: str, system_text: str, history: list[dict], user_text: str):
    if model.startswith("claude"):
        # Anthropic needs explicit breakpoints; clients mark them on content parts and kvgate
        # maps them to cache_control on the Anthropic blocks.
        system = {"role": "system", "content": [
            {"type": "text", "text": system_text, "cache_control": {"type": "ephemeral"}}]}
        last = {"role": "user", "content": [
            {"type": "text", "text": user_text, "cache_control": {"type": "ephemeral"}}]}
    else:
        system = {"role": "system", "content": system_text}
        last = {"role": "user", "content": user_text}
    return [system] + history + [last]


def usage_dict(u) -> dict | None:
    if u is None:
        return None
    d = u.model_dump()
    details = d.get("prompt_tokens_details") or {}
    return {"prompt_tokens": d.get("prompt_tokens"), "completion_tokens": d.get("completion_tokens"),
            "total_tokens": d.get("total_tokens"), "cached_tokens": details.get("cached_tokens")}


def send_turn(client, model: str, messages: list[dict], mode: str, thread_kw: dict) -> SentTurn:
    kwargs = dict(model=model, messages=messages, **thread_kw)
    if mode == "plain":
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        resp = raw.parse()
        assert resp.choices and resp.choices[0].message.content, "empty completion"
        return SentTurn(raw.headers.get("x-request-id"), resp.id,
                        resp.choices[0].message.content, usage_dict(resp.usage))
    if mode == "stream_usage":
        kwargs["stream_options"] = {"include_usage": True}
    raw = client.chat.completions.with_raw_response.create(stream=True, **kwargs)
    chunks = list(raw.parse())
    assert chunks, "empty stream"
    text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    with_usage = [i for i, c in enumerate(chunks) if c.usage is not None]
    empty_choices = [i for i, c in enumerate(chunks) if not c.choices]
    if mode == "stream_usage":
        assert with_usage == [len(chunks) - 1], (
            f"include_usage: expected exactly one usage chunk, the last; got usage at chunk "
            f"indexes {with_usage} of {len(chunks)}")
        assert empty_choices == [len(chunks) - 1], (
            f"the usage chunk must have choices: [] (OpenAI format); empty-choices chunks at "
            f"{empty_choices}")
        sdk_usage = usage_dict(chunks[-1].usage)
    else:
        assert not with_usage, (f"client did not ask for include_usage but chunks {with_usage} "
                                f"carry usage: kvgate must strip the injected usage chunk")
        assert not empty_choices, f"chunks {empty_choices} have empty choices (leaked usage chunk?)"
        sdk_usage = None
    assert text, "stream carried no content"
    return SentTurn(raw.headers.get("x-request-id"), chunks[0].id, text, sdk_usage, chunks)


def sim_generation_requests(sim) -> list[dict]:
    return [r for r in sim.client.requests() if r["path"].endswith(GEN_PATHS)]


def check_thread_against_sim(gw, sim, thread_id: str, model: str, sent: list[SentTurn],
                             stream: bool):
    """Every turn in /api/threads/{id} equals the sim's usage log and the SDK's usage."""
    kind = SIM_KIND_OF_MODEL[model]
    turns = gw.wait_turns(thread_id, len(sent))
    assert len(turns) == len(sent), f"{len(turns)} turns recorded for {len(sent)} requests"
    entries = sorted(sim.client.usage_log(), key=lambda e: e["request_index"])
    assert len(entries) == len(sent), (
        f"the sim answered {len(entries)} generation requests for {len(sent)} client turns")
    by_rid = {t["request_id"]: t for t in turns}
    normalized = []
    for i, (s, entry) in enumerate(zip(sent, entries)):
        assert s.request_id, f"turn {i}: kvgate sent no x-request-id header"
        assert s.request_id in by_rid, (
            f"turn {i}: x-request-id {s.request_id} not among recorded request ids "
            f"{sorted(by_rid)}")
        t = by_rid[s.request_id]
        n = normalized_from_sim(kind, entry["usage"])
        normalized.append(n)
        ctx = f"turn {i} ({s.request_id}, sim usage {json.dumps(entry['usage'])})"
        assert t["usage"] == n, f"{ctx}: telemetry usage {t['usage']} != expected {n}"
        exp_cost = expected_cost_pico(model, n, t["cache_diagnosis"])
        assert t["cost_pico_usd"] == exp_cost, (
            f"{ctx}: cost_pico_usd {t['cost_pico_usd']} != expected {exp_cost}")
        for k, v in exp_cost.items():
            assert t["cost_usd"][k] == pytest.approx(v / 1e12, rel=1e-9, abs=1e-15), (
                f"{ctx}: cost_usd.{k}")
        assert t["model"] == model
        assert t["provider"] == PROVIDER_OF_MODEL[model]
        assert t["status"] == "ok", f"{ctx}: status {t['status']} error {t.get('error')}"
        assert t["http_status"] == 200
        assert t["stream"] is stream
        assert isinstance(t["latency_ms"], (int, float)) and t["latency_ms"] >= 0
        if stream:
            assert isinstance(t["ttft_ms"], (int, float)) and 0 <= t["ttft_ms"] <= t[
                "latency_ms"] + 1, f"{ctx}: ttft_ms {t['ttft_ms']} latency {t['latency_ms']}"
        assert not t.get("error")
        if s.sdk_usage is not None:
            exp = sdk_usage_expected(kind, n)
            got = dict(s.sdk_usage)
            if got["cached_tokens"] is None and exp["cached_tokens"] == 0:
                got["cached_tokens"] = 0
            assert got == exp, f"{ctx}: SDK usage {s.sdk_usage} != expected {exp}"
    return turns, entries, normalized


def check_forwarded(sim, model: str, stream: bool, client_include_usage: bool):
    kind = SIM_KIND_OF_MODEL[model]
    reqs = sim_generation_requests(sim)
    assert reqs, "kvgate forwarded nothing to the simulator"
    for r in reqs:
        body = r["body"] or {}
        assert "thread_identifier" not in body, "kvgate forwarded thread_identifier upstream"
        assert r["status"] == 200, f"the sim rejected a forwarded request: {r['status']} {body}"
        auth = r["headers"].get("authorization", "")
        assert "sk-gw-test" not in auth and "sk-gw-test" not in r["headers"].get("x-api-key", "")
        if kind == "openai":
            assert auth == "Bearer sk-openai-sim", f"upstream auth {auth!r}: ${{ENV}} expansion?"
        elif kind == "deepseek":
            assert auth == "Bearer sk-ds-test"
        else:
            assert r["headers"].get("x-api-key") == "sk-ant-test"
            assert r["headers"].get("anthropic-version")
            assert "cache_control" in json.dumps(body), (
                "kvgate dropped the client's cache_control markers when translating to Anthropic")
        if stream and kind != "anthropic":
            assert (body.get("stream_options") or {}).get("include_usage") is True, (
                f"streaming request forwarded without stream_options.include_usage "
                f"(client asked: {client_include_usage}): {body.get('stream_options')}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
def test_multiturn_thread_cache_telemetry(gw, sim, model, mode):
    """Five turns sharing a >1100-token prefix; an idle gap before turn 4 expires the cache."""
    client = gw.client()
    thread_id = new_thread_id(f"{model}-{mode}")
    system_text = long_text(1200, "ctx")
    history: list[dict] = []
    sent: list[SentTurn] = []
    for i in range(5):
        if i == 3:
            sim.client.advance_clock(IDLE_GAP_S)
        user_text = f"question number {i} about the context please answer briefly"
        msgs = build_messages(model, system_text, history, user_text)
        sent.append(send_turn(client, model, msgs, mode,
                              {"extra_body": {"thread_identifier": thread_id}}))
        history += [{"role": "user", "content": user_text},
                    {"role": "assistant", "content": sent[-1].text}]
    stream = mode != "plain"
    check_forwarded(sim, model, stream, mode == "stream_usage")
    _, entries, norm = check_thread_against_sim(gw, sim, thread_id, model, sent, stream)
    reads = [n["cache_read"] for n in norm]
    assert reads[0] == 0, f"first turn read from cache: {reads}"
    assert reads[1] > 0 and reads[2] > 0, f"turns 2-3 must read the shared prefix: {reads}"
    assert reads[3] == 0, f"after an idle gap of {IDLE_GAP_S}s reads must be 0: {reads}"
    assert reads[4] > 0, f"the turn after the re-write must read again: {reads}"
    kind = SIM_KIND_OF_MODEL[model]
    prompts = [e["prompt_tokens"] for e in entries]
    assert prompts[0] >= 1100
    if kind == "openai":  # each turn's prompt extends the previous one verbatim
        assert reads[1:3] == [openai_cached_for_prefix(p) for p in prompts[0:2]]
        assert reads[4] == openai_cached_for_prefix(prompts[3])
    elif kind == "deepseek":
        assert reads[1:3] == [deepseek_cached_for_prefix(p) for p in prompts[0:2]]
    else:
        writes = [n["cache_write_5m"] + n["cache_write_1h"] for n in norm]
        assert writes[0] > 0 and writes[3] > 0, f"Anthropic cache writes per turn: {writes}"


def test_completions_endpoint_thread(gw, sim):
    client = gw.client()
    thread_id = new_thread_id("completions")
    prompt = long_text(1300, "p")
    sent = []
    for _ in range(2):
        raw = client.completions.with_raw_response.create(
            model="gpt-4o-mini", prompt=prompt, max_tokens=8,
            extra_body={"thread_identifier": thread_id})
        resp = raw.parse()
        sent.append((raw.headers.get("x-request-id"), usage_dict(resp.usage)))
        prompt += " " + resp.choices[0].text + " next"
    turns = gw.wait_turns(thread_id, 2)
    entries = sorted(sim.client.usage_log(), key=lambda e: e["request_index"])
    assert len(entries) == 2
    by_rid = {t["request_id"]: t for t in turns}
    for (rid, sdk_u), e in zip(sent, entries):
        n = normalized_from_sim("openai", e["usage"])
        assert by_rid[rid]["usage"] == n
        assert by_rid[rid]["cost_pico_usd"] == expected_cost_pico("gpt-4o-mini", n, by_rid[rid]["cache_diagnosis"])
        assert sdk_u == sdk_usage_expected("openai", n)
    assert entries[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == \
        openai_cached_for_prefix(entries[0]["prompt_tokens"])


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5"])
@pytest.mark.parametrize("variant", ["header", "metadata"])
def test_thread_id_variants(gw, sim, model, variant):
    client = gw.client()
    thread_id = new_thread_id(f"{variant}-{model}")
    if variant == "header":
        kw = {"extra_headers": {"X-Thread-Id": thread_id}}
    else:
        kw = {"metadata": {"thread_id": thread_id}}
    history: list[dict] = []
    sent = []
    for i in range(2):
        msgs = build_messages(model, long_text(1150, "hv"), history, f"q{i}")
        sent.append(send_turn(client, model, msgs, "plain", kw))
        history += [{"role": "user", "content": f"q{i}"},
                    {"role": "assistant", "content": sent[-1].text}]
    check_thread_against_sim(gw, sim, thread_id, model, sent, stream=False)
    for r in sim_generation_requests(sim):
        assert thread_id not in json.dumps(r["body"]) or SIM_KIND_OF_MODEL[model] == "openai", (
            f"thread id forwarded to {model}: {r['body'].get('metadata')}")
        assert r["status"] == 200


def extract_rows(body, key: str) -> list[dict]:
    """The read API may answer a list or an object holding one; find the list of rows."""
    if isinstance(body, list):
        return body
    assert isinstance(body, dict), f"unexpected read API answer {body!r}"
    if isinstance(body.get(key), list):
        return body[key]
    lists = [v for v in body.values() if isinstance(v, list)]
    assert len(lists) == 1, f"cannot find the {key} list in {json.dumps(body)[:500]}"
    return lists[0]


def test_read_api_lists_and_filters(gw, sim):
    client = gw.client()
    tid = new_thread_id("list")
    ids = []
    for i in range(3):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini" if i < 2 else "deepseek-chat",
            messages=[{"role": "user", "content": f"hello {i}"}],
            extra_body={"thread_identifier": tid})
        raw.parse()
        ids.append(raw.headers.get("x-request-id"))
    gw.wait_turns(tid, 3)
    st, _, body = gw.admin_get("/api/threads")
    assert st == 200
    rows = extract_rows(body, "threads")
    assert any(r.get("thread_id") == tid for r in rows), f"{tid} missing from /api/threads"
    st, _, body = gw.admin_get(f"/api/requests?thread_id={tid}&limit=100")
    assert st == 200
    rows = extract_rows(body, "requests")
    assert sorted(r["request_id"] for r in rows) == sorted(ids)
    st, _, body = gw.admin_get(f"/api/requests?thread_id={tid}&model=deepseek-chat")
    assert st == 200
    assert [r["request_id"] for r in extract_rows(body, "requests")] == [ids[2]]
    st, _, body = gw.admin_get(f"/api/requests?thread_id={tid}&limit=1")
    assert st == 200 and len(extract_rows(body, "requests")) == 1
    st, _, body = gw.admin_get(f"/api/requests?thread_id={tid}&status=ok")
    assert st == 200 and len(extract_rows(body, "requests")) == 3
    st, _, body = gw.admin_get(f"/api/requests?thread_id={tid}&status=error")
    assert st == 200 and extract_rows(body, "requests") == []
    st, body = gw.thread("t-does-not-exist-" + uuid.uuid4().hex)
    assert st == 404 or (st == 200 and not body.get("turns")), (st, body)


def test_read_api_requires_admin_token(gw, sim):
    for token in (None, "sk-gw-test", "wrong"):
        st, _, _ = gw.admin_get("/api/threads", token=token)
        assert st in (401, 403), f"/api/threads with token {token!r} answered {st}"


def test_models_list(gw, sim):
    ids = {m.id for m in gw.client().models.list()}
    assert {"gpt-4o-mini", "claude-sonnet-4-5", "deepseek-chat"} <= ids, ids
