"""The answers kvgate writes itself (the built-in engine's chat completions, completions and
responses, streamed and whole; the model list; the errors, embeddings on a model that does not
embed among them) against OpenAI's published API document, whose schemas the official SDK's
types mirror: each raw JSON body is validated with the SDK's pydantic model, and every key the
document requires is checked to be present.

The SDK is lenient: a field that the document requires but allows to be null (`message.refusal`,
`error.param`) is `Optional[...] = None` in its types, so a missing key validates. Those fields
are listed below from the document's `required` lists, beside the SDK's own required fields
(pydantic fields without a default), and checked on the raw JSON, at every nesting level."""
from __future__ import annotations

import json

import pydantic
import pytest
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice as ChatChoice
from openai.types.chat.chat_completion import ChoiceLogprobs as ChatChoiceLogprobs
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceLogprobs as ChunkChoiceLogprobs
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob, TopLogprob
from openai.types.completion_choice import CompletionChoice
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.shared import ErrorObject

from gwctl import GATEWAY_KEY

# Required by the API document but nullable, hence optional in the SDK's types (schema names of
# the document in the comments).
NULLABLE_REQUIRED: dict[type, set[str]] = {
    ChatCompletionMessage: {"content", "refusal"},        # ChatCompletionResponseMessage
    ChatChoice: {"logprobs"},                             # CreateChatCompletionResponse.choices
    ChatChoiceLogprobs: {"content", "refusal"},           # ...choices.logprobs
    ChunkChoice: {"finish_reason"},                       # CreateChatCompletionStreamResponse.choices
    ChunkChoiceLogprobs: {"content", "refusal"},
    ChatCompletionTokenLogprob: {"bytes"},                # ChatCompletionTokenLogprob
    TopLogprob: {"bytes"},
    CompletionChoice: {"logprobs"},                       # CreateCompletionResponse.choices
    Response: {"error", "incomplete_details", "instructions", "metadata", "temperature", "top_p"},
    ErrorObject: {"code", "param"},                       # Error
}

STREAM_EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)


def missing_keys(obj: pydantic.BaseModel, raw: dict, path: str) -> list[str]:
    """The keys the document requires that `raw` (validated into `obj`) lacks, recursively: the
    validated object tells which member of a union each nested value is."""
    cls = type(obj)
    out = []
    required = {n for n, f in cls.model_fields.items() if f.is_required()}
    required |= NULLABLE_REQUIRED.get(cls, set())
    for name in sorted(required):
        key = cls.model_fields[name].alias or name
        if key not in raw:
            out.append(f"{path}.{key} ({cls.__module__}.{cls.__name__})")
    for name, field in cls.model_fields.items():
        key = field.alias or name
        if key in raw:
            out += _walk(getattr(obj, name), raw[key], f"{path}.{key}")
    return out


def _walk(value, raw, path: str) -> list[str]:
    if isinstance(value, pydantic.BaseModel) and isinstance(raw, dict):
        return missing_keys(value, raw, path)
    if isinstance(value, list) and isinstance(raw, list):
        return [m for i, (v, r) in enumerate(zip(value, raw)) for m in _walk(v, r, f"{path}[{i}]")]
    if isinstance(value, dict) and isinstance(raw, dict):
        return [m for k in value if k in raw for m in _walk(value[k], raw[k], f"{path}.{k}")]
    return []


def check(model, raw: dict, what: str):
    """`raw` is a valid `model` (strict types: no string where the document has a number) with
    every required key."""
    if isinstance(model, pydantic.TypeAdapter):
        obj = model.validate_python(raw, strict=True)
    else:
        obj = model.model_validate(raw, strict=True)
    missing = missing_keys(obj, raw, "$")
    assert not missing, f"{what}: keys the OpenAI API document requires are missing: {missing}\n{raw}"
    return obj


def check_error(body, what: str):
    assert isinstance(body, dict) and set(body) >= {"error"}, f"{what}: {body}"
    check(ErrorObject, body["error"], what)


@pytest.fixture(scope="module")
def egw(kvgate_bin, tmp_path_factory, local_kvgate_class, bundled_model):
    """The bundled model on the built-in engine as `smollm2`, one kvgate for the module."""
    kg = local_kvgate_class(kvgate_bin, tmp_path_factory.mktemp("openapi-shapes"), sim_port=0,
                            name="openapi-shapes").start(timeout=60)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


HEADERS = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}
HELLO = [{"role": "user", "content": "Say hello."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


def post(gw, path: str, body: dict, timeout: float = 300):
    return gw.request("POST", path, json.dumps(body), HEADERS, timeout=timeout)


def sse_events(raw: bytes) -> list[dict]:
    """The JSON objects of an SSE body's data lines ([DONE] left out)."""
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[len("data: "):]))
    return out


@pytest.mark.parametrize("extra", [
    {},
    {"logprobs": True, "top_logprobs": 2},
    {"response_format": {"type": "json_object"}},
    {"tools": [WEATHER], "tool_choice": "required"},
    {"tools": [WEATHER], "tool_choice": "auto", "n": 2, "temperature": 0.9, "seed": 5},
], ids=["text", "logprobs", "json_object", "tool_call", "auto_n2"])
def test_chat_completion_has_every_required_field(egw, extra):
    # Room for a whole call with tools ({"tool_calls":[{"name":...,"arguments":{...}}]}).
    body = {"model": "smollm2", "messages": HELLO, "max_tokens": 60 if "tools" in extra else 12,
            "temperature": 0, **extra}
    status, _, answer = post(egw, "/v1/chat/completions", body)
    assert status == 200, answer
    completion = check(ChatCompletion, answer, f"chat {extra}")
    for choice in answer["choices"]:
        # The engine never refuses: the key is there, null.
        assert "refusal" in choice["message"] and choice["message"]["refusal"] is None, choice
    if "tool_choice" in extra and extra["tool_choice"] == "required":
        assert completion.choices[0].message.tool_calls, answer


@pytest.mark.parametrize("extra", [
    {"stream_options": {"include_usage": True}},
    {"logprobs": True, "top_logprobs": 1},
    {"tools": [WEATHER], "tool_choice": "required"},
], ids=["usage", "logprobs", "tool_call"])
def test_chat_chunks_have_every_required_field(egw, extra):
    body = {"model": "smollm2", "messages": HELLO, "max_tokens": 60 if "tools" in extra else 12,
            "temperature": 0, "stream": True, **extra}
    status, _, raw = post(egw, "/v1/chat/completions", body)
    assert status == 200, raw
    chunks = sse_events(raw)
    assert chunks
    for chunk in chunks:
        check(ChatCompletionChunk, chunk, f"chat chunk {extra}")
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finals[-1] in ("stop", "length", "tool_calls"), finals


@pytest.mark.parametrize("stream", [False, True])
def test_completion_has_every_required_field(egw, stream):
    body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0,
            "logprobs": 2, "stream": stream}
    status, _, answer = post(egw, "/v1/completions", body)
    assert status == 200, answer
    if not stream:
        check(Completion, answer, "completion")
        return
    events = sse_events(answer)
    assert events
    # The document has no schema of its own for these events: each is a CreateCompletionResponse,
    # whose finish_reason has no null, while OpenAI's stream (and kvgate's) writes null until the
    # last one. So the key must be there, null before the last event, and the rest must match.
    for i, event in enumerate(events):
        for choice in event["choices"]:
            assert "finish_reason" in choice, event
            if i < len(events) - 1:
                assert choice["finish_reason"] is None, event
                choice["finish_reason"] = "length"
        check(Completion, event, "completion chunk")
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length"), events[-1]


@pytest.mark.parametrize("stream", [False, True])
def test_response_has_every_required_field(egw, stream):
    body = {"model": "smollm2", "input": "Say hello.", "max_output_tokens": 16, "temperature": 0,
            "stream": stream}
    status, _, answer = post(egw, "/v1/responses", body)
    assert status == 200, answer
    if not stream:
        check(Response, answer, "response")
        return
    events = sse_events(answer)
    assert events
    for event in events:
        check(STREAM_EVENTS, event, f"response event {event.get('type')}")
    # max_output_tokens may cut it: incomplete is a whole answer too.
    assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]


def test_model_list_has_every_required_field(egw):
    status, _, answer = egw.request("GET", "/v1/models", headers=HEADERS)
    assert status == 200, answer
    assert answer["object"] == "list" and answer["data"], answer
    for m in answer["data"]:
        check(Model, m, "model")


@pytest.mark.parametrize("path, body, want", [
    # The engine does not embed: kvgate's own refusal.
    ("/v1/embeddings", {"model": "smollm2", "input": "hello"}, 400),
    ("/v1/chat/completions", {"model": "no-such-model", "messages": HELLO}, 404),
    ("/v1/chat/completions", {"model": "smollm2", "messages": HELLO, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}}}}, 400),
    ("/v1/completions", {"model": "smollm2", "prompt": "hi", "max_tokens": -1}, 400),
    ("/v1/responses", {"model": "smollm2", "input": "hi", "previous_response_id": "resp_nope"}, 400),
], ids=["embeddings", "unknown_model", "endless_schema", "bad_max_tokens", "unknown_previous"])
def test_errors_have_every_required_field(egw, path, body, want):
    status, _, answer = post(egw, path, body, timeout=60)
    assert status == want, answer
    check_error(answer, f"{path} {body}")
