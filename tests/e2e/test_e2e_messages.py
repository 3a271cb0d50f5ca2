"""The Anthropic Messages API (POST /v1/messages) through kvgate with the official Anthropic SDK
(`messages.create`, `messages.stream`) against the simulator:

* to an `anthropic` provider the simulator receives the client's exact bytes but for `model`
  (hash of the received body compared with the SDK's own bytes), the client's anthropic-version
  and anthropic-beta headers, and kvgate records usage and cost equal to what the simulator
  reported, 5m and 1h cache writes included;
* to an OpenAI-type provider the request is translated to chat and the answer back (a Message,
  Anthropic's event stream the SDK parses), usage recorded as the simulator reported it;
* to the built-in engine a short answer, streaming and not;
* kvgate's and the upstream's errors reach the SDK as its own exception types."""

from __future__ import annotations

import hashlib
import json
import re
import uuid

import anthropic
import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, expected_cost_pico, normalized_from_sim


@pytest.fixture(scope="module")
def mgw(kvgate_bin, sim, tmp_path_factory, kvgate_process_class, bundled_model):
    class MessagesKvgate(kvgate_process_class):
        """Anthropic under another model name (so the splice of `model` shows), OpenAI, the
        built-in engine, and a router that falls back from Anthropic to OpenAI."""

        def _write_config(self):
            s = f"http://127.0.0.1:{self.sim_port}"
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: openai, type: openai, base_url: {s}/openai/v1, api_key: "${{SIM_OPENAI_KEY}}"}}
  - {{name: claude, type: anthropic, base_url: {s}/anthropic, api_key: sk-ant-test}}
  - {{name: local, type: local, model_path: {bundled_model}, kv_cache_tokens: 1024, threads: 1}}
models:
  - {{name: sonnet, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: gpt-4o-mini, provider: openai}}
  - {{name: smollm2, provider: local}}
  - {{name: sonnet-first, provider: claude, upstream_model: claude-sonnet-4-5}}
routers:
  - {{name: mixed, strategy: fallback, retries: 0,
     targets: [{{model: sonnet-first}}, {{model: gpt-4o-mini}}]}}
""")

    kg = MessagesKvgate(kvgate_bin, tmp_path_factory.mktemp("messages"), sim.port,
                        name="messages").start(timeout=60)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


class Captured:
    """The exact bytes of every request the SDK sends (an httpx event hook)."""

    def __init__(self):
        self.bodies: list[bytes] = []

    def hook(self, request):
        self.bodies.append(request.read())


def sdk(gw, captured: Captured | None = None, **kw) -> anthropic.Anthropic:
    kw.setdefault("api_key", GATEWAY_KEY)
    hooks = {"request": [captured.hook]} if captured else {}
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", max_retries=0,
                               timeout=60.0,
                               http_client=anthropic.DefaultHttpxClient(event_hooks=hooks), **kw)


def long_text(tag: str, n: int = 1400) -> str:
    return " ".join(f"{tag}{i % 89}q{i}" for i in range(n))


def last_sim_request(sim, path_suffix: str) -> dict:
    reqs = [r for r in sim.client.requests() if r["path"].endswith(path_suffix)]
    assert reqs, f"no request to {path_suffix} reached the simulator"
    return reqs[-1]


def with_model(body: bytes, model: str) -> bytes:
    """The client's bytes with the value of its top-level `model` replaced, nothing else."""
    out, n = re.subn(rb'("model"\s*:\s*)"[^"]*"', lambda m: m.group(1) + json.dumps(model).encode(),
                     body, count=1)
    assert n == 1
    return out


def assert_recorded_as_sim(gw, sim, request_id: str, model_rates: str, kind: str) -> dict:
    rec = gw.wait_request(request_id)
    entry = {e["id"]: e for e in sim.client.usage_log()}[rec["response_id"]]
    n = normalized_from_sim(kind, entry["usage"])
    assert rec["usage"] == n, (rec["usage"], entry["usage"])
    if model_rates:
        assert rec["cost_pico_usd"] == expected_cost_pico(model_rates, n, rec["cache_diagnosis"]), \
            rec["cost_pico_usd"]
    assert rec["endpoint"] == "messages", rec
    return rec


TOOLS = [{"name": "get_weather", "description": "Weather for a city.",
          # Keys deliberately not sorted: re-serializing with sorted keys would change them.
          "input_schema": {"type": "object", "required": ["city"],
                           "properties": {"city": {"type": "string"}, "Aunit": {"type": "string"}}}}]


def test_create_to_anthropic_is_byte_for_byte_with_exact_usage_and_cost(mgw, sim):
    captured = Captured()
    client = sdk(mgw, captured)
    session = f"cc-{uuid.uuid4().hex[:12]}"
    system = [{"type": "text", "text": long_text("sys", 1500),
               "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    messages = [{"role": "user", "content": [
        {"type": "text", "text": long_text("doc", 1200) + " Caf\u00e9 \"quoted\"",
         "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]
    ask = dict(model="sonnet", max_tokens=64, system=system, tools=TOOLS,
               extra_headers={"x-claude-code-session-id": session,
                              "anthropic-beta": "extended-cache-ttl-2025-04-11"})
    raw = client.messages.with_raw_response.create(messages=messages, **ask)
    first = raw.parse()
    assert first.type == "message" and first.role == "assistant"
    assert first.content[0].type == "text" and first.content[0].text
    assert first.stop_reason == "end_turn"
    sent = last_sim_request(sim, "/anthropic/v1/messages")
    assert sent["body_sha256"] == hashlib.sha256(
        with_model(captured.bodies[-1], "claude-sonnet-4-5")).hexdigest()
    assert sent["body"]["model"] == "claude-sonnet-4-5"
    assert sent["headers"]["x-api-key"] == "sk-ant-test"  # the provider's key, not the gateway's
    assert sent["headers"]["anthropic-version"] == client.default_headers["anthropic-version"]
    assert sent["headers"]["anthropic-beta"] == "extended-cache-ttl-2025-04-11"
    # The SDK's usage is the simulator's, 5m and 1h writes apart.
    entry = {e["id"]: e for e in sim.client.usage_log()}[first.id]
    u = entry["usage"]
    assert u["cache_creation"]["ephemeral_1h_input_tokens"] > 0
    assert u["cache_creation"]["ephemeral_5m_input_tokens"] > 0
    assert first.usage.input_tokens == u["input_tokens"]
    assert first.usage.cache_creation_input_tokens == u["cache_creation_input_tokens"]
    assert first.usage.cache_read_input_tokens == 0
    rec = assert_recorded_as_sim(mgw, sim, raw.headers["x-request-id"], "claude-sonnet-4-5",
                                 "anthropic")
    assert rec["thread_id"] == session and rec["response_id"] == first.id
    assert rec["usage"]["cache_write_1h"] > 0 and rec["usage"]["cache_write_5m"] > 0

    # The next turn reads what the first wrote.
    messages += [{"role": "assistant", "content": first.content[0].text},
                 {"role": "user", "content": "and now?"}]
    second = client.messages.with_raw_response.create(messages=messages, **ask)
    assert sim.client.requests()[-1]["body_sha256"] == hashlib.sha256(
        with_model(captured.bodies[-1], "claude-sonnet-4-5")).hexdigest()
    assert second.parse().usage.cache_read_input_tokens > 0
    rec2 = assert_recorded_as_sim(mgw, sim, second.headers["x-request-id"], "claude-sonnet-4-5",
                                  "anthropic")
    assert rec2["usage"]["cache_read"] == second.parse().usage.cache_read_input_tokens
    assert rec2["thread_id"] == session
    turns = mgw.wait_turns(session, 2)
    assert [t["request_id"] for t in turns] == [rec["request_id"], rec2["request_id"]]


def test_raw_bytes_with_whitespace_and_escapes_reach_anthropic_unchanged(mgw, sim):
    """A body no SDK would write: pretty-printed, unsorted keys, escapes, kvgate's thread fields
    (which go) among Anthropic's own."""
    body = (b'{\n  "messages" : [ {"role": "user", "content": "h\\u00e9llo\\n"} ],\n'
            b'  "thread_identifier": "t-raw-' + uuid.uuid4().hex[:8].encode() + b'",\n'
            b'  "model":"sonnet" ,  "max_tokens" : 16,\n'
            b'  "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {}}}]\n}')
    st, headers, answer = mgw.request("POST", "/v1/messages", body=body, headers={
        "x-api-key": GATEWAY_KEY, "content-type": "application/json",
        "anthropic-version": "2023-06-01"})
    assert st == 200, answer
    sent = last_sim_request(sim, "/anthropic/v1/messages")
    expected = body.replace(b'"model":"sonnet"', b'"model":"claude-sonnet-4-5"')
    expected = re.sub(rb'\n  "thread_identifier": "[^"]*",', b"", expected)
    assert sent["body_sha256"] == hashlib.sha256(expected).hexdigest(), sent["body"]
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    rec = mgw.wait_request(headers["x-request-id"])
    assert rec["thread_id"].startswith("t-raw-") and rec["response_id"] == answer["id"]


def test_stream_to_anthropic_events_and_usage(mgw, sim):
    captured = Captured()
    client = sdk(mgw, captured)
    thread = f"t-stream-{uuid.uuid4().hex[:10]}"
    system = [{"type": "text", "text": long_text("ssys", 1300),
               "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    with client.messages.stream(model="sonnet", max_tokens=64, system=system,
                                messages=[{"role": "user", "content": "stream please"}],
                                metadata={"user_id": thread}) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_message()
        request_id = stream.response.headers["x-request-id"]
    assert types[0] == "message_start" and types[-1] == "message_stop", types
    assert "content_block_delta" in types and "message_delta" in types
    assert final.content[0].text and final.stop_reason == "end_turn"
    sent = last_sim_request(sim, "/anthropic/v1/messages")
    assert sent["body_sha256"] == hashlib.sha256(
        with_model(captured.bodies[-1], "claude-sonnet-4-5")).hexdigest()
    entry = {e["id"]: e for e in sim.client.usage_log()}[final.id]
    assert final.usage.output_tokens == entry["usage"]["output_tokens"]
    assert final.usage.cache_creation_input_tokens == entry["usage"]["cache_creation_input_tokens"]
    rec = assert_recorded_as_sim(mgw, sim, request_id, "claude-sonnet-4-5", "anthropic")
    assert rec["stream"] is True and rec["usage"]["cache_write_1h"] > 0
    assert rec["thread_id"] == thread  # metadata.user_id names the thread
    assert rec["ttft_ms"] is not None


def test_translated_to_openai_both_ways(mgw, sim):
    client = sdk(mgw)
    thread = f"t-oai-{uuid.uuid4().hex[:10]}"
    raw = client.messages.with_raw_response.create(
        model="gpt-4o-mini", max_tokens=64, system="You are terse.",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello there",
                                                "cache_control": {"type": "ephemeral"}}]}],
        stop_sequences=["ZZZ"], extra_body={"temperature": 0.2, "top_k": 5},
        extra_headers={"x-thread-id": thread})
    message = raw.parse()
    assert message.type == "message" and message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason == "end_turn"
    sent = last_sim_request(sim, "/openai/v1/chat/completions")["body"]
    assert sent["messages"] == [{"role": "system", "content": "You are terse."},
                                {"role": "user", "content": "hello there"}]
    assert sent["max_tokens"] == 64 and sent["stop"] == ["ZZZ"] and sent["temperature"] == 0.2
    assert "top_k" not in sent  # OpenAI itself rejects it
    assert "cache_control" not in json.dumps(sent)
    sent_id = last_sim_request(sim, "/openai/v1/chat/completions")["response_id"]
    u = {e["id"]: e for e in sim.client.usage_log()}[sent_id]["usage"]
    assert message.usage.input_tokens == u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
    assert message.usage.output_tokens == u["completion_tokens"]
    rec = mgw.wait_request(raw.headers["x-request-id"])
    assert rec["usage"] == normalized_from_sim("openai", u), rec["usage"]
    assert rec["response_id"] == message.id and sent_id.startswith("chatcmpl")
    assert rec["endpoint"] == "messages" and rec["thread_id"] == thread
    assert mgw.wait_request(message.id)["request_id"] == rec["request_id"]

    # Streaming: Anthropic's events, parsed by the SDK; usage in message_delta.
    with client.messages.stream(model="gpt-4o-mini", max_tokens=5,
                                messages=[{"role": "user", "content": "count to ten"}]) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_message()
        request_id = stream.response.headers["x-request-id"]
    raw_types = [t for t in types if t not in ("text",)]
    assert raw_types[:2] == ["message_start", "content_block_start"], types
    assert raw_types[-3:] == ["content_block_stop", "message_delta", "message_stop"], types
    assert final.stop_reason == "max_tokens" and final.content[0].text
    sent = last_sim_request(sim, "/openai/v1/chat/completions")
    assert sent["body"]["stream"] is True
    u = {e["id"]: e for e in sim.client.usage_log()}[sent["response_id"]]["usage"]
    assert final.usage.output_tokens == u["completion_tokens"] == 5
    assert final.usage.input_tokens == u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
    rec = mgw.wait_request(request_id)
    assert rec["usage"] == normalized_from_sim("openai", u) and rec["stream"] is True
    assert rec["finish_reason"] == "length" and rec["response_id"] == final.id


def test_diagnosis_reads_messages_bodies(mgw, sim):
    """A changed system prompt in a Messages conversation is diagnosed at the system element."""
    client = sdk(mgw)
    thread = f"t-diag-{uuid.uuid4().hex[:10]}"
    system = long_text("dsys", 1300)
    messages = [{"role": "user", "content": "first question"}]
    ask = dict(model="gpt-4o-mini", max_tokens=16, extra_headers={"x-thread-id": thread})
    client.messages.create(system=system, messages=messages, **ask)
    messages += [{"role": "assistant", "content": "an answer"},
                 {"role": "user", "content": "second question"}]
    client.messages.create(system=system, messages=messages, **ask)
    client.messages.create(system="EDITED " + system, messages=messages, **ask)
    turns = mgw.wait_turns(thread, 3)
    assert turns[1]["usage"]["cache_read"] >= 1024 and turns[1]["cache_diagnosis"] is None
    diagnosis = turns[2]["cache_diagnosis"]
    assert diagnosis and diagnosis["cause"] == "prompt_changed", diagnosis
    assert diagnosis["element"] == "system", diagnosis


def test_built_in_engine_short_answer(mgw):
    client = sdk(mgw)
    raw = client.messages.with_raw_response.create(
        model="smollm2", max_tokens=8, system="You are a helpful assistant.",
        messages=[{"role": "user", "content": "Say hello."}])
    message = raw.parse()
    assert message.type == "message" and message.content and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.output_tokens > 0 and message.usage.input_tokens > 0
    rec = mgw.wait_request(raw.headers["x-request-id"])
    assert rec["provider"] == "local" and rec["status"] == "ok" and rec["endpoint"] == "messages"
    assert rec["usage"]["output"] == message.usage.output_tokens
    total = sum(rec["usage"][k] for k in ("cache_read", "cache_write_5m", "cache_write_1h",
                                          "cache_write_no_ttl", "uncached"))
    assert total == message.usage.input_tokens + message.usage.cache_read_input_tokens + \
        message.usage.cache_creation_input_tokens

    with client.messages.stream(model="smollm2", max_tokens=8,
                                messages=[{"role": "user", "content": "Say hi."}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.usage.output_tokens > 0 and final.stop_reason in ("end_turn", "max_tokens")


def test_engine_names_the_stop_sequence_that_ended_the_answer(mgw):
    """The engine knows which stop string ended an answer: the Messages client gets
    stop_reason "stop_sequence" and the string, streaming and not, as from Anthropic."""
    client = sdk(mgw)
    ask = dict(model="smollm2", max_tokens=24, extra_body={"temperature": 0},
               messages=[{"role": "user", "content": "Count from one to ten in words."}])
    free = client.messages.create(**ask)
    text = free.content[0].text
    # A stop string from inside the greedy answer (the same prompt gives the same tokens).
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    expected = text[:text.find(stop)]
    stopped = client.messages.create(**ask, stop_sequences=["never-said-zz", stop])
    assert stopped.stop_reason == "stop_sequence", stopped
    assert stopped.stop_sequence == stop
    assert (stopped.content[0].text if stopped.content else "") == expected
    with client.messages.stream(**ask, stop_sequences=[stop]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == expected
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    # Without a stop string it is an end_turn or max_tokens, with no sequence.
    assert free.stop_reason in ("end_turn", "max_tokens") and free.stop_sequence is None


def test_engine_tools_answer_or_anthropic_400(mgw):
    """The engine may not serve tools (yet): if it refuses them, the SDK gets its 400 in
    Anthropic's shape."""
    client = sdk(mgw)
    try:
        message = client.messages.create(model="smollm2", max_tokens=8, tools=TOOLS,
                                         messages=[{"role": "user", "content": "Weather in Oslo?"}])
    except anthropic.BadRequestError as e:
        assert e.status_code == 400
        assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error"
        assert "tools" in e.body["error"]["message"], e.body
    else:
        assert message.type == "message"


def test_gateway_key_as_x_api_key_or_bearer_and_auth_errors(mgw, sim):
    ok = anthropic.Anthropic(base_url=f"http://127.0.0.1:{mgw.port}", api_key=None,
                             default_headers={"x-api-key": GATEWAY_KEY}, max_retries=0)
    assert ok.messages.create(model="sonnet", max_tokens=8,
                              messages=[{"role": "user", "content": "hi"}]).type == "message"
    assert "authorization" not in last_sim_request(sim, "/anthropic/v1/messages")["headers"]
    bearer = sdk(mgw)  # this SDK sends api_key as Authorization: Bearer
    assert bearer.messages.create(model="sonnet", max_tokens=8,
                                  messages=[{"role": "user", "content": "hi"}]).type == "message"
    for client in (sdk(mgw, api_key="sk-wrong"),
                   anthropic.Anthropic(base_url=f"http://127.0.0.1:{mgw.port}", api_key=None,
                                       default_headers={"x-api-key": "sk-wrong"}, max_retries=0)):
        with pytest.raises(anthropic.AuthenticationError) as e:
            client.messages.create(model="sonnet", max_tokens=8,
                                   messages=[{"role": "user", "content": "hi"}])
        assert e.value.status_code == 401
        assert e.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                           "message": "Incorrect API key provided"}}


def test_errors_are_anthropic_shaped_sdk_exceptions(mgw, sim):
    client = sdk(mgw)
    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="no-such-model", max_tokens=8, messages=hi)
    assert e.value.body["error"]["type"] == "not_found_error", e.value.body
    # kvgate's own 400s (translated targets check what Anthropic would).
    st, _, body = mgw.request("POST", "/v1/messages",
                              body=json.dumps({"model": "gpt-4o-mini", "messages": hi}),
                              headers={"x-api-key": GATEWAY_KEY})
    assert st == 400 and body["type"] == "error", body
    assert body["error"]["type"] == "invalid_request_error" and "max_tokens" in body["error"]["message"]
    st, _, body = mgw.request("POST", "/v1/messages", body=b"{not json",
                              headers={"x-api-key": GATEWAY_KEY})
    assert st == 400 and body["error"]["type"] == "invalid_request_error", body
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="gpt-4o-mini", max_tokens=8, messages=[
            {"role": "user", "content": [{"type": "document", "source": {
                "type": "text", "media_type": "text/plain", "data": "x"}}]}])
    assert "document" in e.value.body["error"]["message"]
    # The upstream's errors: Anthropic's 529 stays a 529 (OverloadedError), 429 a rate limit.
    sim.client.add_faults({"provider": "anthropic", "status": 529})
    with pytest.raises(anthropic.OverloadedError) as e:
        client.messages.create(model="sonnet", max_tokens=8, messages=hi)
    assert e.value.body["error"]["type"] == "overloaded_error"
    sim.client.add_faults({"provider": "anthropic", "status": 429})
    with pytest.raises(anthropic.RateLimitError) as e:
        client.messages.create(model="sonnet", max_tokens=8, messages=hi)
    assert e.value.body["error"]["type"] == "rate_limit_error"
    assert e.value.response.headers.get("retry-after") == "1"
    sim.client.add_faults({"path": "/openai/", "status": 500})
    with pytest.raises(anthropic.InternalServerError) as e:
        client.messages.create(model="gpt-4o-mini", max_tokens=8, messages=hi)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "api_error"
    # A stream cut mid-way ends with Anthropic's error event: the SDK raises, on both paths.
    for model, provider in (("sonnet", "anthropic"), ("gpt-4o-mini", "openai")):
        sim.client.add_faults({"provider": provider, "reset_after_chunks": 3})
        with pytest.raises(anthropic.APIStatusError) as e:
            with client.messages.stream(model=model, max_tokens=16, messages=hi) as stream:
                for _ in stream:
                    pass
        assert e.value.body["type"] == "error", e.value.body
        assert e.value.body["error"]["type"] == "api_error", e.value.body


def test_router_falls_back_from_the_pass_through_to_the_translation(mgw, sim):
    """One request, two attempts: Anthropic (passed through) fails before answering, the OpenAI
    target (translated) answers; the client gets one Message (streamed, then whole)."""
    client = sdk(mgw)
    for stream in (True, False):
        sim.client.add_faults({"provider": "anthropic", "status": 500})
        if stream:
            with client.messages.stream(model="mixed", max_tokens=8,
                                        messages=[{"role": "user", "content": "hi"}]) as s:
                message = s.get_final_message()
                request_id = s.response.headers["x-request-id"]
        else:
            raw = client.messages.with_raw_response.create(
                model="mixed", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
            message, request_id = raw.parse(), raw.headers["x-request-id"]
        assert message.type == "message" and message.content[0].text
        rec = mgw.wait_request(request_id)
        targets = [a["target"] for a in rec["attempts"]]
        if stream:
            assert targets == ["sonnet-first", "gpt-4o-mini"], rec["attempts"]
            assert rec["attempts"][0]["status"] == "upstream_error"
        else:  # (the router may skip Anthropic while it cools down after the first failure)
            assert targets[-1] == "gpt-4o-mini", rec["attempts"]
        assert rec["target"] == "gpt-4o-mini" and rec["status"] == "ok"
        assert rec["response_id"] == message.id and rec["usage"]["output"] == 8


def test_count_tokens_by_the_serving_models_tokenizer(mgw, sim):
    """POST /v1/messages/count_tokens (the SDK's messages.count_tokens): Anthropic models count
    at Anthropic (the client's bytes, model spliced), the engine counts its own prompt, both equal
    to the prompt tokens a Message of the same request reports; nothing is recorded."""
    captured = Captured()
    client = sdk(mgw, captured)
    tag = uuid.uuid4().hex[:6]
    prompt = dict(system=long_text(f"{tag}s", 300), tools=TOOLS,
                  messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    st, _, before = mgw.request("GET", "/api/requests?limit=1000",
                                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert st == 200

    counted = client.messages.count_tokens(model="sonnet", **prompt)
    sent = last_sim_request(sim, "/v1/messages/count_tokens")
    assert sent["body_sha256"] == hashlib.sha256(
        with_model(captured.bodies[-1], "claude-sonnet-4-5")).hexdigest()
    assert sent["headers"]["x-api-key"] == "sk-ant-test"
    message = client.messages.create(model="sonnet", max_tokens=8, **prompt)
    u = message.usage
    assert counted.input_tokens == u.input_tokens + u.cache_read_input_tokens + \
        u.cache_creation_input_tokens > 300

    engine_prompt = {"messages": [{"role": "user", "content": "Name a colour."}],
                     "system": "You are terse."}
    engine_count = client.messages.count_tokens(model="smollm2", **engine_prompt)
    answer = client.messages.create(model="smollm2", max_tokens=4, **engine_prompt)
    a = answer.usage
    assert engine_count.input_tokens == a.input_tokens + a.cache_read_input_tokens + \
        a.cache_creation_input_tokens > 0
    # A router counts with its first target that can (sonnet-first, at Anthropic).
    assert client.messages.count_tokens(model="mixed", **prompt).input_tokens == counted.input_tokens

    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.count_tokens(model="gpt-4o-mini", **engine_prompt)
    assert "count_tokens" in str(e.value) and "openai" in str(e.value)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", **engine_prompt)
    with pytest.raises(anthropic.AuthenticationError):
        sdk(mgw, api_key="sk-wrong").messages.count_tokens(model="sonnet", **engine_prompt)
    # Anthropic's own refusal reaches the client in its shape.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.count_tokens(model="sonnet", messages=[])
    assert "messages" in str(e.value)

    # Counting is not a turn: the log holds the two Messages requests only.
    st, _, after = mgw.request("GET", "/api/requests?limit=1000",
                               headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    new = [r for r in after["requests"]
           if r["request_id"] not in {b["request_id"] for b in before["requests"]}]
    assert sorted(r["endpoint"] for r in new) == ["messages", "messages"], new
