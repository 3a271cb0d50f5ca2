"""kvgate's HTTP strictness and its upstream transport retries, from the outside.

Client side: `Expect: 100-continue` with a bad gateway key is a 401 before kvgate asks for the
body (no `100 Continue`), recorded like every inference request; with a good key the 100 comes and
then the answer. Upstream side: a fake provider on a raw socket that reads a POST on a reused
keep-alive connection and closes without answering gets that POST once, not twice (a provider that
processed it would bill it twice); the failure is a recorded attempt. A keep-alive connection the
provider closed while idle is not written to: the request goes out once, on a new connection."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY

CHAT = "/v1/chat/completions"
ANSWER = json.dumps({
    "id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": "fake-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()


def read_request(sock: socket.socket, carry: bytearray) -> bytes | None:
    """One request (head + Content-Length body) from `sock`; None on EOF."""
    while b"\r\n\r\n" not in carry:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        carry += chunk
    head_end = carry.index(b"\r\n\r\n") + 4
    length = 0
    for line in bytes(carry[:head_end]).split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(carry) < head_end + length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        carry += chunk
    request = bytes(carry[:head_end + length])
    del carry[:head_end + length]
    return request


class FakeProvider:
    """An OpenAI-compatible upstream on a raw socket. Connection 0 answers its first request with
    keep-alive, then, with `drop_next`, reads the next request and closes without answering, or,
    with `close_idle`, closes while idle; every other connection answers every request."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.requests: list[tuple[int, bytes]] = []  # (connection index, request)
        self.connections = 0
        self.first_answered = threading.Event()
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                index = self.connections
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn, index), daemon=True).start()

    def _serve(self, conn: socket.socket, index: int):
        carry = bytearray()
        with conn:
            while True:
                try:
                    request = read_request(conn, carry)
                except OSError:
                    return
                if request is None:
                    return
                with self.lock:
                    self.requests.append((index, request))
                    seen = sum(1 for i, _ in self.requests if i == index)
                if index == 0 and seen == 2 and self.behaviour == "drop_next":
                    return  # read, never answered: the close is all kvgate gets
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(ANSWER)).encode() + b"\r\n\r\n" + ANSWER)
                if index == 0 and seen == 1:
                    self.first_answered.set()
                    if self.behaviour == "close_idle":
                        time.sleep(0.2)
                        return  # keep-alive was promised; the idle connection closes

    def stop(self):
        self.stopping = True
        self.listener.close()


@pytest.fixture
def fake_gateway(kvgate_process_class, kvgate_bin, tmp_path):
    """Starts a FakeProvider with the given behaviour and a kvgate (one event loop, so one
    connection pool) whose only model is on it."""
    started = []

    def start(behaviour: str):
        provider = FakeProvider(behaviour)

        class FakeKvgate(kvgate_process_class):
            def _write_config(self):
                self.config_path.write_text(f"""\
server: {{listen: 127.0.0.1:0, threads: 1, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage: {{sqlite: {self.db_path}}}
providers:
  - {{name: fake, type: openai, base_url: http://127.0.0.1:{self.sim_port}/v1, api_key: sk-fake}}
models:
  - {{name: fake-model, provider: fake, upstream_model: fake-model}}
""")

        kg = FakeKvgate(kvgate_bin, tmp_path / behaviour, provider.port, name=behaviour).start()
        started.append((kg, provider))
        return kg, provider

    yield start
    for kg, provider in started:
        kg.kill()
        provider.stop()


def chat(gw, content: str):
    body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": content}]})
    st, hdrs, answer = gw.request("POST", CHAT, body, {
        "Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
    return st, hdrs.get("x-request-id"), answer


def test_post_read_by_the_upstream_is_not_resent_when_it_closes_without_answering(fake_gateway):
    kg, provider = fake_gateway("drop_next")
    gw = kg.gateway()
    st, _, answer = chat(gw, "first")
    assert st == 200, answer
    st, rid, answer = chat(gw, "second")
    # One upstream request for the second POST, on the pooled connection; no second copy of it.
    assert st == 502, answer
    assert answer["error"]["code"] == "upstream_unavailable", answer
    with provider.lock:
        assert [i for i, _ in provider.requests] == [0, 0], provider.requests
        assert b'"second"' in provider.requests[1][1]
        assert provider.connections == 1
    record = gw.wait_request(rid)
    attempts = record["attempts"]
    assert len(attempts) == 1, attempts
    assert attempts[0]["status"] == "upstream_error", attempts
    assert "before responding" in (attempts[0]["error"] or ""), attempts
    assert record["http_status"] == 502, record


def test_idle_connection_the_upstream_closed_is_not_used(fake_gateway):
    kg, provider = fake_gateway("close_idle")
    gw = kg.gateway()
    st, _, answer = chat(gw, "first")
    assert st == 200, answer
    time.sleep(0.6)  # the provider closes the pooled connection meanwhile
    st, rid, answer = chat(gw, "second")
    assert st == 200, answer
    with provider.lock:
        # The second request went out once, on a new connection.
        assert [i for i, _ in provider.requests] == [0, 1], provider.requests
    record = gw.wait_request(rid)
    assert [a["status"] for a in record["attempts"]] == ["ok"], record["attempts"]


def expect_continue(port: int, key: str, body: bytes) -> bytes:
    """Sends a chat request's head with `Expect: 100-continue`; sends the body only once a
    `100 Continue` came; returns everything kvgate sent until it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall((f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                   f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n"
                   f"Connection: close\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk
        if data.startswith(b"HTTP/1.1 100 "):
            s.sendall(body)
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        return data


def test_expect_continue_is_answered_only_after_the_key_is_checked(fake_gateway):
    kg, provider = fake_gateway("answer")
    body = json.dumps({"model": "fake-model",
                       "messages": [{"role": "user", "content": "hello"}]}).encode()
    refused = expect_continue(kg.port, "sk-wrong", body)
    assert refused.startswith(b"HTTP/1.1 401 "), refused[:300]
    assert b"100 Continue" not in refused, refused[:300]
    head, _, payload = refused.partition(b"\r\n\r\n")
    assert json.loads(payload)["error"]["code"] == "invalid_api_key", payload
    rid = next(line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
               if line.lower().startswith(b"x-request-id:"))
    record = kg.gateway().wait_request(rid)
    assert record["http_status"] == 401 and record["endpoint"] == "chat.completions", record
    with provider.lock:
        assert provider.requests == []

    accepted = expect_continue(kg.port, GATEWAY_KEY, body)
    assert accepted.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 "), accepted[:300]
    assert json.loads(accepted.partition(b"\r\n\r\nHTTP/1.1 200 ")[2].partition(b"\r\n\r\n")[2])[
        "choices"][0]["message"]["content"] == "hi"
