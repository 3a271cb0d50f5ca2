"""The OpenAI Responses API on the built-in engine, by translation to chat, with the official
OpenAI SDK, through the gateway and through `kvgate engine`: `responses.create` whole and
streamed (the SDK's event parser and `responses.stream` accumulate the events), usage that
equals the recorded usage, a conversation continued by previous_response_id that reads the
engine's prefix cache, function tools with tool_choice required, text.format json_schema, and
the 400s for an unknown previous_response_id and for fields the engine cannot honour."""
from __future__ import annotations

import json

import openai
import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, kvgate_engine

INSTRUCTIONS = ("You are a patient assistant for a bicycle repair shop. Answer briefly. " * 12).strip()
WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city",
           "parameters": {"type": "object",
                          "properties": {"city": {"type": "string", "maxLength": 30},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                          "required": ["city", "unit"], "additionalProperties": False},
           "strict": True}


@pytest.fixture(scope="module")
def egw(kvgate_bin, tmp_path_factory, local_kvgate_class, bundled_model):
    """The bundled model on the built-in engine as `smollm2`, one kvgate for the module."""
    kg = local_kvgate_class(kvgate_bin, tmp_path_factory.mktemp("resp-engine"), sim_port=0,
                            name="resp-engine").start(timeout=60)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


def check_usage_recorded(gw, request_id: str, response) -> dict:
    """The record of `request_id` has the response's id and exactly its usage."""
    rec = gw.wait_request(request_id)
    u = response.usage
    assert rec["status"] == "ok", rec
    assert rec["endpoint"] == "responses" and rec["provider"] == "local", rec
    assert rec["response_id"] == response.id, rec
    n = rec["usage"]
    assert n["cache_read"] == u.input_tokens_details.cached_tokens, (n, u)
    assert n["cache_read"] + n["cache_write_no_ttl"] + n["uncached"] == u.input_tokens, (n, u)
    assert n["output"] == u.output_tokens and not n.get("reasoning"), (n, u)
    assert u.output_tokens_details.reasoning_tokens == 0
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert rec["cost_complete"] is True and rec["cost_pico_usd"]["total"] == 0
    return rec


def test_create_whole_answer(egw):
    raw = egw.client(timeout=120).responses.with_raw_response.create(
        model="smollm2", instructions="Answer briefly.", input="Name a color.",
        max_output_tokens=8, temperature=0, metadata={"team": "bikes"})
    r = raw.parse()
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status in ("completed", "incomplete")
    assert r.model == "smollm2" and r.metadata == {"team": "bikes"}
    assert r.instructions == "Answer briefly." and r.max_output_tokens == 8
    assert [o.type for o in r.output] == ["message"]
    assert isinstance(r.output_text, str) and r.output_text
    assert 1 <= r.usage.output_tokens <= 8
    if r.status == "incomplete":
        assert r.usage.output_tokens == 8 and r.incomplete_details.reason == "max_output_tokens"
    check_usage_recorded(egw, raw.headers["x-request-id"], r)


def test_stream_is_the_responses_event_sequence(egw):
    client = egw.client(timeout=120)
    raw = client.responses.with_raw_response.create(
        model="smollm2", input="Say hello to the mechanic.", max_output_tokens=10, temperature=0,
        stream=True)
    events = list(raw.parse())
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"], types
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done",
                            "response.output_item.done"], types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    final = events[-1].response
    assert deltas and "".join(deltas) == final.output_text
    assert events[0].response.id == final.id and events[0].response.status == "in_progress"
    check_usage_recorded(egw, raw.headers["x-request-id"], final)
    # The SDK's helper parses the same events into the same response (its get_final_response
    # wants response.completed, which a capped answer does not end with: OpenAI's rule too).
    with client.responses.stream(model="smollm2", input="Say hello to the mechanic.",
                                 max_output_tokens=10, temperature=0) as stream:
        helper_events = list(stream)
    helper = helper_events[-1].response
    helper_deltas = [e.delta for e in helper_events if e.type == "response.output_text.delta"]
    assert "".join(helper_deltas) == helper.output_text == final.output_text  # greedy: the same


def test_previous_response_id_continues_the_conversation_from_the_prefix_cache(egw):
    client = egw.client(timeout=120)
    raw1 = client.responses.with_raw_response.create(
        model="smollm2", instructions=INSTRUCTIONS, input="My chain skips. Why?",
        max_output_tokens=8, temperature=0)
    first = raw1.parse()
    raw2 = client.responses.with_raw_response.create(
        model="smollm2", instructions=INSTRUCTIONS, input="And how do I fix it?",
        previous_response_id=first.id, max_output_tokens=8, temperature=0)
    second = raw2.parse()
    assert second.previous_response_id == first.id
    # The whole conversation was rebuilt: turn 1's prompt and answer precede the new input.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert second.usage.input_tokens_details.cached_tokens > 0
    rec1 = check_usage_recorded(egw, raw1.headers["x-request-id"], first)
    rec2 = check_usage_recorded(egw, raw2.headers["x-request-id"], second)
    # One thread, named by the first response.
    assert rec1["thread_id"] == rec2["thread_id"] == first.id
    # A third turn streamed, continuing the second.
    with client.responses.stream(model="smollm2", instructions=INSTRUCTIONS, input="Thanks!",
                                 previous_response_id=second.id, max_output_tokens=6,
                                 temperature=0) as stream:
        third = list(stream)[-1].response
    assert third.usage.input_tokens > second.usage.input_tokens
    assert third.usage.input_tokens_details.cached_tokens >= \
        second.usage.input_tokens_details.cached_tokens


def test_unknown_and_unstored_previous_response_is_a_400(egw):
    client = egw.client(timeout=120)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="smollm2", input="hi", previous_response_id="resp_nope")
    assert e.value.code == "previous_response_not_found"
    assert e.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model="smollm2", input="hi", store=False,
                                       max_output_tokens=2, temperature=0)
    assert unstored.store is False
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="smollm2", input="again", max_output_tokens=2,
                                previous_response_id=unstored.id)
    assert e.value.code == "previous_response_not_found"


@pytest.mark.parametrize("fields,param", [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]},
     "input[0].content[0].type"),
])
def test_what_the_engine_cannot_honour_is_a_400_naming_it(egw, fields, param):
    body = {"model": "smollm2", "input": "hi", **fields}
    st, headers, answer = egw.request("POST", "/v1/responses", body=json.dumps(body),
                                      headers={"Authorization": f"Bearer {GATEWAY_KEY}"})
    assert st == 400, answer
    assert answer["error"]["param"] == param, answer
    assert answer["error"]["type"] == "invalid_request_error", answer
    rec = egw.wait_request(headers["x-request-id"])
    assert rec["status"] == "error" and rec["http_status"] == 400, rec


def test_required_tool_call_is_a_function_call_item_and_its_output_continues(egw):
    client = egw.client(timeout=300)
    raw = client.responses.with_raw_response.create(
        model="smollm2", input="What is the weather in Lima right now?", tools=[WEATHER],
        tool_choice="required", parallel_tool_calls=False, max_output_tokens=60, temperature=0)
    r = raw.parse()
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.status == "completed"
    args = json.loads(call.arguments)
    assert list(args) == ["city", "unit"] and args["unit"] in ("celsius", "fahrenheit")
    check_usage_recorded(egw, raw.headers["x-request-id"], r)
    # The tool's result goes back as a function_call_output item on the stored conversation.
    follow = client.responses.create(
        model="smollm2", previous_response_id=r.id, tools=[WEATHER], tool_choice="none",
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"temperature": 21, "sky": "clear"})}],
        max_output_tokens=8, temperature=0)
    assert [o.type for o in follow.output] == ["message"]
    assert follow.usage.input_tokens_details.cached_tokens > 0


def test_streamed_tool_call_deltas_equal_the_item(egw):
    client = egw.client(timeout=300)
    events = list(client.responses.create(
        model="smollm2", input="What is the weather in Oslo right now?", tools=[WEATHER],
        tool_choice="required", parallel_tool_calls=False, max_output_tokens=60, temperature=0,
        stream=True))
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types, types
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == done[0].arguments
    item = [o for o in events[-1].response.output if o.type == "function_call"][0]
    assert item.arguments == deltas and json.loads(deltas)["unit"] in ("celsius", "fahrenheit")


def test_text_format_json_schema_is_valid_json(egw):
    schema = {"type": "object",
              "properties": {"part": {"type": "string", "maxLength": 20},
                             "size": {"type": "string", "enum": ["small", "medium", "large"]}},
              "required": ["part", "size"], "additionalProperties": False}
    r = egw.client(timeout=300).responses.create(
        model="smollm2", input="Which bicycle part wears out first, and how big is it?",
        text={"format": {"type": "json_schema", "name": "part_size", "schema": schema,
                         "strict": True}},
        max_output_tokens=40, temperature=0)
    assert r.status == "completed", r
    value = json.loads(r.output_text)
    assert list(value) == ["part", "size"]
    assert isinstance(value["part"], str) and len(value["part"]) <= 20
    assert value["size"] in ("small", "medium", "large")
    assert r.text.format.type == "json_schema"


def test_responses_through_kvgate_engine(kvgate_bin, tmp_path, bundled_model):
    """`kvgate engine` serves the same translation, whole, streamed and continued."""
    with kvgate_engine(kvgate_bin, tmp_path, bundled_model) as client:
        first = client.responses.create(model="smollm2", instructions=INSTRUCTIONS,
                                        input="Name a tool.", max_output_tokens=6, temperature=0)
        assert first.output_text and first.usage.output_tokens >= 1
        events = list(client.responses.create(
            model="smollm2", instructions=INSTRUCTIONS, input="Name another.",
            previous_response_id=first.id, max_output_tokens=6, temperature=0, stream=True))
        assert events[0].type == "response.created"
        final = events[-1].response
        assert events[-1].type in ("response.completed", "response.incomplete")
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
            final.output_text
        assert final.usage.input_tokens_details.cached_tokens > 0


def test_prefix_affinity_routes_a_responses_turn_to_the_replica_with_its_prefix(
        kvgate_bin, tmp_path, kvgate_process_class, bundled_model):
    """A router asks the engines about the chat prompt a Responses request becomes: a new
    conversation with known instructions goes to the replica that holds them."""
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
    try:
        gw = kg.gateway()
        pinned = gw.client(timeout=120, default_headers={"x-kvgate-route-target": "smol-2"})
        pinned.responses.create(model="smol", instructions=INSTRUCTIONS, input="Hi",
                                max_output_tokens=4, temperature=0)
        raw = gw.client(timeout=120).responses.with_raw_response.create(
            model="smol", instructions=INSTRUCTIONS, input="Hello?", max_output_tokens=4,
            temperature=0)
        r = raw.parse()
        assert r.usage.input_tokens_details.cached_tokens > 100
        rec = gw.wait_request(raw.headers["x-request-id"])
        assert rec["target"] == "smol-2", rec["route"]
        assert rec["route"]["reason_code"] == "prefix_hit", rec["route"]
        # A turn continuing it is asked about with its stored conversation: the same replica.
        raw = gw.client(timeout=120).responses.with_raw_response.create(
            model="smol", instructions=INSTRUCTIONS, input="And then?", previous_response_id=r.id,
            max_output_tokens=4, temperature=0)
        rec = gw.wait_request(raw.headers["x-request-id"])
        assert rec["target"] == "smol-2", rec["route"]
        # (The cache is in 16-token blocks: the whole blocks of the turn it continues.)
        assert raw.parse().usage.input_tokens_details.cached_tokens >= \
            (r.usage.input_tokens // 16) * 16 > 0
    finally:
        if kg.alive:
            assert kg.terminate() == 0, kg.stderr_tail()
