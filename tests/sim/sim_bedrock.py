"""The simulator's AWS Bedrock Runtime: Converse, ConverseStream, InvokeModel and
InvokeModelWithResponseStream, SigV4 (or a Bedrock API key as a bearer token) checked on arrival.

The wire follows the AWS Bedrock API reference: "Converse" (API_runtime_Converse),
"ConverseStream" (API_runtime_ConverseStream), "InvokeModel" and
"InvokeModelWithResponseStream" (API_runtime_InvokeModelWithResponseStream), and the event stream
encoding of the AWS SDKs ("Event stream encoding", the application/vnd.amazon.eventstream
framing: prelude with CRC32, typed headers, payload, message CRC32). Golden samples of each answer
are in tests/sim/golden/bedrock/ (README.md there names the pages).

Endpoints (under /bedrock, the base_url kvgate is given):
  POST /bedrock/model/{modelId}/converse | /converse-stream | /invoke | /invoke-with-response-stream
modelId is URL-encoded (':' as %3A). Signing: SigV4 for service "bedrock", any region, verified
with botocore's own signer against the secret of the request's access key id
(state.bedrock_credentials, default {"AKIASIMULATOR": "sim-secret-key"}); with
``Authorization: Bearer <key>`` the key must be the sim's bedrock key when one is set.

Tokenization and caching are the Anthropic sim's: a Converse request is read as the Anthropic
request it stands for (system, messages, tools), its ``cachePoint`` blocks as cache_control on the
block before them (ttl "1h" kept), and the model id as its Anthropic name
(``[us.]anthropic.claude-sonnet-4-5-20250929-v1:0`` -> ``claude-sonnet-4-5-20250929``).
Converse usage: inputTokens (uncached), outputTokens, totalTokens, cacheReadInputTokens,
cacheWriteInputTokens, and cacheDetails ([{ttl, inputTokens}]) when something was written.
"""

import base64
import json
import re
import struct
import uuid
import zlib
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from sim_core import Reply, SimError
from sim_handlers import handle_anthropic

DEFAULT_CREDENTIALS = {"AKIASIMULATOR": "sim-secret-key"}
PATH_RE = re.compile(r"^/bedrock/model/([^/]+)/(converse|converse-stream|invoke|"
                     r"invoke-with-response-stream)$")


# ---------------------------------------------------------------------------------------------
# Event stream framing


def _header_bytes(name: str, value: str) -> bytes:
    n = name.encode()
    v = value.encode()
    return bytes([len(n)]) + n + bytes([7]) + struct.pack(">H", len(v)) + v


def frame(headers: dict, payload: bytes) -> bytes:
    """One event-stream message (string headers only) with correct CRCs."""
    h = b"".join(_header_bytes(k, v) for k, v in headers.items())
    total = 12 + len(h) + len(payload) + 4
    prelude = struct.pack(">II", total, len(h))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + h + payload
    return body + struct.pack(">I", zlib.crc32(body))


def event_frame(event_type: str, body: dict) -> bytes:
    # AWS pads every event's payload with a "p" member of varying length (against traffic
    # analysis); readers must ignore it.
    payload = dict(body, p="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[:len(event_type) * 2])
    return frame({":event-type": event_type, ":content-type": "application/json",
                  ":message-type": "event"}, json.dumps(payload, separators=(",", ":")).encode())


def exception_frame(exception_type: str, message: str) -> bytes:
    return frame({":exception-type": exception_type, ":content-type": "application/json",
                  ":message-type": "exception"}, json.dumps({"message": message}).encode())


def corrupt(frame_bytes: bytes, how: str) -> bytes:
    """A frame made bad: "prelude" (its prelude CRC), "message" (its message CRC), "truncate"
    (cut in the middle)."""
    b = bytearray(frame_bytes)
    if how == "prelude":
        b[8] ^= 0xFF
    elif how == "message":
        b[-1] ^= 0xFF
    elif how == "truncate":
        return bytes(b[: len(b) // 2])
    return bytes(b)


# ---------------------------------------------------------------------------------------------
# Errors


def bedrock_error(status: int, exception: str, message: str) -> SimError:
    return SimError(status, {"message": message},
                    {"x-amzn-ErrorType": f"{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/",
                     "x-amzn-RequestId": str(uuid.uuid4())})


EXCEPTION_BY_STATUS = {400: "ValidationException", 403: "AccessDeniedException",
                       404: "ResourceNotFoundException", 424: "ModelErrorException",
                       429: "ThrottlingException", 500: "InternalServerException",
                       503: "ServiceUnavailableException"}


def error_for_status(status: int, message: str) -> SimError:
    return bedrock_error(status, EXCEPTION_BY_STATUS.get(status, "InternalServerException"), message)


# ---------------------------------------------------------------------------------------------
# Auth


class _FixedTimeSigV4(SigV4Auth):
    """botocore's signer at the request's own x-amz-date."""

    def __init__(self, credentials, service, region, timestamp):
        super().__init__(credentials, service, region)
        self._timestamp = timestamp

    def add_auth(self, request):
        request.context["timestamp"] = self._timestamp
        self._modify_request_before_signing(request)
        canonical = self.canonical_request(request)
        signature = self.signature(self.string_to_sign(request, canonical), request)
        self._inject_signature_to_request(request, signature)


def check_auth(state, headers, raw_path: str, raw_body: bytes):
    """Raises a Bedrock error unless the request is signed (or carries the API key)."""
    auth = headers.get("Authorization") or ""
    if auth.startswith("Bearer "):
        key = state.keys.get("bedrock")
        if not auth[7:] or (key is not None and auth[7:] != key):
            raise bedrock_error(403, "AccessDeniedException", "Invalid API Key format: Must start with pre-defined prefix")
        return
    m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                 r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$", auth)
    if not m:
        raise bedrock_error(403, "AccessDeniedException", "Missing Authentication Token")
    akid, _date, region, service, signed, _sig = m.groups()
    secret = state.bedrock_credentials.get(akid)
    if secret is None:
        raise bedrock_error(403, "UnrecognizedClientException",
                            "The security token included in the request is invalid.")
    if service != "bedrock":
        raise bedrock_error(403, "InvalidSignatureException", f"Credential should be scoped to correct service: 'bedrock'.")
    amz_date = headers.get("X-Amz-Date") or ""
    token = headers.get("X-Amz-Security-Token")
    wanted = {}
    for name in signed.split(";"):
        if name in ("x-amz-date", "x-amz-security-token", "authorization"):
            continue
        value = headers.get(name)
        if value is None:
            raise bedrock_error(403, "InvalidSignatureException", f"signed header {name} is missing")
        wanted[name] = value
    req = AWSRequest(method="POST", url=f"http://{headers.get('Host')}{raw_path}", data=raw_body,
                     headers=wanted)
    _FixedTimeSigV4(Credentials(akid, secret, token), "bedrock", region, amz_date).add_auth(req)
    if req.headers["Authorization"] != auth:
        raise bedrock_error(403, "InvalidSignatureException",
                            "The request signature we calculated does not match the signature you "
                            "provided. Check your AWS Secret Access Key and signing method.")


# ---------------------------------------------------------------------------------------------
# Converse -> the Anthropic request it stands for


def anthropic_model_name(model_id: str) -> str:
    name = model_id.rsplit("/", 1)[-1]  # an ARN's last part
    name = re.sub(r"^(us|eu|apac|global)\.", "", name)
    name = re.sub(r"^anthropic\.", "", name)
    return re.sub(r"-v\d+(:\d+)?$", "", name)


def _mark(blocks: list, point: dict):
    if not blocks:
        raise bedrock_error(400, "ValidationException", "A cachePoint must follow a content block")
    cc = {"type": "ephemeral"}
    if point.get("ttl") == "1h":
        cc["ttl"] = "1h"
    blocks[-1]["cache_control"] = cc


def _converse_block(block: dict) -> dict:
    if "text" in block:
        return {"type": "text", "text": block["text"]}
    if "image" in block:
        return {"type": "image", "source": block["image"]}
    if "toolUse" in block:
        t = block["toolUse"]
        return {"type": "tool_use", "id": t.get("toolUseId"), "name": t.get("name"),
                "input": t.get("input")}
    if "toolResult" in block:
        t = block["toolResult"]
        return {"type": "tool_result", "tool_use_id": t.get("toolUseId"), "content": t.get("content")}
    raise bedrock_error(400, "ValidationException", f"unknown content block {sorted(block)}")


def converse_to_anthropic(model_id: str, body: dict) -> dict:
    out = {"model": anthropic_model_name(model_id)}
    system = []
    for block in body.get("system") or []:
        if "cachePoint" in block:
            _mark(system, block["cachePoint"])
        else:
            system.append({"type": "text", "text": block.get("text", "")})
    if system:
        out["system"] = system
    messages = []
    for m in body.get("messages") or []:
        if m.get("role") not in ("user", "assistant"):
            raise bedrock_error(400, "ValidationException", "messages.role must be user or assistant")
        content = []
        for block in m.get("content") or []:
            if "cachePoint" in block:
                _mark(content, block["cachePoint"])
            else:
                content.append(_converse_block(block))
        messages.append({"role": m["role"], "content": content})
    if not messages:
        raise bedrock_error(400, "ValidationException", "messages must not be empty")
    out["messages"] = messages
    tools = []
    for t in (body.get("toolConfig") or {}).get("tools") or []:
        if "cachePoint" in t:
            _mark(tools, t["cachePoint"])
        else:
            spec = t["toolSpec"]
            tools.append({"name": spec["name"], "description": spec.get("description", ""),
                          "input_schema": (spec.get("inputSchema") or {}).get("json")})
    if tools:
        out["tools"] = tools
    out["max_tokens"] = int((body.get("inferenceConfig") or {}).get("maxTokens") or 4096)
    return out


# ---------------------------------------------------------------------------------------------
# Handlers


def handle_bedrock(state, headers, raw_path: str, raw_body: bytes, body) -> tuple:
    """Returns (Reply, usage-log entry)."""
    check_auth(state, headers, raw_path, raw_body)
    m = PATH_RE.match(raw_path.split("?", 1)[0])
    if not m:
        raise bedrock_error(404, "UnknownOperationException", f"Unknown operation {raw_path}")
    if not isinstance(body, dict):
        raise bedrock_error(400, "ValidationException", "The request body is not a JSON object")
    model_id, op = unquote(m.group(1)), m.group(2)
    stream = op in ("converse-stream", "invoke-with-response-stream")
    request_id = str(uuid.uuid4())
    if op.startswith("invoke"):
        if body.get("anthropic_version") != "bedrock-2023-05-31":
            raise bedrock_error(400, "ValidationException",
                                "anthropic_version: must be bedrock-2023-05-31")
        if "model" in body or "stream" in body:
            raise bedrock_error(400, "ValidationException",
                                "extraneous key [model] or [stream] is not permitted")
        anth = {k: v for k, v in body.items() if k != "anthropic_version"}
        anth["model"] = anthropic_model_name(model_id)
        if stream:
            anth["stream"] = True
    else:
        anth = converse_to_anthropic(model_id, body)
        if stream:
            anth["stream"] = True
    try:
        reply, entry = handle_anthropic(state, anth, raw_path)
    except SimError as e:  # the Anthropic checks (more than 4 breakpoints, ...) as Bedrock's 400
        message = (e.body.get("error") or {}).get("message") if isinstance(e.body, dict) else None
        raise error_for_status(e.status, message or "invalid request") from None
    entry["provider"] = "bedrock"
    entry["api"] = "invoke" if op.startswith("invoke") else "converse"
    usage = entry["usage"]
    hdrs = {"x-amzn-RequestId": request_id}
    if op == "invoke":
        reply.body["model"] = anth["model"]
        return Reply(200, reply.body, headers=hdrs, response_id=reply.response_id), entry
    if op == "invoke-with-response-stream":
        frames = []
        for ev in reply.events:
            data = ev.split(b"data: ", 1)[1].strip()
            frames.append(event_frame("chunk", {"bytes": base64.b64encode(data).decode()}))
        hdrs["Content-Type"] = "application/vnd.amazon.eventstream"
        hdrs["X-Amzn-Bedrock-Content-Type"] = "application/json"
        return Reply(200, events=frames, headers=hdrs, response_id=reply.response_id), entry
    # Converse: the same answer in Converse's shape.
    creation = usage.get("cache_creation") or {}
    cusage = {"inputTokens": usage["input_tokens"], "outputTokens": usage["output_tokens"],
              "totalTokens": usage["input_tokens"] + usage["output_tokens"]
              + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"],
              "cacheReadInputTokens": usage["cache_read_input_tokens"],
              "cacheWriteInputTokens": usage["cache_creation_input_tokens"]}
    details = [{"ttl": ttl, "inputTokens": creation.get(f"ephemeral_{ttl}_input_tokens", 0)}
               for ttl in ("5m", "1h") if creation.get(f"ephemeral_{ttl}_input_tokens", 0)]
    if details:
        cusage["cacheDetails"] = details
    entry["usage"] = cusage
    entry["anthropic_usage"] = usage
    if stream:
        text = "".join(json.loads(ev.split(b"data: ", 1)[1])["delta"]["text"]
                       for ev in reply.events if b"text_delta" in ev)
    else:
        text = reply.body["content"][0]["text"]
    stop = "max_tokens" if len(text.split()) >= anth["max_tokens"] else "end_turn"
    if not stream:
        return Reply(200, {"output": {"message": {"role": "assistant",
                                                  "content": [{"text": text}]}},
                           "stopReason": stop, "usage": cusage,
                           "metrics": {"latencyMs": 12}}, headers=hdrs,
                     response_id=reply.response_id), entry
    frames = [event_frame("messageStart", {"role": "assistant"})]
    words = text.split(" ")
    for i in range(0, len(words), 3):
        piece = " ".join(words[i:i + 3])
        frames.append(event_frame("contentBlockDelta", {"contentBlockIndex": 0,
                                                        "delta": {"text": piece if i == 0 else " " + piece}}))
    frames.append(event_frame("contentBlockStop", {"contentBlockIndex": 0}))
    frames.append(event_frame("messageStop", {"stopReason": stop}))
    frames.append(event_frame("metadata", {"usage": cusage, "metrics": {"latencyMs": 12}}))
    hdrs["Content-Type"] = "application/vnd.amazon.eventstream"
    return Reply(200, events=frames, headers=hdrs, response_id=reply.response_id), entry
