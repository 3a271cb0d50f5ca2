"""Self-tests of the simulator's Responses API and embeddings: wire format, the chat path's
caching rules over a conversation continued by previous_response_id, and usage."""

from __future__ import annotations

import base64
import json
import struct

import openai
import pytest

from test_provider_sim import OPENAI_AUTH, call, parse_sse, text_of


def client(sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim.base}/openai/v1", api_key="sk-openai-sim",
                         max_retries=0)


def test_response_object_and_usage(sim):
    st, _, body = call(sim.port, "POST", "/openai/v1/responses",
                       {"model": "gpt-4o-mini", "instructions": "be brief", "input": "hi there"},
                       OPENAI_AUTH)
    assert st == 200, body
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["id"].startswith("resp_") and body["error"] is None
    assert body["output"][0]["type"] == "message"
    text = body["output"][0]["content"][0]["text"]
    assert len(text.split()) == 16
    # <|system|> be brief <|end|> <|user|> hi there <|end|> <|assistant|>
    assert body["usage"] == {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0},
                             "output_tokens": 16, "output_tokens_details": {"reasoning_tokens": 0},
                             "total_tokens": 25}
    assert sim.client.usage_log()[-1]["id"] == body["id"]


def test_chained_conversation_hits_the_openai_cache(sim):
    c = client(sim)
    first = c.responses.create(model="gpt-4o-mini", input=text_of(1500))
    assert first.usage.input_tokens == 1503 and first.usage.input_tokens_details.cached_tokens == 0
    second = c.responses.create(model="gpt-4o-mini", input="next", previous_response_id=first.id)
    # The whole first prompt (1503 tokens) is the shared prefix: 1024 + 3 x 128.
    assert second.usage.input_tokens == 1503 + 16 + 1 + 3 + 1  # + output, <|end|>, input, primer
    assert second.usage.input_tokens_details.cached_tokens == 1408
    # The chat path shares the entries: the same tokens as a chat prompt hit them too.
    st, _, chat = call(sim.port, "POST", "/openai/v1/chat/completions",
                       {"model": "gpt-4o-mini",
                        "messages": [{"role": "user", "content": text_of(1500)}]}, OPENAI_AUTH)
    assert st == 200 and chat["usage"]["prompt_tokens_details"]["cached_tokens"] == 1408


def test_unknown_or_unstored_previous_response(sim):
    c = client(sim)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="gpt-4o-mini", input="x", previous_response_id="resp_nope")
    assert e.value.code == "previous_response_not_found"
    once = c.responses.create(model="gpt-4o-mini", input="x", store=False)
    with pytest.raises(openai.BadRequestError):
        c.responses.create(model="gpt-4o-mini", input="y", previous_response_id=once.id)


def test_stream_event_sequence(sim):
    st, headers, payload = call(sim.port, "POST", "/openai/v1/responses",
                                {"model": "o4-mini", "input": "hi", "stream": True}, OPENAI_AUTH)
    assert st == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = parse_sse(payload)
    names = [e for e, _ in events]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] + ["response.output_text.delta"] * 6 + [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"], names
    datas = [json.loads(d) for _, d in events]
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    assert all(d["type"] == e for e, d in zip(names, datas))
    assert datas[0]["response"]["usage"] is None
    final = datas[-1]["response"]
    assert "".join(d["delta"] for d in datas if "delta" in d) == final["output"][0]["content"][0][
        "text"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 8
    assert final["usage"]["output_tokens"] == 16 + 8


def test_max_output_tokens_is_incomplete(sim):
    st, _, payload = call(sim.port, "POST", "/openai/v1/responses",
                          {"model": "gpt-4o-mini", "input": "hi", "stream": True,
                           "max_output_tokens": 4}, OPENAI_AUTH)
    last = json.loads(parse_sse(payload)[-1][1])
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["usage"]["output_tokens"] == 4


def test_responses_rejects_what_openai_rejects(sim):
    for body, param in [({"model": "m", "input": "x", "stream": True,
                          "stream_options": {"include_usage": True}},
                         "stream_options.include_usage"),
                        ({"model": "m", "input": "x", "thread_identifier": "t"},
                         "thread_identifier"),
                        ({"model": "m"}, "input")]:
        st, _, err = call(sim.port, "POST", "/openai/v1/responses", body, OPENAI_AUTH)
        assert st == 400 and err["error"]["param"] == param, err


def test_embeddings_usage_and_formats(sim):
    st, _, body = call(sim.port, "POST", "/openai/v1/embeddings",
                       {"model": "text-embedding-3-small", "input": ["a b", "c d e"]}, OPENAI_AUTH)
    assert st == 200 and body["object"] == "list"
    assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert len(body["data"][0]["embedding"]) == 8
    st, _, b64 = call(sim.port, "POST", "/openai/v1/embeddings",
                      {"model": "text-embedding-3-small", "input": ["a b", "c d e"],
                       "encoding_format": "base64", "dimensions": 4}, OPENAI_AUTH)
    vec = struct.unpack("<4f", base64.b64decode(b64["data"][0]["embedding"]))
    assert list(vec) == pytest.approx(body["data"][0]["embedding"][:4])
    result = client(sim).embeddings.create(model="text-embedding-3-small", input=[1, 2, 3])
    assert result.usage.prompt_tokens == 3 and len(result.data[0].embedding) == 8


def test_fault_response_failed(sim):
    sim.client.add_faults({"response_failed": True, "count": 2})
    st, _, payload = call(sim.port, "POST", "/openai/v1/responses",
                          {"model": "gpt-4o-mini", "input": "hi", "stream": True}, OPENAI_AUTH)
    events = parse_sse(payload)
    assert [e for e, _ in events] == ["response.created", "response.in_progress",
                                      "response.failed"]
    failed = json.loads(events[-1][1])["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["usage"]["output_tokens"] == 0 and failed["usage"]["input_tokens"] == 4
    assert sim.client.usage_log()[-1]["usage"] == failed["usage"]
    st, _, body = call(sim.port, "POST", "/openai/v1/responses",
                       {"model": "gpt-4o-mini", "input": "hi"}, OPENAI_AUTH)
    assert st == 200 and body["status"] == "failed" and body["output"] == []
