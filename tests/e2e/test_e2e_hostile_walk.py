"""Every route, walked with hostile values: paths, ids and query values that are not UTF-8, over
long or the wrong type, bodies of every wrong JSON type, hostile headers and every method.

One kvgate serves all three provider types through the simulator, the built-in engine, a router,
an alert channel and a monitor, so that each route has something real behind it. No answer may be
a 500 (or any 5xx other than an upstream's 502/503/504), every answer carries an x-request-id,
the process keeps serving, and afterwards every page of the read API still answers."""

from __future__ import annotations

import itertools
import json
import socket
from urllib.parse import quote

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY

# Raw bytes in the request line and headers: http.client would refuse to send most of these.
HOSTILE_IDS = [b"%ff", b"%00", b"%c0%af", b"%ed%a0%80", b"%", b"%zz", b"%2e%2e%2f%2e%2e",
               b"a" * 6000, b"%F0%9F%98%80", b"null", b"-1", b"99999999999999999999999", b"\xff",
               b"x%0d%0aSet-Cookie:%20a=b"]
HOSTILE_VALUES = [b"%ff", b"-1", b"0", b"1e309", b"abc", b"x" * 3000, b"", b"%00", b"[]",
                  b"99999999999999999999999", b"%", b"\xfe", b"2026-13-45T99:99:99Z", b"+01:00"]
QUERY_PARAMS = {
    "/api/threads": ["sort", "order", "model", "q", "since", "until", "limit", "cursor"],
    "/api/requests": ["thread_id", "model", "provider", "status", "since", "until", "limit",
                      "cursor"],
    "/api/overview": ["window"],
    "/api/live": ["thread_id"],
    "/api/alerts": ["limit"],
    "/v1/models": ["after", "limit"],
}
ROUTES = ["/", "/healthz", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions",
          "/api/access", "/api/threads", "/api/requests", "/api/overview", "/api/live",
          "/api/routes", "/api/engine", "/api/engine/lookup", "/api/monitors", "/api/alerts",
          "/api/channels", "/api/channels/hook/test", "/api/keys", "/v1/responses", "/v1/embeddings",
          "/v1/messages", "/v1/messages/count_tokens", "/api/nowhere",
          "/assets/app.js", "/%ff", "//api//threads", "/api/../metrics"]
ID_ROUTES = ["/v1/models/{}", "/api/threads/{}", "/api/requests/{}", "/api/monitors/{}",
             "/api/channels/{}/test", "/api/keys/{}", "/api/keys/{}/rotate", "/assets/{}"]
METHODS = [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"BREW"]
POST_ROUTES = [(b"POST", b"/v1/chat/completions"), (b"POST", b"/v1/completions"),
               (b"POST", b"/v1/responses"), (b"POST", b"/v1/embeddings"),
               (b"POST", b"/v1/messages"), (b"POST", b"/v1/messages/count_tokens"),
               (b"POST", b"/api/engine/lookup"), (b"POST", b"/api/monitors"),
               (b"PUT", b"/api/monitors/1"), (b"POST", b"/api/channels/hook/test"),
               (b"POST", b"/api/keys")]
MESSAGES = [{"role": "user", "content": "hi"}]


def hostile_bodies() -> list[bytes]:
    bodies = [b"", b"not json", b"\xff\xfe\xfd", b"{", b"[" * 20000 + b"]" * 20000, b"{}", b"[]",
              b"5", b'"s"', b"null", b"true", b"1e999999", b'{"model":"gpt-4o-mini"' + b" " * 10,
              "\u00e9".encode("latin-1"), b'{"model":"\xff","messages":[]}',
              b'{"a":1,"a":2}', b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"\\ud800"}]}']
    models = ["gpt-4o-mini", "claude-sonnet-4-5", "deepseek-chat", "smollm2", "kvgate-router", 5,
              None, ["x"], {"x": 1}, "x" * 5000]
    for model in models:
        bodies.append(json.dumps({"model": model, "messages": MESSAGES, "max_tokens": 1}).encode())
    wrong = [5, "s", None, [], {}, [5], [None], [{}], [{"role": 5}], [{"role": "user"}],
             [{"role": "user", "content": 5}], [{"role": "user", "content": [{"type": 5}]}],
             [{"role": "user", "content": [{"type": None}]}],
             [{"role": "user", "content": [{"type": ["text"]}]}],
             [{"role": "user", "content": [{"type": "text", "text": {"x": 1}}]}],
             [{"role": "user", "content": [{"type": "image_url", "image_url": 5}]}],
             [{"role": "nobody", "content": "x"}],
             [{"role": "user", "content": "x", "cache_control": 5}]]
    for model, messages in itertools.product(["gpt-4o-mini", "claude-sonnet-4-5", "smollm2"],
                                             wrong):
        bodies.append(json.dumps({"model": model, "messages": messages, "max_tokens": 1}).encode())
    fields = {"max_tokens": ["x", -1, 1e20, 0, None, [1]], "temperature": ["hot", -5, 1e308],
              "stream": ["yes", 1, None], "stream_options": [5, {"include_usage": "x"}],
              "n": [0, 1000, "2"], "stop": [5, [5], ["x"] * 100], "top_p": ["x", 2],
              "seed": ["x", 1e30], "thread_identifier": [5, "\u0000", "t" * 600, ["t"]],
              "metadata": [5, {"thread_id": 5}, {"thread_id": "\ud800"}],
              "prompt": [5, None, [5], [[1, 2]], ""], "user": [5, {"x": 1}],
              "tools": [5, [{"type": "function"}]], "logit_bias": [{"1": 5}, 5],
              "response_format": [5, {"type": 5}], "logprobs": ["x", True]}
    for model in ("gpt-4o-mini", "claude-sonnet-4-5", "smollm2", "kvgate-router"):
        for field, values in fields.items():
            for value in values:
                body = {"model": model, "messages": MESSAGES, "max_tokens": 1, field: value}
                bodies.append(json.dumps(body).encode())
    # Anthropic Messages shapes (POST /v1/messages translates them for OpenAI and the engine).
    blocks = [[{"type": "tool_use"}], [{"type": "tool_use", "id": 5, "name": "f", "input": 5}],
              [{"type": "tool_result", "tool_use_id": "x", "content": 5}],
              [{"type": "tool_result", "tool_use_id": "x", "content": [{"type": "image"}]}],
              [{"type": "image", "source": 5}], [{"type": "image", "source": {"type": "file"}}],
              [{"type": "document", "source": {}}], [{"type": "thinking"}], [5], [None]]
    messages_fields = {"system": [5, [5], [{"type": "image"}], [{"type": "text", "text": 5}]],
                       "tools": [[{"name": 5}], [{"type": "bash_20250124", "name": "bash"}],
                                 [{"name": "f", "input_schema": 5}]],
                       "tool_choice": [5, {"type": "tool"}, {"type": "nope"}],
                       "stop_sequences": ["x", [5]], "top_k": ["x"],
                       "metadata": [{"user_id": 5}, {"user_id": "u" * 600}]}
    for model in ("gpt-4o-mini", "claude-sonnet-4-5", "smollm2"):
        for role, content in itertools.product(("user", "assistant"), blocks):
            bodies.append(json.dumps({"model": model, "max_tokens": 1, "messages": [
                {"role": role, "content": content}]}).encode())
        for field, values in messages_fields.items():
            for value in values:
                bodies.append(json.dumps({"model": model, "max_tokens": 1, "messages": MESSAGES,
                                          field: value}).encode())
    monitor_like = [{"name": 5}, {"name": "m", "metric": "nope"},
                    {"name": "m", "metric": "cost", "threshold": "x"},
                    {"name": "m", "metric": "cost", "threshold": 1, "window": "forever"},
                    {"name": "\ud800", "metric": "cost", "threshold": 1, "window": "5m"},
                    {"name": "m", "metric": "cost", "threshold": 1e308,
                     "window": "5m", "channels": [5]}]
    bodies += [json.dumps(m).encode() for m in monitor_like]
    return bodies


def exchange(port: int, method: bytes, target: bytes, headers: list[bytes] = (),
             body: bytes = b"", timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """One request on its own connection; returns (status, headers, body)."""
    head = [method + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1",
            b"Connection: close", b"Content-Length: " + str(len(body)).encode()]
    head += list(headers)
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
            if method == b"HEAD" and b"\r\n\r\n" in data:
                break
    assert data, f"no answer at all to {method!r} {target[:200]!r}"
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        hdrs[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return status, hdrs, rest


class Walk:
    """Sends each case and keeps the ones that broke the contract."""

    def __init__(self, port: int):
        self.port = port
        self.sent = 0
        self.failures: list[str] = []

    def send(self, method: bytes, target: bytes, headers: list[bytes] = (), body: bytes = b"",
             admin: bool = True, key: bool = True):
        auth = list(headers)
        if admin and not any(h.lower().startswith(b"authorization") for h in headers):
            auth.append(b"Authorization: Bearer " + (ADMIN_TOKEN if target.startswith(b"/api")
                                                      else GATEWAY_KEY).encode())
        if body:
            auth.append(b"Content-Type: application/json")
        status, hdrs, answer = exchange(self.port, method, target, auth, body)
        self.sent += 1
        case = f"{method.decode()} {target[:120]!r} body={body[:80]!r} -> {status}"
        if status >= 500 and status not in (502, 503, 504):
            self.failures.append(f"{case}: {answer[:300]!r}")
        elif "x-request-id" not in hdrs:
            self.failures.append(f"{case}: no x-request-id")


@pytest.fixture
def walk_gw(kvgate_process_class, kvgate_bin, sim, bundled_model, tmp_path):
    # max_output_tokens_default bounds the engine's answers to bodies whose max_tokens is null
    # (they run to the end of the context otherwise, past the walk's 30 s per case).
    class WalkKvgate(kvgate_process_class):
        def _write_config(self):
            s = f"http://127.0.0.1:{self.sim_port}"
            self.config_path.write_text(f"""\
server: {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage: {{sqlite: {self.db_path}}}
providers:
  - {{name: openai, type: openai, base_url: {s}/openai/v1, api_key: "${{SIM_OPENAI_KEY}}"}}
  - {{name: claude, type: anthropic, base_url: {s}/anthropic, api_key: sk-ant-test}}
  - {{name: ds, type: deepseek, base_url: {s}/deepseek/v1, api_key: sk-ds-test}}
  - {{name: local, type: local, model_path: {bundled_model}, kv_cache_tokens: 2048, threads: 1,
      max_output_tokens_default: 16}}
models:
  - {{name: gpt-4o-mini, provider: openai, upstream_model: gpt-4o-mini}}
  - {{name: claude-sonnet-4-5, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: deepseek-chat, provider: ds, upstream_model: deepseek-chat}}
  - {{name: smollm2, provider: local}}
routers:
  - {{name: kvgate-router, strategy: cost, targets: [{{model: gpt-4o-mini}}, {{model: deepseek-chat}}]}}
alerts:
  channels:
    - {{name: hook, type: webhook, url: "http://127.0.0.1:9/hook", secret: whsec_c2VjcmV0LXNlY3JldA==}}
  monitors:
    - {{name: costly, metric: cost, scope: global, condition: above, threshold: 100, window: 5m,
       channels: [hook]}}
""")

    kg = WalkKvgate(kvgate_bin, tmp_path / "walk", sim.port, name="walk").start(timeout=60)
    yield kg
    assert kg.terminate() == 0, kg.stderr_tail()


def test_no_route_answers_500_to_hostile_input(walk_gw):
    walk = Walk(walk_gw.port)
    # 1. Every route with every method, with and without credentials.
    for route, method in itertools.product(ROUTES, METHODS):
        for admin in (True, False):
            walk.send(method, route.encode(), admin=admin)
    # 2. Hostile ids in every route that takes one.
    for template, raw_id in itertools.product(ID_ROUTES, HOSTILE_IDS):
        target = template.encode().replace(b"{}", raw_id)
        for method in (b"GET", b"POST", b"PUT", b"DELETE"):
            walk.send(method, target, body=b'{"x":1}' if method in (b"POST", b"PUT") else b"")
    # 3. Hostile values for every query parameter, one at a time, and all at once.
    for route, params in QUERY_PARAMS.items():
        for param, value in itertools.product(params, HOSTILE_VALUES):
            walk.send(b"GET", route.encode() + b"?" + param.encode() + b"=" + value)
        for value in HOSTILE_VALUES:
            query = b"&".join(p.encode() + b"=" + value for p in params)
            walk.send(b"GET", route.encode() + b"?" + query + b"&" + query)
        walk.send(b"GET", route.encode() + b"?" + b"&".join([b"limit"] * 2000))
        walk.send(b"GET", route.encode() + b"?%ff=%ff&=&&=x&limit")
    # 4. Hostile bodies to every route that reads one.
    for (method, route), body in itertools.product(POST_ROUTES, hostile_bodies()):
        walk.send(method, route, body=body)
    # 5. Hostile headers on the inference, engine and read routes.
    chat = json.dumps({"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 1}).encode()
    hostile_headers = [b"X-Thread-Id: \xff\xfe", b"X-Thread-Id: " + b"t" * 7000,
                       b"X-Thread-Id: a\x01b", b"Authorization: Bearer \xff",
                       b"Authorization: Basic " + b"A" * 5000, b"Authorization: ",
                       b"Content-Type: text/\xff", b"x-kvgate-route-target: \xff",
                       b"x-kvgate-route-target: nowhere", b"anthropic-version: \xff",
                       b"Accept-Encoding: \xff", b"X-Forwarded-For: \xff",
                       b"traceparent: " + b"0" * 4000, b"Idempotency-Key: \xff",
                       b"Content-Length: 5", b"Transfer-Encoding: chunked", b"Expect: 100-continue"]
    hostile_headers += [b"x-claude-code-session-id: \xff", b"x-claude-code-session-id: " + b"s" * 700,
                        b"anthropic-beta: \x01", b"x-api-key: \xff"]
    for header in hostile_headers:
        for method, route, body in ((b"POST", b"/v1/chat/completions", chat),
                                    (b"POST", b"/v1/messages", chat),
                                    (b"POST", b"/v1/messages/count_tokens", chat),
                                    (b"POST", b"/api/engine/lookup",
                                     b'{"model":"smollm2","prompt":"hi"}'),
                                    (b"GET", b"/api/threads", b""),
                                    (b"GET", b"/v1/models", b"")):
            walk.send(method, route, headers=[header], body=body)
    assert walk_gw.alive, walk_gw.stderr_tail()
    assert not walk.failures, f"{len(walk.failures)} of {walk.sent} cases broke the contract:\n" + \
        "\n".join(walk.failures[:40])
    assert walk.sent > 1500

    # Afterwards, every page of the read API still answers: the walk poisoned nothing.
    gw = walk_gw.gateway()
    for listing, key in (("/api/requests", "requests"), ("/api/threads", "threads")):
        cursor, pages = None, 0
        while True:
            path = f"{listing}?limit=200" + (f"&cursor={cursor}" if cursor else "")
            st, _, page = gw.admin_get(path)
            assert st == 200, (path, st, page)
            pages += 1
            for row in page[key][:5]:
                ident = row.get("request_id") or row.get("thread_id")
                st, _, _ = gw.admin_get(f"{listing}/{quote(ident, safe='')}")
                assert st == 200, (listing, ident, st)
            cursor = page.get("next_cursor")
            if not cursor:
                break
        assert pages >= 1
    st, _, overview = gw.admin_get("/api/overview?window=1h")
    assert st == 200 and overview["totals"]["requests"] > 0
