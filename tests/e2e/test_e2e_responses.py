"""The OpenAI Responses API and embeddings through kvgate with the official OpenAI SDK
(`responses.create`, `responses.stream`, `stream=True`, `embeddings.create`), against the
simulator: every turn's recorded usage and cost equal, token for token and to the pico-dollar,
what the simulator reported; turns chained by previous_response_id form one thread; an Anthropic
target serves the Responses API by translation (test_e2e_responses_engine.py covers the built-in
engine); targets that cannot serve these endpoints get a 400 that names them."""

from __future__ import annotations

import uuid

import openai
import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY

# Built-in catalog rates, micro-USD per 1M tokens = pico-USD per token (telemetry/catalog.json).
RATES = {
    "gpt-5-mini": {"input": 250_000, "cached": 25_000, "output": 2_000_000},
    "gpt-4o-mini": {"input": 150_000, "cached": 75_000, "output": 600_000},
    "text-embedding-3-small": {"input": 20_000, "cached": 20_000, "output": 0},
    "text-embedding-3-large": {"input": 130_000, "cached": 130_000, "output": 0},
}


@pytest.fixture(scope="module")
def rgw(kvgate_bin, sim, tmp_path_factory, kvgate_process_class, bundled_model):
    class ResponsesKvgate(kvgate_process_class):
        """OpenAI, Anthropic and the built-in engine, embedding models, one OpenAI model with the
        Responses API turned off, and routers over an Anthropic target."""

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
  - {{name: gpt-5-mini, provider: openai}}
  - {{name: gpt-4o-mini, provider: openai}}
  - {{name: claude-sonnet-4-5, provider: claude}}
  - {{name: smollm2, provider: local}}
  - {{name: text-embedding-3-small, provider: openai}}
  - {{name: text-embedding-3-large, provider: openai}}
  - {{name: chat-only, provider: openai, upstream_model: gpt-4o-mini,
     supports: {{responses: false, embeddings: false}}}}
routers:
  - {{name: mixed, strategy: fallback, targets: [{{model: claude-sonnet-4-5}}, {{model: gpt-4o-mini}}]}}
  - {{name: claude-only, strategy: fallback, targets: [{{model: claude-sonnet-4-5}}]}}
  - {{name: chat-first, strategy: fallback, targets: [{{model: chat-only}}, {{model: gpt-4o-mini}}]}}
""")

    kg = ResponsesKvgate(kvgate_bin, tmp_path_factory.mktemp("responses"), sim.port,
                         name="responses").start(timeout=60)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


def long_text(tag: str, n: int = 1400) -> str:
    return " ".join(f"{tag}{i % 89}q{i}" for i in range(n))


def expected_from_sim(model: str, usage: dict) -> tuple[dict, dict]:
    """The normalized usage docs/providers.md prescribes for one simulator Responses (or
    embeddings) usage object, and its exact cost in pico-USD."""
    r = RATES[model]
    if "input_tokens" in usage:
        read = usage["input_tokens_details"]["cached_tokens"]
        n = {"cache_read": read, "cache_write_5m": 0, "cache_write_1h": 0,
             "cache_write_no_ttl": 0, "uncached": usage["input_tokens"] - read,
             "output": usage["output_tokens"],
             "reasoning": usage["output_tokens_details"]["reasoning_tokens"]}
    else:
        n = {"cache_read": 0, "cache_write_5m": 0, "cache_write_1h": 0, "cache_write_no_ttl": 0,
             "uncached": usage["prompt_tokens"], "output": 0, "reasoning": 0}
    cost = {"cache_read": n["cache_read"] * r["cached"], "cache_write": 0,
            "uncached": n["uncached"] * r["input"], "output": n["output"] * r["output"]}
    cost["total"] = sum(cost.values())
    cost["saved"] = n["cache_read"] * (r["input"] - r["cached"])
    cost["missed"] = 0
    return n, cost


def sim_usage(sim, response_id: str) -> dict:
    by_id = {e["id"]: e for e in sim.client.usage_log()}
    assert response_id in by_id, f"the sim logged no answer with id {response_id}"
    return by_id[response_id]["usage"]


def check_recorded(gw, sim, request_id: str | None, response_id: str, model: str, stream: bool,
                   sdk_usage) -> dict:
    """kvgate's record of one turn (by its x-request-id, else by the response's id) equals the
    simulator's usage, priced exactly; the SDK saw the simulator's usage unchanged. Returns the
    record."""
    rec = gw.wait_request(request_id or response_id)
    if request_id:
        assert rec["request_id"] == request_id
    usage = sim_usage(sim, response_id)
    n, cost = expected_from_sim(model, usage)
    ctx = f"{request_id} ({response_id}, sim usage {usage})"
    assert rec["status"] == "ok", f"{ctx}: {rec['status']} {rec.get('error')}"
    assert rec["endpoint"] == "responses"
    assert rec["response_id"] == response_id
    assert rec["stream"] is stream
    assert rec["usage"] == n, f"{ctx}: recorded {rec['usage']} != {n}"
    assert rec["cost_pico_usd"] == cost, f"{ctx}: cost {rec['cost_pico_usd']} != {cost}"
    assert rec["cost_complete"] is True
    assert rec["reported_input"] == usage["input_tokens"]
    if stream:
        assert isinstance(rec["ttft_ms"], (int, float)) and 0 <= rec["ttft_ms"] <= rec[
            "latency_ms"] + 1, f"{ctx}: ttft {rec['ttft_ms']} latency {rec['latency_ms']}"
    got = sdk_usage.model_dump()
    assert got["input_tokens"] == usage["input_tokens"]
    assert got["input_tokens_details"]["cached_tokens"] == usage["input_tokens_details"][
        "cached_tokens"]
    assert got["output_tokens"] == usage["output_tokens"]
    return rec


def test_chained_turns_one_thread_exact_usage_and_cost(rgw, sim):
    """Four turns of one conversation held by the provider: create, create chained, stream()
    chained, stream=True chained. No thread id is sent: the first response's id names the
    thread, and each previous_response_id joins it. Cache reads grow as the sim's cache allows."""
    client = rgw.client()
    model = "gpt-5-mini"  # a reasoning model: the sim reports reasoning_tokens
    instructions = "Answer in one sentence."
    raw = client.responses.with_raw_response.create(model=model, instructions=instructions,
                                                    input=long_text("a"))
    first = raw.parse()
    assert first.output_text and first.id.startswith("resp_")
    turns = [(raw.headers["x-request-id"], first.id, False, first.usage)]

    raw = client.responses.with_raw_response.create(
        model=model, instructions=instructions, previous_response_id=first.id,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "and then?"}]}])
    second = raw.parse()
    turns.append((raw.headers["x-request-id"], second.id, False, second.usage))

    with client.responses.stream(model=model, instructions=instructions, input="go on",
                                 previous_response_id=second.id) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        third = stream.get_final_response()
    assert "".join(deltas) == third.output_text and len(deltas) > 1
    turns.append((None, third.id, True, third.usage))  # looked up by its response id

    raw = client.responses.with_raw_response.create(
        model=model, instructions=instructions, input="last one", previous_response_id=third.id,
        stream=True)
    events = list(raw.parse())
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"], types
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"], types
    fourth = events[-1].response
    turns.append((raw.headers["x-request-id"], fourth.id, True, fourth.usage))

    records = [check_recorded(rgw, sim, rid, resp_id, model, stream, usage)
               for rid, resp_id, stream, usage in turns]
    reads = [r["usage"]["cache_read"] for r in records]
    assert reads[0] == 0 and all(r >= 1024 for r in reads[1:]), reads
    assert all(r["usage"]["reasoning"] == 8 for r in records)
    threads = {r["thread_id"] for r in records}
    assert threads == {first.id}, f"chained turns spread over threads {threads}"
    thread = rgw.wait_turns(first.id, 4)
    assert [t["response_id"] for t in thread] == [first.id, second.id, third.id, fourth.id]


def test_explicit_thread_id_wins_and_the_chain_follows_it(rgw, sim):
    client = rgw.client()
    thread = f"t-resp-{uuid.uuid4().hex[:10]}"
    first = client.responses.create(model="gpt-4o-mini", input="hello",
                                    extra_headers={"X-Thread-Id": thread})
    second = client.responses.create(model="gpt-4o-mini", input="more",
                                     previous_response_id=first.id)
    third = client.responses.create(model="gpt-4o-mini", input="again",
                                    previous_response_id=second.id,
                                    extra_body={"metadata": {"thread_id": thread, "team": "x"}})
    turns = rgw.wait_turns(thread, 3)
    assert [t["response_id"] for t in turns] == [first.id, second.id, third.id]
    forwarded = [r["body"] for r in sim.client.requests() if r["path"].endswith("/responses")]
    assert forwarded[-1]["metadata"] == {"team": "x"}, "kvgate's metadata.thread_id leaked"
    assert all("thread_identifier" not in b and "stream_options" not in b for b in forwarded)


def test_unstored_response_starts_no_response_chain(rgw, sim):
    client = rgw.client()
    raw = client.responses.with_raw_response.create(model="gpt-4o-mini", input="once",
                                                    store=False)
    resp = raw.parse()
    rec = rgw.wait_request(raw.headers["x-request-id"])
    # Not a thread named by its response (nothing can chain to it), but an automatic one: a
    # client that re-sends its whole input (Codex does, with store: false) continues it.
    assert rec["thread_id"].startswith("auto-") and rec["thread_source"] == "auto"
    assert rec["response_id"] == resp.id
    # It cannot be continued: the provider's own 400 reaches the client.
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="gpt-4o-mini", input="x", previous_response_id=resp.id)
    assert e.value.code == "previous_response_not_found"


def test_failed_and_incomplete_streams_are_recorded_as_such(rgw, sim):
    """response.failed reaches the client as the provider sent it and is recorded as an
    upstream_error with its usage; response.incomplete (max_output_tokens) is a whole answer
    whose finish_reason is length."""
    client = rgw.client()
    sim.client.add_faults({"response_failed": True, "path": "/responses"})
    raw = client.responses.with_raw_response.create(model="gpt-4o-mini", input="fail me",
                                                    stream=True)
    events = list(raw.parse())
    assert [e.type for e in events] == ["response.created", "response.in_progress",
                                        "response.failed"]
    rec = rgw.wait_request(raw.headers["x-request-id"])
    assert rec["status"] == "upstream_error", rec
    assert rec["error"] == "The model failed to generate a response."
    n, cost = expected_from_sim("gpt-4o-mini", sim_usage(sim, events[-1].response.id))
    assert rec["usage"] == n and rec["cost_pico_usd"] == cost

    with client.responses.stream(model="gpt-4o-mini", input="cut me",
                                 max_output_tokens=4) as stream:
        types = [e.type for e in stream]
    assert types[-1] == "response.incomplete", types
    rec = rgw.wait_request(sim.client.usage_log()[-1]["id"])  # by the response's id
    assert rec["status"] == "ok" and rec["finish_reason"] == "length", rec
    assert rec["usage"]["output"] == 4 and rec["stream"] is True


def test_diagnosis_on_whole_prompts_names_the_changed_instructions(rgw, sim):
    """Stateless turns (the client resends the whole input): instructions are the system element,
    input items the messages; changing the instructions is diagnosed as prompt_changed there."""
    client = rgw.client()
    thread = f"t-diag-{uuid.uuid4().hex[:10]}"
    instructions = long_text("sys", 1300)
    items = [{"role": "user", "content": "first question"}]
    ask = dict(model="gpt-4o-mini", store=False, extra_body={"thread_identifier": thread})
    client.responses.create(instructions=instructions, input=items, **ask)
    items = items + [{"role": "assistant", "content": "an answer"},
                     {"role": "user", "content": "second question"}]
    client.responses.create(instructions=instructions, input=items, **ask)
    client.responses.create(instructions="EDITED " + instructions, input=items, **ask)
    turns = rgw.wait_turns(thread, 3)
    assert turns[1]["usage"]["cache_read"] >= 1024
    assert turns[1]["cache_diagnosis"] is None
    diagnosis = turns[2]["cache_diagnosis"]
    assert diagnosis and diagnosis["cause"] == "prompt_changed", diagnosis
    assert diagnosis["element"] == "system", diagnosis


@pytest.mark.parametrize("model,named", [
    ("chat-only", "supports.responses: false"),
])
def test_responses_on_a_target_that_cannot_serve_it_is_a_400(rgw, sim, model, named):
    client = rgw.client()
    before = len(sim.client.requests())
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="hi")
    assert e.value.code == "unsupported_endpoint"
    assert named in e.value.message and "/v1/responses" in e.value.message, e.value.message
    with pytest.raises(openai.BadRequestError):
        with client.responses.stream(model=model, input="hi"):
            pass
    assert len(sim.client.requests()) == before, "a refused request reached the simulator"
    st, st_headers, body = rgw.request(
        "POST", "/v1/responses", body=b'{"model": "%s", "input": "x"}' % model.encode(),
        headers={"Authorization": f"Bearer {GATEWAY_KEY}"})
    assert st == 400 and body["error"]["param"] == "model", body
    recorded = rgw.wait_request(st_headers["x-request-id"])
    assert recorded["status"] == "error" and recorded["http_status"] == 400, recorded
    assert recorded["endpoint"] == "responses" and recorded["model"] == model, recorded


def test_router_skips_a_target_without_the_responses_api(rgw, sim):
    raw = rgw.client().responses.with_raw_response.create(model="chat-first", input="hi")
    resp = raw.parse()
    assert resp.output_text
    rec = rgw.wait_request(raw.headers["x-request-id"])
    assert rec["target"] == "gpt-4o-mini" and rec["status"] == "ok"
    assert rec["route"] is not None


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_target_serves_responses_by_translation(rgw, sim, stream):
    """Responses -> chat -> the Anthropic adapter: the simulator gets a Messages request, the
    client a Responses answer whose usage is the simulator's (in OpenAI's terms), and the next
    turn continues it by previous_response_id from kvgate's own store."""
    client = rgw.client()
    kw = {"model": "claude-sonnet-4-5", "instructions": "Be brief.", "max_output_tokens": 64}
    if stream:
        events = list(client.responses.create(input="hi", stream=True, **kw))
        assert events[0].type == "response.created", events[0]
        first = events[-1].response
        assert events[-1].type == "response.completed", events[-1]
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
            first.output_text
    else:
        first = client.responses.create(input="hi", **kw)
    assert first.output_text and first.id.startswith("resp_")
    sent = sim.client.requests()[-1]
    assert sent["path"] == "/anthropic/v1/messages", sent["path"]
    entry = sim.client.usage_log()[-1]
    u = entry["usage"]
    read = u.get("cache_read_input_tokens") or 0
    written = u.get("cache_creation_input_tokens") or 0
    assert first.usage.input_tokens == u["input_tokens"] + read + written
    assert first.usage.output_tokens == u["output_tokens"]
    rec = rgw.wait_request(first.id)  # the record answers to the response's own id
    assert rec["response_id"] == first.id and rec["provider"] == "claude", rec
    assert rec["endpoint"] == "responses" and rec["stream"] is stream, rec
    assert rec["usage"]["output"] == u["output_tokens"] and rec["usage"]["cache_read"] == read
    second = client.responses.create(input="and then?", previous_response_id=first.id, **kw)
    assert second.output_text
    messages = sim.client.requests()[-1]["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"], messages


@pytest.mark.parametrize("model", ["text-embedding-3-small", "text-embedding-3-large"])
def test_embeddings_usage_and_cost(rgw, sim, model):
    client = rgw.client()
    inputs = ["the cache holds a prefix", "of tokens that the model has already seen"]
    raw = client.embeddings.with_raw_response.create(model=model, input=inputs)
    result = raw.parse()
    assert len(result.data) == 2 and len(result.data[0].embedding) == 8
    entries = [e for e in sim.client.usage_log() if e["path"].endswith("/embeddings")]
    usage = entries[-1]["usage"]
    assert usage["prompt_tokens"] == sum(len(i.split()) for i in inputs)
    assert result.usage.prompt_tokens == usage["prompt_tokens"]
    rec = rgw.wait_request(raw.headers["x-request-id"])
    n, cost = expected_from_sim(model, usage)
    assert rec["endpoint"] == "embeddings" and rec["status"] == "ok" and rec["stream"] is False
    assert rec["usage"] == n, rec["usage"]
    assert rec["cost_pico_usd"] == cost, rec["cost_pico_usd"]
    assert rec["cost_complete"] is True
    assert rec["thread_id"] == "" and rec["cache_diagnosis"] is None


def test_embeddings_float_format_and_refusals(rgw, sim):
    client = rgw.client()
    st, _, body = rgw.request(
        "POST", "/v1/embeddings",
        body=b'{"model": "text-embedding-3-small", "input": "a b c", "encoding_format": "float"}',
        headers={"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
    assert st == 200 and body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}, body
    assert isinstance(body["data"][0]["embedding"][0], float)
    for model, named in [("claude-sonnet-4-5", "of type anthropic"), ("smollm2", "of type local"),
                         ("chat-only", "supports.embeddings: false")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model=model, input="hi")
        assert e.value.code == "unsupported_endpoint" and named in e.value.message, e.value.message
    st, _, body = rgw.request(
        "POST", "/v1/embeddings",
        body=b'{"model": "text-embedding-3-small", "input": "a", "stream": true}',
        headers={"Authorization": f"Bearer {GATEWAY_KEY}"})
    assert st == 400 and body["error"]["param"] == "stream", body


def test_metrics_count_requests_by_endpoint(rgw, sim):
    client = rgw.client()
    client.responses.create(model="gpt-4o-mini", input="count me", store=False)
    client.embeddings.create(model="text-embedding-3-small", input="count me")
    _, _, text = rgw.request("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else str(text)
    for endpoint in ("responses", "embeddings"):
        line = [l for l in text.splitlines()
                if l.startswith(f'kvgate_endpoint_requests_total{{endpoint="{endpoint}",'
                                f'status="ok"}}')]
        assert line and float(line[0].split()[-1]) >= 1, (endpoint, text[-3000:])
