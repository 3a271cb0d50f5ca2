"""The built-in engine through the gateway with the OpenAI SDK: prefix-cache usage reported to the
client equals what telemetry records, turn 2 of a thread reads a block-aligned prefix, and many
concurrent streaming conversations sharing a system prompt all finish and hit the cache."""
import concurrent.futures
import time

import openai
import pytest

from gwctl import ADMIN_TOKEN

BLOCK = 16

SYSTEM = ("You are a careful assistant for a hardware store. " * 30).strip()


def lookup(gw, messages):
    st, _, body = gw.request("POST", "/api/engine/lookup",
                             body=__import__("json").dumps({"model": "smollm2", "messages": messages}),
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert st == 200, body
    return body


def test_second_turn_reads_block_aligned_prefix_and_telemetry_matches(local_gw):
    client = local_gw.client(timeout=120)
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Which screws hold drywall best?"}]
    seen = []
    for turn in range(3):
        r = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12,
                                           temperature=0, extra_body={"thread_identifier": "eng-1"})
        u = r.usage
        seen.append(u)
        cached = u.prompt_tokens_details.cached_tokens
        written = u.prompt_tokens_details.cache_write_tokens
        assert cached % BLOCK == 0
        assert 0 <= cached + written <= u.prompt_tokens
        if turn == 0:
            assert cached == 0
        else:
            # Everything up to the previous turn's computed tokens is reused, block aligned.
            assert cached >= (seen[turn - 1].prompt_tokens // BLOCK) * BLOCK
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": f"And question {turn + 2}?"}]
        # The lookup API sees the cache the next turn will hit, without changing it.
        assert lookup(local_gw, messages)["cached_tokens"] > 0
    turns = local_gw.wait_turns("eng-1", 3)
    for t, u in zip(turns, seen):
        cached = u.prompt_tokens_details.cached_tokens
        written = u.prompt_tokens_details.cache_write_tokens
        assert t["provider"] == "local" and t["status"] == "ok"
        assert t["usage"]["cache_read"] == cached
        # The engine's writes have no TTL: their own bucket, not Anthropic's 5-minute one.
        assert t["usage"]["cache_write_no_ttl"] == written
        assert t["usage"]["cache_write_5m"] == 0 and t["usage"]["cache_write_1h"] == 0
        assert t["usage"]["uncached"] == u.prompt_tokens - cached - written
        assert t["usage"]["output"] == u.completion_tokens
        # A model served by the built-in engine is free: its cost is 0 and complete.
        assert t["cost_complete"] is True and t["cost_pico_usd"]["total"] == 0
        # The id the SDK saw finds the request too.
        assert t["response_id"].startswith("chatcmpl")
    assert turns[1]["cache_diagnosis"] is None and turns[2]["cache_diagnosis"] is None


def test_sixteen_concurrent_streams_share_the_system_prompt(local_gw):
    client = local_gw.client(timeout=300)
    # Warm the shared prefix once, then 16 conversations at the same time.
    client.chat.completions.create(model="smollm2", max_tokens=1, temperature=0,
                                   messages=[{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": "hi"}])

    def conversation(i):
        stream = client.chat.completions.create(
            model="smollm2", stream=True, max_tokens=8, temperature=0,
            stream_options={"include_usage": True},
            messages=[{"role": "system", "content": SYSTEM},
                      {"role": "user", "content": f"Customer {i} asks about nails."}],
            extra_body={"thread_identifier": f"many-{i}"})
        text, usage = "", None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage:
                usage = chunk.usage
        return text, usage

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(conversation, range(16), timeout=280))
    for text, usage in results:
        assert usage is not None and usage.completion_tokens >= 1
        assert usage.prompt_tokens_details.cached_tokens >= BLOCK * 10  # the shared system prompt
    st, _, engine = local_gw.admin_get("/api/engine")
    assert st == 200
    e = engine["engines"][0]
    assert e["prefix_cache_hits_tokens"] > 0 and e["used_blocks"] == 0 and e["running"] == 0
    st, _, metrics = local_gw.request("GET", "/metrics")
    text = metrics.decode() if isinstance(metrics, bytes) else str(metrics)
    assert 'kvgate_engine_prefix_cache_hits_total{provider="local"}' in text


def test_a_stream_cut_by_the_client_keeps_what_the_engine_counted(local_gw):
    """A client that leaves mid-stream stops the generation, and its turn still carries the
    engine's counts so far (prompt split into cached and uncached, the tokens generated) instead
    of unknowns; the engine's own token counters agree."""
    client = local_gw.client(timeout=120)
    stream = client.chat.completions.create(
        model="smollm2", stream=True, max_tokens=400, temperature=0,
        messages=[{"role": "user", "content": "Count from one to two hundred in words."}],
        extra_body={"thread_identifier": "cut-stream"})
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
            if received == 3:
                break
    stream.response.close()
    turns = local_gw.wait_turns("cut-stream", 1, timeout=30)
    turn = turns[0]
    assert turn["status"] == "client_disconnected", turn
    usage = turn["usage"]
    assert usage["output"] is not None and 3 <= usage["output"] < 400, usage
    assert usage["uncached"] is not None and usage["cache_read"] is not None, usage
    assert usage["uncached"] + usage["cache_read"] > 5, usage
    # The engine drops the request at its next step (a decode step here).
    deadline = time.monotonic() + 10
    while True:
        st, _, engine = local_gw.admin_get("/api/engine")
        assert st == 200
        e = engine["engines"][0]
        if e["running"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert e["running"] == 0


def test_a_client_that_gives_up_during_prefill_frees_the_engine(local_gw):
    """The client's timeout passes while the engine is still reading a long prompt (no token yet):
    kvgate notices within a sweep and cancels the engine request then, not at the first token."""
    long_prompt = " ".join(f"item {i} is a plain fact about nothing in particular." for i in range(250))
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        local_gw.client(timeout=1.0).chat.completions.create(
            model="smollm2", max_tokens=8, temperature=0,
            messages=[{"role": "user", "content": long_prompt}],
            extra_body={"thread_identifier": "gave-up-in-prefill"})
    turn = local_gw.wait_turns("gave-up-in-prefill", 1, timeout=60)[0]
    recorded_after = time.monotonic() - started
    assert turn["status"] == "client_disconnected", turn
    assert turn["latency_ms"] < 3000, f"recorded as if it waited for the first token: {turn}"
    assert recorded_after < 4.5, f"recorded {recorded_after:.1f}s after the request"
    # The engine drops the request at its next step boundary (a prefill chunk is 512 tokens).
    deadline = time.monotonic() + 30
    while True:
        st, _, engine = local_gw.admin_get("/api/engine")
        assert st == 200
        if engine["engines"][0]["running"] == 0:
            break
        assert time.monotonic() < deadline, engine
        time.sleep(0.1)
    freed_after = time.monotonic() - started
    # Without the cancel the engine would read the whole prompt first (tens of seconds on 2 cores).
    assert freed_after < recorded_after + 15, f"engine still busy {freed_after:.1f}s in"
