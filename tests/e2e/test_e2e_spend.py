"""Spend that a client cannot dodge (issue: budgets can be dodged or overshot).

A client that closes its stream after the content but before the usage event must not make the
turn free: the provider bills it all the same. kvgate reads the upstream on to its usage (for a
bounded time) and records it; when the usage never comes, the unreported counts are kvgate's
estimate, flagged `usage_estimated`. The simulator's faults (tests/sim/provider_sim.py) pace the
upstream: `chunk_delay_ms` spaces its events, `reset_after_chunks` kills it before its usage."""

from __future__ import annotations

import json
import socket
import time
import uuid

from gwctl import GATEWAY_KEY, normalized_from_sim

GPT = "gpt-4o-mini"


def tid(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def read_first_content_then_close(port: int, thread: str) -> None:
    """Streams a chat request by hand and hangs up as soon as the first content chunk arrives."""
    body = json.dumps({"model": GPT, "stream": True, "thread_identifier": thread,
                       "messages": [{"role": "user", "content": "a long answer please"}]})
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {GATEWAY_KEY}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        seen = b""
        while b'"content":"' not in seen.replace(b'"content": "', b'"content":"'):
            chunk = s.recv(65536)
            assert chunk, f"the stream ended before any content: {seen!r}"
            seen += chunk
        assert seen.startswith(b"HTTP/1.1 200"), seen[:200]
    finally:
        s.close()


def wait_row(gw, thread: str, timeout: float = 30.0) -> dict:
    turns = gw.wait_turns(thread, 1, timeout=timeout)
    st, _, row = gw.admin_get(f"/api/requests/{turns[0]['request_id']}")
    assert st == 200, row
    return row


def test_a_client_that_leaves_before_the_usage_event_is_charged_the_real_usage(gw, sim):
    thread = tid("leave")
    # ~8 events after the first content one, 300 ms apart: the usage comes ~2.5 s after the
    # client has gone, well inside kvgate's 10 s drain.
    sim.client.add_faults({"path": "/openai/", "stream": True, "chunk_delay_ms": 300})
    t0 = time.monotonic()
    read_first_content_then_close(gw.port, thread)
    row = wait_row(gw, thread)
    assert row["status"] == "client_disconnected", row
    assert "read the upstream on to its usage" in row["error"], row
    entry = sim.client.usage_log()[-1]
    assert row["usage"] == normalized_from_sim("openai", entry["usage"]), (row["usage"], entry)
    assert row["usage_estimated"] is False, row
    assert row["cost_pico_usd"]["total"] > 0 and row["cost_complete"], row
    assert time.monotonic() - t0 < 15, "the turn was recorded only after the drain's bound"


def test_a_client_that_leaves_a_stream_whose_usage_never_comes_is_charged_an_estimate(gw, sim):
    thread = tid("estimate")
    # The upstream dies (RST) after its 3rd event, long after the client left: no usage at all.
    sim.client.add_faults({"path": "/openai/", "stream": True, "chunk_delay_ms": 300,
                           "reset_after_chunks": 3})
    read_first_content_then_close(gw.port, thread)
    row = wait_row(gw, thread)
    assert row["status"] == "client_disconnected", row
    assert "estimated" in row["error"], row
    assert row["usage_estimated"] is True, row
    u = row["usage"]
    body_bytes = len(json.dumps({"model": GPT, "stream": True, "thread_identifier": thread,
                                 "messages": [{"role": "user",
                                               "content": "a long answer please"}]}))
    # A token per 4 bytes of the request body kvgate forwarded (its own fields removed: a little
    # less than the client's body), a token per content event received before the reset.
    assert 0 < u["uncached"] <= (body_bytes + 3) // 4, u
    assert 1 <= u["output"] <= 3, u
    assert row["cost_pico_usd"]["total"] > 0, row
