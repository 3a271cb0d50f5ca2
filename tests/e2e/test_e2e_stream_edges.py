"""Upstream stream edge cases the proxy handles (591d187, f86ad80, 86e8fdd, 4c8cb93): a stream
without data: [DONE], a final event followed by a body held open, a gzip answer, a 2xx JSON
document answering a streaming request, SSE blocks that dispatch nothing. Each test checks what
the client receives and what /api/threads/{id} and /api/requests record.

The simulator's faults (tests/sim/provider_sim.py, "Faults") produce the upstream behaviour."""

from __future__ import annotations

import http.client
import json
import time
import uuid

import openai
import pytest

from gwctl import (GATEWAY_KEY, SIM_KIND_OF_MODEL, normalized_from_sim, sdk_usage_expected)

CHAT = "/v1/chat/completions"
GPT, CLAUDE = "gpt-4o-mini", "claude-sonnet-4-5"
HOLD_MS = 5000  # how long the upstream keeps its body open after the final event


def tid(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def chat(thread: str, model: str = GPT, stream: bool = True, **extra) -> dict:
    return {"model": model, "stream": stream, "thread_identifier": thread,
            "messages": [{"role": "user", "content": "tell me about stream edges"}], **extra}


def post(gw, body: dict, timeout: float = 20.0):
    """POST /v1/chat/completions read to the end of the body: (status, headers (lowercase), raw
    body, seconds from sending to the body's end)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    try:
        t0 = time.monotonic()
        conn.request("POST", CHAT, body=json.dumps(body), headers={
            "Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return (resp.status, {k.lower(): v for k, v in resp.getheaders()}, data,
                time.monotonic() - t0)
    finally:
        conn.close()


def blocks(raw: bytes) -> list[str]:
    """The SSE blocks of a client stream (each without its blank line)."""
    text = raw.decode()
    assert text.endswith("\n\n"), f"the stream does not end with a blank line: {text[-200:]!r}"
    return text[:-2].split("\n\n")


def datas(raw: bytes) -> list[str]:
    return [b[6:] for b in blocks(raw) if b.startswith("data: ")]


def usage_of(u: dict) -> dict:
    """An OpenAI usage object in sdk_usage_expected's terms."""
    return {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
            "total_tokens": u["total_tokens"],
            "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0}


def recorded(gw, thread: str, n: int = 1) -> list[dict]:
    """The thread's n requests as GET /api/requests/{id} has them, checked against the
    /api/threads/{id} turns and the /api/requests?thread_id= list."""
    turns = gw.wait_turns(thread, n)
    assert len(turns) == n, turns
    st, _, body = gw.admin_get(f"/api/requests?thread_id={thread}&limit=100")
    assert st == 200, body
    listed = {r["request_id"]: r for r in body["requests"]}
    assert sorted(listed) == sorted(t["request_id"] for t in turns), (listed, turns)
    full = []
    for t in turns:
        st, _, row = gw.admin_get(f"/api/requests/{t['request_id']}")
        assert st == 200, row
        for k in ("status", "http_status", "usage", "error", "stream", "cost_pico_usd"):
            assert row[k] == listed[t["request_id"]][k] == t[k], (k, row, t)
        full.append(row)
    return full


def assert_ok(row: dict, kind: str, sim_usage: dict):
    assert row["status"] == "ok", row
    assert row["http_status"] == 200 and row["error"] is None, row
    assert row["usage"] == normalized_from_sim(kind, sim_usage), (row["usage"], sim_usage)


def assert_still_serving(gw):
    r = gw.client().chat.completions.create(
        model=GPT, messages=[{"role": "user", "content": "still there?"}])
    assert r.choices[0].message.content


# --- 1. a clean end without data: [DONE] ---------------------------------------------------


@pytest.mark.parametrize("include_usage", [True, False], ids=["usage", "no-usage"])
def test_openai_stream_ending_after_finish_reason_without_done_is_whole(gw, sim, include_usage):
    thread = tid("nodone")
    sim.client.add_faults({"path": "/openai/", "stream": True, "drop_final_event": True})
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    st, h, raw, _ = post(gw, chat(thread, **extra))
    assert st == 200 and h["content-type"].startswith("text/event-stream"), raw
    ds = datas(raw)
    assert ds[-1] == "[DONE]" and ds.count("[DONE]") == 1, ds[-3:]
    chunks = [json.loads(d) for d in ds[:-1]]
    assert not [c for c in chunks if "error" in c], chunks[-1]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    # kvgate asks for the usage chunk whatever the client asked, and passes it on only if asked
    assert sim.client.requests()[-1]["body"]["stream_options"] == {"include_usage": True}
    entry = sim.client.usage_log()[-1]
    assert [c["usage"] for c in chunks if c.get("usage")] == (
        [entry["usage"]] if include_usage else [])
    row = recorded(gw, thread)[0]
    assert_ok(row, "openai", entry["usage"])
    assert row["finish_reason"] == "stop"


@pytest.mark.parametrize("model,fault", [
    (GPT, {"end_after_chunks": 3}),  # role chunk + 2 content chunks, no finish_reason
    (CLAUDE, {"drop_final_event": True}),  # message_delta came, message_stop did not
], ids=["openai-before-finish-reason", "anthropic-without-message-stop"])
def test_clean_end_before_the_final_event_is_an_error(gw, sim, model, fault):
    thread = tid("cut")
    sim.client.add_faults({"stream": True, **fault})
    st, _, raw, _ = post(gw, chat(thread, model))
    assert st == 200, raw
    ds = datas(raw)
    assert "[DONE]" not in ds, ds[-2:]
    assert any(json.loads(d).get("choices") for d in ds[:-1]), "no content before the error"
    error = json.loads(ds[-1]).get("error")
    assert error and error["code"] == "stream_incomplete", ds[-1]
    row = recorded(gw, thread)[0]
    assert row["status"] == "upstream_error" and row["http_status"] == 200, row
    assert row["error"] == error["message"] and "ended before" in row["error"], row
    assert_still_serving(gw)


# --- 2. the final event, then a body held open ----------------------------------------------


@pytest.mark.parametrize("model", [GPT, CLAUDE])
def test_final_event_ends_the_stream_while_the_upstream_holds_its_body(gw, sim, model):
    kind = SIM_KIND_OF_MODEL[model]
    thread = tid("hold")
    sim.client.add_faults({"stream": True, "hold_after_final_ms": HOLD_MS})
    st, _, raw, elapsed = post(gw, chat(thread, model, stream_options={"include_usage": True}))
    assert st == 200 and datas(raw)[-1] == "[DONE]", raw[-300:]
    assert elapsed < 1.5, (f"the client's stream ended {elapsed:.2f}s after the request: kvgate "
                           f"waited for the upstream, which held its body {HOLD_MS} ms")
    entry = sim.client.usage_log()[-1]
    n = normalized_from_sim(kind, entry["usage"])
    assert usage_of(json.loads(datas(raw)[-2])["usage"]) == sdk_usage_expected(kind, n)
    row = recorded(gw, thread)[0]
    assert_ok(row, kind, entry["usage"])
    assert row["latency_ms"] < 1500, row
    assert_still_serving(gw)  # the upstream still holds the first body
    # kvgate gave the rest of the body its finish grace (1 s), then closed the connection
    held = sim.client.wait_for(
        lambda: [r for r in sim.client.requests() if "hold_ended" in r], timeout=HOLD_MS / 1000)
    assert held and held[0]["hold_ended"] == "client_closed", held
    assert held[0]["held_ms"] < HOLD_MS - 1000, held[0]


# --- 3. a gzip answer -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_gzip_answer_is_a_clear_502(gw, sim, stream):
    thread = tid("gzip")
    sim.client.add_faults({"path": "/openai/", "gzip": True})
    with pytest.raises(openai.APIStatusError) as exc:
        gw.client().chat.completions.create(  # a stream's 502 comes before any event
            model=GPT, messages=[{"role": "user", "content": "compressed"}], stream=stream,
            extra_headers={"Accept-Encoding": "gzip"}, extra_body={"thread_identifier": thread})
    assert exc.value.status_code == 502, exc.value
    body = exc.value.body
    error = body.get("error", body) if isinstance(body, dict) else body
    assert isinstance(error, dict), f"not an OpenAI-format error: {body!r}"
    assert error["code"] == "bad_upstream_response", error
    assert "Content-Encoding gzip" in error["message"], error
    up = sim.client.requests()
    assert [r["headers"].get("accept-encoding") for r in up] == ["identity"], up
    row = recorded(gw, thread)[0]
    assert row["status"] == "upstream_error" and row["http_status"] == 502, row
    assert row["error"] == error["message"] and row["upstream_status"] == 200, row
    assert row["stream"] is stream
    assert_still_serving(gw)


# --- 4. a 2xx JSON document answering a streaming request -----------------------------------

OPENAI_ERR = {"error": {"message": "the model is overloaded (sim)", "type": "server_error",
                        "code": "overloaded"}}
ANTHROPIC_ERR = {"type": "error", "error": {"type": "overloaded_error",
                                            "message": "Overloaded (sim)"}}
NOT_A_STREAM = "answered a streaming request with a JSON document instead of an event stream"
JSON_CASES = {  # model, fault, the client's error message (or NOT_A_STREAM)
    "openai-error-object": (GPT, {"status": 200, "body": OPENAI_ERR},
                            "the model is overloaded (sim)"),
    "anthropic-error-object": (CLAUDE, {"status": 200, "body": ANTHROPIC_ERR}, "Overloaded (sim)"),
    "openai-chat-completion": (GPT, {"ignore_stream": True}, NOT_A_STREAM),
    "anthropic-message": (CLAUDE, {"ignore_stream": True}, NOT_A_STREAM),
    "error-only-in-the-text": (GPT, {"status": 200, "body": {"detail": ["error"]}}, NOT_A_STREAM),
    "completion-with-error-null": (GPT, {"status": 200, "body": {
        "object": "chat.completion", "error": None, "choices": []}}, NOT_A_STREAM),
    "empty-error-object": (GPT, {"status": 200, "body": {"error": {}}}, NOT_A_STREAM),
}
WHOLE_ANSWERS = {"openai-chat-completion", "anthropic-message"}


@pytest.mark.parametrize("case", list(JSON_CASES))
def test_2xx_json_answer_to_a_stream_is_a_502(gw, sim, case):
    model, fault, message = JSON_CASES[case]
    thread = tid("json")
    sim.client.add_faults({"stream": True, **fault})
    st, h, raw, _ = post(gw, chat(thread, model))
    assert st == 502 and h["content-type"].startswith("application/json"), (st, raw[:300])
    error = json.loads(raw)["error"]
    if message is NOT_A_STREAM:
        assert error["code"] == "bad_upstream_response", error
        assert f"upstream {'claude' if model == CLAUDE else 'openai'} {NOT_A_STREAM}" in \
            error["message"], error
    else:
        assert error["message"] == message, error
    row = recorded(gw, thread)[0]
    assert row["status"] == "upstream_error" and row["http_status"] == 502, row
    assert row["error"] == error["message"] and row["upstream_status"] == 200, row
    if case in WHOLE_ANSWERS:  # generated (and billed) all the same: its usage is recorded
        entry = sim.client.usage_log()[-1]
        assert row["usage"] == normalized_from_sim(SIM_KIND_OF_MODEL[model], entry["usage"]), \
            (row["usage"], entry)


def test_compressed_error_answer_keeps_its_status(gw, sim):
    thread = tid("gzip-429")
    sim.client.add_faults({"path": "/openai/", "status": 429, "gzip": True})
    with pytest.raises(openai.RateLimitError) as exc:
        gw.client().chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "slow down"}],
            extra_body={"thread_identifier": thread})
    assert exc.value.response.headers.get("retry-after"), exc.value.response.headers
    assert "HTTP 429" in exc.value.body["message"], exc.value.body
    row = recorded(gw, thread)[0]
    assert row["http_status"] == 429 and row["upstream_status"] == 429, row


def test_content_encoding_identity_is_case_insensitive(gw, sim):
    thread = tid("Identity")
    answer = {"id": "chatcmpl-sim", "object": "chat.completion", "created": 1, "model": GPT,
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "plain"},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}
    sim.client.add_faults({"path": "/openai/", "status": 200, "body": answer,
                           "headers": {"Content-Encoding": "Identity"}})
    r = gw.client().chat.completions.create(
        model=GPT, messages=[{"role": "user", "content": "plain please"}],
        extra_body={"thread_identifier": thread})
    assert r.choices[0].message.content == "plain"
    row = recorded(gw, thread)[0]
    assert row["status"] == "ok" and row["usage"]["output"] == 1, row


# --- 5. SSE blocks that dispatch nothing ----------------------------------------------------


@pytest.mark.parametrize("model", [GPT, CLAUDE])
def test_sse_blocks_without_data_are_skipped(gw, sim, model):
    kind = SIM_KIND_OF_MODEL[model]
    thread = tid("noise")
    sim.client.add_faults({"stream": True, "sse_noise": True, "count": 2})
    st, _, raw, _ = post(gw, chat(thread, model, stream_options={"include_usage": True}))
    assert st == 200, raw
    bs = blocks(raw)
    # comments (keep-alives) pass through an OpenAI-compatible stream; no other data-less block
    assert [b for b in bs if b.startswith(":")] == ([": keep-alive"] * 2 if kind == "openai"
                                                    else [])
    others = [b for b in bs if not b.startswith(":")]
    assert all(b.startswith("data: ") and "\n" not in b for b in others), others
    ds = datas(raw)
    assert ds[-1] == "[DONE]" and "" not in ds, ds
    chunks = [json.loads(d) for d in ds[:-1]]
    assert not [c for c in chunks if "error" in c], chunks[-1]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    entry = sim.client.usage_log()[-1]
    n = normalized_from_sim(kind, entry["usage"])
    assert len(text.split()) == n["output"], text
    assert usage_of(chunks[-1]["usage"]) == sdk_usage_expected(kind, n)
    # The OpenAI SDK reads the same stream (it choked on a retry: block).
    got = list(gw.client().chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **{
            k: v for k, v in chat(thread, model).items() if k in ("model", "messages")},
        extra_body={"thread_identifier": thread}))
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == text
    sdk_u = got[-1].usage
    assert usage_of(sdk_u.model_dump()) == sdk_usage_expected(kind, normalized_from_sim(
        kind, sim.client.usage_log()[-1]["usage"]))
    rows = recorded(gw, thread, 2)
    for row, e in zip(rows, sim.client.usage_log()[-2:]):
        assert_ok(row, kind, e["usage"])
