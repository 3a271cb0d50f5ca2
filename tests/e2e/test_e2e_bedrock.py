"""AWS Bedrock through kvgate, against the simulator's Bedrock Runtime (tests/sim/sim_bedrock.py,
which checks every request's SigV4 signature with botocore):

* OpenAI SDK chat, streaming and not, to `api: converse` and `api: invoke` models; Anthropic SDK
  messages to both; the turn's cache read / write / uncached / output and cost in the stored
  record and in /metrics equal the simulator's figures;
* the simulator's streams decode with botocore's own EventStreamBuffer (the framing is AWS's);
* a corrupted frame is a recorded upstream error and the next request still works; a throttled
  request is an OpenAI-shaped 429;
* SigV4 headers (authorization, x-amz-date, x-amz-security-token with a session token), the
  bearer mode of a Bedrock API key, and credentials from the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request

import anthropic
import pytest
from botocore.eventstream import EventStreamBuffer

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, expected_cost_pico

MODEL_ID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
TOKEN_AKID, TOKEN_SECRET, SESSION_TOKEN = "ASIASIMTOKEN", "token-secret", "FwoGZXIvYXdzE//sess+tok="


@pytest.fixture(scope="module")
def bgw(kvgate_bin, sim, tmp_path_factory, kvgate_process_class):
    sim.client._call("POST", "/_sim/bedrock_credentials", {TOKEN_AKID: TOKEN_SECRET})

    class BedrockKvgate(kvgate_process_class):
        def _write_config(self):
            b = f"http://127.0.0.1:{self.sim_port}/bedrock"
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: br, type: bedrock, region: us-east-1, base_url: {b},
     aws_access_key_id: "${{BR_TEST_AKID}}", aws_secret_access_key: "${{BR_TEST_SECRET}}"}}
  - {{name: brtok, type: bedrock, region: eu-west-1, base_url: {b},
     aws_access_key_id: {TOKEN_AKID}, aws_secret_access_key: {TOKEN_SECRET},
     aws_session_token: "{SESSION_TOKEN}"}}
  - {{name: brenv, type: bedrock, region: us-west-2, base_url: {b}}}
  - {{name: brkey, type: bedrock, region: us-east-1, base_url: {b}, api_key: br-api-key-123}}
models:
  - {{name: claude-br, provider: br, upstream_model: "{MODEL_ID}", api: converse}}
  - {{name: claude-br-invoke, provider: br, upstream_model: "{MODEL_ID}", api: invoke}}
  - {{name: claude-br-token, provider: brtok, upstream_model: "{MODEL_ID}"}}
  - {{name: claude-br-env, provider: brenv, upstream_model: "{MODEL_ID}"}}
  - {{name: claude-br-key, provider: brkey, upstream_model: "{MODEL_ID}", api: invoke}}
""")

    saved = dict(os.environ)
    os.environ.update(BR_TEST_AKID="AKIASIMULATOR", BR_TEST_SECRET="sim-secret-key",
                      AWS_ACCESS_KEY_ID="AKIASIMULATOR", AWS_SECRET_ACCESS_KEY="sim-secret-key")
    os.environ.pop("AWS_SESSION_TOKEN", None)
    try:
        kg = BedrockKvgate(kvgate_bin, tmp_path_factory.mktemp("bedrock"), sim.port,
                           name="bedrock").start(timeout=60)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


def long_text(tag: str, n: int = 1400) -> str:
    return " ".join(f"{tag}{i % 89}q{i}" for i in range(n))


def sim_entry(sim, path_part: str) -> dict:
    entries = [e for e in sim.client.usage_log() if path_part in e["path"]]
    assert entries, f"no Bedrock call to {path_part} reached the simulator"
    return entries[-1]


def normalized(entry: dict) -> dict:
    """What docs/providers.md says kvgate records for the simulator's usage of one call."""
    if entry["api"] == "converse":
        u = entry["usage"]
        one_hour = sum(d["inputTokens"] for d in u.get("cacheDetails", []) if d["ttl"] == "1h")
        return {"cache_read": u["cacheReadInputTokens"],
                "cache_write_5m": u["cacheWriteInputTokens"] - one_hour,
                "cache_write_1h": one_hour, "cache_write_no_ttl": 0,
                "uncached": u["inputTokens"], "output": u["outputTokens"], "reasoning": None}
    u = entry["usage"]
    return {"cache_read": u["cache_read_input_tokens"],
            "cache_write_5m": u["cache_creation"]["ephemeral_5m_input_tokens"],
            "cache_write_1h": u["cache_creation"]["ephemeral_1h_input_tokens"],
            "cache_write_no_ttl": 0, "uncached": u["input_tokens"], "output": u["output_tokens"],
            "reasoning": None}


def assert_recorded_as_sim(gw, request_id: str, entry: dict) -> dict:
    rec = gw.wait_request(request_id)
    n = normalized(entry)
    assert rec["usage"] == n, (rec["usage"], entry["usage"])
    assert rec["provider_type"] == "bedrock"
    assert rec["cost_pico_usd"] == expected_cost_pico("claude-sonnet-4-5", n, rec["cache_diagnosis"])
    return rec


def cached_messages(tag: str, ttl: str = "5m") -> list[dict]:
    return [{"role": "system", "content": [{"type": "text", "text": long_text(tag, 1500),
                                            "cache_control": {"type": "ephemeral", "ttl": ttl}}]},
            {"role": "user", "content": "Summarize, please."}]


def tokens_metric(gw, model: str) -> dict[str, float]:
    st, _, body = gw.request("GET", "/metrics")
    assert st == 200
    text = body.decode() if isinstance(body, bytes) else str(body)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kvgate_tokens_total{") and f'model="{model}"' in line:
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            out[kind] = out.get(kind, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def test_converse_chat_writes_then_reads_the_cache_exactly(bgw, sim):
    client = bgw.client()
    before = tokens_metric(bgw, "claude-br")
    recs = []
    for turn in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="claude-br", max_tokens=32, messages=cached_messages("conv", "1h"))
        answer = raw.parse()
        assert answer.choices[0].message.content
        entry = sim_entry(sim, "/converse")
        rec = assert_recorded_as_sim(bgw, raw.headers["x-request-id"], entry)
        assert answer.usage.prompt_tokens == rec["usage"]["uncached"] + rec["usage"]["cache_read"] \
            + rec["usage"]["cache_write_5m"] + rec["usage"]["cache_write_1h"]
        recs.append(rec)
    assert recs[0]["usage"]["cache_write_1h"] > 1000 and recs[0]["usage"]["cache_read"] == 0
    assert recs[1]["usage"]["cache_read"] == recs[0]["usage"]["cache_write_1h"]
    sent = sim.client.requests()[-1]
    assert sent["path"] == "/bedrock/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    assert sent["body"]["system"][-1] == {"cachePoint": {"type": "default", "ttl": "1h"}}
    assert sent["headers"]["authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIASIMULATOR/")
    assert "/us-east-1/bedrock/aws4_request" in sent["headers"]["authorization"]
    assert sent["headers"]["x-amz-date"].endswith("Z")
    assert "x-amz-security-token" not in sent["headers"]
    after = tokens_metric(bgw, "claude-br")
    for kind, field in (("cache_read", ("cache_read",)), ("uncached", ("uncached",)),
                        ("output", ("output",)), ("cache_write", ("cache_write_5m", "cache_write_1h"))):
        want = sum(r["usage"][f] for r in recs for f in field)
        assert after.get(kind, 0) - before.get(kind, 0) == want, (kind, before, after)


def test_converse_stream_with_usage_chunk(bgw, sim):
    client = bgw.client()
    client.chat.completions.create(model="claude-br", max_tokens=32,
                                   messages=cached_messages("strm"))
    raw = client.chat.completions.with_raw_response.create(
        model="claude-br", max_tokens=32, messages=cached_messages("strm"), stream=True,
        stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in raw.parse():
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    entry = sim_entry(sim, "/converse-stream")
    assert text and len(text.split()) == entry["usage"]["outputTokens"]
    rec = assert_recorded_as_sim(bgw, raw.headers["x-request-id"], entry)
    assert rec["usage"]["cache_read"] > 1000
    assert usage.prompt_tokens_details.cached_tokens == rec["usage"]["cache_read"]
    assert rec["status"] == "ok", rec


def test_sim_streams_decode_with_botocore(bgw, sim):
    """The simulator's ConverseStream bytes, read straight from it, are AWS event-stream frames
    botocore decodes (so kvgate is tested against the real framing)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    for op, first in (("converse-stream", "messageStart"), ("invoke-with-response-stream", "chunk")):
        body = ({"messages": [{"role": "user", "content": [{"text": "hi there"}]}]}
                if op == "converse-stream" else
                {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 20,
                 "messages": [{"role": "user", "content": "hi there"}]})
        url = f"{sim.base}/bedrock/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/{op}"
        req = AWSRequest(method="POST", url=url, data=json.dumps(body).encode(),
                         headers={"content-type": "application/json"})
        SigV4Auth(Credentials("AKIASIMULATOR", "sim-secret-key"), "bedrock", "us-east-1").add_auth(req)
        prepared = req.prepare()
        http_req = urllib.request.Request(url, data=prepared.body, method="POST",
                                          headers=dict(prepared.headers))
        with urllib.request.urlopen(http_req, timeout=20) as resp:
            assert resp.headers["content-type"] == "application/vnd.amazon.eventstream"
            data = resp.read()
        buf = EventStreamBuffer()
        buf.add_data(data)
        messages = list(buf)
        types = [m.headers[":event-type"] for m in messages]
        assert types[0] == first, types
        if op == "converse-stream":
            assert types[-2:] == ["messageStop", "metadata"]
            usage = json.loads(messages[-1].payload)["usage"]
            assert usage["outputTokens"] > 0 and "cacheReadInputTokens" in usage
        else:
            assert all(t == "chunk" for t in types)


def test_invoke_chat_and_messages_sdk(bgw, sim):
    client = bgw.client()
    raw = client.chat.completions.with_raw_response.create(
        model="claude-br-invoke", max_tokens=24, messages=cached_messages("inv"))
    assert raw.parse().choices[0].message.content
    entry = sim_entry(sim, "/invoke")
    assert_recorded_as_sim(bgw, raw.headers["x-request-id"], entry)
    sent = sim.client.requests()[-1]
    assert sent["path"].endswith("/invoke")
    assert sent["body"]["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in sent["body"] and "stream" not in sent["body"]

    sdk = anthropic.Anthropic(base_url=f"http://127.0.0.1:{bgw.port}", api_key=GATEWAY_KEY,
                              max_retries=0, timeout=30)
    for model, path in (("claude-br-invoke", "/invoke-with-response-stream"),
                        ("claude-br", "/converse-stream")):
        with sdk.messages.stream(model=model, max_tokens=24, system=[
                {"type": "text", "text": long_text("msg" + model, 1300),
                 "cache_control": {"type": "ephemeral"}}],
                messages=[{"role": "user", "content": "Hello"}]) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text
        entry = sim_entry(sim, path)
        n = normalized(entry)
        assert final.usage.cache_creation_input_tokens == n["cache_write_5m"] + n["cache_write_1h"]
        assert final.usage.output_tokens == n["output"]
    message = sdk.messages.create(model="claude-br", max_tokens=16,
                                  messages=[{"role": "user", "content": "Hi"}])
    assert message.content[0].text
    entry = sim_entry(sim, "/converse")
    assert message.usage.input_tokens == entry["usage"]["inputTokens"]


def test_corrupt_frame_is_a_recorded_upstream_error_and_the_next_request_works(bgw, sim):
    client = bgw.client()
    for how in ("message", "prelude", "truncate"):
        sim.client.add_faults({"provider": "bedrock", "corrupt_frame": how, "at": 2})
        st, headers, body = bgw.request(
            "POST", "/v1/chat/completions",
            json.dumps({"model": "claude-br", "stream": True, "max_tokens": 16,
                        "messages": [{"role": "user", "content": "tell me"}]}),
            {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
        assert st == 200
        text = body.decode() if isinstance(body, bytes) else json.dumps(body)
        assert '"error"' in text, text
        rec = bgw.wait_request(headers["x-request-id"])
        assert rec["status"] == "upstream_error", rec
        assert "event stream" in rec["error"], rec
        ok = client.chat.completions.create(model="claude-br", max_tokens=8,
                                            messages=[{"role": "user", "content": "again"}])
        assert ok.choices[0].message.content


def test_throttling_is_an_openai_429(bgw, sim):
    sim.client.add_faults({"provider": "bedrock", "status": 429})
    st, headers, body = bgw.request(
        "POST", "/v1/chat/completions",
        json.dumps({"model": "claude-br", "max_tokens": 8,
                    "messages": [{"role": "user", "content": "x"}]}),
        {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
    assert st == 429, body
    assert body["error"]["message"] == "simulated 429 error"
    sim.client.add_faults({"provider": "bedrock", "stream": True,
                           "stream_exception": "throttlingException"})
    st, headers, body = bgw.request(
        "POST", "/v1/chat/completions",
        json.dumps({"model": "claude-br", "stream": True, "max_tokens": 8,
                    "messages": [{"role": "user", "content": "x"}]}),
        {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
    text = body.decode() if isinstance(body, bytes) else json.dumps(body)
    assert "rate_limit_error" in text and "throttlingException" in text, text


def test_session_token_bearer_and_env_credentials(bgw, sim):
    client = bgw.client()
    client.chat.completions.create(model="claude-br-token", max_tokens=8,
                                   messages=[{"role": "user", "content": "tok"}])
    sent = sim.client.requests()[-1]
    assert sent["status"] == 200
    assert sent["headers"]["x-amz-security-token"] == SESSION_TOKEN
    assert f"Credential={TOKEN_AKID}/" in sent["headers"]["authorization"]
    assert "/eu-west-1/bedrock/aws4_request" in sent["headers"]["authorization"]
    assert "x-amz-security-token" in sent["headers"]["authorization"].split("SignedHeaders=")[1]

    client.chat.completions.create(model="claude-br-key", max_tokens=8,
                                   messages=[{"role": "user", "content": "key"}])
    sent = sim.client.requests()[-1]
    assert sent["status"] == 200
    assert sent["headers"]["authorization"] == "Bearer br-api-key-123"
    assert "x-amz-date" not in sent["headers"]

    client.chat.completions.create(model="claude-br-env", max_tokens=8,
                                   messages=[{"role": "user", "content": "env"}])
    sent = sim.client.requests()[-1]
    assert sent["status"] == 200
    assert "/us-west-2/bedrock/aws4_request" in sent["headers"]["authorization"]


def test_missing_credentials_is_a_clear_config_error(kvgate_bin, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("providers:\n  - {name: br, type: bedrock, region: us-east-1}\n"
                      "models:\n  - {name: m, provider: br, upstream_model: x, api: converse}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = str(tmp_path)
    out = subprocess.run([kvgate_bin, "serve", "--config", str(config), "--db",
                          str(tmp_path / "k.db"), "--listen", "127.0.0.1:0"], env=env,
                         capture_output=True, timeout=30)
    assert out.returncode != 0
    assert b"no AWS credentials" in out.stderr, out.stderr
    # The shared credentials file, profile AWS_PROFILE, is the last source.
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = A\naws_secret_access_key = B\n")
    config.write_text(config.read_text().replace("api: converse", "api: sideways"))
    out = subprocess.run([kvgate_bin, "serve", "--config", str(config), "--db",
                          str(tmp_path / "k.db"), "--listen", "127.0.0.1:0"], env=env,
                         capture_output=True, timeout=30)
    assert out.returncode != 0
    assert b"api must be converse or invoke" in out.stderr, out.stderr


def test_responses_api_client_reaches_converse(bgw, sim):
    """The Responses API is translated to chat for bedrock, then to Converse."""
    raw = bgw.client().responses.with_raw_response.create(
        model="claude-br", instructions=long_text("resp", 1300), input="Say something.",
        max_output_tokens=16)
    response = raw.parse()
    assert response.output_text
    entry = sim_entry(sim, "/converse")
    rec = assert_recorded_as_sim(bgw, raw.headers["x-request-id"], entry)
    assert rec["endpoint"] == "responses"
    assert response.usage.output_tokens == entry["usage"]["outputTokens"]
