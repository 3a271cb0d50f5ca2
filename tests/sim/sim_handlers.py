"""The provider simulator's request handlers: OpenAI chat and completions, DeepSeek (OpenAI-style
chat with its own cache), Anthropic Messages. Each takes the parsed body and returns a Reply;
see provider_sim.py for the wire formats and caching rules."""

from __future__ import annotations

import json
import uuid

from sim_core import (ANTHROPIC_FIELDS, ANTHROPIC_MAX_BREAKPOINTS, ANTHROPIC_TTLS,
    DEEPSEEK_CHAT_FIELDS, OPENAI_CHAT_FIELDS, OPENAI_COMPLETION_FIELDS, OPENAI_ROLES, Reply,
    SimError, SimState, anthropic_error, check_fields, deepseek_usage, flatten_anthropic,
    flatten_completion_prompt, flatten_openai_chat, is_reasoning_model, openai_error, openai_usage,
    output_budget, reply_words, split_pieces, sse)


def openai_stream_and_budget(state: SimState, body: dict, budget_keys: tuple):
    """OpenAI's checks shared by chat and completions: `stream` / `stream_options`, and the output
    token budget read from the first of `budget_keys` present. Returns (stream, include_usage,
    output tokens, whether the budget capped them)."""
    stream = body.get("stream") is True
    so = body.get("stream_options")
    if so is not None and not stream:
        raise openai_error(400, "The 'stream_options' parameter is only allowed when 'stream' "
                                "is enabled.", param="stream_options")
    include_usage = stream and isinstance(so, dict) and so.get("include_usage") is True
    try:
        n_out, capped = output_budget(state, body, budget_keys)
    except SimError:
        raise openai_error(400, "max_tokens must be a positive integer", param="max_tokens")
    return stream, include_usage, n_out, capped


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
    stream, include_usage, n_out, capped = openai_stream_and_budget(
        state, body, ("max_completion_tokens", "max_tokens"))
    tokens = flatten_openai_chat(body)
    reasoning = int(state.config["reasoning_tokens"]) if (
        provider == "openai" and is_reasoning_model(model)) else 0
    with state.lock:
        cached = state.prefix_cache_lookup_store(provider, model, tokens,
                                                 body.get("prompt_cache_key"))
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
    stream, include_usage, n_out, capped = openai_stream_and_budget(state, body, ("max_tokens",))
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


def anthropic_structure(body: dict) -> dict:
    """What Anthropic's cache diagnostics compare: the model, then system, tools and messages
    (cache_control left out: a breakpoint moved is not a change of content)."""
    def plain(v):
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items() if k != "cache_control"}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    return {"model": body["model"], "system": json.dumps(plain(system or []), sort_keys=True),
            "tools": json.dumps(plain(body.get("tools") or []), sort_keys=True),
            "messages": [json.dumps(plain(m), sort_keys=True) for m in body["messages"]]}


def anthropic_cache_miss_reason(state: SimState, body: dict, read: int) -> dict | None:
    """The `diagnostics` object of a request that asked for one (`diagnostics.previous_message_id`):
    the first of model, system, tools, messages that differs from the previous message's request,
    null when none did and the cache was read, "unavailable" when nothing differs but nothing was
    read either (expired or evicted: the API compares structure only, it cannot tell which)."""
    asked = body.get("diagnostics")
    if not isinstance(asked, dict) or not isinstance(asked.get("previous_message_id"), str):
        return None
    prev = state.anthropic_messages.get(asked["previous_message_id"])
    if prev is None:
        return {"cache_miss_reason": "previous_message_not_found"}
    cur = anthropic_structure(body)
    for part, reason in (("model", "model_changed"), ("system", "system_changed"),
                         ("tools", "tools_changed")):
        if cur[part] != prev[part]:
            return {"cache_miss_reason": reason}
    if cur["messages"][:len(prev["messages"])] != prev["messages"]:
        return {"cache_miss_reason": "messages_changed"}
    return {"cache_miss_reason": None if read > 0 else "unavailable"}


# POST /v1/messages/count_tokens: the fields a Message's prompt has (no max_tokens, stream,
# sampling or metadata), answered {"input_tokens"}: every prompt token, as a Message's usage
# splits them into input_tokens, cache_read_input_tokens and cache_creation_input_tokens.
ANTHROPIC_COUNT_FIELDS = {"model", "messages", "system", "tools", "tool_choice", "thinking",
                          "mcp_servers"}


def handle_anthropic_count_tokens(state: SimState, body: dict, path: str):
    check_fields(body, ANTHROPIC_COUNT_FIELDS, "anthropic")
    validate_anthropic({**body, "max_tokens": 1})  # the checks of the fields both share
    tokens, _, _ = flatten_anthropic(body)
    return Reply(200, {"input_tokens": len(tokens)},
                 headers={"request-id": "req_" + uuid.uuid4().hex[:24]}), None


def handle_anthropic(state: SimState, body: dict, path: str) -> Reply:
    validate_anthropic(body)
    asked = body.get("diagnostics")
    if asked is not None and (not isinstance(asked, dict) or set(asked) != {"previous_message_id"}
                              or not isinstance(asked["previous_message_id"], str)):
        raise anthropic_error(400, "diagnostics.previous_message_id: Field required")
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
    with state.lock:
        diagnostics = anthropic_cache_miss_reason(state, body, read)
        state.anthropic_messages[rid] = anthropic_structure(body)
        while len(state.anthropic_messages) > 10000:
            state.anthropic_messages.pop(next(iter(state.anthropic_messages)))
    extra = {} if diagnostics is None else {"diagnostics": diagnostics}
    stop = "max_tokens" if capped else "end_turn"
    headers = {"request-id": "req_" + uuid.uuid4().hex[:24],
               "anthropic-organization-id": "sim-org"}
    entry = {"id": rid, "provider": "anthropic", "path": path, "model": model, "stream": stream,
             "usage": usage, "delivered": True, "prompt_tokens": len(tokens)}
    if not stream:
        return Reply(200, {
            "id": rid, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": " ".join(text_words)}],
            "stop_reason": stop, "stop_sequence": None, "usage": usage, **extra},
            headers=headers, response_id=rid), entry
    start_usage = dict(usage, output_tokens=1)
    events = [sse({"type": "message_start", "message": {
        "id": rid, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage, **extra}},
        "message_start"),
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
    for p in ("openai", "anthropic", "deepseek", "bedrock"):
        if path.startswith(f"/{p}/"):
            return p
    return None
