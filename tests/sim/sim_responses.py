"""The provider simulator's OpenAI Responses API (POST /openai/v1/responses) and embeddings
(POST /openai/v1/embeddings) handlers. See provider_sim.py for the tokenization and caching rules;
the Responses API uses the OpenAI prompt cache of the chat path (same model, same entries)."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import uuid

from sim_core import (Reply, SimState, check_fields, is_reasoning_model, openai_content_tokens,
                      openai_error, reply_words, split_pieces, sse, words)

OPENAI_RESPONSES_FIELDS = {
    "model", "input", "instructions", "previous_response_id", "stream", "stream_options",
    "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "text", "reasoning",
    "metadata", "store", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
    "parallel_tool_calls", "truncation", "include", "background", "service_tier", "top_logprobs",
    "max_tool_calls",
}
OPENAI_EMBEDDINGS_FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
EMBEDDING_DIMENSIONS = 8  # the sim's default vector length (real models: 1536 / 3072)


def response_item_tokens(item) -> list[str]:
    """One input item: a message (`<|role|>` + its content's words + `<|end|>`; content parts of
    type input_text / output_text count their text's words) or any other item (`<|item|>` + the
    words of its JSON + `<|end|>`)."""
    if isinstance(item, dict) and "role" in item and item.get("type", "message") == "message":
        content = item.get("content")
        if isinstance(content, list):
            content = [dict(p, type="text") if isinstance(p, dict) and p.get("type") in (
                "input_text", "output_text") else p for p in content]
        return [f"<|{item['role']}|>"] + openai_content_tokens(content) + ["<|end|>"]
    return ["<|item|>"] + words(item) + ["<|end|>"]


def responses_input_tokens(body: dict) -> list[str]:
    inp = body.get("input")
    if isinstance(inp, str):
        return ["<|user|>"] + words(inp) + ["<|end|>"]
    return [t for item in inp for t in response_item_tokens(item)]


def responses_prompt(state: SimState, body: dict) -> tuple[list[str], list[str]]:
    """(prompt tokens, the conversation so far without instructions and primer). The prompt is the
    request's instructions (`<|system|>` + words + `<|end|>`; earlier turns' instructions are not
    carried over, as OpenAI documents), then the stored conversation of previous_response_id (its
    input and output, turn after turn), then this input, then the `<|assistant|>` primer."""
    history: list[str] = []
    prev = body.get("previous_response_id")
    if prev is not None:
        with state.lock:
            stored = state.responses.get(prev)
        if stored is None:
            raise openai_error(400, f"Previous response with id '{prev}' not found.",
                               param="previous_response_id", code="previous_response_not_found")
        history = list(stored)
    conversation = history + responses_input_tokens(body)
    instructions = body.get("instructions")
    system = ["<|system|>"] + words(instructions) + ["<|end|>"] if instructions else []
    return system + conversation + ["<|assistant|>"], conversation


def validate_responses(body: dict):
    check_fields(body, OPENAI_RESPONSES_FIELDS, "openai")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise openai_error(400, "Missing required parameter: 'model'.", param="model",
                           code="missing_required_parameter")
    inp = body.get("input")
    if not isinstance(inp, (str, list)) or (isinstance(inp, list) and not inp):
        raise openai_error(400, "Invalid type for 'input': expected a string or a non-empty "
                                "array of input items.", param="input", code="invalid_type")
    so = body.get("stream_options")
    if so is not None:
        if body.get("stream") is not True:
            raise openai_error(400, "The 'stream_options' parameter is only allowed when 'stream' "
                                    "is enabled.", param="stream_options")
        extra = sorted(set(so) - {"include_obfuscation"}) if isinstance(so, dict) else ["?"]
        if extra:
            raise openai_error(400, f"Unknown parameter: 'stream_options.{extra[0]}'.",
                               param=f"stream_options.{extra[0]}", code="unknown_parameter")
    mot = body.get("max_output_tokens")
    if mot is not None and (not isinstance(mot, int) or isinstance(mot, bool) or mot < 1):
        raise openai_error(400, "max_output_tokens must be a positive integer",
                           param="max_output_tokens")


def responses_usage(prompt: int, cached: int, output: int, reasoning: int) -> dict:
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output + reasoning,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + output + reasoning}


def handle_openai_responses(state: SimState, body: dict, path: str) -> Reply:
    validate_responses(body)
    model = body["model"]
    stream = body.get("stream") is True
    tokens, conversation = responses_prompt(state, body)
    n_out = int(state.config["output_tokens"])
    capped = body.get("max_output_tokens") is not None and body["max_output_tokens"] < n_out
    if capped:
        n_out = body["max_output_tokens"]
    reasoning = int(state.config["reasoning_tokens"]) if is_reasoning_model(model) else 0
    text_words = reply_words(tokens, n_out)
    rid = "resp_" + uuid.uuid4().hex + uuid.uuid4().hex[:16]
    mid = "msg_" + uuid.uuid4().hex + uuid.uuid4().hex[:16]
    with state.lock:
        cached = state.prefix_cache_lookup_store("openai", model, tokens,
                                                 body.get("prompt_cache_key"))
        created = int(state.now())
        if body.get("store") is not False:
            state.responses[rid] = conversation + ["<|assistant|>"] + text_words + ["<|end|>"]
    usage = responses_usage(len(tokens), cached, len(text_words), reasoning)
    text = " ".join(text_words)
    status = "incomplete" if capped else "completed"
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    item = {"id": mid, "type": "message", "status": status, "content": [part],
            "role": "assistant"}

    def response(status_value, output, usage_value):
        return {
            "id": rid, "object": "response", "created_at": created, "status": status_value,
            "background": False, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if (
                capped and status_value == "incomplete") else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"), "model": model,
            "output": output, "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None}, "service_tier": "default",
            "store": body.get("store") is not False, "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
            "top_p": 1.0, "truncation": "disabled", "usage": usage_value, "user": None,
            "metadata": body.get("metadata") or {},
        }

    headers = {"x-request-id": "req_" + uuid.uuid4().hex, "openai-processing-ms": "1"}
    entry = {"id": rid, "provider": "openai", "path": path, "model": model, "stream": stream,
             "usage": usage, "delivered": True, "prompt_tokens": len(tokens)}
    if not stream:
        return Reply(200, response(status, [item], usage), headers=headers,
                     response_id=rid), entry

    seq = [0]

    def event(kind: str, **fields) -> bytes:
        data = {"type": kind, "sequence_number": seq[0], **fields}
        seq[0] += 1
        return sse(data, kind)

    started = response("in_progress", [], None)
    events = [event("response.created", response=started),
              event("response.in_progress", response=started),
              event("response.output_item.added", output_index=0,
                    item={"id": mid, "type": "message", "status": "in_progress", "content": [],
                          "role": "assistant"}),
              event("response.content_part.added", item_id=mid, output_index=0, content_index=0,
                    part={"type": "output_text", "annotations": [], "logprobs": [], "text": ""})]
    for piece in split_pieces(text_words):
        events.append(event("response.output_text.delta", item_id=mid, output_index=0,
                            content_index=0, delta=piece, logprobs=[]))
    events += [event("response.output_text.done", item_id=mid, output_index=0, content_index=0,
                     text=text, logprobs=[]),
               event("response.content_part.done", item_id=mid, output_index=0, content_index=0,
                     part=part),
               event("response.output_item.done", output_index=0, item=item),
               event("response." + status, response=response(status, [item], usage))]
    return Reply(200, events=events, headers=headers, response_id=rid), entry


def embedding_inputs(inp) -> list[list[str]]:
    """The tokens of each input: a string's words; a list of strings, one input each; token
    arrays (lists of integers) count one token per integer."""
    if isinstance(inp, str):
        return [words(inp)]
    if isinstance(inp, list) and inp and all(isinstance(i, int) for i in inp):
        return [[str(i) for i in inp]]
    if isinstance(inp, list) and inp:
        out = []
        for i in inp:
            if isinstance(i, str):
                out.append(words(i))
            elif isinstance(i, list) and all(isinstance(t, int) for t in i):
                out.append([str(t) for t in i])
            else:
                return []
        return out
    return []


def embedding_vector(tokens: list[str], dims: int) -> list[float]:
    seed = hashlib.sha256(" ".join(tokens).encode()).digest()
    return [(seed[i % len(seed)] - 128) / 128.0 for i in range(dims)]


def handle_openai_embeddings(state: SimState, body: dict, path: str) -> Reply:
    check_fields(body, OPENAI_EMBEDDINGS_FIELDS, "openai")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise openai_error(400, "you must provide a model parameter", param="model")
    inputs = embedding_inputs(body.get("input"))
    if not inputs or any(not t for t in inputs):
        raise openai_error(400, "'input' must be a non-empty string, array of strings or array "
                                "of token arrays", param="input")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise openai_error(400, "encoding_format must be float or base64", param="encoding_format")
    dims = body.get("dimensions", EMBEDDING_DIMENSIONS)
    if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
        raise openai_error(400, "dimensions must be a positive integer", param="dimensions")
    data = []
    for i, toks in enumerate(inputs):
        vec = embedding_vector(toks, dims)
        value = (base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if fmt == "base64"
                 else vec)
        data.append({"object": "embedding", "index": i, "embedding": value})
    n = sum(len(t) for t in inputs)
    usage = {"prompt_tokens": n, "total_tokens": n}
    rid = "emb-" + uuid.uuid4().hex[:24]  # not in the body (embeddings have no id): log key only
    entry = {"id": rid, "provider": "openai", "path": path, "model": model, "stream": False,
             "usage": usage, "delivered": True, "prompt_tokens": n}
    headers = {"x-request-id": "req_" + uuid.uuid4().hex, "openai-processing-ms": "1"}
    return Reply(200, {"object": "list", "data": data, "model": model, "usage": usage},
                 headers=headers), entry


def fail_response(reply: Reply, entry: dict):
    """The "response_failed" fault: the response fails after it started. A stream keeps
    response.created and response.in_progress, then ends with response.failed; a JSON answer is
    the response object with status "failed". The usage then bills the input and no output."""
    usage = dict(entry["usage"], output_tokens=0, total_tokens=entry["usage"]["input_tokens"],
                 output_tokens_details={"reasoning_tokens": 0})
    entry["usage"] = usage
    error = {"code": "server_error", "message": "The model failed to generate a response."}
    if reply.events is None:
        reply.body = dict(reply.body, status="failed", error=error, output=[], usage=usage)
        return
    created = json.loads(reply.events[0].decode().split("data: ", 1)[1])["response"]
    failed = dict(created, status="failed", error=error, usage=usage)
    reply.events = reply.events[:2] + [sse({"type": "response.failed", "sequence_number": 2,
                                            "response": failed}, "response.failed")]
