"""Self-tests of the provider simulator: wire formats, caching rules, clock, faults, introspection.

Expected numbers are derived from the tokenization and caching rules documented in provider_sim.py.
"""

from __future__ import annotations

import http.client
import json
import socket
import time

import openai
import pytest

from simctl import (SimClient, SimProcess, chat_prompt_tokens, deepseek_cached_for_prefix,
                    openai_cached_for_prefix)

OPENAI_AUTH = {"Authorization": "Bearer sk-openai-sim"}
DS_AUTH = {"Authorization": "Bearer sk-ds-test"}
ANT_AUTH = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}


def text_of(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def call(port, method, path, body=None, headers=None, timeout=10.0, raw: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        h = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        ctype = resp.getheader("Content-Type") or ""
        if "json" in ctype:
            return resp.status, dict(resp.getheaders()), json.loads(payload)
        return resp.status, dict(resp.getheaders()), payload
    finally:
        conn.close()


def parse_sse(payload: bytes) -> list[tuple[str | None, str]]:
    """Splits an SSE body into (event, data) pairs; asserts the framing is well-formed."""
    events = []
    text = payload.decode()
    assert text.endswith("\n\n"), "an SSE stream must end with a blank line"
    for block in text.split("\n\n")[:-1]:
        ev, data = None, []
        for line in block.split("\n"):
            assert ":" in line, f"bad SSE line {line!r}"
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                ev = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE field {field!r}")
        events.append((ev, "\n".join(data)))
    return events


def openai_chat(port, messages, model="gpt-4o-mini", path="/openai/v1/chat/completions",
                auth=OPENAI_AUTH, **extra):
    return call(port, "POST", path, {"model": model, "messages": messages, **extra}, auth)


# --- basics --------------------------------------------------------------------------------


def test_port_and_models(sim):
    st, _, body = call(sim.port, "GET", "/openai/v1/models", headers=OPENAI_AUTH)
    assert st == 200 and body["object"] == "list" and body["data"]
    st, _, body = call(sim.port, "GET", "/openai/v1/models", headers={"Authorization": "Bearer x"})
    assert st == 401 and body["error"]["code"] == "invalid_api_key"


def test_openai_auth_required(sim):
    msgs = [{"role": "user", "content": "hi"}]
    st, _, body = openai_chat(sim.port, msgs, auth={})
    assert st == 401
    assert set(body["error"]) == {"message", "type", "param", "code"}
    st, _, body = openai_chat(sim.port, msgs, auth={"Authorization": "Bearer sk-wrong"})
    assert st == 401


def test_openai_rejects_unknown_fields(sim):
    st, _, body = openai_chat(sim.port, [{"role": "user", "content": "hi"}],
                              thread_identifier="t-1")
    assert st == 400
    assert body["error"]["param"] == "thread_identifier"
    assert "thread_identifier" in body["error"]["message"]
    st, _, body = openai_chat(sim.port, [{"role": "user", "content": "hi"}],
                              stream_options={"include_usage": True})
    assert st == 400 and body["error"]["param"] == "stream_options"


def test_malformed_json_and_unknown_path(sim):
    st, _, body = call(sim.port, "POST", "/openai/v1/chat/completions", headers=OPENAI_AUTH,
                       raw=b"{not json")
    assert st == 400 and "error" in body
    st, _, body = call(sim.port, "POST", "/openai/v1/nothing", {}, OPENAI_AUTH)
    assert st == 404


def test_keep_alive(sim):
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    try:
        body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "a"}]})
        for _ in range(3):
            conn.request("POST", "/openai/v1/chat/completions", body=body,
                         headers={**OPENAI_AUTH, "Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            json.loads(resp.read())
            assert not resp.will_close
    finally:
        conn.close()


# --- OpenAI caching ------------------------------------------------------------------------------


def test_openai_below_minimum_not_cached(sim):
    msgs = [{"role": "user", "content": text_of(1000)}]
    n = chat_prompt_tokens(msgs)
    assert n < 1024
    for _ in range(2):
        st, _, body = openai_chat(sim.port, msgs)
        assert st == 200
        assert body["usage"]["prompt_tokens"] == n
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


@pytest.mark.parametrize("words", [1100, 1300, 2000])
def test_openai_cache_steps(sim, words):
    msgs = [{"role": "system", "content": text_of(words)}, {"role": "user", "content": "q one"}]
    n = chat_prompt_tokens(msgs)
    _, _, b1 = openai_chat(sim.port, msgs)
    assert b1["usage"]["prompt_tokens"] == n
    assert b1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    _, _, b2 = openai_chat(sim.port, msgs)
    cached = b2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == openai_cached_for_prefix(n)
    assert cached >= 1024 and (cached - 1024) % 128 == 0 and cached <= n
    assert b2["usage"]["prompt_tokens"] == n  # includes cached
    assert b2["usage"]["total_tokens"] == n + b2["usage"]["completion_tokens"]
    # A follow-up turn shares the whole previous prompt as its prefix.
    msgs2 = msgs + [{"role": "assistant", "content": b2["choices"][0]["message"]["content"]},
                    {"role": "user", "content": "q two"}]
    _, _, b3 = openai_chat(sim.port, msgs2)
    assert b3["usage"]["prompt_tokens_details"]["cached_tokens"] == openai_cached_for_prefix(n)
    # Another model has its own cache.
    _, _, b4 = openai_chat(sim.port, msgs, model="gpt-4.1")
    assert b4["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_openai_prefix_divergence(sim):
    base = text_of(1500)
    m1 = [{"role": "system", "content": base}, {"role": "user", "content": "x"}]
    openai_chat(sim.port, m1)
    # Change a word at token position ~1300: the common prefix ends there.
    changed = base.split()
    changed[1299] = "CHANGED"
    m2 = [{"role": "system", "content": " ".join(changed)}, {"role": "user", "content": "x"}]
    _, _, b = openai_chat(sim.port, m2)
    common = 1 + 1299  # <|system|> + the unchanged words
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == openai_cached_for_prefix(common)
    # Changing the first message entirely: no hit.
    m3 = [{"role": "system", "content": text_of(1500, "z")}, {"role": "user", "content": "x"}]
    _, _, b = openai_chat(sim.port, m3)
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_openai_ttl_and_refresh(sim):
    msgs = [{"role": "system", "content": text_of(1200)}, {"role": "user", "content": "x"}]
    n = chat_prompt_tokens(msgs)
    openai_chat(sim.port, msgs)
    sim.client.advance_clock(200)
    _, _, b = openai_chat(sim.port, msgs)  # hit at t=200 refreshes
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == openai_cached_for_prefix(n)
    sim.client.advance_clock(200)  # 400 s after the write, 200 s after the hit
    _, _, b = openai_chat(sim.port, msgs)
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == openai_cached_for_prefix(n)
    sim.client.advance_clock(301)
    _, _, b = openai_chat(sim.port, msgs)
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # ...and the miss wrote it again.
    _, _, b = openai_chat(sim.port, msgs)
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == openai_cached_for_prefix(n)


def test_openai_completions_endpoint(sim):
    prompt = text_of(1300)
    body = {"model": "gpt-4o-mini", "prompt": prompt, "max_tokens": 5}
    st, _, b1 = call(sim.port, "POST", "/openai/v1/completions", body, OPENAI_AUTH)
    assert st == 200 and b1["object"] == "text_completion"
    assert b1["usage"]["prompt_tokens"] == 1300
    assert b1["usage"]["completion_tokens"] == 5
    assert len(b1["choices"][0]["text"].split()) == 5
    assert b1["choices"][0]["finish_reason"] == "length"
    _, _, b2 = call(sim.port, "POST", "/openai/v1/completions", body, OPENAI_AUTH)
    assert b2["usage"]["prompt_tokens_details"]["cached_tokens"] == openai_cached_for_prefix(1300)
    st, _, payload = call(sim.port, "POST", "/openai/v1/completions",
                          {**body, "stream": True, "stream_options": {"include_usage": True}},
                          OPENAI_AUTH)
    evs = parse_sse(payload)
    assert evs[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in evs[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 1300
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == b1["choices"][0]["text"]


def test_openai_reasoning_model_and_max_tokens(sim):
    msgs = [{"role": "user", "content": "think"}]
    _, _, b = openai_chat(sim.port, msgs, model="o4-mini")
    visible = len(b["choices"][0]["message"]["content"].split())
    r = b["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert r == 8 and b["usage"]["completion_tokens"] == visible + r
    _, _, b = openai_chat(sim.port, msgs, max_tokens=3)
    assert b["usage"]["completion_tokens"] == 3
    assert b["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert b["choices"][0]["finish_reason"] == "length"
    _, _, b = openai_chat(sim.port, msgs)
    assert b["usage"]["completion_tokens"] == 16 and b["choices"][0]["finish_reason"] == "stop"


def test_deterministic_reply(sim):
    msgs = [{"role": "user", "content": "same prompt"}]
    _, _, a = openai_chat(sim.port, msgs)
    _, _, b = openai_chat(sim.port, msgs)
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["id"] != b["id"]


# --- OpenAI streaming and the SDK ------------------------------------------------------------------


def test_openai_sse_format_with_usage(sim):
    msgs = [{"role": "system", "content": text_of(1100)}, {"role": "user", "content": "s"}]
    st, headers, payload = openai_chat(sim.port, msgs, stream=True,
                                       stream_options={"include_usage": True})
    assert st == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert headers.get("Transfer-Encoding") == "chunked"
    evs = parse_sse(payload)
    assert all(ev is None for ev, _ in evs)
    assert evs[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in evs[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["usage"] is None for c in chunks[:-1])
    final = chunks[-1]
    assert final["choices"] == []
    assert final["usage"]["prompt_tokens"] == chat_prompt_tokens(msgs)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    content_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) >= 3
    text = "".join(c["choices"][0]["delta"]["content"] for c in content_chunks)
    assert len(text.split()) == final["usage"]["completion_tokens"]


def test_openai_sse_without_include_usage(sim):
    st, _, payload = openai_chat(sim.port, [{"role": "user", "content": "s"}], stream=True)
    chunks = [json.loads(d) for _, d in parse_sse(payload)[:-1]]
    assert all("usage" not in c for c in chunks)
    assert all(c["choices"] for c in chunks)
    # The simulator still knows the usage it would have reported.
    entry = sim.client.usage_log()[-1]
    assert entry["id"] == chunks[0]["id"] and entry["usage"]["completion_tokens"] == 16


def test_openai_sdk_against_sim(sim):
    client = openai.OpenAI(base_url=f"{sim.base}/openai/v1", api_key="sk-openai-sim",
                           max_retries=0, timeout=10)
    msgs = [{"role": "system", "content": text_of(1200)}, {"role": "user", "content": "q"}]
    r1 = client.chat.completions.create(model="gpt-4o-mini", messages=msgs)
    r2 = client.chat.completions.create(model="gpt-4o-mini", messages=msgs)
    log = {e["id"]: e for e in sim.client.usage_log()}
    assert r2.usage.prompt_tokens_details.cached_tokens == openai_cached_for_prefix(
        chat_prompt_tokens(msgs))
    for r in (r1, r2):
        assert r.usage.model_dump(exclude_none=True) == {
            k: v for k, v in log[r.id]["usage"].items()}
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=msgs, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gpt-4o-mini", messages=msgs,
                                       extra_body={"thread_identifier": "t"})
    bad = openai.OpenAI(base_url=f"{sim.base}/openai/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="gpt-4o-mini", messages=msgs)


# --- DeepSeek ------------------------------------------------------------------------------------


def test_deepseek_cache_units(sim):
    path = "/deepseek/v1/chat/completions"
    msgs = [{"role": "system", "content": text_of(300)}, {"role": "user", "content": "a b c"}]
    n = chat_prompt_tokens(msgs)
    _, _, b1 = openai_chat(sim.port, msgs, model="deepseek-chat", path=path, auth=DS_AUTH)
    u = b1["usage"]
    assert u["prompt_tokens"] == n and u["prompt_cache_hit_tokens"] == 0
    assert u["prompt_cache_miss_tokens"] == n
    msgs2 = msgs + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    _, _, b2 = openai_chat(sim.port, msgs2, model="deepseek-chat", path=path, auth=DS_AUTH)
    u = b2["usage"]
    hit = deepseek_cached_for_prefix(n)
    assert hit > 0 and hit % 64 == 0
    assert u["prompt_cache_hit_tokens"] == hit
    assert u["prompt_tokens_details"]["cached_tokens"] == hit
    assert u["prompt_cache_hit_tokens"] + u["prompt_cache_miss_tokens"] == u["prompt_tokens"]
    assert u["prompt_tokens"] == chat_prompt_tokens(msgs2)
    assert "completion_tokens_details" not in u
    sim.client.advance_clock(301)
    _, _, b3 = openai_chat(sim.port, msgs2, model="deepseek-chat", path=path, auth=DS_AUTH)
    assert b3["usage"]["prompt_cache_hit_tokens"] == 0
    st, _, _ = openai_chat(sim.port, msgs, model="deepseek-chat", path=path,
                           auth={"Authorization": "Bearer bad"})
    assert st == 401
    st, _, _ = openai_chat(sim.port, msgs, model="deepseek-chat", path=path, auth=DS_AUTH,
                           thread_identifier="x")
    assert st == 400


def test_deepseek_stream(sim):
    st, _, payload = openai_chat(sim.port, [{"role": "user", "content": "hello"}],
                                 model="deepseek-chat", path="/deepseek/v1/chat/completions",
                                 auth=DS_AUTH, stream=True, stream_options={"include_usage": True})
    evs = parse_sse(payload)
    assert evs[-1][1] == "[DONE]"
    final = json.loads(evs[-2][1])
    assert final["choices"] == []
    assert final["usage"]["prompt_cache_miss_tokens"] == final["usage"]["prompt_tokens"]


# --- Anthropic -----------------------------------------------------------------------------------


def ant(port, body, headers=ANT_AUTH):
    return call(port, "POST", "/anthropic/v1/messages", body, headers)


def ant_body(system_words=1500, user="question one", model="claude-sonnet-4-5", sys_ttl=None,
             msg_cache=False, msg_ttl=None, history=(), **extra):
    system = [{"type": "text", "text": text_of(system_words, "s")}]
    if sys_ttl:
        system[0]["cache_control"] = {"type": "ephemeral", **({"ttl": sys_ttl}
                                                               if sys_ttl != "default" else {})}
    last = {"type": "text", "text": user}
    if msg_cache:
        last["cache_control"] = {"type": "ephemeral", **({"ttl": msg_ttl} if msg_ttl else {})}
    messages = list(history) + [{"role": "user", "content": [last]}]
    return {"model": model, "max_tokens": 64, "system": system, "messages": messages, **extra}


def ant_total(u):
    return u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]


def test_anthropic_auth_and_validation(sim):
    body = ant_body()
    assert ant(sim.port, body, {"anthropic-version": "2023-06-01"})[0] == 401
    st, _, err = ant(sim.port, body, {"x-api-key": "sk-ant-test"})
    assert st == 400 and err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    st, _, err = ant(sim.port, {**body, "thread_identifier": "t"})
    assert st == 400 and "thread_identifier" in err["error"]["message"]
    st, _, err = ant(sim.port, {**body, "metadata": {"thread_id": "t"}})
    assert st == 400
    assert ant(sim.port, {**body, "metadata": {"user_id": "u"}})[0] == 200
    no_max = dict(body)
    del no_max["max_tokens"]
    assert ant(sim.port, no_max)[0] == 400
    sys_role = {**body, "messages": [{"role": "system", "content": "x"}] + body["messages"]}
    assert ant(sim.port, sys_role)[0] == 400
    five = ant_body(sys_ttl="5m", msg_cache=True)
    five["messages"][-1]["content"] = [{"type": "text", "text": f"p{i}",
                                        "cache_control": {"type": "ephemeral"}} for i in range(4)]
    st, _, err = ant(sim.port, five)
    assert st == 400 and "maximum of 4" in err["error"]["message"]
    bad_ttl = ant_body(sys_ttl="10m")
    assert ant(sim.port, bad_ttl)[0] == 400


def test_anthropic_no_breakpoint_no_cache(sim):
    body = ant_body()
    for _ in range(2):
        st, _, r = ant(sim.port, body)
        assert st == 200
        u = r["usage"]
        assert u["cache_read_input_tokens"] == 0 and u["cache_creation_input_tokens"] == 0
        assert u["input_tokens"] == ant_total(u)


def test_anthropic_write_then_read(sim):
    body = ant_body(sys_ttl="default")
    sys_bp = 1 + 1500  # <|system|> + words
    _, _, r1 = ant(sim.port, body)
    u1 = r1["usage"]
    assert u1["cache_creation_input_tokens"] == sys_bp
    assert u1["cache_creation"] == {"ephemeral_5m_input_tokens": sys_bp,
                                    "ephemeral_1h_input_tokens": 0}
    assert u1["cache_read_input_tokens"] == 0
    total = ant_total(u1)
    assert u1["input_tokens"] == total - sys_bp  # NOT including the cached part
    _, _, r2 = ant(sim.port, body)
    u2 = r2["usage"]
    assert u2["cache_read_input_tokens"] == sys_bp
    assert u2["cache_creation_input_tokens"] == 0
    assert u2["input_tokens"] == total - sys_bp
    assert r2["content"][0]["text"] == r1["content"][0]["text"]
    assert r2["stop_reason"] == "end_turn" and u2["output_tokens"] == 16


def test_anthropic_incremental_conversation(sim):
    # Breakpoint on the last user message each turn: turn N reads what turn N-1 wrote.
    b1 = ant_body(sys_ttl="default", msg_cache=True, user="first question")
    _, _, r1 = ant(sim.port, b1)
    u1 = r1["usage"]
    total1 = ant_total(u1)
    assert u1["input_tokens"] == 1  # only the assistant primer after the last breakpoint
    assert u1["cache_creation_input_tokens"] == total1 - 1
    history = [{"role": "user", "content": "first question"},
               {"role": "assistant", "content": r1["content"][0]["text"]}]
    b2 = ant_body(sys_ttl="default", msg_cache=True, user="second question", history=history)
    _, _, r2 = ant(sim.port, b2)
    u2 = r2["usage"]
    assert u2["cache_read_input_tokens"] == total1 - 1
    assert u2["cache_creation_input_tokens"] == ant_total(u2) - 1 - (total1 - 1)
    assert u2["input_tokens"] == 1


def test_anthropic_min_cacheable_per_model(sim):
    body = ant_body(system_words=2000, sys_ttl="default", model="claude-haiku-4-5")
    for _ in range(2):
        _, _, r = ant(sim.port, body)
        u = r["usage"]
        assert u["cache_creation_input_tokens"] == 0 and u["cache_read_input_tokens"] == 0
        assert u["input_tokens"] == ant_total(u)
    body = ant_body(system_words=4100, sys_ttl="default", model="claude-haiku-4-5")
    _, _, r = ant(sim.port, body)
    assert r["usage"]["cache_creation_input_tokens"] == 4101
    body = ant_body(system_words=1000, sys_ttl="default", model="claude-sonnet-4-5")
    _, _, r = ant(sim.port, body)
    # 1001 tokens < 1024: nothing written for sonnet either.
    assert r["usage"]["cache_creation_input_tokens"] == 0
    body = ant_body(system_words=1023, sys_ttl="default", model="claude-sonnet-4-5")
    _, _, r = ant(sim.port, body)
    assert r["usage"]["cache_creation_input_tokens"] == 1024  # exactly the minimum


def test_anthropic_ttl_split_and_expiry(sim):
    b1 = ant_body(sys_ttl="1h", msg_cache=True, msg_ttl="5m", user="first")
    sys_bp = 1501
    _, _, r1 = ant(sim.port, b1)
    u1 = r1["usage"]
    total = ant_total(u1)
    assert u1["cache_creation"]["ephemeral_1h_input_tokens"] == sys_bp
    assert u1["cache_creation"]["ephemeral_5m_input_tokens"] == total - 1 - sys_bp
    assert u1["cache_creation_input_tokens"] == total - 1
    # 301 s later the 5m entry is gone, the 1h entry is still there.
    sim.client.advance_clock(301)
    _, _, r2 = ant(sim.port, b1)
    u2 = r2["usage"]
    assert u2["cache_read_input_tokens"] == sys_bp
    assert u2["cache_creation"]["ephemeral_5m_input_tokens"] == total - 1 - sys_bp
    assert u2["cache_creation"]["ephemeral_1h_input_tokens"] == 0
    # A read refreshes: 3000 s later the 1h entry (read at t=301) is still alive.
    sim.client.advance_clock(3000)
    _, _, r3 = ant(sim.port, b1)
    assert r3["usage"]["cache_read_input_tokens"] == sys_bp
    sim.client.advance_clock(3601)
    _, _, r4 = ant(sim.port, b1)
    assert r4["usage"]["cache_read_input_tokens"] == 0
    assert r4["usage"]["cache_creation_input_tokens"] == total - 1


def test_anthropic_tools_prefix(sim):
    tools = [{"name": "lookup", "description": text_of(1100, "d"),
              "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "tools": tools,
            "messages": [{"role": "user", "content": "hi"}]}
    _, _, r1 = ant(sim.port, body)
    w = r1["usage"]["cache_creation_input_tokens"]
    assert w > 1100
    _, _, r2 = ant(sim.port, {**body, "system": "a different system prompt"})
    assert r2["usage"]["cache_read_input_tokens"] == w  # tools come before system in the prefix
    assert r1["stop_reason"] == "max_tokens" and r1["usage"]["output_tokens"] == 10


def test_anthropic_stream_format(sim):
    body = ant_body(sys_ttl="default")
    _, _, plain = ant(sim.port, body)
    st, headers, payload = ant(sim.port, {**body, "stream": True})
    assert st == 200 and headers["Content-Type"].startswith("text/event-stream")
    evs = parse_sse(payload)
    names = [e for e, _ in evs]
    datas = [json.loads(d) for _, d in evs]
    assert all(d["type"] == e for e, d in zip(names, datas))
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert names[1] == "content_block_start" and "ping" in names
    assert names[-2] == "message_delta" and names[-3] == "content_block_stop"
    start_usage = datas[0]["message"]["usage"]
    assert start_usage["output_tokens"] == 1
    assert start_usage["cache_read_input_tokens"] == 1501
    text = "".join(d["delta"]["text"] for d in datas if d["type"] == "content_block_delta")
    assert text == plain["content"][0]["text"]
    assert sum(1 for n in names if n == "content_block_delta") >= 3
    delta = datas[-2]
    assert delta["usage"]["output_tokens"] == 16
    assert delta["delta"]["stop_reason"] == "end_turn"
    entry = sim.client.usage_log()[-1]
    assert entry["id"] == datas[0]["message"]["id"] and entry["stream"] is True
    assert entry["usage"]["cache_read_input_tokens"] == 1501
    assert entry["usage"]["output_tokens"] == 16


# --- clock, introspection, faults ----------------------------------------------------------------


def test_clock(sim):
    c0 = sim.client.clock()
    c1 = sim.client.advance_clock(1000)
    assert c1["offset"] - c0["offset"] == 1000
    assert c1["now"] - c0["now"] >= 1000


def test_requests_and_usage_log(sim):
    msgs = [{"role": "user", "content": "logged"}]
    _, _, b = openai_chat(sim.port, msgs, metadata={"k": "v"})
    reqs = sim.client.requests()
    assert len(reqs) == 1
    r = reqs[0]
    assert r["path"] == "/openai/v1/chat/completions" and r["method"] == "POST"
    assert r["headers"]["authorization"] == "Bearer sk-openai-sim"
    assert r["body"]["messages"] == msgs and r["status"] == 200
    assert r["response_id"] == b["id"]
    log = sim.client.usage_log()
    assert [e["id"] for e in log] == [b["id"]]
    assert log[0]["usage"] == b["usage"] and log[0]["request_index"] == r["index"]
    openai_chat(sim.port, msgs, bogus=1)
    assert len(sim.client.requests()) == 2 and len(sim.client.usage_log()) == 1
    assert len(sim.client.requests(limit=1)) == 1
    sim.client.reset()
    assert sim.client.requests() == [] and sim.client.usage_log() == []


def test_reset_clears_caches(sim):
    msgs = [{"role": "system", "content": text_of(1200)}, {"role": "user", "content": "x"}]
    openai_chat(sim.port, msgs)
    sim.client.reset()
    _, _, b = openai_chat(sim.port, msgs)
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_fault_status_one_shot_and_counted(sim):
    msgs = [{"role": "user", "content": "x"}]
    sim.client.add_faults({"path": "/openai/", "status": 500})
    st, _, b = openai_chat(sim.port, msgs)
    assert st == 500 and b["error"]["type"] == "server_error"
    assert openai_chat(sim.port, msgs)[0] == 200
    sim.client.add_faults({"provider": "anthropic", "status": 429, "count": 2})
    for _ in range(2):
        st, h, b = ant(sim.port, ant_body())
        assert st == 429 and b["error"]["type"] == "rate_limit_error" and h["retry-after"]
    assert ant(sim.port, ant_body())[0] == 200
    sim.client.add_faults({"path": "/deepseek/", "status": 503, "body": {"custom": 1}, "count": 0})
    for _ in range(3):
        st, _, b = openai_chat(sim.port, msgs, model="deepseek-chat",
                               path="/deepseek/v1/chat/completions", auth=DS_AUTH)
        assert st == 503 and b == {"custom": 1}
    assert len(sim.client.faults()) == 1
    sim.client.clear_faults()
    assert sim.client.faults() == []
    assert openai_chat(sim.port, msgs, model="deepseek-chat",
                       path="/deepseek/v1/chat/completions", auth=DS_AUTH)[0] == 200
    assert not any(e.get("status") for e in sim.client.usage_log())


def test_fault_user_match(sim):
    """A fault can target one end user (OpenAI `user`, Anthropic metadata.user_id): a replay marks
    the turns of an outage with it."""
    msgs = [{"role": "user", "content": "x"}]
    sim.client.add_faults({"user": "down", "status": 503, "count": 0})
    assert openai_chat(sim.port, msgs)[0] == 200
    assert openai_chat(sim.port, msgs, user="down")[0] == 503
    assert ant(sim.port, ant_body(metadata={"user_id": "down"}))[0] == 503
    assert ant(sim.port, ant_body(metadata={"user_id": "up"}))[0] == 200


def test_anthropic_ttls_are_configurable(sim):
    sim.client.config(anthropic_ttl_5m=2)
    try:
        b = ant_body(msg_cache=True, user="short ttl")
        ant(sim.port, b)
        sim.client.advance_clock(1)
        assert ant(sim.port, b)[2]["usage"]["cache_read_input_tokens"] > 0
        sim.client.advance_clock(3)
        assert ant(sim.port, b)[2]["usage"]["cache_read_input_tokens"] == 0
    finally:
        sim.client.config(anthropic_ttl_5m=300)


def test_fault_stream_match(sim):
    sim.client.add_faults({"path": "/openai/", "stream": True, "status": 502})
    assert openai_chat(sim.port, [{"role": "user", "content": "x"}])[0] == 200
    st, _, _ = openai_chat(sim.port, [{"role": "user", "content": "x"}], stream=True)
    assert st == 502


def test_fault_latency(sim):
    sim.client.add_faults({"path": "/openai/", "latency_ms": 1000})
    t0 = time.monotonic()
    assert openai_chat(sim.port, [{"role": "user", "content": "x"}])[0] == 200
    assert time.monotonic() - t0 >= 1.0
    t0 = time.monotonic()
    openai_chat(sim.port, [{"role": "user", "content": "x"}])  # the one-shot fault is used up
    assert time.monotonic() - t0 < 1.0


def test_fault_hang(sim):
    sim.client.add_faults({"path": "/openai/", "hang": True})
    t0 = time.monotonic()
    with pytest.raises((socket.timeout, TimeoutError)):
        call(sim.port, "POST", "/openai/v1/chat/completions",
             {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]},
             OPENAI_AUTH, timeout=0.5)
    assert time.monotonic() - t0 < 3
    assert openai_chat(sim.port, [{"role": "user", "content": "x"}])[0] == 200


def test_fault_reset_after_chunks(sim):
    sim.client.add_faults({"path": "/openai/", "reset_after_chunks": 2})
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    body = json.dumps({"model": "gpt-4o-mini", "stream": True,
                       "messages": [{"role": "user", "content": "x"}]})
    conn.request("POST", "/openai/v1/chat/completions", body=body,
                 headers={**OPENAI_AUTH, "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    got = b""
    with pytest.raises((http.client.IncompleteRead, ConnectionResetError,
                        http.client.HTTPException, OSError)):
        while True:
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
            if not chunk:
                raise AssertionError("stream ended cleanly; expected an abrupt reset")
            got += chunk
    conn.close()
    assert got.count(b"data: ") <= 2 and b"[DONE]" not in got
    deadline = time.monotonic() + 5  # (marked once the simulator's handler has finished)
    while sim.client.usage_log()[-1]["delivered"] is not False and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sim.client.usage_log()[-1]["delivered"] is False
    # Non-streaming requests matched by the fault are reset before any byte.
    sim.client.add_faults({"path": "/openai/", "reset_after_chunks": 0})
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        openai_chat(sim.port, [{"role": "user", "content": "x"}])
    assert openai_chat(sim.port, [{"role": "user", "content": "x"}])[0] == 200


def test_fault_malformed_sse(sim):
    sim.client.add_faults({"path": "/anthropic/", "malformed_sse": True})
    st, _, payload = ant(sim.port, {**ant_body(), "stream": True})
    bad = 0
    for block in payload.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                try:
                    json.loads(line[6:])
                except ValueError:
                    bad += 1
    assert bad >= 1
    sim.client.add_faults({"path": "/openai/", "malformed_sse": True})
    with pytest.raises(ValueError):  # a 200 with a truncated JSON body
        openai_chat(sim.port, [{"role": "user", "content": "x"}])


def test_fault_chunk_delay(sim):
    sim.client.add_faults({"path": "/openai/", "chunk_delay_ms": 50})
    t0 = time.monotonic()
    st, _, _ = openai_chat(sim.port, [{"role": "user", "content": "x"}], stream=True)
    assert st == 200 and time.monotonic() - t0 >= 0.05 * 8


def open_stream(port, path, body, headers):
    """Sends a request and returns (connection, response) with the body unread."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Content-Type": "application/json", **headers})
    return conn, conn.getresponse()


OPENAI_STREAM = {"model": "gpt-4o-mini", "stream": True,
                 "stream_options": {"include_usage": True},
                 "messages": [{"role": "user", "content": "x"}]}


def newest_usage_entry(sim, known: int, until=lambda entry: True, timeout: float = 5.0) -> dict:
    """The usage-log entry after the first `known` ones, once `until(entry)` holds: the simulator
    marks a stream undelivered only after it has ended it, which may be just after the client read
    the end."""
    deadline = time.monotonic() + timeout
    while True:
        log = sim.client.usage_log()
        if (len(log) > known and until(log[known])) or time.monotonic() > deadline:
            assert len(log) > known, log
            return log[known]
        time.sleep(0.01)


def test_fault_end_after_chunks_and_drop_final_event(sim):
    sim.client.add_faults({"path": "/openai/", "end_after_chunks": 2})
    known = len(sim.client.usage_log())
    st, _, payload = call(sim.port, "POST", "/openai/v1/chat/completions", OPENAI_STREAM,
                          OPENAI_AUTH)  # a clean end of the chunked body: no exception
    assert st == 200 and len(parse_sse(payload)) == 2
    assert b"finish_reason\":\"stop" not in payload and b"[DONE]" not in payload
    entry = newest_usage_entry(sim, known, until=lambda e: e["delivered"] is False)
    assert entry["delivered"] is False, entry
    sim.client.add_faults({"path": "/openai/", "drop_final_event": True})
    known = len(sim.client.usage_log())
    st, _, payload = call(sim.port, "POST", "/openai/v1/chat/completions", OPENAI_STREAM,
                          OPENAI_AUTH)
    datas = [json.loads(d) for _, d in parse_sse(payload)]  # all JSON: no [DONE]
    assert datas[-2]["choices"][0]["finish_reason"] == "stop"
    assert datas[-1]["usage"] == newest_usage_entry(sim, known)["usage"]
    sim.client.add_faults({"path": "/anthropic/", "drop_final_event": True})
    st, _, payload = ant(sim.port, {**ant_body(), "stream": True})
    names = [e for e, _ in parse_sse(payload)]
    assert names[-1] == "message_delta" and "message_stop" not in names


def test_fault_hold_after_final(sim):
    sim.client.add_faults({"path": "/openai/", "hold_after_final_ms": 5000})
    t0 = time.monotonic()
    conn, resp = open_stream(sim.port, "/openai/v1/chat/completions", OPENAI_STREAM, OPENAI_AUTH)
    got = b""
    while b"data: [DONE]" not in got:
        got += resp.read1(65536)
    assert time.monotonic() - t0 < 2
    conn.sock.settimeout(0.3)
    with pytest.raises((socket.timeout, TimeoutError)):  # neither ended nor closed
        resp.read1(65536)
    conn.close()
    rec = sim.client.wait_for(lambda: [r for r in sim.client.requests() if "hold_ended" in r])
    assert rec[0]["hold_ended"] == "client_closed" and rec[0]["held_ms"] < 4000, rec
    for provider in ("openai", "anthropic"):  # a short hold, then the body ends cleanly
        sim.client.reset()
        sim.client.add_faults({"path": f"/{provider}/", "hold_after_final_ms": 300})
        t0 = time.monotonic()
        if provider == "openai":
            st, _, payload = call(sim.port, "POST", "/openai/v1/chat/completions", OPENAI_STREAM,
                                  OPENAI_AUTH)
            assert parse_sse(payload)[-1] == (None, "[DONE]")
        else:
            st, _, payload = ant(sim.port, {**ant_body(), "stream": True})
            assert parse_sse(payload)[-1][0] == "message_stop"
        assert st == 200 and time.monotonic() - t0 >= 0.3
        r = sim.client.requests()[-1]
        assert r["hold_ended"] == "elapsed" and r["held_ms"] >= 300, r


def test_fault_gzip(sim):
    import gzip
    sim.client.add_faults({"path": "/openai/", "gzip": True, "count": 2})
    msgs = [{"role": "user", "content": "x"}]
    conn, resp = open_stream(sim.port, "/openai/v1/chat/completions",
                             {"model": "gpt-4o-mini", "messages": msgs},
                             {**OPENAI_AUTH, "Accept-Encoding": "identity"})
    raw = resp.read()
    conn.close()
    assert resp.status == 200 and resp.getheader("Content-Encoding") == "gzip"
    assert int(resp.getheader("Content-Length")) == len(raw)
    assert json.loads(gzip.decompress(raw))["object"] == "chat.completion"
    assert sim.client.requests()[-1]["headers"]["accept-encoding"] == "identity"
    conn, resp = open_stream(sim.port, "/openai/v1/chat/completions", OPENAI_STREAM, OPENAI_AUTH)
    raw = resp.read()
    conn.close()
    assert resp.getheader("Content-Encoding") == "gzip"
    assert resp.getheader("Content-Type").startswith("text/event-stream")
    events = parse_sse(gzip.decompress(raw))
    assert events[-1] == (None, "[DONE]") and len(events) > 3
    assert openai_chat(sim.port, msgs)[0] == 200  # used up: plain again


def test_fault_ignore_stream_and_2xx_error_body(sim):
    sim.client.add_faults({"path": "/openai/", "ignore_stream": True})
    st, h, body = call(sim.port, "POST", "/openai/v1/chat/completions", OPENAI_STREAM, OPENAI_AUTH)
    assert st == 200 and h["Content-Type"] == "application/json"
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 16
    sim.client.add_faults({"path": "/anthropic/", "ignore_stream": True})
    st, h, body = ant(sim.port, {**ant_body(), "stream": True})
    assert st == 200 and body["type"] == "message" and body["stop_reason"] == "end_turn"
    err = {"error": {"message": "overloaded, try later", "type": "server_error"}}
    sim.client.add_faults({"path": "/openai/", "stream": True, "status": 200, "body": err})
    st, h, body = call(sim.port, "POST", "/openai/v1/chat/completions", OPENAI_STREAM, OPENAI_AUTH)
    assert st == 200 and h["Content-Type"] == "application/json" and body == err


def test_fault_sse_noise(sim):
    from provider_sim import SSE_NOISE
    sim.client.add_faults({"path": "/openai/", "sse_noise": True})
    st, _, payload = call(sim.port, "POST", "/openai/v1/chat/completions", OPENAI_STREAM,
                          OPENAI_AUTH)
    blocks = payload.decode().split("\n\n")[:-1]
    noise = [b.decode().rstrip("\n") for b in SSE_NOISE]
    assert blocks[1:1 + len(noise)] == noise and blocks[-1 - len(noise):-1] == noise
    assert blocks[0].startswith("data: {") and blocks[-1] == "data: [DONE]"
    clean = [b for b in blocks if b not in noise]
    assert all(json.loads(b[6:]) for b in clean[:-1])
    sim.client.add_faults({"path": "/anthropic/", "sse_noise": True})
    st, _, payload = ant(sim.port, {**ant_body(), "stream": True})
    blocks = payload.decode().split("\n\n")[:-1]
    assert blocks.count(": keep-alive") == 2 and blocks[-1].startswith("event: message_stop")


def test_concurrent_requests(sim):
    import concurrent.futures as cf
    msgs = [{"role": "user", "content": "parallel"}]
    with cf.ThreadPoolExecutor(32) as ex:
        results = list(ex.map(lambda _: openai_chat(sim.port, msgs)[0], range(64)))
    assert results == [200] * 64
    assert len(sim.client.usage_log()) == 64


def test_cli_keys_default_any(tmp_path):
    """Without --*-key flags any non-empty key is accepted; SIGTERM stops the process."""
    import subprocess
    import sys
    from simctl import SIM_SCRIPT, read_line_with_timeout
    p = subprocess.Popen([sys.executable, str(SIM_SCRIPT), "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = read_line_with_timeout(p.stdout, 10)
        port = int(line.strip().split("=")[1])
        st, _, _ = call(port, "POST", "/openai/v1/chat/completions",
                        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
                        {"Authorization": "Bearer anything"})
        assert st == 200
        SimClient(port).reset()
    finally:
        p.terminate()
        assert p.wait(5) == 0
        p.stdout.close()


def test_echo_key_fault_gives_the_key_away(sim):
    """The "echo_key" fault: an error status whose message carries the caller's key in every
    style, and a mid-stream error event carrying it (kvgate's redaction tests rely on both)."""
    sim.client.add_faults({"provider": "openai", "echo_key": "all"})
    st, _, body = call(sim.port, "POST", "/openai/v1/chat/completions",
                       {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]},
                       OPENAI_AUTH)
    assert st == 401, body
    message = body["error"]["message"]
    for form in ("sk-openai-sim.", "Bearer sk-openai-sim", "sk-opena" + "*" * 24 + "-sim",
                 "sk-op...-sim", "c2stb3BlbmFpLXNpbQ=="):
        assert form in message, (form, message)
    # The escaped style is JSON-escaped in the bytes: read back, it is the key itself.
    assert "key sk-openai-sim is not valid" in message

    sim.client.add_faults({"provider": "anthropic", "echo_key": "whole", "stream_error": True})
    st, _, payload = call(sim.port, "POST", "/anthropic/v1/messages",
                          {"model": "claude-sonnet-4-5", "max_tokens": 8, "stream": True,
                           "messages": [{"role": "user", "content": "x"}]}, ANT_AUTH)
    assert st == 200
    events = parse_sse(payload)
    assert [e for e, _ in events] == ["message_start", "error"], events
    assert json.loads(events[1][1])["error"]["message"] == (
        "Incorrect API key provided: sk-ant-test.")
