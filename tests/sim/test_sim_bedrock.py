"""Self-tests of the simulator's Bedrock Runtime: SigV4 checked with botocore, the answers shaped
as the golden samples (tests/sim/golden/bedrock/, from the AWS API reference), the streams decoded
by botocore's EventStreamBuffer, cachePoints driving cache writes and reads, and the faults."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

GOLDEN = Path(__file__).resolve().parent / "golden" / "bedrock"
MODEL = "anthropic.claude-sonnet-4-5-20250929-v1%3A0"


def call(sim, op: str, body: dict, secret: str = "sim-secret-key", token: str | None = None):
    url = f"{sim.base}/bedrock/model/{MODEL}/{op}"
    req = AWSRequest(method="POST", url=url, data=json.dumps(body).encode(),
                     headers={"content-type": "application/json"})
    SigV4Auth(Credentials("AKIASIMULATOR", secret, token), "bedrock", "us-east-1").add_auth(req)
    prepared = req.prepare()
    http_req = urllib.request.Request(url, data=prepared.body, method="POST",
                                      headers=dict(prepared.headers))
    try:
        with urllib.request.urlopen(http_req, timeout=20) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def same_shape(got, want, where="$"):
    """Every member of `want` is in `got` with the same JSON type (recursively)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        for k, v in want.items():
            assert k in got, f"{where}.{k} missing"
            same_shape(got[k], v, f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and got, where
        same_shape(got[0], want[0], f"{where}[0]")
    else:
        assert type(got) is type(want) or (isinstance(got, int) and isinstance(want, int)), where


def converse_body(words: int = 1200, ttl: str | None = None) -> dict:
    point = {"type": "default", **({"ttl": ttl} if ttl else {})}
    return {"system": [{"text": " ".join(f"w{i}" for i in range(words))}, {"cachePoint": point}],
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "inferenceConfig": {"maxTokens": 10}}


def test_converse_matches_golden_and_caches_by_cache_point(sim):
    st, headers, raw = call(sim, "converse", converse_body(ttl="1h"))
    assert st == 200, raw
    first = json.loads(raw)
    same_shape(first, json.loads((GOLDEN / "converse_response.json").read_text()))
    u = first["usage"]
    # <|system|> + 1200 words, breakpoint there (1201 tokens); then <|user|> hello <|assistant|>.
    assert u["cacheWriteInputTokens"] == 1201 and u["cacheReadInputTokens"] == 0
    assert u["cacheDetails"] == [{"ttl": "1h", "inputTokens": 1201}]
    assert u["inputTokens"] == 3 and u["outputTokens"] == 10
    assert u["totalTokens"] == 1201 + 3 + 10
    st, _, raw = call(sim, "converse", converse_body(ttl="1h"))
    again = json.loads(raw)["usage"]
    assert again["cacheReadInputTokens"] == 1201 and again["cacheWriteInputTokens"] == 0


def test_converse_stream_frames_decode_with_botocore(sim):
    st, headers, raw = call(sim, "converse-stream", converse_body())
    assert st == 200 and headers["Content-Type"] == "application/vnd.amazon.eventstream"
    buf = EventStreamBuffer()
    buf.add_data(raw)
    messages = list(buf)
    golden = json.loads((GOLDEN / "converse_stream_events.json").read_text())
    types = [m.headers[":event-type"] for m in messages]
    assert types[0] == "messageStart" and types[-2:] == ["messageStop", "metadata"]
    by_type = {m.headers[":event-type"]: json.loads(m.payload) for m in messages}
    for event, payload in golden:
        same_shape(by_type[event], payload)
    assert all(m.headers[":message-type"] == "event" for m in messages)
    assert by_type["metadata"]["usage"]["cacheWriteInputTokens"] == 1201


def test_invoke_stream_chunks_are_anthropic_events(sim):
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}]}
    st, _, raw = call(sim, "invoke-with-response-stream", body)
    assert st == 200
    buf = EventStreamBuffer()
    buf.add_data(raw)
    events = []
    for m in buf:
        assert m.headers[":event-type"] == "chunk"
        payload = json.loads(m.payload)
        same_shape(payload, json.loads((GOLDEN / "invoke_stream_chunk.json").read_text()))
        events.append(json.loads(base64.b64decode(payload["bytes"])))
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    st, _, raw = call(sim, "invoke", dict(body, model="x"))
    assert st == 400 and "extraneous" in json.loads(raw)["message"]


def test_sigv4_is_checked(sim):
    st, headers, raw = call(sim, "converse", converse_body(), secret="wrong")
    assert st == 403
    assert headers["x-amzn-ErrorType"].startswith("InvalidSignatureException")
    same_shape(json.loads(raw), json.loads((GOLDEN / "error_response.json").read_text()))
    st, _, _ = call(sim, "converse", converse_body(), token="session-token")
    assert st == 200
    assert sim.client.requests()[-1]["headers"]["x-amz-security-token"] == "session-token"


def test_faults_corrupt_frames_and_throttle(sim):
    sim.client.add_faults({"provider": "bedrock", "corrupt_frame": "message", "at": 1})
    st, _, raw = call(sim, "converse-stream", converse_body())
    buf = EventStreamBuffer()
    buf.add_data(raw)
    try:
        list(buf)
        raise AssertionError("botocore decoded a corrupted frame")
    except Exception as e:  # botocore's ChecksumMismatch
        assert "Checksum" in type(e).__name__ or "checksum" in str(e).lower()
    sim.client.add_faults({"provider": "bedrock", "status": 429})
    st, headers, raw = call(sim, "converse", converse_body())
    assert st == 429 and headers["x-amzn-ErrorType"].startswith("ThrottlingException")
