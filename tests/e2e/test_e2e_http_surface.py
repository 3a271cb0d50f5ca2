"""kvgate's HTTP surface and request translation, pinned down from the outside: path ids are
percent-decoded, routing answers 404/405 (with Allow) and HEAD, every answer carries x-request-id
and the requests the server rejects itself are recorded, the read API validates its parameters and
pages threads by keyset, unknown model names do not become metric series, provider-specific
parameters are translated or refused before anything reaches the upstream, and SIGHUP drains."""

from __future__ import annotations

import gzip
import json
import signal
import socket
import threading
import time
import urllib.parse
import uuid

import openai
import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, PROVIDER_OF_MODEL

CHAT = "/v1/chat/completions"


def new_thread_id(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def auth_json(key: str = GATEWAY_KEY) -> dict:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def admin() -> dict:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def encode_every_byte(s: str) -> str:
    """`s` with every byte percent-encoded ("req_1" -> "%72%65%71%5F%31"): the same path segment
    to a server that decodes, a different one to a server that does not."""
    return "".join(f"%{b:02X}" for b in s.encode())


def assert_error(status, body, want_status: int, ctx: str, code: str | None = None,
                 type_: str | None = "invalid_request_error"):
    """An OpenAI-format error with this HTTP status (and code / type when given)."""
    assert status == want_status, f"{ctx}: HTTP {status} (want {want_status}): {body!r}"
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), (
        f"{ctx}: not an OpenAI-format error body: {body!r}")
    err = body["error"]
    assert isinstance(err.get("message"), str) and err["message"], f"{ctx}: {err}"
    if type_ is not None:
        assert err.get("type") == type_, f"{ctx}: error.type {err.get('type')!r}: {err}"
    if code is not None:
        assert err.get("code") == code, f"{ctx}: error.code {err.get('code')!r}: {err}"
    return err


def raw_http(port: int, data: bytes, timeout: float = 10.0):
    """Sends `data` (one request, which should say `Connection: close`) on a fresh socket and reads
    until the server closes. Returns (status, headers(lowercase), body bytes exactly as sent)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(data)
        buf = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
    finally:
        sock.close()
    assert b"\r\n\r\n" in buf, f"no complete HTTP response head: {buf[:500]!r}"
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


def recorded_request(gw, request_id: str, timeout: float = 10.0) -> dict:
    """The request's stored record, once committed (the list shows it too): gwctl's wait_request."""
    return gw.wait_request(request_id, timeout)


def chat_once(client, thread_id: str, model: str = "gpt-4o-mini", content: str = "hello"):
    """One non-streaming turn; returns its x-request-id."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}],
        extra_body={"thread_identifier": thread_id})
    raw.parse()
    rid = raw.headers.get("x-request-id")
    assert rid, "no x-request-id header"
    return rid


def metric_value(text: str, series: str) -> float:
    """The value of one exact series line in Prometheus text; 0 when the series is absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line[len(series) + 1:])
    return 0.0


def metrics_text(gw) -> str:
    st, _, body = gw.request("GET", "/metrics")
    assert st == 200, (st, body)
    return body.decode() if isinstance(body, bytes) else str(body)


# -- 1. path ids are percent-decoded -------------------------------------------------------------


@pytest.mark.parametrize("base", ["with space", "emoji-😀", "日本語", "q?x=1", "plus+sign", "a/b"])
def test_thread_and_request_ids_in_paths_are_percent_decoded(gw, sim, base):
    """A thread id with spaces, non-ASCII, '?', '+' or '/' is fetched at its percent-encoded path
    (it used to be compared still encoded: 404); so is a request id encoded byte by byte."""
    thread_id = f"{base}-{uuid.uuid4().hex[:6]}"
    rid = chat_once(gw.client(), thread_id)
    gw.wait_turns(thread_id, 1)
    path = f"/api/threads/{urllib.parse.quote(thread_id, safe='')}"
    st, _, body = gw.admin_get(path)
    assert st == 200, f"GET {path} -> {st}: {body!r}"
    assert body["thread_id"] == thread_id
    assert [t["request_id"] for t in body["turns"]] == [rid]
    st, _, body = gw.admin_get(f"/api/requests/{encode_every_byte(rid)}")
    assert st == 200, f"GET /api/requests/<{rid} percent-encoded> -> {st}: {body!r}"
    assert body["request_id"] == rid and body["thread_id"] == thread_id, body


# -- 2. /v1/models -------------------------------------------------------------------------------


def test_models_list_requires_gateway_key(gw):
    """With server.api_keys set, /v1/models is a 401 (invalid_api_key) without the key or with a
    wrong one (it used to list the models to anyone), and 200 with it."""
    for ctx, headers in [("no key", {}), ("wrong key", auth_json("sk-wrong"))]:
        st, _, body = gw.request("GET", "/v1/models", headers=headers)
        assert_error(st, body, 401, f"GET /v1/models, {ctx}", code="invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        gw.client(api_key="sk-wrong").models.list()
    st, _, body = gw.request("GET", "/v1/models", headers=auth_json())
    assert st == 200, (st, body)
    assert set(PROVIDER_OF_MODEL) <= {m["id"] for m in body["data"]}, body


def test_models_retrieve(gw):
    """The SDK's models.retrieve (GET /v1/models/{model}) returns the configured model, owned by
    its provider's name; an unknown model is a 404 model_not_found; it needs the gateway key."""
    client = gw.client()
    for name, provider in PROVIDER_OF_MODEL.items():
        m = client.models.retrieve(name)
        assert (m.id, m.object, m.owned_by) == (name, "model", provider), m
    with pytest.raises(openai.NotFoundError) as exc:
        client.models.retrieve("no-such-model-xyz")
    assert exc.value.code == "model_not_found", exc.value.body
    st, _, body = gw.request("GET", "/v1/models/gpt-4o-mini")
    assert_error(st, body, 401, "GET /v1/models/gpt-4o-mini without a key", code="invalid_api_key")


# -- 3. routing: 404, 405 with Allow, HEAD -------------------------------------------------------


@pytest.mark.parametrize("method,path,headers", [
    ("GET", "/v1/nothing", auth_json()),
    ("POST", "/v1/audio/speech", auth_json()),
    ("GET", "/api/nothing", admin()),
])
def test_unknown_path_404(gw, method, path, headers):
    """A path kvgate does not serve is a 404 not_found (it used to be a 405)."""
    st, hdrs, body = gw.request(method, path, headers=headers,
                                body=b"{}" if method == "POST" else None)
    assert_error(st, body, 404, f"{method} {path}", code="not_found")
    assert "allow" not in hdrs, hdrs


@pytest.mark.parametrize("method,path,headers,allow", [
    ("GET", CHAT, auth_json(), "POST"),
    ("GET", "/v1/responses", auth_json(), "POST"),
    ("DELETE", "/v1/embeddings", auth_json(), "POST"),
    ("POST", "/healthz", {}, "GET, HEAD"),
    ("DELETE", "/api/threads", admin(), "GET, HEAD"),
])
def test_wrong_method_405_with_allow(gw, method, path, headers, allow):
    """A known path with the wrong method is a 405 whose Allow header lists the methods it takes."""
    st, hdrs, body = gw.request(method, path, headers=headers,
                                body=b"{}" if method == "POST" else None)
    assert_error(st, body, 405, f"{method} {path}")
    assert hdrs.get("allow") == allow, f"{method} {path}: Allow {hdrs.get('allow')!r}, {hdrs}"


@pytest.mark.parametrize("path", ["/healthz", "/v1/models"])
def test_head_answers_like_get_without_body(gw, path):
    """HEAD is served for GET routes: 200, no body bytes on the wire, and the Content-Length the GET
    answer has."""
    def request(method):
        return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
                f"Authorization: Bearer {GATEWAY_KEY}\r\nConnection: close\r\n\r\n").encode()

    st, hdrs, body = raw_http(gw.port, request("GET"))
    assert st == 200 and body, (st, body[:300])
    st, head_hdrs, head_body = raw_http(gw.port, request("HEAD"))
    assert st == 200, (st, head_hdrs, head_body[:300])
    assert head_body == b"", f"HEAD {path} sent a body: {head_body[:300]!r}"
    assert head_hdrs.get("content-length") == str(len(body)), (
        f"HEAD {path}: Content-Length {head_hdrs.get('content-length')!r}, GET body {len(body)} "
        f"bytes")


# -- 4. x-request-id everywhere; the server's own 413 is recorded --------------------------------


def test_every_answer_carries_request_id(gw):
    """x-request-id on a normal answer, /healthz, a 404, a 405 and the server's own 431 (request
    head over 16 KB); each a fresh id."""
    answers = {
        "GET /v1/models": gw.request("GET", "/v1/models", headers=auth_json()),
        "GET /healthz": gw.request("GET", "/healthz"),
        "404": gw.request("GET", "/v1/nothing", headers=auth_json()),
        "405": gw.request("GET", CHAT, headers=auth_json()),
        "431": gw.request("GET", "/healthz", headers={"X-Big": "a" * 20_000}),
    }
    assert [a[0] for a in answers.values()] == [200, 200, 404, 405, 431], {
        k: a[0] for k, a in answers.items()}
    ids = {k: a[1].get("x-request-id") for k, a in answers.items()}
    assert all(ids.values()), f"answers without x-request-id: {ids}"
    assert len(set(ids.values())) == len(ids), f"request ids repeat: {ids}"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_server_413_carries_request_id_and_is_recorded(spawn_kvgate, sim, framing):
    """A chat body over server.body_limit_bytes gets the server's own 413 with an x-request-id, and
    is recorded under that id: status error, http_status 413, the X-Thread-Id it carried. Both
    ways of framing the body: a declared Content-Length over the limit, and chunks that pass it."""
    kg = spawn_kvgate("limit", body_limit_bytes=4096)
    gw = kg.gateway()
    thread_id = new_thread_id("toolarge")
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
            f"Authorization: Bearer {GATEWAY_KEY}\r\nContent-Type: application/json\r\n"
            f"X-Thread-Id: {thread_id}\r\nConnection: close\r\n")
    payload = json.dumps({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "x" * 6000}]}).encode()
    if framing == "content-length":
        data = f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload
    else:
        data = (f"{head}Transfer-Encoding: chunked\r\n\r\n{len(payload):x}\r\n".encode() +
                payload + b"\r\n0\r\n\r\n")
    st, hdrs, body = raw_http(gw.port, data)
    assert_error(st, json.loads(body), 413, f"{framing} body over the limit")
    rid = hdrs.get("x-request-id")
    assert rid, f"the 413 has no x-request-id: {hdrs}"
    assert not sim.client.requests(), "an oversized body reached the upstream"
    row = recorded_request(gw, rid)
    got = {k: row.get(k) for k in ("request_id", "http_status", "status", "thread_id")}
    assert got == {"request_id": rid, "http_status": 413, "status": "error",
                   "thread_id": thread_id}, f"recorded 413 ({framing}): {row}"
    st, _, listed = gw.admin_get("/api/requests?status=error&limit=100")
    assert st == 200 and rid in [r["request_id"] for r in listed["requests"]], listed
    assert kg.terminate() == 0, kg.stderr_tail()


# -- 5. absolute-form target ---------------------------------------------------------------------


def test_absolute_form_request_target(gw):
    """`GET http://host:port/healthz` (RFC 9112 absolute-form, what a client sends to a proxy) is
    served like `GET /healthz`."""
    st, hdrs, body = raw_http(gw.port, (
        f"GET http://127.0.0.1:{gw.port}/healthz HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
        f"Connection: close\r\n\r\n").encode())
    assert st == 200, (st, body[:300])
    assert json.loads(body) == {"status": "ok"}
    assert hdrs.get("x-request-id")


# -- 6. compressed request bodies ----------------------------------------------------------------


def test_gzip_body_415_and_recorded(gw, sim):
    """A gzip-encoded chat body is a 415 unsupported_content_encoding (it used to be parsed as JSON:
    a 400 "malformed JSON"), nothing goes upstream, and the request is recorded."""
    body = gzip.compress(json.dumps({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "compressed"}]}).encode())
    st, hdrs, answer = gw.request("POST", CHAT, body=body,
                                  headers={**auth_json(), "Content-Encoding": "gzip"})
    assert_error(st, answer, 415, "gzip body", code="unsupported_content_encoding")
    assert not sim.client.requests(), "a compressed body reached the upstream"
    row = recorded_request(gw, hdrs["x-request-id"])
    assert (row["status"], row["http_status"]) == ("error", 415), row


# -- 7. read API parameter validation ------------------------------------------------------------


@pytest.mark.parametrize("query", ["limit=0", "limit=-1", "limit=abc", "status=bogus"])
def test_read_api_rejects_bad_parameters(gw, query):
    """/api/requests refuses a limit below 1, a non-integer limit and an unknown status with a 400
    invalid_request_error (a limit of 0 or less used to mean "no limit", an unknown status an
    empty list)."""
    st, _, body = gw.admin_get(f"/api/requests?{query}")
    assert_error(st, body, 400, f"/api/requests?{query}")


# -- 8. /api/threads keyset paging ---------------------------------------------------------------


def thread_page(gw, sort: str, order: str, limit: int, cursor: str | None = None):
    q = {"sort": sort, "order": order, "limit": limit}
    if cursor:
        q["cursor"] = cursor
    st, _, body = gw.admin_get("/api/threads?" + urllib.parse.urlencode(q))
    assert st == 200, (q, st, body)
    return body["threads"], body.get("next_cursor")


def all_thread_pages(gw, sort: str, order: str, limit: int) -> list[list[dict]]:
    pages, cursor = [], None
    while True:
        rows, cursor = thread_page(gw, sort, order, limit, cursor)
        pages.append(rows)
        if not cursor:
            return pages
        assert len(pages) < 50, f"sort={sort} order={order}: paging does not end"


def test_threads_keyset_paging_with_concurrent_writes(spawn_kvgate, sim):
    """Paging /api/threads by last_seen while threads start and old ones get new turns: later pages
    continue after the cursor's (last_seen, thread id), so nothing of page 1 comes back (an offset
    cursor showed page-1 threads again once newer threads pushed them down)."""
    kg = spawn_kvgate("paging")
    gw = kg.gateway()
    client = gw.client()
    t = [f"page-t{i}" for i in range(1, 8)]
    for name in t:
        chat_once(client, name, content=f"first turn of {name}")
        gw.wait_turns(name, 1)
    page1, cursor = thread_page(gw, "last_seen", "desc", 3)
    assert [r["thread_id"] for r in page1] == ["page-t7", "page-t6", "page-t5"], page1
    assert cursor
    for name in ("page-new1", "page-new2"):
        chat_once(client, name)
        gw.wait_turns(name, 1)
    chat_once(client, "page-t2", content="a second turn moves t2 to the top")
    gw.wait_turns("page-t2", 2)
    later = []
    while cursor:
        rows, cursor = thread_page(gw, "last_seen", "desc", 3, cursor)
        later.append([r["thread_id"] for r in rows])
        assert len(later) < 10, later
    seen = [r["thread_id"] for r in page1] + [x for page in later for x in page]
    assert len(seen) == len(set(seen)), f"a thread came back on a later page: {later}"
    assert later[0] == ["page-t4", "page-t3", "page-t1"], (
        f"page 2 must continue right after page-t5: {later}")
    assert [x for page in later[1:] for x in page] == [], later
    assert kg.terminate() == 0, kg.stderr_tail()


SORT_KEYS = {"last_seen": "last_seen", "first_seen": "first_seen", "cost": "cost_pico_usd",
             "turns": "turns", "hit_ratio": "hit_ratio"}


def test_threads_every_sort_pages_without_gaps_or_repeats(spawn_kvgate, sim):
    """For every sort and order, paging 3 at a time through a fixed set of 9 threads (with ties:
    equal costs, turn counts and hit ratios) returns each thread exactly once, in sort order."""
    kg = spawn_kvgate("sorts")
    gw = kg.gateway()
    client = gw.client()
    shared = " ".join(f"w{i}" for i in range(150))  # DeepSeek caches it: second turns hit
    names = [f"sort-{i}" for i in range(9)]
    for i, name in enumerate(names):
        model = "deepseek-chat" if i % 3 else "gpt-4o-mini"
        for k in range(1 + i % 3):
            chat_once(client, name, model=model, content=f"{shared} turn {k}")
        gw.wait_turns(name, 1 + i % 3)
    for sort, key in SORT_KEYS.items():
        for order in ("asc", "desc"):
            pages = all_thread_pages(gw, sort, order, 3)
            ctx = f"sort={sort} order={order}"
            assert all(len(p) <= 3 for p in pages), f"{ctx}: page over the limit: {pages}"
            ids = [r["thread_id"] for p in pages for r in p]
            assert len(ids) == len(set(ids)), f"{ctx}: repeated threads: {ids}"
            assert sorted(ids) == sorted(names), f"{ctx}: got {ids}"
            values = [r[key] for p in pages for r in p]
            assert values == sorted(values, reverse=order == "desc"), f"{ctx}: {key} {values}"
    assert kg.terminate() == 0, kg.stderr_tail()


# -- 9. thread summary keeps unknown counts unknown ----------------------------------------------


def test_deepseek_thread_summary_reasoning_is_null(gw, sim):
    """DeepSeek reports no reasoning count, so each turn's reasoning is null, and so is the thread
    summary's (it used to sum the unknowns to 0); output is still summed."""
    thread_id = new_thread_id("ds-summary")
    client = gw.client()
    for i in range(2):
        chat_once(client, thread_id, model="deepseek-chat", content=f"question {i}")
    turns = gw.wait_turns(thread_id, 2)
    assert [t["usage"]["reasoning"] for t in turns] == [None, None], turns
    st, body = gw.thread(thread_id)
    assert st == 200, body
    tokens = body["summary"]["tokens"]
    assert "reasoning" in tokens and tokens["reasoning"] is None, tokens
    assert isinstance(tokens["output"], int)
    assert tokens["output"] == sum(t["usage"]["output"] for t in turns), (tokens, turns)


# -- 10. a non-streaming client that gives up ----------------------------------------------------


def test_non_streaming_client_timeout_recorded_client_disconnected(gw, sim):
    """A non-streaming client that times out before the (slow) upstream answers is recorded as
    client_disconnected once the upstream finishes (it used to be recorded ok)."""
    thread_id = new_thread_id("gaveup")
    sim.client.add_faults({"path": "/openai/", "latency_ms": 2000})
    t0 = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        gw.client(timeout=0.5, max_retries=0).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "slow answer"}],
            extra_body={"thread_identifier": thread_id})
    assert time.monotonic() - t0 < 1.9, "the SDK's 0.5 s timeout did not fire before the upstream"
    t = gw.wait_turns(thread_id, 1, timeout=15)[0]
    assert t["status"] == "client_disconnected", t
    assert t["stream"] is False


# -- 11. /metrics label cardinality --------------------------------------------------------------


def test_unknown_models_do_not_become_metric_series(spawn_kvgate, sim):
    """Requests for model names kvgate does not serve (404) are counted under model="" and
    provider="": client-chosen names must not create series."""
    kg = spawn_kvgate("cardinality")
    gw = kg.gateway()
    series = 'kvgate_requests_total{model="",target="",provider="",status="error"}'
    before = metric_value(metrics_text(gw), series)
    names = [f"made-up-model-{uuid.uuid4().hex[:8]}" for _ in range(20)]
    client = gw.client()
    for name in names:
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}])
    assert not sim.client.requests()
    text = metrics_text(gw)
    leaked = [n for n in names if n in text]
    assert not leaked, f"{len(leaked)} unknown model names became series, e.g. {leaked[:3]}"
    assert metric_value(text, series) == before + 20, (
        "\n".join(l for l in text.splitlines() if l.startswith("kvgate_requests_total")))
    assert kg.terminate() == 0, kg.stderr_tail()


# -- 12. DeepSeek: max_completion_tokens ---------------------------------------------------------


def test_deepseek_gets_max_tokens_for_max_completion_tokens(gw, sim):
    """DeepSeek does not know max_completion_tokens: kvgate sends its value as max_tokens."""
    r = gw.client().chat.completions.create(
        model="deepseek-chat", messages=[{"role": "user", "content": "short please"}],
        max_completion_tokens=4)
    assert r.choices[0].message.content
    assert r.usage.completion_tokens == 4, r.usage
    reqs = [q for q in sim.client.requests() if q["path"].endswith("/chat/completions")]
    assert len(reqs) == 1, reqs
    body = reqs[0]["body"]
    assert body.get("max_tokens") == 4 and "max_completion_tokens" not in body, body
    assert reqs[0]["status"] == 200, reqs[0]


# -- 13. Anthropic translation -------------------------------------------------------------------


def anthropic_sse(*events: dict) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def test_anthropic_streamed_tool_call_without_arguments(gw, sim):
    """A streamed Anthropic tool_use with input {} and no input_json_delta reaches the client as a
    tool call whose arguments accumulate to "{}" (they used to stay "")."""
    # The simulator makes no tool calls of its own: a fault answers with this Anthropic stream.
    stream = anthropic_sse(
        {"type": "message_start", "message": {
            "id": "msg_tool", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": "toolu_empty", "name": "get_time", "input": {}}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 6}},
        {"type": "message_stop"})
    sim.client.add_faults({"path": "/anthropic/", "status": 200, "body": stream,
                           "headers": {"Content-Type": "text/event-stream"}})
    chunks = list(gw.client().chat.completions.create(
        model="claude-sonnet-4-5", messages=[{"role": "user", "content": "what time is it?"}],
        stream=True, tools=[{"type": "function", "function": {
            "name": "get_time", "parameters": {"type": "object", "properties": {}}}}]))
    calls: dict[int, dict] = {}
    finish = None
    for c in chunks:
        for ch in c.choices:
            finish = ch.finish_reason or finish
            for tc in ch.delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                if tc.function:
                    call["name"] += tc.function.name or ""
                    call["arguments"] += tc.function.arguments or ""
    assert calls == {0: {"id": "toolu_empty", "name": "get_time", "arguments": "{}"}}, calls
    assert finish == "tool_calls", finish


def test_anthropic_all_empty_messages_400_from_kvgate(gw, sim):
    """Messages whose contents are all empty are refused by kvgate with its own 400 (it used to
    forward a request with no messages and relay Anthropic's 'messages: Field required')."""
    with pytest.raises(openai.BadRequestError) as exc:
        gw.client().chat.completions.create(
            model="claude-sonnet-4-5", messages=[{"role": "user", "content": ""}])
    message = exc.value.body["message"]
    assert message.startswith("messages: no message with content"), exc.value.body
    assert not sim.client.requests(), "the request reached the simulator"


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5"])
def test_stream_options_without_stream_is_a_400_like_openai(gw, sim, model):
    """OpenAI (and vLLM) refuse stream_options on a request that does not stream; kvgate answers
    the same for every upstream instead of silently dropping it."""
    thread = new_thread_id("stream-options")
    with pytest.raises(openai.BadRequestError) as exc:
        gw.client().chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}],
            stream_options={"include_usage": True}, extra_body={"thread_identifier": thread})
    assert exc.value.body["param"] == "stream_options", exc.value.body
    assert "only allowed when 'stream' is enabled" in exc.value.body["message"]
    assert not sim.client.requests(), "the request reached the simulator"
    turn = gw.wait_turns(thread, 1)[0]
    assert turn["status"] == "error" and turn["http_status"] == 400, turn


@pytest.mark.parametrize("param", ["logprobs", "response_format", "temperature"])
def test_anthropic_refuses_unsupported_parameters(gw, sim, param):
    """Parameters Anthropic cannot honour are a 400 from kvgate, not silently dropped (logprobs,
    a json_schema response_format) or passed on (a non-numeric temperature)."""
    kwargs = {
        "logprobs": {"logprobs": True},
        "response_format": {"response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object"}}}},
        "temperature": {"extra_body": {"temperature": "hot"}},
    }[param]
    with pytest.raises(openai.BadRequestError) as exc:
        gw.client().chat.completions.create(
            model="claude-sonnet-4-5", messages=[{"role": "user", "content": "hi"}], **kwargs)
    message = exc.value.body["message"]
    assert param in message, exc.value.body
    if param == "logprobs":
        assert message == "'logprobs' is not supported by Anthropic providers", message
    assert not sim.client.requests(), "the request reached the simulator"


# -- 14. the built-in engine ---------------------------------------------------------------------


def test_local_engine_overlong_prompt_is_context_length_exceeded(local_gw):
    """A prompt longer than the model's 8192-token context is OpenAI's 400: code
    context_length_exceeded, param "messages" (what clients look for to trim history)."""
    with pytest.raises(openai.BadRequestError) as exc:
        local_gw.client(timeout=60).chat.completions.create(
            model="smollm2", max_tokens=4,
            messages=[{"role": "user", "content": "hello " * 10_000}])
    assert exc.value.code == "context_length_exceeded", exc.value.body
    assert exc.value.param == "messages", exc.value.body


# -- 15. SIGHUP ----------------------------------------------------------------------------------


def test_sighup_drains_in_flight_request(spawn_kvgate, sim):
    """SIGHUP (a closed terminal) drains like SIGTERM: the request in flight completes, kvgate
    exits 0, and the request is in the store (SIGHUP used to kill the process outright)."""
    kg = spawn_kvgate("hup")
    thread_id = new_thread_id("hup")
    sim.client.add_faults({"path": "/openai/", "latency_ms": 1000})
    result: dict = {}

    def call():
        try:
            result["rid"] = chat_once(kg.gateway().client(), thread_id, content="in flight")
        except Exception as e:  # reported by the assertion below
            result["error"] = f"{type(e).__name__}: {e}"

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    assert sim.client.wait_for(lambda: sim.client.requests()), "the request never reached the sim"
    kg.proc.send_signal(signal.SIGHUP)
    worker.join(20)
    assert not worker.is_alive(), "the in-flight request did not finish after SIGHUP"
    assert "rid" in result, f"the in-flight request failed after SIGHUP: {result.get('error')}"
    rc = kg.proc.wait(40)
    assert rc == 0, f"kvgate exited with {rc} after SIGHUP:\n{kg.stderr_tail()}"
    again = spawn_kvgate("hup-restart", db_path=kg.db_path)
    st, body = again.gateway().thread(thread_id)
    assert st == 200, (st, body)
    assert [t["request_id"] for t in body["turns"]] == [result["rid"]], body
    assert again.terminate() == 0, again.stderr_tail()


def test_local_engine_refuses_what_it_cannot_honour(local_gw):
    """A prompt plus an explicit max_tokens over the context is context_length_exceeded (a
    "length" finish would otherwise come before max_tokens); penalties outside OpenAI's [-2, 2],
    suffix and best_of > 1 are 400s, not silently applied or ignored."""
    client = local_gw.client(timeout=60, max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="smollm2", max_tokens=1000,
                                       messages=[{"role": "user", "content": "hello " * 7500}])
    assert exc.value.code == "context_length_exceeded", exc.value.body
    assert "in the completion" in exc.value.body["message"], exc.value.body
    for extra in ({"frequency_penalty": 2.5}, {"presence_penalty": -3}):
        with pytest.raises(openai.BadRequestError) as exc:
            client.chat.completions.create(model="smollm2", max_tokens=2,
                                           messages=[{"role": "user", "content": "hi"}], **extra)
        assert "between -2 and 2" in exc.value.body["message"], exc.value.body
    for extra in ({"suffix": "tail"}, {"best_of": 3}):
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="smollm2", prompt="Hi", max_tokens=2, **extra)

