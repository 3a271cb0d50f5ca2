"""Talking to a running kvgate: the OpenAI SDK client, the admin read API, raw HTTP, and the
expected telemetry (normalized usage and exact cost) derived from the simulator's usage log."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import subprocess
import threading
import select
import socket
import time
import urllib.parse
import uuid

import openai

GATEWAY_KEY = "sk-gw-test"
ADMIN_TOKEN = "test-admin"

# Built-in catalog rates in micro-USD per 1M tokens (telemetry/catalog.json): cost in pico-USD is exactly
# tokens x rate.
RATES = {
    "gpt-4o-mini": {"input": 150_000, "cached": 75_000, "w5m": 0, "w1h": 0, "output": 600_000},
    "claude-sonnet-4-5": {"input": 3_000_000, "cached": 300_000, "w5m": 3_750_000,
                          "w1h": 6_000_000, "output": 15_000_000},
    "deepseek-chat": {"input": 280_000, "cached": 28_000, "w5m": 0, "w1h": 0, "output": 420_000},
}
PROVIDER_OF_MODEL = {"gpt-4o-mini": "openai", "claude-sonnet-4-5": "claude",
                     "deepseek-chat": "ds"}
SIM_KIND_OF_MODEL = {"gpt-4o-mini": "openai", "claude-sonnet-4-5": "anthropic",
                     "deepseek-chat": "deepseek"}


# OpenAI's caching rule with a 1 s idle TTL, so a real gap of a second or two is one kvgate can
# see (it judges idle time on its own clock). Set the simulator's TTL to match.
ONE_SECOND_OPENAI_TTL = ("pricing:\n  caching_rules:\n    openai: {min_cacheable_tokens: 1024, "
                         "granularity_tokens: 128, ttl_seconds: 1}\n")


def with_config_tail(process_class, tail: str):
    """`process_class` with `tail` (YAML for top-level keys its config does not write) appended
    to the config it writes."""
    class WithTail(process_class):
        def _write_config(self):
            super()._write_config()
            with open(self.config_path, "a") as f:
                f.write(tail)
    return WithTail


class ChatLoad:
    """Clients that send chat completions (every other one streamed) on keep-alive connections
    until stopped, client n to ports[n % len(ports)] in thread f"{prefix}-{n}". A request counts
    as answered only once its client read the whole body; a client whose gateway is gone keeps
    trying to reconnect."""

    def __init__(self, ports: list[int], clients: int, prefix: str):
        self.ports, self.prefix = ports, prefix
        self.answered: dict[str, bool] = {}  # request id -> streamed
        self.sent = 0  # requests written to a gateway
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(n,), daemon=True)
                         for n in range(clients)]

    def start(self) -> "ChatLoad":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> dict[str, bool]:
        self._stop.set()
        for t in self._threads:
            t.join(15)
        with self._lock:
            return dict(self.answered)

    def stored_ids(self, gw) -> list[str]:
        """The request ids `gw`'s store holds for these clients' threads, every page."""
        rows = []
        for n in range(len(self._threads)):
            cursor = ""
            while True:
                page = gw.admin_get(f"/api/requests?thread_id={self.prefix}-{n}&limit=1000"
                                    f"&cursor={cursor}")[2]
                rows += page["requests"]
                cursor = page["next_cursor"]
                if not cursor:
                    break
        return [r["request_id"] for r in rows]

    def _client(self, n: int):
        port = self.ports[n % len(self.ports)]
        conn = None
        i = 0
        while not self._stop.is_set():
            stream = (n + i) % 2 == 1
            i += 1
            body = json.dumps({"model": "gpt-4o-mini", "stream": stream,
                               "thread_identifier": f"{self.prefix}-{n}",
                               "messages": [{"role": "user", "content": f"q {uuid.uuid4().hex}"}]})
            try:
                conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("POST", "/v1/chat/completions", body=body, headers={
                    "Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
                with self._lock:
                    self.sent += 1
                resp = conn.getresponse()
                data = resp.read()  # the whole body: only then has the client seen the answer
                rid = resp.getheader("x-request-id")
                complete = resp.status == 200 and (not stream or data.endswith(b"data: [DONE]\n\n"))
                if complete and rid:
                    with self._lock:
                        self.answered[rid] = stream
            except (OSError, http.client.HTTPException):
                conn = None  # the process is gone
                time.sleep(0.01)


class Gateway:
    def __init__(self, port: int):
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def client(self, api_key: str = GATEWAY_KEY, **kw) -> openai.OpenAI:
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 20.0)
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, **kw)

    # -- raw HTTP --

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict | None = None, timeout: float = 20.0):
        """Returns (status, headers(lowercase), parsed JSON or raw bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            try:
                parsed = json.loads(data) if data else None
            except ValueError:
                parsed = data
            return resp.status, hdrs, parsed
        finally:
            conn.close()

    def admin(self, method: str, path: str, body=None):
        """An admin API call with the admin token and `body` as JSON: (status, headers, body)."""
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return self.request(method, path, body=None if body is None else json.dumps(body),
                            headers=headers)

    def admin_get(self, path: str, token: str | None = ADMIN_TOKEN):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.request("GET", path, headers=headers)

    def thread(self, thread_id: str):
        st, _, body = self.admin_get(f"/api/threads/{urllib.parse.quote(thread_id, safe='')}")
        return st, body

    def wait_turns(self, thread_id: str, n: int, timeout: float = 10.0,
                   until=None) -> list[dict]:
        """Polls /api/threads/{id} until it has n turns (telemetry is written asynchronously) and
        `until(turns)` holds; returns the turns sorted by created_at."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            st, body = self.thread(thread_id)
            last = (st, body)
            if st == 200 and isinstance(body, dict):
                turns = body.get("turns") or []
                if len(turns) >= n and (until is None or until(turns)):
                    return sorted(turns, key=lambda t: (t.get("created_at") or 0))
            if time.monotonic() > deadline:
                raise AssertionError(f"thread {thread_id}: expected {n} turns within {timeout}s, "
                                     f"last answer {last[0]}: {json.dumps(last[1])[:3000]}")
            time.sleep(0.05)

    def wait_request(self, request_id: str, timeout: float = 10.0) -> dict:
        """Polls /api/requests/{id} until the request is stored (committed: the list, the
        threads and the overview show it too; /api/requests/{id} answers from the moment the
        response is complete); returns its record."""
        deadline = time.monotonic() + timeout
        while True:
            st, _, body = self.admin_get(f"/api/requests/{urllib.parse.quote(request_id)}")
            if st == 200:
                at = urllib.parse.quote(body["created_at"])
                _, _, listed = self.admin_get(f"/api/requests?since={at}&until={at}&limit=1000")
                if any(r["request_id"] == body["request_id"]
                       for r in (listed or {}).get("requests", [])):
                    return body
            if time.monotonic() > deadline:
                raise AssertionError(f"request {request_id} not stored within {timeout}s: "
                                     f"{st} {body!r:.2000}")
            time.sleep(0.05)

    def post_raw_streaming_body(self, path: str, headers: dict, body_len: int,
                                timeout: float = 20.0):
        """Sends a large body in pieces, stopping as soon as the server answers (a server may
        answer 413 and close before reading it all). Returns (status, body bytes)."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            for k, v in {**headers, "Content-Length": str(body_len)}.items():
                head += f"{k}: {v}\r\n"
            sock.sendall((head + "\r\n").encode())
            piece = b"[" + b" " * 65534 + b"]"
            sent = 0
            deadline = time.monotonic() + timeout
            while sent < body_len and time.monotonic() < deadline:
                r, _, _ = select.select([sock], [], [], 0)
                if r:
                    break
                n = min(len(piece), body_len - sent)
                try:
                    sock.sendall(piece[:n])
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += n
            data = b""
            while time.monotonic() < deadline:
                try:
                    chunk = sock.recv(65536)
                except (ConnectionResetError, socket.timeout):
                    break
                if not chunk:
                    break
                data += chunk
                if b"\r\n\r\n" in data:
                    head_part, _, rest = data.partition(b"\r\n\r\n")
                    m = [l for l in head_part.split(b"\r\n") if l.lower().startswith(
                        b"content-length:")]
                    if m and len(rest) >= int(m[0].split(b":")[1]):
                        break
            if not data:
                raise AssertionError("no HTTP response to an oversized body (connection closed "
                                     "or reset without a status line)")
            status = int(data.split(b" ", 2)[1])
            return status, data.partition(b"\r\n\r\n")[2]
        finally:
            sock.close()


def normalized_from_sim(kind: str, u: dict) -> dict:
    """The normalized usage docs/providers.md prescribes for one simulator usage object."""
    if kind == "openai":
        read = u["prompt_tokens_details"]["cached_tokens"]
        return {"cache_read": read, "cache_write_5m": 0, "cache_write_1h": 0,
                "cache_write_no_ttl": 0, "uncached": u["prompt_tokens"] - read, "output": u["completion_tokens"],
                "reasoning": u["completion_tokens_details"]["reasoning_tokens"]}
    if kind == "deepseek":
        return {"cache_read": u["prompt_cache_hit_tokens"], "cache_write_5m": 0,
                "cache_write_1h": 0, "cache_write_no_ttl": 0,
                "uncached": u["prompt_cache_miss_tokens"],
                "output": u["completion_tokens"], "reasoning": None}
    if kind == "anthropic":
        cc = u["cache_creation"]
        return {"cache_read": u["cache_read_input_tokens"],
                "cache_write_5m": cc["ephemeral_5m_input_tokens"],
                "cache_write_1h": cc["ephemeral_1h_input_tokens"], "cache_write_no_ttl": 0,
                "uncached": u["input_tokens"], "output": u["output_tokens"], "reasoning": None}
    raise ValueError(kind)


def expected_cost_pico(model: str, n: dict, diagnosis: dict | None = None) -> dict:
    """`diagnosis`: the turn's cache_diagnosis; a miss costs its missed tokens at the input rate
    instead of the cached rate (nothing for below_minimum: no cache could have held them)."""
    r = RATES[model]
    missed = 0
    if diagnosis and diagnosis["cause"] != "below_minimum":
        missed = max(0, diagnosis["expected_cached"] - diagnosis["cached"]) * (r["input"] - r["cached"])
    cache_read = n["cache_read"] * r["cached"]
    cache_write = n["cache_write_5m"] * r["w5m"] + n["cache_write_1h"] * r["w1h"]
    uncached = n["uncached"] * r["input"]
    output = n["output"] * r["output"]
    no_cache = (n["cache_read"] + n["cache_write_5m"] + n["cache_write_1h"] + n["uncached"]) * \
        r["input"]
    return {"total": cache_read + cache_write + uncached + output, "cache_read": cache_read,
            "cache_write": cache_write, "uncached": uncached, "output": output,
            "saved": no_cache - (cache_read + cache_write + uncached),
            "missed": missed}


def sdk_usage_expected(kind: str, n: dict) -> dict:
    """What an OpenAI-format usage object from kvgate must say for these normalized counts:
    prompt_tokens includes every input token (cached ones too)."""
    prompt = n["cache_read"] + n["cache_write_5m"] + n["cache_write_1h"] + n["uncached"]
    return {"prompt_tokens": prompt, "completion_tokens": n["output"],
            "total_tokens": prompt + n["output"], "cached_tokens": n["cache_read"]}


@contextlib.contextmanager
def kvgate_engine(kvgate_bin, tmp_path, model_path, *extra_args: str):
    """`kvgate engine` on the model, on a port it picks (read from its stderr, which is kept in
    tmp_path/engine.stderr.log): yields an OpenAI client for it, and stops it afterwards."""
    log = open(tmp_path / "engine.stderr.log", "wb")
    proc = subprocess.Popen([str(kvgate_bin), "engine", "--model", str(model_path), "--port", "0",
                             "--kv-cache-tokens", "4096", "--db", str(tmp_path / "e.db"),
                             *extra_args],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.PIPE)
    port = []
    found = threading.Event()

    def pump():
        for line in iter(proc.stderr.readline, b""):
            log.write(line)
            log.flush()
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line)
            if m and not port:
                port.append(int(m.group(1)))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert found.wait(60) and port, (tmp_path / "engine.stderr.log").read_text()
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port[0]}/v1", api_key="none",
                            timeout=300, max_retries=0)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
        time.sleep(0.1)
        log.close()
