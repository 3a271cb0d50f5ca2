"""Provider-reported cache diagnostics (`anthropic_cache_diagnostics: true`): kvgate names the
thread's previous message on the provider in `diagnostics.previous_message_id`, stores the
provider's `cache_miss_reason` beside its own diagnosis, says whether the two agree, and counts
them in /metrics. The simulator answers as the API describes: the first of model, system, tools
and messages that changed, or previous_message_not_found."""

from __future__ import annotations

import json
import uuid

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY


@pytest.fixture(scope="module")
def dgw(kvgate_bin, sim, tmp_path_factory, kvgate_process_class):
    class DiagnosticsKvgate(kvgate_process_class):
        def _write_config(self):
            s = f"http://127.0.0.1:{self.sim_port}"
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: claude-diag, type: anthropic, base_url: {s}/anthropic, api_key: sk-ant-test,
     anthropic_auto_cache: true, anthropic_cache_diagnostics: true}}
  - {{name: claude-plain, type: anthropic, base_url: {s}/anthropic, api_key: sk-ant-test}}
models:
  - {{name: sonnet-diag, provider: claude-diag, upstream_model: claude-sonnet-4-5}}
  - {{name: sonnet-plain, provider: claude-plain, upstream_model: claude-sonnet-4-5}}
""")

    kg = DiagnosticsKvgate(kvgate_bin, tmp_path_factory.mktemp("diag"), sim.port,
                           name="diag").start(timeout=60)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i % 97}w{i}" for i in range(n))


def last_sent(sim) -> dict:
    return [r for r in sim.client.requests() if r["path"].endswith("/v1/messages")][-1]["body"]


def test_each_turn_carries_the_previous_message_and_both_diagnoses_are_kept(dgw, sim):
    tag = uuid.uuid4().hex[:6]
    client = dgw.client()
    thread = f"t-diag-{tag}"
    system = words(f"{tag}s", 1200)
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": words(f"{tag}d", 400)}]

    def turn(stream: bool = False):
        if stream:
            with client.chat.completions.with_streaming_response.create(
                    model="sonnet-diag", messages=messages, max_tokens=8, stream=True,
                    extra_headers={"X-Thread-Id": thread}) as raw:
                text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                               for line in raw.iter_lines()
                               if line.startswith("data: {") and '"choices":[{' in line)
                rid = raw.headers["x-request-id"]
        else:
            raw = client.chat.completions.with_raw_response.create(
                model="sonnet-diag", messages=messages, max_tokens=8,
                extra_headers={"X-Thread-Id": thread})
            text, rid = raw.parse().choices[0].message.content, raw.headers["x-request-id"]
        messages.extend([{"role": "assistant", "content": text},
                         {"role": "user", "content": f"next {len(messages)}"}])
        return dgw.wait_request(rid), last_sent(sim)

    first, sent = turn()
    assert "diagnostics" not in sent  # nothing to compare with yet
    assert first["provider_cache_diagnosis"] is None

    second, sent = turn(stream=True)
    assert sent["diagnostics"] == {"previous_message_id": first["response_id"]}
    assert second["usage"]["cache_read"] > 0
    assert second["provider_cache_diagnosis"] == {"cache_miss_reason": None,
                                                  "agrees_with_kvgate": True}, second

    messages[0]["content"] = words(f"{tag}changed", 1200)  # a new system prompt
    third, sent = turn()
    assert sent["diagnostics"] == {"previous_message_id": second["response_id"]}
    assert third["provider_cache_diagnosis"]["cache_miss_reason"] == "system_changed"
    assert third["cache_diagnosis"]["cause"] == "prompt_changed"
    # kvgate sees the chat body: the change is at message 0, a system message, which the
    # translation sends to Anthropic as its system prompt.
    assert third["cache_diagnosis"]["element"] == "message"
    assert third["cache_diagnosis"]["message_index"] == 0
    assert third["cache_diagnosis"]["system_message"] is True
    assert third["provider_cache_diagnosis"]["agrees_with_kvgate"] is True

    st, _, text = dgw.request("GET", "/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert st == 200
    text = text if isinstance(text, str) else text.decode()
    assert ('kvgate_provider_cache_diagnoses_total{provider="claude-diag",reason="system_changed",'
            'agreement="agrees"}') in text, text[-2000:]


def test_the_clients_own_diagnostics_are_kept_and_other_providers_get_none(dgw, sim):
    tag = uuid.uuid4().hex[:6]
    headers = {"x-api-key": GATEWAY_KEY, "content-type": "application/json",
               "anthropic-version": "2023-06-01", "x-thread-id": f"t-own-{tag}"}
    for _ in range(2):
        body = {"model": "sonnet-diag", "max_tokens": 8, "system": words(f"{tag}s", 1200),
                "messages": [{"role": "user", "content": "hello"}],
                "diagnostics": {"previous_message_id": "msg_unknown"}}
        st, h, answer = dgw.request("POST", "/v1/messages", body=json.dumps(body).encode(),
                                    headers=headers)
        assert st == 200, answer
        assert last_sent(sim)["diagnostics"] == {"previous_message_id": "msg_unknown"}
        rec = dgw.wait_request(h["x-request-id"])
        # The provider could not compare: not counted for or against kvgate.
        assert rec["provider_cache_diagnosis"] == {"cache_miss_reason": "previous_message_not_found",
                                                   "agrees_with_kvgate": None}
        assert answer["diagnostics"]["cache_miss_reason"] == "previous_message_not_found"

    client = dgw.client()
    for _ in range(2):
        client.chat.completions.create(model="sonnet-plain", max_tokens=8,
                                       messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"X-Thread-Id": f"t-plain-{tag}"})
        assert "diagnostics" not in last_sent(sim)


def test_disagreements_are_listed_by_the_read_api(dgw, sim):
    """A client that names another conversation's message makes the provider compare with that
    one: it reports system_changed while kvgate, comparing with the thread's own last turn,
    sees the cache read as expected. The read API lists that turn among the disagreements."""
    tag = uuid.uuid4().hex[:6]
    headers = {"x-api-key": GATEWAY_KEY, "content-type": "application/json",
               "anthropic-version": "2023-06-01"}

    def send(thread: str, system: str, diagnostics: dict | None = None) -> dict:
        body = {"model": "sonnet-diag", "max_tokens": 8, "system": system,
                "messages": [{"role": "user", "content": "hello"}]}
        if diagnostics:
            body["diagnostics"] = diagnostics
        st, h, answer = dgw.request("POST", "/v1/messages", body=json.dumps(body).encode(),
                                    headers={**headers, "x-thread-id": thread})
        assert st == 200, answer
        return dgw.wait_request(h["x-request-id"])

    other = send(f"t-other-{tag}", words(f"{tag}a", 1200))
    system = words(f"{tag}b", 1200)
    send(f"t-mine-{tag}", system)
    off = send(f"t-mine-{tag}", system, {"previous_message_id": other["response_id"]})
    assert off["usage"]["cache_read"] > 0 and off["cache_diagnosis"] is None
    assert off["provider_cache_diagnosis"] == {"cache_miss_reason": "system_changed",
                                               "agrees_with_kvgate": False}

    def listed(diagnosis: str, **extra) -> list[str]:
        q = "&".join(f"{k}={v}" for k, v in {"provider_diagnosis": diagnosis, **extra}.items())
        st, _, page = dgw.request("GET", f"/api/requests?{q}",
                                  headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert st == 200, page
        for r in page["requests"]:
            assert r["provider_cache_diagnosis"] is not None
        return [r["request_id"] for r in page["requests"]]

    assert off["request_id"] in listed("disagrees")
    assert off["request_id"] in listed("reported")
    assert off["request_id"] not in listed("agrees")
    # Paged one at a time, the disagreements still come out whole and in order.
    st, _, whole = dgw.request("GET", "/api/requests?provider_diagnosis=disagrees&limit=1000",
                               headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    seen, cursor = [], ""
    for _ in range(50):
        st, _, page = dgw.request(
            "GET", f"/api/requests?provider_diagnosis=disagrees&limit=1&cursor={cursor}",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert st == 200 and len(page["requests"]) <= 1
        seen += [r["request_id"] for r in page["requests"]]
        if not page["next_cursor"]:
            break
        cursor = page["next_cursor"]
    assert seen == [r["request_id"] for r in whole["requests"]]
    st, _, bad = dgw.request("GET", "/api/requests?provider_diagnosis=maybe",
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert st == 400 and "provider_diagnosis" in bad["error"]["message"], bad
