#!/usr/bin/env python3
"""A deterministic simulator of the OpenAI, Anthropic and DeepSeek HTTP APIs, with their prompt caches.

kvgate's end-to-end tests point kvgate at this server instead of the real providers. It speaks each
provider's wire format (JSON and SSE), applies each provider's prompt-caching rules to a simple
deterministic tokenization, and records the exact usage it returned, so a test can compare kvgate's
telemetry with the ground truth token for token. Only the Python standard library is used.

Run:  python tests/sim/provider_sim.py --port 0 [--openai-key K] [--anthropic-key K] [--deepseek-key K]
It prints ``SIM_PORT=<port>`` on stdout (flushed) before serving. SIGTERM/SIGINT stop it.

Endpoints (all on 127.0.0.1)
----------------------------
  POST /openai/v1/chat/completions, POST /openai/v1/completions, GET /openai/v1/models
  POST /anthropic/v1/messages
  POST /deepseek/v1/chat/completions, GET /deepseek/v1/models
Control (no auth):
  POST /_sim/clock {"advance_seconds": N}    move simulated time forward (GET shows it)
  POST /_sim/faults [fault, ...]             append faults (also {"faults": [...]} or one object)
  GET  /_sim/faults, DELETE /_sim/faults     list / clear
  GET  /_sim/requests[?limit=N]              last requests received (oldest first)
  GET  /_sim/usage_log                       {"entries": [...], "by_id": {response_id: entry}}
  POST /_sim/config {"output_tokens": N, "openai_ttl": s, "deepseek_ttl": s, "reasoning_tokens": N}
  POST /_sim/reset                           clear caches, logs and faults (the clock keeps running)

Tokenization (documented so tests can derive expected numbers)
-------------------------------------------------------------
A token is a whitespace-separated word. Structural tokens are single tokens spelled ``<|...|>``.
* OpenAI/DeepSeek chat: if ``tools`` is present: ``<|tools|>`` + words(json(tools)) + ``<|end|>``.
  Then per message: ``<|role|>`` + words(content) [+ words(json(tool_calls))] + ``<|end|>``
  (2 tokens of overhead per message), then one ``<|assistant|>`` primer. Content given as an array
  of parts counts the words of each text part (other parts: words of their JSON without cache_control).
* OpenAI completions: words(prompt) (a list of prompts is joined).
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
  usage.prompt_tokens includes cached tokens.
* DeepSeek: every prompt of >= 64 tokens is stored; hit = 64 * floor(common prefix / 64);
  prompt_cache_hit_tokens + prompt_cache_miss_tokens = prompt_tokens; idle TTL ``deepseek_ttl``.
* Anthropic: only prefixes ending at a cache_control breakpoint are written (at most 4 breakpoints,
  else 400). A breakpoint whose prefix is shorter than the model's minimum (claude-sonnet-4-5 /
  claude-sonnet-4 / claude-opus-4-1: 1024; claude-haiku-4-5 / claude-opus-4-5: 4096; claude-3-5-haiku:
  2048; others 1024) is silently not written. Read = the longest live cached prefix ending at any
  block boundary at or before the last breakpoint (none without breakpoints). Written = from the read
  point to each later breakpoint that is long enough; the tokens between consecutive written points
  take the TTL of the breakpoint closing them (5m = 300 s, 1h = 3600 s). A read refreshes the entry.
  input_tokens = total - max(read, last written point); total = input + creation + read.

Faults (POST /_sim/faults)
--------------------------
Each fault is an object; optional match keys: "path" (substring of the request path, e.g.
"/openai/"), "provider" ("openai"|"anthropic"|"deepseek"), "stream" (bool), "model".
"count": how many requests it applies to (default 1; 0 or negative = until cleared). Effects:
  {"status": 500, "body": {...} | "text", "headers": {...}}  error answer (body defaults to the
                                                            provider's error format)
  {"latency_ms": N}            sleep before the headers (combinable with the others)
  {"hang": true}               never answer; the connection is held until the client closes it
  {"reset_after_chunks": N}    stream N SSE events, then abort the socket (RST), no terminal event
  {"malformed_sse": true}      a garbage event in the stream (a truncated JSON body when not streaming)
  {"chunk_delay_ms": N}        sleep before every SSE event
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

OPENAI_MIN_CACHE = 1024
OPENAI_STEP = 128
DEEPSEEK_UNIT = 64
ANTHROPIC_TTLS = {"5m": 300.0, "1h": 3600.0}
ANTHROPIC_MAX_BREAKPOINTS = 4
ANTHROPIC_MIN_CACHEABLE = [  # (model name prefix, minimum tokens); first match wins
    ("claude-haiku-4-5", 4096),
    ("claude-opus-4-5", 4096),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
    ("claude-sonnet-4-5", 1024),
    ("claude-sonnet-4", 1024),
    ("claude-opus-4", 1024),
]
ANTHROPIC_DEFAULT_MIN = 1024
MAX_LOG = 2000
STREAM_PIECE_WORDS = 3

OPENAI_CHAT_FIELDS = {
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "n", "stop", "seed", "tools", "tool_choice", "response_format", "user",
    "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "frequency_penalty",
    "presence_penalty", "logit_bias", "logprobs", "top_logprobs", "parallel_tool_calls", "metadata",
    "store", "service_tier", "reasoning_effort", "modalities", "audio", "prediction", "functions",
    "function_call", "web_search_options", "verbosity",
}
OPENAI_COMPLETION_FIELDS = {
    "model", "prompt", "max_tokens", "stream", "stream_options", "echo", "suffix", "temperature",
    "top_p", "n", "stop", "logprobs", "seed", "user", "best_of", "frequency_penalty",
    "presence_penalty", "logit_bias",
}
DEEPSEEK_CHAT_FIELDS = {
    "model", "messages", "stream", "stream_options", "max_tokens", "temperature", "top_p", "stop",
    "tools", "tool_choice", "response_format", "frequency_penalty", "presence_penalty", "logprobs",
    "top_logprobs", "thinking",
}
ANTHROPIC_FIELDS = {
    "model", "messages", "max_tokens", "system", "stream", "stop_sequences", "temperature", "top_p",
    "top_k", "tools", "tool_choice", "metadata", "thinking", "service_tier", "container",
    "mcp_servers",
}
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}

VOCAB = (
    "the cache holds a prefix of tokens that the model has already seen so a later request "
    "sharing that prefix reads it back cheaply while new tokens are written at full price and "
    "every turn of a thread extends the conversation by one user message and one reply"
).split()


# ---------------------------------------------------------------------------------------------
# Errors


class SimError(Exception):
    """An HTTP error answer: status, JSON body, extra headers."""

    def __init__(self, status: int, body, headers: dict | None = None):
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body
        self.headers = headers or {}


OPENAI_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", None),
    404: ("invalid_request_error", "model_not_found"),
    408: ("server_error", None),
    413: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", None),
    504: ("server_error", None),
}
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
    529: "overloaded_error",
}


def openai_error(status: int, message: str, param=None, code=None, etype=None) -> SimError:
    dtype, dcode = OPENAI_ERROR_TYPES.get(status, ("server_error" if status >= 500 else
                                                   "invalid_request_error", None))
    body = {"error": {"message": message, "type": etype or dtype, "param": param,
                      "code": code if code is not None else dcode}}
    headers = {"retry-after": "1"} if status == 429 else {}
    return SimError(status, body, headers)


def anthropic_error(status: int, message: str) -> SimError:
    etype = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else
                                      "invalid_request_error")
    body = {"type": "error", "error": {"type": etype, "message": message}}
    headers = {"retry-after": "1"} if status == 429 else {}
    return SimError(status, body, headers)


def provider_error(provider: str, status: int, message: str) -> SimError:
    if provider == "anthropic":
        return anthropic_error(status, message)
    return openai_error(status, message)


# ---------------------------------------------------------------------------------------------
# Tokenization


def words(text) -> list[str]:
    if text is None:
        return []
    if not isinstance(text, str):
        text = json.dumps(text, sort_keys=True)
    return text.split()


def strip_cache_control(obj):
    if isinstance(obj, dict):
        return {k: strip_cache_control(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [strip_cache_control(v) for v in obj]
    return obj


def openai_content_tokens(content) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return words(content)
    if isinstance(content, list):
        out: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out += words(part.get("text", ""))
            elif isinstance(part, str):
                out += words(part)
            else:
                out += words(json.dumps(strip_cache_control(part), sort_keys=True))
        return out
    return words(json.dumps(content, sort_keys=True))


def flatten_openai_chat(body: dict) -> list[str]:
    toks: list[str] = []
    if body.get("tools"):
        toks += ["<|tools|>"] + words(json.dumps(strip_cache_control(body["tools"]),
                                                 sort_keys=True)) + ["<|end|>"]
    for m in body["messages"]:
        toks.append(f"<|{m.get('role')}|>")
        toks += openai_content_tokens(m.get("content"))
        if m.get("tool_calls"):
            toks += words(json.dumps(m["tool_calls"], sort_keys=True))
        toks.append("<|end|>")
    toks.append("<|assistant|>")
    return toks


def flatten_completion_prompt(prompt) -> list[str]:
    if isinstance(prompt, list):
        return [t for p in prompt for t in words(p if isinstance(p, str) else json.dumps(p))]
    return words(prompt)


def anthropic_block_tokens(block) -> list[str]:
    if isinstance(block, dict) and block.get("type") == "text":
        return words(block.get("text", ""))
    return words(json.dumps(strip_cache_control(block), sort_keys=True))


def flatten_anthropic(body: dict):
    """Returns (tokens, boundaries, breakpoints): boundaries are the token positions at the end of
    each block; breakpoints a list of (position, ttl) for blocks with cache_control."""
    toks: list[str] = []
    boundaries: list[int] = []
    breakpoints: list[tuple[int, str]] = []

    def add_block(tokens: list[str], block):
        toks.extend(tokens)
        boundaries.append(len(toks))
        cc = block.get("cache_control") if isinstance(block, dict) else None
        if cc is not None:
            breakpoints.append((len(toks), cc.get("ttl", "5m")))

    for tool in body.get("tools") or []:
        add_block(["<|tool|>"] + words(json.dumps(strip_cache_control(tool), sort_keys=True)), tool)
    system = body.get("system")
    if isinstance(system, str):
        if system:
            add_block(["<|system|>"] + words(system), None)
    elif isinstance(system, list):
        for block in system:
            add_block(["<|system|>"] + anthropic_block_tokens(block), block)
    for m in body["messages"]:
        toks.append(f"<|{m.get('role')}|>")
        content = m.get("content")
        if isinstance(content, str):
            add_block(words(content), None)
        else:
            for block in content:
                add_block(anthropic_block_tokens(block), block)
    toks.append("<|assistant|>")
    return toks, boundaries, breakpoints


def anthropic_min_cacheable(model: str) -> int:
    for prefix, n in ANTHROPIC_MIN_CACHEABLE:
        if model.startswith(prefix):
            return n
    return ANTHROPIC_DEFAULT_MIN


def common_prefix_len(a, b) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # largest m with a[:m] == b[:m]; slice comparison runs in C
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def reply_words(tokens: list[str], n: int) -> list[str]:
    seed = hashlib.sha256("\x1f".join(tokens).encode()).digest()
    out: list[str] = []
    counter = 0
    while len(out) < n:
        h = hashlib.sha256(seed + counter.to_bytes(4, "big")).digest()
        out += [VOCAB[b % len(VOCAB)] for b in h]
        counter += 1
    return out[:n]


def is_reasoning_model(model: str) -> bool:
    return bool(re.match(r"^(o\d|gpt-5)", model))


# ---------------------------------------------------------------------------------------------
# State


class SimState:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.keys = {"openai": args.openai_key, "anthropic": args.anthropic_key,
                     "deepseek": args.deepseek_key}
        self.config = {"output_tokens": args.output_tokens, "openai_ttl": args.openai_ttl,
                       "deepseek_ttl": args.deepseek_ttl, "reasoning_tokens": args.reasoning_tokens}
        self.clock_offset = 0.0
        self.shutdown = threading.Event()
        self.reset()

    def reset(self):
        self.prefix_caches: dict[tuple[str, str], list[list]] = {}  # (provider, model) -> [[toks, last]]
        self.anthropic_cache: dict[tuple, list] = {}  # (model, tokens) -> [expires_at, ttl_s]
        self.requests: list[dict] = []
        self.request_counter = 0
        self.usage_entries: list[dict] = []
        self.faults: list[dict] = []

    def now(self) -> float:
        return time.time() + self.clock_offset

    # Called with the lock held.
    def prefix_cache_lookup_store(self, provider: str, model: str, tokens: list[str]) -> int:
        now = self.now()
        if provider == "openai":
            ttl, min_len = self.config["openai_ttl"], OPENAI_MIN_CACHE
        else:
            ttl, min_len = self.config["deepseek_ttl"], DEEPSEEK_UNIT
        if len(tokens) < min_len:
            return 0
        entries = [e for e in self.prefix_caches.get((provider, model), []) if now - e[1] < ttl]
        best, best_entry = 0, None
        tup = tuple(tokens)
        for e in entries:
            n = common_prefix_len(e[0], tup)
            if n > best:
                best, best_entry = n, e
        if provider == "openai":
            cached = 0 if best < OPENAI_MIN_CACHE else (
                OPENAI_MIN_CACHE + OPENAI_STEP * ((best - OPENAI_MIN_CACHE) // OPENAI_STEP))
        else:
            cached = DEEPSEEK_UNIT * (best // DEEPSEEK_UNIT)
        if cached > 0 and best_entry is not None:
            best_entry[1] = now
        same = [e for e in entries if e[0] == tup]
        if same:
            same[0][1] = now
        else:
            entries.append([tup, now])
        if len(entries) > 512:
            entries.sort(key=lambda e: e[1])
            entries = entries[-512:]
        self.prefix_caches[(provider, model)] = entries
        return cached

    # Called with the lock held. Returns (read, w5m, w1h, input_tokens).
    def anthropic_cache_apply(self, model: str, tokens, boundaries, breakpoints):
        now = self.now()
        total = len(tokens)
        if not breakpoints:
            return 0, 0, 0, total
        for key in [k for k, v in self.anthropic_cache.items() if v[0] <= now]:
            del self.anthropic_cache[key]
        last_bp = max(p for p, _ in breakpoints)
        read = 0
        for pos in sorted({b for b in boundaries if b <= last_bp}, reverse=True):
            entry = self.anthropic_cache.get((model, tuple(tokens[:pos])))
            if entry is not None:
                read = pos
                entry[0] = now + entry[1]
                break
        min_len = anthropic_min_cacheable(model)
        w = {"5m": 0, "1h": 0}
        point = read
        for pos, ttl in sorted(breakpoints):
            if pos <= point or pos < min_len:
                continue
            w[ttl] += pos - point
            point = pos
            ttl_s = ANTHROPIC_TTLS[ttl]
            self.anthropic_cache[(model, tuple(tokens[:pos]))] = [now + ttl_s, ttl_s]
        return read, w["5m"], w["1h"], total - point

    def log_usage(self, entry: dict):
        self.usage_entries.append(entry)
        if len(self.usage_entries) > MAX_LOG:
            del self.usage_entries[: len(self.usage_entries) - MAX_LOG]

    def take_fault(self, provider: str, path: str, body) -> dict | None:
        stream = bool(body.get("stream")) if isinstance(body, dict) else False
        model = body.get("model") if isinstance(body, dict) else None
        for f in self.faults:
            if "path" in f and f["path"] not in path:
                continue
            if "provider" in f and f["provider"] != provider:
                continue
            if "stream" in f and bool(f["stream"]) != stream:
                continue
            if "model" in f and f["model"] != model:
                continue
            count = int(f.get("count", 1))
            if count > 0:
                if count == 1:
                    self.faults.remove(f)
                else:
                    f["count"] = count - 1
            f["_applied"] = f.get("_applied", 0) + 1
            return dict(f)
        return None


# ---------------------------------------------------------------------------------------------
# Responses


class Reply:
    """What a provider handler produces: a JSON body or a list of SSE events."""

    def __init__(self, status=200, body=None, events=None, headers=None, response_id=None):
        self.status = status
        self.body = body
        self.events = events
        self.headers = headers or {}
        self.response_id = response_id


def sse(data, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


def split_pieces(ws: list[str]) -> list[str]:
    pieces = []
    for i in range(0, len(ws), STREAM_PIECE_WORDS):
        text = " ".join(ws[i:i + STREAM_PIECE_WORDS])
        pieces.append(text if i == 0 else " " + text)
    return pieces


def check_fields(body: dict, allowed: set[str], provider: str):
    unknown = sorted(k for k in body if k not in allowed)
    if not unknown:
        return
    if provider == "anthropic":
        raise anthropic_error(400, f"{unknown[0]}: Extra inputs are not permitted")
    raise openai_error(400, f"Unrecognized request argument supplied: {unknown[0]}",
                       param=unknown[0], code="unknown_parameter")


def output_budget(state: SimState, body: dict, keys) -> tuple[int, bool]:
    n = int(state.config["output_tokens"])
    for k in keys:
        v = body.get(k)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SimError(400, None)  # replaced by the caller with the provider's format
            if v < n:
                return v, True
            return n, False
    return n, False


def openai_usage(prompt: int, cached: int, completion: int, reasoning: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion + reasoning,
        "total_tokens": prompt + completion + reasoning,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }


def deepseek_usage(prompt: int, hit: int, completion: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": hit},
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": prompt - hit,
    }


def handle_openai_style_chat(state: SimState, provider: str, body: dict, path: str) -> Reply:
    check_fields(body, OPENAI_CHAT_FIELDS if provider == "openai" else DEEPSEEK_CHAT_FIELDS,
                 provider)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise openai_error(400, "you must provide a model parameter", param="model")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise openai_error(400, "'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in OPENAI_ROLES:
            raise openai_error(400, f"Invalid value for 'messages[{i}].role'",
                               param=f"messages[{i}].role")
    stream = body.get("stream") is True
    so = body.get("stream_options")
    if so is not None and not stream:
        raise openai_error(400, "The 'stream_options' parameter is only allowed when 'stream' "
                                "is enabled.", param="stream_options")
    include_usage = stream and isinstance(so, dict) and so.get("include_usage") is True
    try:
        n_out, capped = output_budget(state, body, ("max_completion_tokens", "max_tokens"))
    except SimError:
        raise openai_error(400, "max_tokens must be a positive integer", param="max_tokens")
    tokens = flatten_openai_chat(body)
    reasoning = int(state.config["reasoning_tokens"]) if (
        provider == "openai" and is_reasoning_model(model)) else 0
    with state.lock:
        cached = state.prefix_cache_lookup_store(provider, model, tokens)
        created = int(state.now())
    text_words = reply_words(tokens, n_out)
    if provider == "openai":
        usage = openai_usage(len(tokens), cached, len(text_words), reasoning)
        rid = "chatcmpl-" + uuid.uuid4().hex[:24]
    else:
        usage = deepseek_usage(len(tokens), cached, len(text_words))
        rid = str(uuid.uuid4())
    finish = "length" if capped else "stop"
    fingerprint = "fp_sim0001" if provider == "openai" else "fp_ds_sim01"
    headers = {"x-request-id": "req_" + uuid.uuid4().hex}
    if provider == "openai":
        headers["openai-processing-ms"] = "1"
    entry = {"id": rid, "provider": provider, "path": path, "model": model, "stream": stream,
             "usage": usage, "delivered": True, "prompt_tokens": len(tokens)}
    if not stream:
        reply_body = {
            "id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0,
                         "message": {"role": "assistant", "content": " ".join(text_words),
                                     "refusal": None, "annotations": []},
                         "logprobs": None, "finish_reason": finish}],
            "usage": usage, "system_fingerprint": fingerprint,
        }
        if provider == "openai":
            reply_body["service_tier"] = "default"
        return Reply(200, reply_body, headers=headers, response_id=rid), entry

    def chunk(choices, usage_value=None, with_usage_key=include_usage):
        c = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
             "system_fingerprint": fingerprint, "choices": choices}
        if with_usage_key:
            c["usage"] = usage_value
        return c

    events = [sse(chunk([{"index": 0, "delta": {"role": "assistant", "content": "",
                                                 "refusal": None},
                          "logprobs": None, "finish_reason": None}]))]
    for piece in split_pieces(text_words):
        events.append(sse(chunk([{"index": 0, "delta": {"content": piece}, "logprobs": None,
                                  "finish_reason": None}])))
    events.append(sse(chunk([{"index": 0, "delta": {}, "logprobs": None,
                              "finish_reason": finish}])))
    if include_usage:
        events.append(sse(chunk([], usage)))
    events.append(sse("[DONE]"))
    return Reply(200, events=events, headers=headers, response_id=rid), entry


def handle_openai_completions(state: SimState, body: dict, path: str) -> Reply:
    check_fields(body, OPENAI_COMPLETION_FIELDS, "openai")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise openai_error(400, "you must provide a model parameter", param="model")
    if "prompt" not in body:
        raise openai_error(400, "prompt is required", param="prompt")
    stream = body.get("stream") is True
    so = body.get("stream_options")
    if so is not None and not stream:
        raise openai_error(400, "The 'stream_options' parameter is only allowed when 'stream' "
                                "is enabled.", param="stream_options")
    include_usage = stream and isinstance(so, dict) and so.get("include_usage") is True
    try:
        n_out, capped = output_budget(state, body, ("max_tokens",))
    except SimError:
        raise openai_error(400, "max_tokens must be a positive integer", param="max_tokens")
    tokens = flatten_completion_prompt(body["prompt"])
    with state.lock:
        cached = state.prefix_cache_lookup_store("openai", model, tokens)
        created = int(state.now())
    text_words = reply_words(tokens, n_out)
    usage = openai_usage(len(tokens), cached, len(text_words), 0)
    rid = "cmpl-" + uuid.uuid4().hex[:24]
    finish = "length" if capped else "stop"
    headers = {"x-request-id": "req_" + uuid.uuid4().hex, "openai-processing-ms": "1"}
    entry = {"id": rid, "provider": "openai", "path": path, "model": model, "stream": stream,
             "usage": usage, "delivered": True, "prompt_tokens": len(tokens)}
    if not stream:
        return Reply(200, {
            "id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"text": " ".join(text_words), "index": 0, "logprobs": None,
                         "finish_reason": finish}],
            "usage": usage, "system_fingerprint": "fp_sim0001"},
            headers=headers, response_id=rid), entry

    def chunk(choices, usage_value=None):
        c = {"id": rid, "object": "text_completion", "created": created, "model": model,
             "system_fingerprint": "fp_sim0001", "choices": choices}
        if include_usage:
            c["usage"] = usage_value
        return c

    events = [sse(chunk([{"text": p, "index": 0, "logprobs": None, "finish_reason": None}]))
              for p in split_pieces(text_words)]
    events.append(sse(chunk([{"text": "", "index": 0, "logprobs": None,
                              "finish_reason": finish}])))
    if include_usage:
        events.append(sse(chunk([], usage)))
    events.append(sse("[DONE]"))
    return Reply(200, events=events, headers=headers, response_id=rid), entry


def validate_anthropic(body: dict):
    check_fields(body, ANTHROPIC_FIELDS, "anthropic")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise anthropic_error(400, "model: Field required")
    if "max_tokens" not in body:
        raise anthropic_error(400, "max_tokens: Field required")
    mt = body["max_tokens"]
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        raise anthropic_error(400, "max_tokens: Input should be a valid positive integer")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise anthropic_error(400, "messages: Field required")
    md = body.get("metadata")
    if md is not None:
        if not isinstance(md, dict):
            raise anthropic_error(400, "metadata: Input should be a valid dictionary")
        for k in md:
            if k != "user_id":
                raise anthropic_error(400, f"metadata.{k}: Extra inputs are not permitted")
    blocks = []
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise anthropic_error(400, "tools: Input should be a valid list")
        blocks += tools
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list):
            raise anthropic_error(400, "system: Input should be a valid string or list")
        for i, b in enumerate(system):
            if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(
                    b.get("text"), str):
                raise anthropic_error(400, f"system.{i}: Input should be a text block")
        blocks += system
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise anthropic_error(400, f"messages.{i}: Input should be a valid dictionary")
        if m.get("role") not in ("user", "assistant"):
            raise anthropic_error(400, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = m.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise anthropic_error(400, f"messages.{i}.content: Input should be a valid list")
        for j, b in enumerate(content):
            if not isinstance(b, dict) or "type" not in b:
                raise anthropic_error(400, f"messages.{i}.content.{j}: Input should be a block")
            if b["type"] == "text" and not isinstance(b.get("text"), str):
                raise anthropic_error(400, f"messages.{i}.content.{j}.text: Field required")
        blocks += content
    n_bp = 0
    for b in blocks:
        cc = b.get("cache_control") if isinstance(b, dict) else None
        if cc is None:
            continue
        if not isinstance(cc, dict) or cc.get("type") != "ephemeral":
            raise anthropic_error(400, "cache_control.type: Input should be 'ephemeral'")
        if cc.get("ttl", "5m") not in ANTHROPIC_TTLS:
            raise anthropic_error(400, "cache_control.ttl: Input should be '5m' or '1h'")
        extra = set(cc) - {"type", "ttl"}
        if extra:
            raise anthropic_error(400, f"cache_control.{sorted(extra)[0]}: Extra inputs are not "
                                       "permitted")
        n_bp += 1
    if n_bp > ANTHROPIC_MAX_BREAKPOINTS:
        raise anthropic_error(400, f"A maximum of {ANTHROPIC_MAX_BREAKPOINTS} blocks with "
                                   f"cache_control may be provided. Found {n_bp}.")


def handle_anthropic(state: SimState, body: dict, path: str) -> Reply:
    validate_anthropic(body)
    model = body["model"]
    stream = body.get("stream") is True
    n_out = int(state.config["output_tokens"])
    capped = body["max_tokens"] < n_out
    n_out = min(n_out, body["max_tokens"])
    tokens, boundaries, breakpoints = flatten_anthropic(body)
    with state.lock:
        read, w5m, w1h, input_tokens = state.anthropic_cache_apply(model, tokens, boundaries,
                                                                   breakpoints)
    text_words = reply_words(tokens, n_out)
    usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": w5m + w1h,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": w5m, "ephemeral_1h_input_tokens": w1h},
        "output_tokens": len(text_words),
        "service_tier": "standard",
    }
    rid = "msg_" + uuid.uuid4().hex[:24]
    stop = "max_tokens" if capped else "end_turn"
    headers = {"request-id": "req_" + uuid.uuid4().hex[:24],
               "anthropic-organization-id": "sim-org"}
    entry = {"id": rid, "provider": "anthropic", "path": path, "model": model, "stream": stream,
             "usage": usage, "delivered": True, "prompt_tokens": len(tokens)}
    if not stream:
        return Reply(200, {
            "id": rid, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": " ".join(text_words)}],
            "stop_reason": stop, "stop_sequence": None, "usage": usage},
            headers=headers, response_id=rid), entry
    start_usage = dict(usage, output_tokens=1)
    events = [sse({"type": "message_start", "message": {
        "id": rid, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage}}, "message_start"),
        sse({"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}}, "content_block_start"),
        sse({"type": "ping"}, "ping")]
    for piece in split_pieces(text_words):
        events.append(sse({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": piece}},
                          "content_block_delta"))
    events.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    # Like the live API, message_delta repeats the cumulative input/cache counts: a consumer that
    # sums usage across events double-counts.
    events.append(sse({"type": "message_delta",
                       "delta": {"stop_reason": stop, "stop_sequence": None},
                       "usage": {"input_tokens": input_tokens,
                                 "cache_creation_input_tokens": w5m + w1h,
                                 "cache_read_input_tokens": read,
                                 "output_tokens": len(text_words)}}, "message_delta"))
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return Reply(200, events=events, headers=headers, response_id=rid), entry


def models_list(provider: str) -> dict:
    names = {"openai": ["gpt-4o-mini", "gpt-4o", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "o4-mini"],
             "deepseek": ["deepseek-chat", "deepseek-reasoner"]}[provider]
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 1700000000,
                                        "owned_by": provider} for n in names]}


# ---------------------------------------------------------------------------------------------
# HTTP


def provider_of(path: str) -> str | None:
    for p in ("openai", "anthropic", "deepseek"):
        if path.startswith(f"/{p}/"):
            return p
    return None


class SimHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "provider-sim/1.0"
    timeout = 300  # idle keep-alive connections are dropped after this

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

    def send_json(self, status: int, body, headers: dict | None = None):
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
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

    def stream_events(self, reply: Reply, fault: dict | None):
        reset_after = fault.get("reset_after_chunks") if fault else None
        delay = float(fault.get("chunk_delay_ms", 0)) / 1000 if fault else 0.0
        events = list(reply.events)
        if fault and fault.get("malformed_sse"):
            garbage = (b"event: content_block_delta\ndata: {\"type\": \"content_block_delta\", "
                       b"\"delta\": {\n\n" if provider_of(self.path) == "anthropic" else
                       b"data: {\"id\": \"chatcmpl-broken\", \"choices\": [{\"delta\": \n\n")
            events.insert(min(2, len(events)), garbage + b"this is not an event\n\n")
        self.send_response(reply.status)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()
        for i, ev in enumerate(events):
            if reset_after is not None and i >= int(reset_after):
                self.abort_connection()
                return False
            if delay:
                time.sleep(delay)
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                self.wfile.flush()
            except OSError:
                self.close_connection = True
                return False
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return False
        return True

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
                  "body": body, "body_bytes": len(raw), "json_error": json_error,
                  "status": None, "response_id": None}
        with state.lock:
            state.request_counter += 1
            record["index"] = state.request_counter
            state.requests.append(record)
            if len(state.requests) > MAX_LOG:
                del state.requests[: len(state.requests) - MAX_LOG]
            fault = state.take_fault(provider or "", path, body) if provider else None
        try:
            if fault and fault.get("latency_ms"):
                time.sleep(float(fault["latency_ms"]) / 1000)
            if fault and fault.get("hang"):
                record["status"] = "hang"
                return self.hold_until_client_closes()
            if fault and fault.get("status"):
                st = int(fault["status"])
                b = fault.get("body")
                hdrs = dict(fault.get("headers") or {})
                if b is None:
                    err = provider_error(provider or "openai", st, f"simulated {st} error")
                    b = err.body
                    hdrs = {**err.headers, **hdrs}
                record["status"] = st
                return self.send_json(st, b, hdrs)
            if fault and fault.get("reset_after_chunks") is not None and not (
                    isinstance(body, dict) and body.get("stream") is True):
                record["status"] = "reset"
                return self.abort_connection()
            reply, entry = self.route(provider, path, body, json_error)
        except SimError as e:
            record["status"] = e.status
            return self.send_json(e.status, e.body, e.headers)
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
                return self.send_json(reply.status, data[: len(data) // 2], reply.headers)
            return self.send_json(reply.status, reply.body, reply.headers)
        complete = self.stream_events(reply, fault)
        if entry is not None and not complete:
            with state.lock:
                entry["delivered"] = False

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
            "/deepseek/v1/chat/completions": lambda b: handle_openai_style_chat(
                self.state, "deepseek", b, path),
            "/deepseek/chat/completions": lambda b: handle_openai_style_chat(
                self.state, "deepseek", b, path),
            "/anthropic/v1/messages": lambda b: handle_anthropic(self.state, b, path),
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
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--reasoning-tokens", type=int, default=8)
    p.add_argument("--openai-ttl", type=float, default=300.0)
    p.add_argument("--deepseek-ttl", type=float, default=300.0)
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
