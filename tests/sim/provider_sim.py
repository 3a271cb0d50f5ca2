#!/usr/bin/env python3
"""A deterministic simulator of the OpenAI, Anthropic and DeepSeek HTTP APIs, with their prompt caches.

kvgate's end-to-end tests point kvgate at this server instead of the real providers. It speaks each
provider's wire format (JSON and SSE), applies each provider's prompt-caching rules to a simple
deterministic tokenization, and records the exact usage it returned, so a test can compare kvgate's
telemetry with the ground truth token for token. Only the Python standard library is used. This file is the HTTP server (routing, auth, faults,
control endpoints); sim_core.py holds the tokenization, cache state and reply builders, and
sim_handlers.py the per-provider request handlers.

Run:  python tests/sim/provider_sim.py --port 0 [--openai-key K] [--anthropic-key K] [--deepseek-key K]
It prints ``SIM_PORT=<port>`` on stdout (flushed) before serving. SIGTERM/SIGINT stop it.

Endpoints (all on 127.0.0.1)
----------------------------
  POST /openai/v1/chat/completions, POST /openai/v1/completions, GET /openai/v1/models
  POST /openai/v1/responses (Responses API; stored responses continue by previous_response_id)
  POST /openai/v1/embeddings (encoding_format float or base64; 8 dimensions unless `dimensions`)
  POST /anthropic/v1/messages
  POST /anthropic/v1/messages/count_tokens
  POST /deepseek/v1/chat/completions, GET /deepseek/v1/models
  POST /bedrock/model/{modelId}/converse | converse-stream | invoke | invoke-with-response-stream
       (AWS Bedrock Runtime, SigV4-checked: sim_bedrock.py)
Control (no auth):
  POST /_sim/bedrock_credentials {AKID: SECRET, ...}  the access keys Bedrock's SigV4 accepts
  POST /_sim/clock {"advance_seconds": N}    move simulated time forward (GET shows it)
  POST /_sim/faults [fault, ...]             append faults (also {"faults": [...]} or one object)
  GET  /_sim/faults, DELETE /_sim/faults     list / clear
  GET  /_sim/requests[?limit=N]              last requests received (oldest first): method, path,
                                             headers (names lowercased), body, body_sha256 (of
                                             the exact bytes received), status
  GET  /_sim/usage_log                       {"entries": [...], "by_id": {response_id: entry}}
  POST /_sim/config {"output_tokens": N, "openai_ttl": s, "deepseek_ttl": s, "reasoning_tokens": N,
                     "anthropic_ttl_5m": s, "anthropic_ttl_1h": s, "openai_machines": N,
                     "openai_overflow_rpm": N}  (TTLs: shorter for replays)
  POST /_sim/reset                           clear caches, logs and faults (the clock keeps running)

Tokenization (documented so tests can derive expected numbers)
-------------------------------------------------------------
A token is a whitespace-separated word. Structural tokens are single tokens spelled ``<|...|>``.
* OpenAI/DeepSeek chat: if ``tools`` is present: ``<|tools|>`` + words(json(tools)) + ``<|end|>``.
  Then per message: ``<|role|>`` + words(content) [+ words(json(tool_calls))] + ``<|end|>``
  (2 tokens of overhead per message), then one ``<|assistant|>`` primer. Content given as an array
  of parts counts the words of each text part (other parts: words of their JSON without cache_control).
* OpenAI completions: words(prompt) (a list of prompts is joined).
* OpenAI Responses: ``<|system|>`` + words(instructions) + ``<|end|>`` (this request's only), then
  the stored conversation of ``previous_response_id`` (every earlier turn's input items and its
  output: ``<|assistant|>`` + reply words + ``<|end|>``), then this request's input (a string is
  one user message; each message item is ``<|role|>`` + words of its text parts + ``<|end|>``;
  any other item ``<|item|>`` + words(json) + ``<|end|>``), then one ``<|assistant|>`` primer.
  An unknown ``previous_response_id`` is a 400 ``previous_response_not_found``; ``store: false``
  responses are not kept. ``max_output_tokens`` below the reply length makes it ``incomplete``.
* OpenAI embeddings: words of each input (token arrays: one token per integer); usage
  ``prompt_tokens`` = ``total_tokens`` = their sum.
* Anthropic: the prefix order is tools -> system -> messages. Each tool is one block:
  ``<|tool|>`` + words(json(tool without cache_control)). Each system block: ``<|system|>`` + words(text)
  (a string system is one block). Each message: ``<|role|>`` then each content block's tokens
  (text: words(text); other blocks: words of their JSON without cache_control); then one
  ``<|assistant|>`` primer. Cache breakpoints sit at the end of the block that carries cache_control.
Reply text: deterministic words derived from SHA-256 of the prompt tokens; ``output_tokens`` words
(default 16), capped by max_tokens / max_completion_tokens. Streams split it into pieces of 3 words.
Models named ``o<digit>...`` or ``gpt-5...`` also report ``reasoning_tokens`` (default 8) on top.

Caching rules (simulated time; see /_sim/clock)
-----------------------------------------------
* OpenAI: prompts of >= 1024 tokens are cached automatically (stored whole after the request).
  cached_tokens = largest 1024 + 128k <= the longest common prefix with a live entry of the same
  model (0 below 1024). Entries expire after ``openai_ttl`` (300 s) idle; a hit refreshes the entry.
  usage.prompt_tokens includes cached tokens. The Responses API shares these entries and rules
  (usage.input_tokens includes input_tokens_details.cached_tokens).
  Routing (off unless ``openai_machines`` > 1): each of N machines has its own cache; a request goes
  to the machine a hash of its first 256 tokens and its ``prompt_cache_key`` picks, and once that
  combination has more than ``openai_overflow_rpm`` (15) requests in the last minute, the overflow
  goes round robin to the other machines, as OpenAI's prompt caching guide describes.
* DeepSeek: every prompt of >= 64 tokens is stored; hit = 64 * floor(common prefix / 64);
  prompt_cache_hit_tokens + prompt_cache_miss_tokens = prompt_tokens; idle TTL ``deepseek_ttl``.
* Anthropic: only prefixes ending at a cache_control breakpoint are written (at most 4 breakpoints,
  else 400). A breakpoint whose prefix is shorter than the model's minimum (claude-sonnet-4-5 /
  claude-sonnet-4 / claude-opus-4-1: 1024; claude-haiku-4-5 / claude-opus-4-5: 4096; claude-3-5-haiku:
  2048; others 1024) is silently not written. Read = the longest live cached prefix ending at any
  block boundary at or before the last breakpoint (none without breakpoints). Written = from the read
  point to each later breakpoint that is long enough; the tokens between consecutive written points
  take the TTL of the breakpoint closing them (5m = anthropic_ttl_5m, 300 s; 1h = anthropic_ttl_1h, 3600 s). A read refreshes the entry.
  input_tokens = total - max(read, last written point); total = input + creation + read.

Faults (POST /_sim/faults)
--------------------------
Each fault is an object; optional match keys: "path" (substring of the request path, e.g.
"/openai/"), "provider" ("openai"|"anthropic"|"deepseek"), "stream" (bool), "model", "user" (the
request's end-user id: OpenAI's `user`, Anthropic's metadata.user_id).
"count": how many requests it applies to (default 1; 0 or negative = until cleared). Effects:
  {"status": 500, "body": {...} | "text", "headers": {...}}  error answer (body defaults to the
                                                            provider's error format)
  {"latency_ms": N}            sleep before the headers (combinable with the others)
  {"hang": true}               never answer; the connection is held until the client closes it
  {"reset_after_chunks": N}    stream N SSE events, then abort the socket (RST), no terminal event
  {"malformed_sse": true}      a garbage event in the stream (a truncated JSON body when not streaming)
  {"corrupt_frame": HOW, "at": N}  Bedrock streams: event-stream frame N (default 2) made bad:
                               "prelude" (prelude CRC), "message" (message CRC), "truncate" (cut
                               in half, and nothing after it); the body then ends cleanly
  {"stream_exception": TYPE}   Bedrock streams: after the first frame, an exception frame
                               (:exception-type TYPE, e.g. throttlingException) ends the stream
  {"chunk_delay_ms": N}        sleep before every SSE event
  {"status": 200, "body": {...}}  a 2xx status sends that JSON body as it is, e.g. an error
                               object with 200 (to a streaming request too: application/json)
  {"end_after_chunks": N}      stream N SSE events, then end the body cleanly (terminal chunk), no
                               terminal event
  {"drop_final_event": true}   stream every event but the final one ([DONE]; message_stop for
                               Anthropic), then end the body cleanly
  {"hold_after_final_ms": N}   after the last SSE event keep the body open (no terminal chunk, no
                               close) for N ms, then end it; the hold stops early when the client
                               closes. The request log gets "hold_ended" ("client_closed" |
                               "elapsed") and "held_ms"
  {"gzip": true}               gzip the body and send Content-Encoding: gzip whatever the request's
                               Accept-Encoding says (a stream is compressed event by event, with a
                               sync flush after each)
  {"ignore_stream": true}      answer a streaming request with the non-streaming JSON document
                               (application/json), like a server that ignores "stream": true
  {"response_failed": true}    Responses API only: the response fails after it started (a stream
                               ends with response.failed after response.in_progress; a JSON answer
                               has status "failed" and an error), billing the input, no output
  {"sse_noise": true}          after the first event and before the final one, insert blocks that
                               dispatch nothing (SSE_NOISE: empty data fields, event:/id:/retry:
                               fields without data) and one comment, ": keep-alive"
  {"echo_key": STYLE}          an error whose message gives away the key the request carried
                               (Authorization: Bearer, x-api-key for Anthropic), as some upstreams
                               do. STYLE: "whole" (the key), "masked" (OpenAI's sk-proj-****wxyz
                               and sk-ab...wxyz), "bearer" ("Bearer <key>"), "escaped" (JSON-
                               escaped in the body's bytes, '/' written backslash-slash), "url"
                               (percent-encoded), "base64" (the key, and "user:<key>" as basic
                               auth), or "all" (every one in one message; see echo_key_message in
                               sim_core.py). The answer is an error status ("status", default 401)
                               in the provider's error format, sent before the key is checked.
                               With "stream_error": true instead, a streaming request (its key
                               checked as usual) gets its first event, then the provider's error
                               event carrying that message, with status 200: `data: {"error":
                               ...}` for chat, `event: error` for Anthropic and the Responses API
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import select
import signal
import socket
import struct
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from sim_core import (MAX_LOG, Reply, SimError, SimState, anthropic_error, echo_key_message,
    openai_error, provider_error, stream_error_event, with_escaped_key)
from sim_handlers import (handle_anthropic, handle_anthropic_count_tokens,
    handle_openai_completions, handle_openai_style_chat, models_list, provider_of)
from sim_responses import fail_response, handle_openai_embeddings, handle_openai_responses
import sim_bedrock

# What "sse_noise" inserts: blocks that dispatch no event (WHATWG SSE: an empty data buffer, or no
# data field at all), then a comment.
SSE_NOISE = (b"data:\n\n", b"data: \n\n", b"event: ping\n\n", b"id: 7\n\n", b"retry: 3000\n\n",
             b"event: noise\nid: 8\n\n", b": keep-alive\n\n")


class SimHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "provider-sim/1.0"
    timeout = 300  # idle keep-alive connections are dropped after this
    # A response goes out as a head write and a body write; with Nagle's algorithm the body waits
    # for the client's delayed ACK of the head (about 40 ms per request on a kept-alive
    # connection).
    disable_nagle_algorithm = True

    @property
    def state(self) -> SimState:
        return self.server.state  # type: ignore[attr-defined]

    def log_message(self, fmt, *args):
        if self.server.verbose:  # type: ignore[attr-defined]
            sys.stderr.write("sim: " + (fmt % args) + "\n")

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    # -- plumbing --

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline(16)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def send_json(self, status: int, body, headers: dict | None = None, gzip: bool = False):
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        if gzip:
            c = zlib.compressobj(wbits=31)
            data = c.compress(data) + c.flush()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def abort_connection(self):
        """Closes the socket with RST (SO_LINGER 0): the peer sees a reset, no terminal chunk."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def hold_until_client_closes(self, max_s: float = 300.0):
        self.close_connection = True
        deadline = time.monotonic() + max_s
        sock = self.connection
        while time.monotonic() < deadline and not self.state.shutdown.is_set():
            try:
                r, _, _ = select.select([sock], [], [], 0.1)
                if r and not sock.recv(1, socket.MSG_PEEK):
                    break
            except OSError:
                break
        self.abort_connection()

    def hold_open(self, seconds: float) -> str:
        """Keeps the connection as it is for `seconds`; returns "client_closed" as soon as the
        client closes it, else "elapsed"."""
        deadline = time.monotonic() + seconds
        sock = self.connection
        while not self.state.shutdown.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                r, _, _ = select.select([sock], [], [], min(0.05, left))
                if r:
                    if not sock.recv(1, socket.MSG_PEEK):
                        return "client_closed"
                    time.sleep(min(0.05, max(left, 0)))  # bytes we do not read: no busy loop
            except OSError:
                return "client_closed"
        return "elapsed"

    def stream_events(self, reply: Reply, fault: dict | None, record: dict):
        """Sends reply.events as a chunked SSE body; returns whether every event was sent."""
        fault = fault or {}
        reset_after = fault.get("reset_after_chunks")
        end_after = fault.get("end_after_chunks")
        delay = float(fault.get("chunk_delay_ms", 0)) / 1000
        events = list(reply.events)
        complete = True
        if fault.get("corrupt_frame") and events:
            at = min(int(fault.get("at", 2)), len(events) - 1)
            events[at] = sim_bedrock.corrupt(events[at], fault["corrupt_frame"])
            if fault["corrupt_frame"] == "truncate":
                del events[at + 1:]
        if fault.get("stream_exception") and events:
            events = events[:1] + [sim_bedrock.exception_frame(
                fault["stream_exception"], "Too many requests, please wait before trying again.")]
        if fault.get("drop_final_event") and events:
            events.pop()
        if fault.get("malformed_sse"):
            garbage = (b"event: content_block_delta\ndata: {\"type\": \"content_block_delta\", "
                       b"\"delta\": {\n\n" if provider_of(self.path) == "anthropic" else
                       b"data: {\"id\": \"chatcmpl-broken\", \"choices\": [{\"delta\": \n\n")
            events.insert(min(2, len(events)), garbage + b"this is not an event\n\n")
        if fault.get("sse_noise") and len(events) >= 2:
            events[-1:-1] = SSE_NOISE
            events[1:1] = SSE_NOISE
        gz = zlib.compressobj(wbits=31) if fault.get("gzip") else None
        self.send_response(reply.status)
        headers = dict(reply.headers)
        self.send_header("Content-Type",
                         headers.pop("Content-Type", "text/event-stream; charset=utf-8"))
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if gz:
            self.send_header("Content-Encoding", "gzip")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()

        def write_chunk(data: bytes, last: bool = False) -> bool:
            try:
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                if last:
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return True
            except OSError:
                self.close_connection = True
                return False

        for i, ev in enumerate(events):
            if reset_after is not None and i >= int(reset_after):
                self.abort_connection()
                return False
            if end_after is not None and i >= int(end_after):
                complete = False
                break
            if delay:
                time.sleep(delay)
            if gz:
                ev = gz.compress(ev) + gz.flush(zlib.Z_SYNC_FLUSH)
            if not write_chunk(ev):
                return False
        if gz and not write_chunk(gz.flush()):
            return False
        if fault.get("hold_after_final_ms") is not None:
            t0 = time.monotonic()
            ended = self.hold_open(float(fault["hold_after_final_ms"]) / 1000)
            with self.state.lock:
                record["hold_ended"] = ended
                record["held_ms"] = round((time.monotonic() - t0) * 1000)
            if ended == "client_closed":
                self.close_connection = True
                return complete
        if not write_chunk(b"", last=True):
            return False
        return complete

    # -- dispatch --

    def dispatch(self):
        try:
            raw = self.read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        if path.startswith("/_sim/"):
            return self.control(path, query, raw)
        provider = provider_of(path)
        try:
            body = json.loads(raw) if raw else None
            json_error = False
        except (ValueError, UnicodeDecodeError):
            body, json_error = None, True
        state = self.state
        record = {"time": state.now(), "method": self.command, "path": path,
                  "query": parts.query, "headers": {k.lower(): v for k, v in self.headers.items()},
                  "body": body, "body_bytes": len(raw),
                  "body_sha256": hashlib.sha256(raw).hexdigest(), "json_error": json_error,
                  "status": None, "response_id": None}
        with state.lock:
            state.request_counter += 1
            record["index"] = state.request_counter
            state.requests.append(record)
            if len(state.requests) > MAX_LOG:
                del state.requests[: len(state.requests) - MAX_LOG]
            matched = body
            if provider == "bedrock":  # a Bedrock request streams by its path, names its model there
                model = path.split("/")[3] if path.count("/") >= 4 else None
                matched = dict(body if isinstance(body, dict) else {},
                               stream=path.endswith("-stream"), model=unquote(model or ""))
            fault = state.take_fault(provider or "", path, matched) if provider else None
        gzip = bool(fault and fault.get("gzip"))
        try:
            if fault and fault.get("latency_ms"):
                time.sleep(float(fault["latency_ms"]) / 1000)
            if fault and fault.get("hang"):
                record["status"] = "hang"
                return self.hold_until_client_closes()
            echo = fault.get("echo_key") if fault else None
            if echo and not fault.get("stream_error"):
                st = int(fault.get("status") or 401)
                key = self.credential(provider or "openai")
                err = provider_error(provider or "openai", st, echo_key_message(key, echo))
                record["status"] = st
                return self.send_json(st, with_escaped_key(json.dumps(err.body).encode(), key),
                                      err.headers, gzip=gzip)
            if fault and fault.get("status"):
                st = int(fault["status"])
                b = fault.get("body")
                hdrs = dict(fault.get("headers") or {})
                if b is None:
                    err = (sim_bedrock.error_for_status(st, f"simulated {st} error")
                           if provider == "bedrock" else
                           provider_error(provider or "openai", st, f"simulated {st} error"))
                    b = err.body
                    hdrs = {**err.headers, **hdrs}
                record["status"] = st
                return self.send_json(st, b, hdrs, gzip=gzip)
            if fault and fault.get("reset_after_chunks") is not None and not (
                    isinstance(body, dict) and body.get("stream") is True):
                record["status"] = "reset"
                return self.abort_connection()
            routed = body
            if fault and fault.get("ignore_stream") and isinstance(body, dict):
                routed = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
            if provider == "bedrock":
                reply, entry = sim_bedrock.handle_bedrock(state, self.headers, self.path, raw,
                                                          None if json_error else body)
            else:
                reply, entry = self.route(provider, path, routed, json_error)
        except SimError as e:
            record["status"] = e.status
            return self.send_json(e.status, e.body, e.headers, gzip=gzip)
        if fault and fault.get("response_failed") and path.endswith("/responses"):
            fail_response(reply, entry)
        if echo and fault.get("stream_error") and reply.events:
            key = self.credential(provider)
            error = stream_error_event(provider, path, echo_key_message(key, echo))
            reply.events = reply.events[:1] + [with_escaped_key(error, key)]
        record["status"] = reply.status
        record["response_id"] = reply.response_id
        if entry is not None:
            entry["request_index"] = record["index"]
            entry["time"] = state.now()
            with state.lock:
                state.log_usage(entry)
        if reply.events is None:
            if fault and fault.get("malformed_sse"):
                data = json.dumps(reply.body).encode()
                return self.send_json(reply.status, data[: len(data) // 2], reply.headers,
                                      gzip=gzip)
            return self.send_json(reply.status, reply.body, reply.headers, gzip=gzip)
        complete = self.stream_events(reply, fault, record)
        if entry is not None and not complete:
            with state.lock:
                entry["delivered"] = False

    def credential(self, provider: str) -> str:
        """The key the request carried: x-api-key for Anthropic, else the Bearer token."""
        if provider == "anthropic":
            return self.headers.get("x-api-key") or ""
        auth = self.headers.get("Authorization") or ""
        return auth[7:] if auth.startswith("Bearer ") else ""

    def check_auth(self, provider: str):
        key = self.state.keys.get(provider)
        if provider == "anthropic":
            got = self.headers.get("x-api-key")
            if not got or (key is not None and got != key):
                raise anthropic_error(401, "invalid x-api-key")
            if not self.headers.get("anthropic-version"):
                raise anthropic_error(400, "anthropic-version: header is required")
            return
        auth = self.headers.get("Authorization") or ""
        got = auth[7:] if auth.startswith("Bearer ") else ""
        if not got or (key is not None and got != key):
            if provider == "deepseek":
                raise SimError(401, {"error": {"message": "Authentication Fails (no such user)",
                                               "type": "authentication_error", "param": None,
                                               "code": "invalid_request_error"}})
            shown = (got[:3] + "*" * 4 + got[-4:]) if got else ""
            raise openai_error(401, f"Incorrect API key provided: {shown}. You can find your API "
                                    "key at https://platform.openai.com/account/api-keys.")

    def route(self, provider, path, body, json_error):
        if provider is None:
            raise openai_error(404, f"Invalid URL ({self.command} {path})", code=None)
        self.check_auth(provider)
        method = self.command
        if method == "GET" and path in ("/openai/v1/models", "/deepseek/v1/models"):
            return Reply(200, models_list(provider)), None
        routes = {
            "/openai/v1/chat/completions": lambda b: handle_openai_style_chat(
                self.state, "openai", b, path),
            "/openai/v1/completions": lambda b: handle_openai_completions(self.state, b, path),
            "/openai/v1/responses": lambda b: handle_openai_responses(self.state, b, path),
            "/openai/v1/embeddings": lambda b: handle_openai_embeddings(self.state, b, path),
            "/deepseek/v1/chat/completions": lambda b: handle_openai_style_chat(
                self.state, "deepseek", b, path),
            "/deepseek/chat/completions": lambda b: handle_openai_style_chat(
                self.state, "deepseek", b, path),
            "/anthropic/v1/messages": lambda b: handle_anthropic(self.state, b, path),
            "/anthropic/v1/messages/count_tokens": lambda b: handle_anthropic_count_tokens(
                self.state, b, path),
        }
        fn = routes.get(path)
        if fn is None or method != "POST":
            if provider == "anthropic":
                raise anthropic_error(404, f"Not found: {method} {path}")
            raise openai_error(404, f"Invalid URL ({method} {path})", code=None)
        if json_error or not isinstance(body, dict):
            if provider == "anthropic":
                raise anthropic_error(400, "There was an error parsing the body of your request")
            raise openai_error(400, "We could not parse the JSON body of your request.")
        return fn(body)

    def control(self, path, query, raw):
        state = self.state
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            return self.send_json(400, {"error": "invalid JSON"})
        cmd = self.command
        with state.lock:
            if path == "/_sim/clock":
                if cmd == "POST" and isinstance(payload, dict):
                    if "advance_seconds" in payload:
                        state.clock_offset += float(payload["advance_seconds"])
                    if "set_offset" in payload:
                        state.clock_offset = float(payload["set_offset"])
                out = {"now": state.now(), "offset": state.clock_offset}
            elif path == "/_sim/faults":
                if cmd == "DELETE":
                    state.faults = []
                elif cmd == "POST":
                    if isinstance(payload, dict) and "faults" in payload:
                        payload = payload["faults"]
                    if isinstance(payload, dict):
                        payload = [payload]
                    if not isinstance(payload, list) or not all(isinstance(f, dict)
                                                                for f in payload):
                        return self.send_json(400, {"error": "faults must be objects"})
                    state.faults.extend(copy.deepcopy(payload))
                out = {"faults": copy.deepcopy(state.faults)}
            elif path == "/_sim/requests":
                limit = int(query.get("limit", ["0"])[0] or 0)
                reqs = state.requests[-limit:] if limit > 0 else state.requests
                out = {"requests": copy.deepcopy(reqs)}
            elif path == "/_sim/usage_log":
                entries = copy.deepcopy(state.usage_entries)
                out = {"entries": entries, "by_id": {e["id"]: e for e in entries}}
            elif path == "/_sim/bedrock_credentials":
                if cmd == "POST" and isinstance(payload, dict):
                    state.bedrock_credentials.update({str(k): str(v) for k, v in payload.items()})
                out = {"access_key_ids": sorted(state.bedrock_credentials)}
            elif path == "/_sim/reset" and cmd == "POST":
                state.reset()
                out = {"ok": True}
            elif path == "/_sim/config":
                if cmd == "POST" and isinstance(payload, dict):
                    for k, v in payload.items():
                        if k not in state.config:
                            return self.send_json(400, {"error": f"unknown config key {k}"})
                        state.config[k] = v
                out = dict(state.config)
            else:
                return self.send_json(404, {"error": f"no control endpoint {cmd} {path}"})
        return self.send_json(200, out)


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--openai-key", default=None, help="required Bearer key (default: any)")
    p.add_argument("--anthropic-key", default=None, help="required x-api-key (default: any)")
    p.add_argument("--deepseek-key", default=None, help="required Bearer key (default: any)")
    p.add_argument("--bedrock-key", default=None,
                   help="required Bedrock API key (Bearer; default: any); SigV4 is always checked")
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--reasoning-tokens", type=int, default=8)
    p.add_argument("--openai-ttl", type=float, default=300.0)
    p.add_argument("--deepseek-ttl", type=float, default=300.0)
    p.add_argument("--openai-machines", type=int, default=1,
                   help="OpenAI's cache machines (routing by prefix and prompt_cache_key)")
    p.add_argument("--openai-overflow-rpm", type=int, default=15,
                   help="requests a minute per route before OpenAI's overflow to other machines")
    p.add_argument("--verbose", action="store_true")
    return p


def main(argv=None) -> int:
    args = build_arg_parser().parse_args(argv)
    server = SimServer((args.host, args.port), SimHandler)
    server.state = SimState(args)  # type: ignore[attr-defined]
    server.verbose = args.verbose  # type: ignore[attr-defined]
    print(f"SIM_PORT={server.server_address[1]}", flush=True)

    def stop(*_):
        server.state.shutdown.set()  # type: ignore[attr-defined]
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
