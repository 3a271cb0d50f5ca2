"""Provider keys echoed by an upstream never leave kvgate (issue 36, item 3).

OpenAI's 401 quotes part of the key it was given ("Incorrect API key provided: sk-abc***xyz"), and
some servers echo it whole. The simulator's "echo_key" fault (tests/sim/provider_sim.py) answers
with the key it received, in every form kvgate promises to recognize (the key itself, "Bearer
<key>", masked echoes, JSON-escaped, URL-encoded, base64 and basic auth), either as an error status
or as an error event in the middle of a stream. Through a real kvgate, for chat, the Responses API,
embeddings, Anthropic Messages (passed through and translated) and count_tokens, streaming and
not, the key appears in no client answer, no line of kvgate's stderr, no byte of the SQLite
database and its WAL, no crash-journal file, and no answer of the read API (/api/requests,
/api/threads); what stands in its place is "[redacted]".

The keys are this module's own (its own simulator and kvgate): an env-expanded OpenAI key with
characters JSON and URLs escape ('/', '+', '='), an Anthropic key, and a DeepSeek provider with two
keys (api_keys), both of which must be redacted.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import urllib.parse
import uuid
from pathlib import Path

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY
from simctl import SimProcess

OPENAI_KEY = "sk-proj-Zq8/wT+e2e=Secret_4f6a9c1b7d3e5f80"  # given to kvgate through ${...}
ANTHROPIC_KEY = "sk-ant-api03-e2eSecret_Kq7Wm2Xp9Rt4Yv6Zb8Nc-AA"
DEEPSEEK_KEYS = ["sk-ds-e2e-first-8c1d7e5f9a3b6d2e", "sk-ds-e2e-second-2b4d6f8a0c1e3a5b"]
ALL_KEYS = [OPENAI_KEY, ANTHROPIC_KEY, *DEEPSEEK_KEYS]
ENV_VAR = "KVGATE_E2E_SECRET_OPENAI_KEY"
MARKER = b"[redacted]"


def leaked_forms(key: str) -> list[bytes]:
    """Byte strings that must appear nowhere: the key's hidden middle (what no masked echo
    shows), the key and each encoded form the simulator echoes, and the masked echoes."""
    b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    forms = [key[8:-4], key, json.dumps(key)[1:-1].replace("/", "\\/"),
             urllib.parse.quote(key, safe=""), b64(key), b64("user:" + key),
             f"{key[:8]}{'*' * 24}{key[-4:]}", f"{key[:5]}...{key[-4:]}"]
    return [f.encode() for f in forms]


def find_leaks(blob: bytes) -> list[str]:
    return [f"{form!r} (of {key[:8]}...)" for key in ALL_KEYS for form in leaked_forms(key)
            if form in blob]


def with_secret_keys(process_class):
    """`process_class` writing this module's config: its keys, its simulator."""
    class WithKeys(process_class):
        def _write_config(self):
            sim = f"http://127.0.0.1:{self.sim_port}"
            ds_keys = ", ".join(f'"{k}"' for k in DEEPSEEK_KEYS)
            self.config_path.write_text(f"""\
server:   {{listen: "127.0.0.1:0", admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: openai, type: openai, base_url: {sim}/openai/v1, api_key: "${{{ENV_VAR}}}"}}
  - {{name: claude, type: anthropic, base_url: {sim}/anthropic, api_key: "{ANTHROPIC_KEY}"}}
  - {{name: ds, type: deepseek, base_url: {sim}/deepseek/v1, api_keys: [{ds_keys}]}}
models:
  - {{name: gpt-4o-mini, provider: openai, upstream_model: gpt-4o-mini}}
  - {{name: text-embedding-3-small, provider: openai, upstream_model: text-embedding-3-small}}
  - {{name: claude-sonnet-4-5, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: deepseek-chat, provider: ds, upstream_model: deepseek-chat}}
""")
    return WithKeys


@pytest.fixture(scope="module")
def secret_sim(tmp_path_factory):
    proc = SimProcess(openai_key=OPENAI_KEY, anthropic_key=ANTHROPIC_KEY,
                      deepseek_key=DEEPSEEK_KEYS[0],
                      log_dir=str(tmp_path_factory.mktemp("secret-sim")))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def secret_kvgate(kvgate_bin, secret_sim, kvgate_process_class, tmp_path_factory):
    os.environ[ENV_VAR] = OPENAI_KEY
    kg = with_secret_keys(kvgate_process_class)(
        kvgate_bin, tmp_path_factory.mktemp("kvgate-secrets"), secret_sim.port)
    try:
        kg.start()
        yield kg
    finally:
        os.environ.pop(ENV_VAR, None)
        kg.kill()


CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello there"}]}
CLAUDE_CHAT = dict(CHAT, model="claude-sonnet-4-5")
RESPONSES = {"model": "gpt-4o-mini", "input": "hello there"}
EMBEDDINGS = {"model": "text-embedding-3-small", "input": "hello there"}
MESSAGES = {"model": "claude-sonnet-4-5", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello there"}]}
MESSAGES_ON_OPENAI = dict(MESSAGES, model="gpt-4o-mini")

# name -> (path, body, stream, fault)
CASES = {
    "chat": ("/v1/chat/completions", CHAT, False, {"status": 401}),
    "chat-400": ("/v1/chat/completions", CHAT, False, {"status": 400}),
    "chat-stream": ("/v1/chat/completions", CHAT, True, {"status": 401}),
    "chat-stream-event": ("/v1/chat/completions", CHAT, True, {"stream_error": True}),
    "chat-claude": ("/v1/chat/completions", CLAUDE_CHAT, False, {"status": 401}),
    "chat-claude-stream-event": ("/v1/chat/completions", CLAUDE_CHAT, True,
                                 {"stream_error": True}),
    "responses": ("/v1/responses", RESPONSES, False, {"status": 401}),
    "responses-stream": ("/v1/responses", RESPONSES, True, {"status": 401}),
    "responses-stream-event": ("/v1/responses", RESPONSES, True, {"stream_error": True}),
    "embeddings": ("/v1/embeddings", EMBEDDINGS, False, {"status": 401}),
    "messages": ("/v1/messages", MESSAGES, False, {"status": 401}),
    "messages-stream": ("/v1/messages", MESSAGES, True, {"status": 401}),
    "messages-stream-event": ("/v1/messages", MESSAGES, True, {"stream_error": True}),
    "messages-on-openai-stream-event": ("/v1/messages", MESSAGES_ON_OPENAI, True,
                                        {"stream_error": True}),
    "count-tokens": ("/v1/messages/count_tokens",
                     {k: v for k, v in MESSAGES.items() if k != "max_tokens"}, False,
                     {"status": 401}),
}


def post(kg, path: str, body: dict, thread: str):
    """Raw POST (the answer's bytes as they came: an SDK would raise on the error or hide the
    stream's error event); returns (status, headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", kg.port, timeout=30)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={
            "Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json",
            "anthropic-version": "2023-06-01", "x-thread-id": thread})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def answers(secret_kvgate, secret_sim):
    """Every case once, each upstream answer echoing the key in every form; then a DeepSeek
    request per key of its multi-key provider. name -> (status, body bytes, request id)."""
    sim = secret_sim.client
    out = {}
    for name, (path, body, stream, fault) in CASES.items():
        sim.clear_faults()
        sim.add_faults({"echo_key": "all", "count": 0, **fault})
        out[name] = post(secret_kvgate, path, dict(body, stream=True) if stream else body,
                         f"t-secret-{name}")
    sim.clear_faults()
    # The DeepSeek provider's two keys: a thread sticks to one, so new threads until both were
    # sent (the echo fault answers before the simulator checks the key).
    sim.add_faults({"provider": "deepseek", "echo_key": "all", "status": 401, "count": 0})
    seen = set()
    for i in range(40):
        sim_before = len(sim.requests())
        name = f"deepseek-{i}"
        out[name] = post(secret_kvgate, "/v1/chat/completions",
                         dict(CHAT, model="deepseek-chat"), f"t-secret-ds-{uuid.uuid4().hex}")
        for r in sim.requests()[sim_before:]:
            seen.add(r["headers"].get("authorization", "")[len("Bearer "):])
        if seen >= set(DEEPSEEK_KEYS):
            break
    sim.clear_faults()
    assert seen >= set(DEEPSEEK_KEYS), f"kvgate sent only {seen} of the DeepSeek keys"
    return {name: (st, hdrs.get("x-request-id", ""), data) for name, (st, hdrs, data) in out.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_client_answer_carries_no_key(answers, secret_sim, name):
    status, request_id, data = answers[name]
    leaks = find_leaks(data)
    assert not leaks, f"{name}: HTTP {status} answer leaks {leaks}: {data[:1500]!r}"
    # The upstream's message reached the client, with the marker where the key was: the echo was
    # relayed (so this test saw the path it means to), only without the key.
    assert MARKER in data, f"{name}: HTTP {status}, no {MARKER!r} in {data[:1500]!r}"
    assert request_id, name


def test_multi_key_provider_answers_carry_no_key(answers):
    ds = {n: a for n, a in answers.items() if n.startswith("deepseek-")}
    assert ds
    for name, (status, _, data) in ds.items():
        assert status == 502, (name, status, data[:500])
        assert not find_leaks(data), (name, find_leaks(data), data[:1500])
        assert MARKER in data, (name, data[:1500])


def admin_get(kg, path: str):
    conn = http.client.HTTPConnection("127.0.0.1", kg.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_no_key_in_read_api_database_journal_or_stderr(answers, secret_kvgate):
    kg = secret_kvgate
    gw = kg.gateway()
    # count_tokens is never recorded (docs/api.md); every other request is, with the upstream's
    # message, the key taken out of it.
    ids = [rid for name, (_, rid, _) in answers.items() if name != "count-tokens"]
    records = [gw.wait_request(rid) for rid in ids]
    for record in records:
        assert not find_leaks(json.dumps(record).encode()), (find_leaks(json.dumps(record).encode()),
                                                             record)
        assert "[redacted]" in (record.get("error") or ""), record

    pages = {}
    for path in ["/api/requests?limit=500", "/api/threads?limit=500", "/api/live",
                 "/api/overview"] + [f"/api/requests/{urllib.parse.quote(rid)}" for rid in ids]:
        pages[path] = admin_get(kg, path)
    status, threads = pages["/api/threads?limit=500"]
    assert status == 200, threads[:500]
    for t in json.loads(threads).get("threads", []):
        tid = t.get("thread_id") or t.get("id")
        if tid:
            path = f"/api/threads/{urllib.parse.quote(tid, safe='')}"
            pages[path] = admin_get(kg, path)
    for path, (status, data) in pages.items():
        assert status == 200, (path, status, data[:300])
        assert not find_leaks(data), (path, find_leaks(data), data[:1500])
    assert MARKER in pages["/api/requests?limit=500"][1]

    def files_on_disk() -> dict[str, bytes]:
        db = Path(kg.db_path)
        found = {p.name: p.read_bytes() for p in db.parent.iterdir()
                 if p.is_file() and p.name.startswith(db.name)}
        assert db.name in found, sorted(found)
        return found

    # While kvgate runs (the WAL and the journal hold the latest records), then after it stopped
    # (checkpointed into the database file).
    running = files_on_disk()
    # (The crash journal, kvgate.db-journal.N, sits beside the database: docs/configuration.md.)
    assert any("-journal" in n for n in running) and any(n.endswith("-wal") for n in running), (
        sorted(running))
    assert kg.terminate() == 0, kg.stderr_tail()
    stopped = files_on_disk()
    for when, files in (("running", running), ("stopped", stopped)):
        for fname, data in files.items():
            assert not find_leaks(data), (when, fname, find_leaks(data))
    assert any(MARKER in data for data in {**running, **stopped}.values()), (
        "no stored error carries the marker: the records were not where this test looked")
    stderr = kg.log_path.read_bytes()
    assert not find_leaks(stderr), (find_leaks(stderr), stderr[-3000:])
