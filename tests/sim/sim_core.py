"""The provider simulator's shared parts: constants, error shapes, the deterministic tokenization,
the cache state (SimState) and the reply builders. See provider_sim.py for the rules they implement."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.parse

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
    "mcp_servers", "diagnostics",
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
# Echoing the caller's key (the "echo_key" fault)

# Stands for the key as a JSON encoder that escapes '/' writes it; replaced in the encoded bytes.
ESCAPED_KEY_MARK = "@@ESCAPED_KEY@@"
ECHO_STYLES = ("whole", "masked", "bearer", "escaped", "url", "base64")


def echo_key_message(key: str, style: str) -> str:
    """An error message that gives away `key` the way some upstreams do; `style` is one of
    ECHO_STYLES or "all" (every one, in one message)."""
    if style == "all":
        return " | ".join(echo_key_message(key, s) for s in ECHO_STYLES)
    if style == "whole":
        return f"Incorrect API key provided: {key}."
    if style == "masked":  # OpenAI's 401, and the "sk-ab...wxyz" form of dashboards
        return (f"Incorrect API key provided: {key[:8]}{'*' * 24}{key[-4:]}; "
                f"also shown as {key[:5]}...{key[-4:]}.")
    if style == "bearer":
        return f"the header 'Authorization: Bearer {key}' was rejected"
    if style == "escaped":
        return f"key {ESCAPED_KEY_MARK} is not valid"
    if style == "url":
        return f"see https://keys.example.invalid/check?key={urllib.parse.quote(key, safe='')}"
    if style == "base64":
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        return f"credentials Basic {b64(key)} or Basic {b64('user:' + key)} refused"
    raise ValueError(f"unknown echo_key style {style!r}")


def with_escaped_key(data: bytes, key: str) -> bytes:
    """`data` (JSON text) with ESCAPED_KEY_MARK replaced by `key` JSON-escaped with '/' as "\\/"."""
    escaped = json.dumps(key)[1:-1].replace("/", "\\/")
    return data.replace(ESCAPED_KEY_MARK.encode(), escaped.encode())


def stream_error_event(provider: str, path: str, message: str) -> bytes:
    """The error event a provider sends mid-stream (status 200) carrying `message`."""
    if provider == "anthropic":
        return sse({"type": "error", "error": {"type": "api_error", "message": message}}, "error")
    if path.endswith("/responses"):
        return sse({"type": "error", "code": "server_error", "message": message, "param": None,
                    "sequence_number": 1}, "error")
    return sse({"error": {"message": message, "type": "server_error", "param": None,
                          "code": None}})


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
    # Prompts of other conversations usually differ early: settle those without copying the
    # long slices the binary search makes.
    head = min(hi, 64)
    if a[:head] != b[:head]:
        hi = head - 1
    elif a[:hi] == b[:hi]:  # one prompt extends the other: the usual case in a conversation
        return hi
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
                     "deepseek": args.deepseek_key, "bedrock": getattr(args, "bedrock_key", None)}
        # Bedrock SigV4: access key id -> secret (sim_bedrock.py), set by /_sim/bedrock_credentials.
        self.bedrock_credentials = {"AKIASIMULATOR": "sim-secret-key"}
        self.config = {"output_tokens": args.output_tokens, "openai_ttl": args.openai_ttl,
                       "deepseek_ttl": args.deepseek_ttl, "reasoning_tokens": args.reasoning_tokens,
                       "anthropic_ttl_5m": ANTHROPIC_TTLS["5m"],
                       "anthropic_ttl_1h": ANTHROPIC_TTLS["1h"],
                       "openai_machines": args.openai_machines,
                       "openai_overflow_rpm": args.openai_overflow_rpm}
        self.clock_offset = 0.0
        self.shutdown = threading.Event()
        self.reset()

    def reset(self):
        # (provider, model, machine) -> [[toks, last]]; machine is always 0 but for OpenAI's routing
        self.prefix_caches: dict[tuple[str, str, int], list[list]] = {}
        self.openai_routes: dict[str, list[float]] = {}  # route hash -> its requests' times (60 s)
        self.anthropic_cache: dict[tuple, list] = {}  # (model, tokens) -> [expires_at, ttl_s]
        self.requests: list[dict] = []
        self.request_counter = 0
        self.usage_entries: list[dict] = []
        self.faults: list[dict] = []
        # Responses API: stored response id -> its conversation's tokens (input and output so far)
        self.responses: dict[str, list[str]] = {}
        # Anthropic cache diagnostics: message id -> the structure of the request that produced it
        # (model, system, tools, messages as JSON texts), the last 10,000.
        self.anthropic_messages: dict[str, dict] = {}

    def now(self) -> float:
        return time.time() + self.clock_offset

    # Called with the lock held. OpenAI's documented routing (the prompt caching guide): a request
    # goes to a machine chosen by a hash of its first 256 tokens combined with its
    # prompt_cache_key, and once one such combination gets more than about 15 requests a minute,
    # the overflow goes to other machines, which hold no cache for it. Each machine has its own
    # cache. With openai_machines = 1 (the default) every request meets the one cache.
    def openai_machine(self, tokens: list[str], prompt_cache_key) -> int:
        machines = int(self.config["openai_machines"])
        if machines <= 1:
            return 0
        key = prompt_cache_key if isinstance(prompt_cache_key, str) else ""
        route = hashlib.sha256(("\x1f".join(tokens[:256]) + "\x1e" + key).encode()).hexdigest()
        now = self.now()
        times = [t for t in self.openai_routes.get(route, []) if now - t < 60.0]
        times.append(now)
        self.openai_routes[route] = times
        home = int(route[:15], 16) % machines
        over = len(times) - int(self.config["openai_overflow_rpm"])
        if over <= 0:
            return home
        return (home + 1 + (over - 1) % (machines - 1)) % machines  # round robin over the others

    # Called with the lock held.
    def prefix_cache_lookup_store(self, provider: str, model: str, tokens: list[str],
                                  prompt_cache_key=None) -> int:
        now = self.now()
        machine = self.openai_machine(tokens, prompt_cache_key) if provider == "openai" else 0
        if provider == "openai":
            ttl, min_len = self.config["openai_ttl"], OPENAI_MIN_CACHE
        else:
            ttl, min_len = self.config["deepseek_ttl"], DEEPSEEK_UNIT
        if len(tokens) < min_len:
            return 0
        entries = [e for e in self.prefix_caches.get((provider, model, machine), [])
                   if now - e[1] < ttl]
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
        self.prefix_caches[(provider, model, machine)] = entries
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
            ttl_s = float(self.config["anthropic_ttl_" + ttl])
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
            if "user" in f and _user_of(body) != f["user"]:
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


def _user_of(body) -> str | None:
    """The end-user id of a request: OpenAI's `user`, Anthropic's metadata.user_id."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("user"), str):
        return body["user"]
    md = body.get("metadata")
    return md.get("user_id") if isinstance(md, dict) else None


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
