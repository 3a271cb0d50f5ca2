"""Client errors, upstream failures and disconnects: the right answer, a telemetry record, and a
gateway that keeps serving afterwards."""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid

import openai
import pytest

from gwctl import GATEWAY_KEY

CHAT = "/v1/chat/completions"


def tid(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def assert_openai_error(body, ctx: str):
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), (
        f"{ctx}: not an OpenAI-format error body: {body!r}")
    assert isinstance(body["error"].get("message"), str) and body["error"]["message"], ctx
    assert "type" in body["error"], f"{ctx}: error.type missing: {body}"


def assert_still_serving(gw):
    r = gw.client().chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "still there?"}])
    assert r.choices[0].message.content


def auth_json():
    return {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}


def test_malformed_json_400(gw, sim):
    st, _, body = gw.request("POST", CHAT, body=b'{"model": "gpt-4o-mini", "messages": [',
                             headers=auth_json())
    assert st == 400, (st, body)
    assert_openai_error(body, "malformed JSON")
    st, _, body = gw.request("POST", CHAT, body=b"[1, 2, 3]", headers=auth_json())
    assert st == 400, (st, body)
    assert_openai_error(body, "JSON that is not an object")
    assert not sim.client.requests(), "kvgate forwarded an invalid request upstream"
    assert_still_serving(gw)


def test_unknown_model_404(gw, sim):
    with pytest.raises(openai.NotFoundError) as exc:
        gw.client().chat.completions.create(
            model="no-such-model-xyz", messages=[{"role": "user", "content": "x"}])
    body = exc.value.body
    assert isinstance(body, dict), body
    err = body.get("error", body)
    assert "model_not_found" in json.dumps(err) or "not_found" in json.dumps(err), body
    assert not sim.client.requests()
    assert_still_serving(gw)


def test_missing_model_field(gw, sim):
    st, _, body = gw.request("POST", CHAT, headers=auth_json(), body=json.dumps(
        {"messages": [{"role": "user", "content": "x"}]}))
    assert st in (400, 404), (st, body)
    assert_openai_error(body, "missing model")
    assert not sim.client.requests()


def test_oversized_body_413(gw, sim):
    st, body = gw.post_raw_streaming_body(CHAT, auth_json(), 9 * 1024 * 1024)
    assert st == 413, (st, body[:300])
    assert not sim.client.requests()
    assert_still_serving(gw)


def test_wrong_gateway_key_401(gw, sim):
    with pytest.raises(openai.AuthenticationError):
        gw.client(api_key="sk-wrong").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    st, _, body = gw.request("POST", CHAT, headers={"Content-Type": "application/json"},
                             body=json.dumps({"model": "gpt-4o-mini", "messages": [
                                 {"role": "user", "content": "x"}]}))
    assert st == 401, (st, body)
    assert_openai_error(body, "no key")
    assert not sim.client.requests(), "an unauthenticated request reached the upstream"
    assert_still_serving(gw)


def test_upstream_500_surfaced_and_recorded(gw, sim):
    thread = tid("u500")
    sim.client.add_faults({"path": "/openai/", "status": 500, "count": 0})
    with pytest.raises(openai.APIStatusError) as exc:
        gw.client().chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}],
            extra_body={"thread_identifier": thread})
    assert exc.value.status_code >= 500, exc.value
    sim.client.clear_faults()
    turns = gw.wait_turns(thread, 1)
    t = turns[0]
    assert t["status"] in ("error", "upstream_error"), t
    assert t["http_status"] == exc.value.status_code, t
    assert t["error"], t
    assert exc.value.response.headers.get("x-request-id") == t["request_id"]
    assert_still_serving(gw)


def test_upstream_timeout_504(spawn_kvgate, sim):
    kg = spawn_kvgate("timeout", upstream_timeout_ms=1000)
    gw = kg.gateway()
    thread = tid("timeout")
    sim.client.add_faults({"path": "/openai/", "hang": True, "count": 0})
    t0 = time.monotonic()
    with pytest.raises(openai.APIError) as exc:
        gw.client(timeout=15).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}],
            extra_body={"thread_identifier": thread})
    elapsed = time.monotonic() - t0
    assert isinstance(exc.value, openai.APIStatusError), (
        f"expected an HTTP error answer, got {type(exc.value).__name__}: {exc.value}")
    assert exc.value.status_code == 504, exc.value
    assert elapsed < 8, f"upstream_timeout_ms=1000 but the error came after {elapsed:.1f}s"
    sim.client.clear_faults()
    t = gw.wait_turns(thread, 1)[0]
    assert t["status"] in ("timeout", "upstream_error", "error"), t
    assert t["http_status"] == 504, t
    assert_still_serving(gw)
    assert kg.terminate() == 0, kg.stderr_tail()


def test_upstream_reset_mid_stream(gw, sim):
    thread = tid("reset")
    sim.client.add_faults({"path": "/openai/", "stream": True, "reset_after_chunks": 3})
    stream = gw.client().chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "tell me more"}], stream=True,
        extra_body={"thread_identifier": thread})
    got = []
    with pytest.raises(Exception) as exc:
        for chunk in stream:
            got.append(chunk)
    assert isinstance(exc.value, openai.APIError), (
        f"the SDK should see an error event from kvgate; it raised "
        f"{type(exc.value).__module__}.{type(exc.value).__name__}: {exc.value}")
    t = gw.wait_turns(thread, 1)[0]
    assert t["status"] not in ("ok", None), t
    assert t["stream"] is True
    assert_still_serving(gw)


def test_client_disconnect_mid_stream(gw, sim):
    thread = tid("disconnect")
    sim.client.add_faults({"path": "/openai/", "stream": True, "chunk_delay_ms": 200})
    body = json.dumps({"model": "gpt-4o-mini", "stream": True, "thread_identifier": thread,
                       "messages": [{"role": "user", "content": "a slow answer please"}]})
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    try:
        sock.sendall((f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Authorization: Bearer {GATEWAY_KEY}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        buf = b""
        deadline = time.monotonic() + 10
        while b"data:" not in buf and time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                break
            buf += chunk
        assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
        assert b"data:" in buf, "no SSE event before the disconnect"
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    t = gw.wait_turns(thread, 1, timeout=15, until=lambda ts: ts[0].get("status") not in (None,))[0]
    assert t["status"] == "client_disconnected", t
    assert t["stream"] is True
    assert_still_serving(gw)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_client_that_gives_up_before_the_upstream_answers(gw, sim, stream):
    """The client's timeout passes while the upstream is still working: kvgate notices within a
    sweep, closes the upstream request (nobody will read it; vLLM-like servers stop generating),
    and records the turn then, not when the upstream would have answered."""
    thread = tid("gave-up")
    sim.client.add_faults({"path": "/openai/", "latency_ms": 4000})
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        r = gw.client(timeout=0.5).chat.completions.create(
            model="gpt-4o-mini", stream=stream, extra_body={"thread_identifier": thread},
            messages=[{"role": "user", "content": "an answer I will not wait for"}])
        if stream:
            for _ in r:
                pass
    t = gw.wait_turns(thread, 1, timeout=10)[0]
    recorded_after = time.monotonic() - started
    assert t["status"] == "client_disconnected", t
    assert "closed the upstream request" in (t["error"] or ""), t
    assert t["latency_ms"] < 2500, f"recorded as if it waited for the upstream: {t}"
    assert recorded_after < 3.5, f"recorded {recorded_after:.1f}s after the request"
    sim.client.clear_faults()
    assert_still_serving(gw)
