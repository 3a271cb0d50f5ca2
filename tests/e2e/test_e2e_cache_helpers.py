"""The cache helpers against the simulator's caching rules: the hit rate with each helper on and
off, on the same traffic.

* `prompt_cache_key: thread` (OpenAI): with the simulator's OpenAI routing on (eight cache
  machines; a route of one 256-token prefix and prompt_cache_key overflows to other machines past
  15 requests a minute), ten conversations that share a system prompt mostly miss once their
  shared route overflows; with a key per thread each keeps meeting its own cache.
* `anthropic_auto_cache` (Anthropic): a client that sets no cache_control gets no cache reads at
  all; with the helper its later turns read the conversation so far, on the chat translation and
  on the /v1/messages pass-through, whose other bytes stay the client's."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY


@pytest.fixture(scope="module")
def hgw(kvgate_bin, sim, tmp_path_factory, kvgate_process_class):
    class HelpersKvgate(kvgate_process_class):
        def _write_config(self):
            s = f"http://127.0.0.1:{self.sim_port}"
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: openai, type: openai, base_url: {s}/openai/v1, api_key: "${{SIM_OPENAI_KEY}}"}}
  - {{name: openai-keyed, type: openai, base_url: {s}/openai/v1, api_key: "${{SIM_OPENAI_KEY}}",
     prompt_cache_key: thread}}
  - {{name: claude, type: anthropic, base_url: {s}/anthropic, api_key: sk-ant-test}}
  - {{name: claude-auto, type: anthropic, base_url: {s}/anthropic, api_key: sk-ant-test,
     anthropic_auto_cache: true}}
  - {{name: claude-auto-1h, type: anthropic, base_url: {s}/anthropic, api_key: sk-ant-test,
     anthropic_auto_cache: {{ttl: 1h}}}}
models:
  - {{name: plain-4o, provider: openai, upstream_model: gpt-4o-mini}}
  - {{name: keyed-4o, provider: openai-keyed, upstream_model: gpt-4o-mini}}
  - {{name: sonnet, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: sonnet-auto, provider: claude-auto, upstream_model: claude-sonnet-4-5}}
  - {{name: sonnet-auto-1h, provider: claude-auto-1h, upstream_model: claude-sonnet-4-5}}
""")

    kg = HelpersKvgate(kvgate_bin, tmp_path_factory.mktemp("helpers"), sim.port,
                       name="helpers").start(timeout=60)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i % 97}w{i}" for i in range(n))


def hit_rate(records: list[dict]) -> float:
    """Cache reads over every input token (reads, writes and uncached)."""
    read = sum(r["usage"]["cache_read"] for r in records)
    total = sum(sum(r["usage"][k] or 0 for k in
                    ("cache_read", "cache_write_5m", "cache_write_1h", "cache_write_no_ttl",
                     "uncached")) for r in records)
    return read / total


def run_conversations(gw, model: str, tag: str, threads: int = 10, turns: int = 3) -> list[dict]:
    """`threads` conversations sharing one 300-word system prompt (more than the 256 tokens the
    route hashes, less than the 1024 OpenAI caches), each with its own 1,200-word document,
    played turn by turn across all of them (as concurrent users would)."""
    client = gw.client()
    system = words(f"{tag}sys", 300)
    history = {t: [{"role": "system", "content": system},
                   {"role": "user", "content": words(f"{tag}doc{t}", 1200)}] for t in range(threads)}
    ids = {t: f"t-{tag}-{t}-{uuid.uuid4().hex[:6]}" for t in range(threads)}
    records = []
    for turn in range(turns):
        for t in range(threads):
            raw = client.chat.completions.with_raw_response.create(
                model=model, messages=history[t], max_tokens=8,
                extra_headers={"X-Thread-Id": ids[t]})
            answer = raw.parse().choices[0].message.content
            history[t] += [{"role": "assistant", "content": answer},
                           {"role": "user", "content": f"question {turn} please"}]
            records.append(gw.wait_request(raw.headers["x-request-id"]))
    return records


def test_prompt_cache_key_keeps_each_thread_on_its_cache(hgw, sim):
    sim.client.config(openai_machines=8)
    try:
        plain = run_conversations(hgw, "plain-4o", "p" + uuid.uuid4().hex[:6])
        keyed = run_conversations(hgw, "keyed-4o", "k" + uuid.uuid4().hex[:6])
    finally:
        sim.client.config(openai_machines=1)
    plain_rate, keyed_rate = hit_rate(plain), hit_rate(keyed)
    print(f"OpenAI routing, 10 threads x 3 turns: hit rate {plain_rate:.3f} without the helper, "
          f"{keyed_rate:.3f} with prompt_cache_key: thread")
    assert keyed_rate > plain_rate + 0.25, (plain_rate, keyed_rate)
    assert all(r["cache_helper"] is None for r in plain)
    assert all(r["cache_helper"] == "prompt_cache_key" for r in keyed)
    # Upstream, every keyed request carried its thread's key: one key per thread, none shared,
    # and not the thread id itself.
    sent = [r for r in sim.client.requests() if r["path"].endswith("/chat/completions")][-60:]
    keys = {}
    for r in sent:
        k = r["body"].get("prompt_cache_key")
        if k is not None:
            first_user = r["body"]["messages"][1]["content"][:40]
            keys.setdefault(first_user, set()).add(k)
    assert len(keys) == 10 and all(len(v) == 1 for v in keys.values()), keys
    assert all(re.fullmatch(r"kvgate-[0-9a-f]{32}", next(iter(v))) for v in keys.values())


def test_the_clients_own_prompt_cache_key_is_kept(hgw, sim):
    client = hgw.client()
    raw = client.chat.completions.with_raw_response.create(
        model="keyed-4o", messages=[{"role": "user", "content": "hello"}], max_tokens=4,
        extra_body={"prompt_cache_key": "mine"}, extra_headers={"X-Thread-Id": "t-own-key"})
    assert sim.client.requests()[-1]["body"]["prompt_cache_key"] == "mine"
    assert hgw.wait_request(raw.headers["x-request-id"])["cache_helper"] is None


def chat_turns(gw, model: str, tag: str, turns: int = 3) -> list[dict]:
    client = gw.client()
    messages = [{"role": "system", "content": words(f"{tag}s", 800)},
                {"role": "user", "content": words(f"{tag}d", 700)}]
    thread = f"t-{tag}-{uuid.uuid4().hex[:6]}"
    records = []
    for turn in range(turns):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=8, extra_headers={"X-Thread-Id": thread})
        messages += [{"role": "assistant", "content": raw.parse().choices[0].message.content},
                     {"role": "user", "content": f"and then {turn}?"}]
        records.append(gw.wait_request(raw.headers["x-request-id"]))
    return records


def test_anthropic_auto_cache_on_the_chat_translation(hgw, sim):
    tag = uuid.uuid4().hex[:6]
    plain = chat_turns(hgw, "sonnet", "a" + tag)
    auto = chat_turns(hgw, "sonnet-auto", "b" + tag)
    hour = chat_turns(hgw, "sonnet-auto-1h", "c" + tag)
    print(f"Anthropic, 3 turns of a 1,500-word conversation without cache_control: hit rate "
          f"{hit_rate(plain):.3f} without the helper, {hit_rate(auto):.3f} with "
          f"anthropic_auto_cache")
    assert hit_rate(plain) == 0
    assert all(r["usage"]["cache_read"] > 0 for r in auto[1:]), [r["usage"] for r in auto]
    assert auto[0]["usage"]["cache_write_5m"] > 0 and auto[0]["usage"]["cache_write_1h"] == 0
    assert hour[0]["usage"]["cache_write_1h"] > 0 and hour[0]["usage"]["cache_write_5m"] == 0
    assert all(r["usage"]["cache_read"] > 0 for r in hour[1:])
    assert [r["cache_helper"] for r in auto] == ["anthropic_auto_cache"] * 3
    assert all(r["cache_helper"] is None for r in plain)


def test_anthropic_auto_cache_on_the_messages_pass_through(hgw, sim):
    tag = uuid.uuid4().hex[:6]
    tools = ('[{"name":"lookup","input_schema":{"type":"object","required":["q"],'
             '"properties":{"q":{"type":"string"},"Amode":{"type":"string"}}}}]')
    system = words(f"m{tag}s", 900)
    doc = words(f"m{tag}d", 600)
    headers = {"x-api-key": GATEWAY_KEY, "content-type": "application/json",
               "anthropic-version": "2023-06-01", "x-thread-id": f"t-m{tag}"}

    def body(messages: str) -> bytes:
        return ('{"model": "sonnet-auto", "max_tokens": 8, "tools": ' + tools +
                ', "system": ' + json.dumps(system) + ', "messages": ' + messages + '}').encode()

    first = '[{"role": "user", "content": ' + json.dumps(doc) + '}]'
    st, h1, a1 = hgw.request("POST", "/v1/messages", body=body(first), headers=headers)
    assert st == 200, a1
    sent = [r for r in sim.client.requests() if r["path"].endswith("/v1/messages")][-1]
    assert sent["body"]["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["body"]["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    rec1 = hgw.wait_request(h1["x-request-id"])
    assert rec1["cache_helper"] == "anthropic_auto_cache"
    assert rec1["usage"]["cache_write_5m"] > 0

    second = ('[{"role": "user", "content": ' + json.dumps(doc) + '}, {"role": "assistant", '
              '"content": ' + json.dumps(a1["content"][0]["text"]) + '}, {"role": "user", '
              '"content": "and more?"}]')
    st, h2, a2 = hgw.request("POST", "/v1/messages", body=body(second), headers=headers)
    assert st == 200, a2
    rec2 = hgw.wait_request(h2["x-request-id"])
    assert rec2["usage"]["cache_read"] > 0, rec2["usage"]
    assert a2["usage"]["cache_read_input_tokens"] == rec2["usage"]["cache_read"]
    sent = [r for r in sim.client.requests() if r["path"].endswith("/v1/messages")][-1]
    raw_sent = json.dumps(sent["body"]["tools"], separators=(",", ":"))
    assert raw_sent == tools, "the tools reach Anthropic with their keys in the client's order"
