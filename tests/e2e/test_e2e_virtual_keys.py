"""Gateway keys with limits (server.api_keys objects and /api/keys): the model allow-list, rpm,
tpm, max_parallel and budgets enforced before any upstream call, with OpenAI's 429 and
x-ratelimit-* headers; budgets kept across a restart; the key API's create / rotate / revoke;
the key metrics; and a monitor on a key's `budget`.

Rate limits refill with real time (rpm: 5 refills one request per 12 s), so the counts below hold
as long as each test's burst of requests takes less than that; nothing waits on a timer."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import threading
import time

import openai
import pytest

from gwctl import GATEWAY_KEY

CHAT = "/v1/chat/completions"
HEADER_NAMES = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens",
                "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")


@pytest.fixture
def keyed_kvgate(kvgate_process_class, kvgate_bin, sim, tmp_path):
    """Factory: a kvgate whose server.api_keys is `api_keys` (YAML flow text), with optional
    extra top-level YAML (alerts:), on its own database (or `db_path`)."""

    class KeyedKvgate(kvgate_process_class):
        def __init__(self, *args, api_keys: str, extra_yaml: str = "", **kw):
            self.api_keys = api_keys
            self.extra_yaml = extra_yaml
            super().__init__(*args, **kw)

        def _write_config(self):
            super()._write_config()
            text = self.config_path.read_text()
            text = text.replace("api_keys: [sk-gw-test]", f"api_keys: {self.api_keys}")
            self.config_path.write_text(text + self.extra_yaml)

    procs = []

    def spawn(api_keys: str, extra_yaml: str = "", name: str = "kvgate", db_path=None):
        kg = KeyedKvgate(kvgate_bin, tmp_path / name, sim.port, db_path=db_path, name=name,
                         api_keys=api_keys, extra_yaml=extra_yaml)
        procs.append(kg)
        return kg.start()

    yield spawn
    for kg in procs:
        kg.kill()


def chat(gw, key: str, model: str = "gpt-4o-mini", **extra):
    """One non-streaming chat request over raw HTTP: (status, headers, body)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}], **extra}
    return gw.request("POST", CHAT, body=json.dumps(body),
                      headers={"Authorization": f"Bearer {key}",
                               "Content-Type": "application/json"})


def settle(gw, *request_ids: str):
    """Waits until these requests are recorded: a key's spend and tokens are counted as a request
    is recorded, which is just after its answer went out (the client may be quicker)."""
    for request_id in request_ids:
        gw.wait_request(request_id)


def wait_idle(gw, name: str, timeout: float = 10.0) -> dict:
    """The key once none of its requests is in flight (a hold ends just after the record)."""
    deadline = time.monotonic() + timeout
    while True:
        key = key_by_name(gw, name)
        if key["in_flight"] == 0:
            return key
        assert time.monotonic() < deadline, key
        time.sleep(0.02)


def key_by_name(gw, name: str) -> dict:
    st, _, listing = gw.admin("GET", "/api/keys")
    assert st == 200, listing
    found = [k for k in listing["keys"] if k["name"] == name]
    assert len(found) == 1, listing
    return found[0]


def test_rpm_refuses_the_sixth_request_in_a_minute_with_openai_headers(keyed_kvgate):
    kg = keyed_kvgate("[{name: team-a, key: sk-team-a, rpm: 5}, sk-gw-test]")
    gw = kg.gateway()
    remaining = []
    for _ in range(5):
        st, hdrs, body = chat(gw, "sk-team-a")
        assert st == 200, body
        assert hdrs["x-ratelimit-limit-requests"] == "5"
        remaining.append(int(hdrs["x-ratelimit-remaining-requests"]))
        assert hdrs["x-ratelimit-reset-requests"].endswith("s")
    assert remaining == [4, 3, 2, 1, 0]
    st, hdrs, body = chat(gw, "sk-team-a")
    assert st == 429, body
    assert body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == "rate_limit_exceeded"
    assert "5 requests per minute" in body["error"]["message"]
    assert 1 <= int(hdrs["retry-after"]) <= 12
    assert hdrs["x-ratelimit-limit-requests"] == "5"
    assert hdrs["x-ratelimit-remaining-requests"] == "0"
    assert hdrs["x-ratelimit-reset-requests"]
    # The tokens trio comes too, for a dimension this key does not limit.
    assert hdrs["x-ratelimit-limit-tokens"] == hdrs["x-ratelimit-remaining-tokens"] == "unlimited"
    assert hdrs["x-ratelimit-reset-tokens"] == "0s"
    # A key without limits is not limited, and its answers carry no x-ratelimit-* headers.
    st, hdrs, _ = chat(gw, GATEWAY_KEY)
    assert st == 200
    assert not any(h in hdrs for h in HEADER_NAMES)
    # An Anthropic Messages client (x-api-key) gets the same refusal in Anthropic's shape.
    st, hdrs, body = gw.request(
        "POST", "/v1/messages",
        body=json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8,
                         "messages": [{"role": "user", "content": "hi"}]}),
        headers={"x-api-key": "sk-team-a", "anthropic-version": "2023-06-01",
                 "Content-Type": "application/json"})
    assert st == 429 and body["type"] == "error", body
    assert body["error"]["type"] == "rate_limit_error" and int(hdrs["retry-after"]) >= 1
    # The SDK sees OpenAI's RateLimitError.
    with pytest.raises(openai.RateLimitError):
        gw.client(api_key="sk-team-a").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    # The refusal is recorded: 429, with the key's id.
    key = key_by_name(gw, "team-a")
    assert key["source"] == "config" and key["rpm"] == 5 and key["tpm"] is None
    assert key["rate_limited"]["rpm"] == 3
    record = gw.wait_request(hdrs_id := chat(gw, "sk-team-a")[1]["x-request-id"])
    assert record["http_status"] == 429 and record["api_key_id"] == key["id"], (hdrs_id, record)
    assert record["attempts"] == []  # refused before any upstream call


def test_a_limited_keys_headers_replace_the_upstreams(keyed_kvgate, sim):
    kg = keyed_kvgate("[{name: team-a, key: sk-team-a, rpm: 5}, sk-gw-test]")
    gw = kg.gateway()
    answer = {"id": "chatcmpl-up", "object": "chat.completion", "created": 0,
              "model": "gpt-4o-mini",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    upstream = {"x-ratelimit-limit-requests": "10000", "X-RateLimit-Remaining-Tokens": "123"}
    sim.client.add_faults({"provider": "openai", "status": 200, "body": answer,
                           "headers": upstream, "count": 2})

    def answer_headers(key):
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
        try:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
            conn.request("POST", CHAT, body=json.dumps(body),
                         headers={"Authorization": f"Bearer {key}",
                                  "Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
            return [(k.lower(), v) for k, v in resp.getheaders() if k.lower().startswith("x-ratel")]
        finally:
            conn.close()

    mine = answer_headers("sk-team-a")
    assert sorted(k for k, _ in mine) == sorted(HEADER_NAMES), mine  # each once
    assert ("x-ratelimit-limit-requests", "5") in mine
    assert ("x-ratelimit-remaining-tokens", "unlimited") in mine
    # A key without limits gets the upstream's as they came.
    theirs = answer_headers(GATEWAY_KEY)
    assert sorted(theirs) == [("x-ratelimit-limit-requests", "10000"),
                              ("x-ratelimit-remaining-tokens", "123")], theirs


def test_tpm_counts_used_tokens_and_reserves_max_tokens(keyed_kvgate, sim):
    kg = keyed_kvgate("[{name: tok, key: sk-tok, tpm: 100}, {name: big, key: sk-big, tpm: 100}]")
    gw = kg.gateway()
    used = []
    status = None
    for _ in range(20):
        status, hdrs, body = chat(gw, "sk-tok", max_tokens=5)
        if status != 200:
            break
        assert hdrs["x-ratelimit-limit-tokens"] == "100"
        used.append(body["usage"]["total_tokens"])
        settle(gw, hdrs["x-request-id"])
    assert status == 429, body
    assert body["error"]["code"] == "rate_limit_exceeded" and "tokens per minute" in \
        body["error"]["message"]
    assert hdrs["x-ratelimit-limit-tokens"] == "100" and int(hdrs["retry-after"]) >= 1
    # Admitted while what finished left room for the reservation, refused once it did not (the
    # bucket refills 100 tokens a minute: a few seconds of slack). The reservation is the
    # request's estimate: its prompt at a token per 4 bytes of the body, plus max_tokens (5).
    body_bytes = len(json.dumps({"model": "gpt-4o-mini", "max_tokens": 5,
                                 "messages": [{"role": "user", "content": "hello there"}]}))
    reserved = (body_bytes + 3) // 4 + 5
    assert used and sum(used[:-1]) <= 100 - reserved, (used, reserved)
    assert sum(used) > 100 - reserved - 15, (used, reserved)
    # A request that may produce more than the whole bucket reserves all of it: the first is
    # admitted on a full bucket, the next not until it refills.
    st, hdrs, body = chat(gw, "sk-big", max_tokens=1000)
    assert st == 200, body
    settle(gw, hdrs["x-request-id"])
    wait_idle(gw, "big")
    st, hdrs, body = chat(gw, "sk-big", max_tokens=1000)
    assert st == 429, body
    assert int(hdrs["x-ratelimit-remaining-tokens"]) < 100


def test_max_parallel_refuses_requests_beyond_those_in_flight(keyed_kvgate, sim):
    kg = keyed_kvgate("[{name: par, key: sk-par, max_parallel: 2}]")
    gw = kg.gateway()
    sim.client.add_faults({"provider": "openai", "latency_ms": 4000, "count": 2})
    results = []

    def slow():
        results.append(chat(gw, "sk-par")[0])

    threads = [threading.Thread(target=slow) for _ in range(2)]
    for t in threads:
        t.start()
    sim.client.wait_for(lambda: len(sim.client.requests()) >= 2)
    st, hdrs, body = chat(gw, "sk-par")  # the two slow ones are held upstream
    assert st == 429, body
    assert body["error"]["type"] == "rate_limit_error"
    assert "max_parallel" in body["error"]["message"]
    assert hdrs["retry-after"] == "1"
    assert all(h in hdrs for h in HEADER_NAMES), hdrs
    for t in threads:
        t.join()
    assert results == [200, 200]
    wait_idle(gw, "par")
    st, _, _ = chat(gw, "sk-par")  # their slots were given back
    assert st == 200
    key = wait_idle(gw, "par")
    assert key["rate_limited"]["max_parallel"] == 1


def test_max_parallel_under_concurrent_load(keyed_kvgate, sim):
    kg = keyed_kvgate("[{name: load, key: sk-load, max_parallel: 3}]")
    gw = kg.gateway()
    sim.client.add_faults({"provider": "openai", "latency_ms": 300, "count": 0})
    statuses = []
    lock = threading.Lock()
    peak = [0]

    def worker():
        for _ in range(4):
            st = chat(gw, "sk-load")[0]
            with lock:
                statuses.append(st)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        st, _, key = gw.admin("GET", f"/api/keys/{key_by_name(gw, 'load')['id']}")
        peak[0] = max(peak[0], key["in_flight"])
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 3, statuses
    assert statuses.count(429) >= 1, statuses
    assert peak[0] <= 3
    key = wait_idle(gw, "load")
    assert key["rate_limited"]["max_parallel"] == statuses.count(429)


def test_models_allow_list_is_a_403(keyed_kvgate):
    kg = keyed_kvgate("[{name: narrow, key: sk-narrow, models: [gpt-4o-mini]}, sk-wide]")
    gw = kg.gateway()
    assert chat(gw, "sk-narrow")[0] == 200
    st, _, body = chat(gw, "sk-narrow", model="deepseek-chat")
    assert st == 403, body
    assert body["error"]["code"] == "model_not_allowed" and body["error"]["param"] == "model"
    with pytest.raises(openai.PermissionDeniedError):
        gw.client(api_key="sk-narrow").chat.completions.create(
            model="claude-sonnet-4-5", messages=[{"role": "user", "content": "hi"}])
    # It sees only its models; a key without a list sees all.
    listed = [m.id for m in gw.client(api_key="sk-narrow").models.list()]
    assert listed == ["gpt-4o-mini"]
    st, _, _ = gw.request("GET", "/v1/models/deepseek-chat",
                          headers={"Authorization": "Bearer sk-narrow"})
    assert st == 404
    assert len(gw.client(api_key="sk-wide").models.list().data) == 3


def spend_until_refused(gw, key: str, limit: int = 40):
    """Requests, each recorded before the next, until the key's budget refuses one; returns
    (successes, the refusal)."""
    ok = 0
    for _ in range(limit):
        st, hdrs, body = chat(gw, key)
        if st != 200:
            return ok, (st, hdrs, body)
        settle(gw, hdrs["x-request-id"])
        ok += 1
    raise AssertionError(f"{limit} requests and no refusal")


def test_budget_is_enforced_from_recorded_cost_and_across_a_restart(keyed_kvgate, tmp_path):
    keys = "[{name: spender, key: sk-spend, max_budget_usd: 0.00004}]"
    db = tmp_path / "shared.db"
    kg = keyed_kvgate(keys, name="first", db_path=db)
    gw = kg.gateway()
    ok, (st, hdrs, body) = spend_until_refused(gw, "sk-spend")
    assert st == 429, body
    assert body["error"]["type"] == "insufficient_quota"
    assert body["error"]["code"] == "budget_exceeded"
    assert int(hdrs["retry-after"]) > 0
    assert all(h in hdrs for h in HEADER_NAMES), hdrs
    assert ok >= 2
    key = key_by_name(gw, "spender")
    assert key["spend_usd"] >= 0.00004 and key["budget_remaining_usd"] == 0
    # The spend is the recorded cost of the key's requests; the last success was the one that
    # passed the budget.
    settle(gw, hdrs["x-request-id"])
    st, _, listing = gw.admin("GET", "/api/requests?limit=100")
    costs = [r["cost_pico_usd"]["total"] for r in listing["requests"] if r["status"] == "ok"]
    assert len(costs) == ok and key["spend_pico_usd"] == sum(costs), (key, costs)
    assert kg.terminate() == 0
    # Same database, new process: still over budget, before any new spend.
    kg2 = keyed_kvgate(keys, name="second", db_path=db)
    gw2 = kg2.gateway()
    assert key_by_name(gw2, "spender")["spend_pico_usd"] == key["spend_pico_usd"]
    st, _, body = chat(gw2, "sk-spend")
    assert st == 429 and body["error"]["code"] == "budget_exceeded", body


def test_key_api_create_use_rotate_revoke(keyed_kvgate):
    kg = keyed_kvgate("[{name: cfg, key: sk-cfg, rpm: 100}]")
    gw = kg.gateway()
    st, _, made = gw.admin("POST", "/api/keys",
                        {"name": "made", "models": ["gpt-4o-mini"], "rpm": 50,
                         "max_budget_usd": 5, "budget_duration": "30d"})
    assert st == 201, made
    secret = made["key"]
    assert secret.startswith("sk-kvgate-") and made["source"] == "api"
    assert made["rpm"] == 50 and made["budget_duration"] == "30d" and made["max_budget_usd"] == 5
    assert made["models"] == ["gpt-4o-mini"] and made["budget_duration_s"] == 30 * 86400
    st, hdrs, _ = chat(gw, secret)
    assert st == 200 and hdrs["x-ratelimit-limit-requests"] == "50"
    settle(gw, hdrs["x-request-id"])
    assert chat(gw, secret, model="deepseek-chat")[0] == 403
    # Listed, with the config's key, never with a secret.
    st, _, listing = gw.admin("GET", "/api/keys")
    text = json.dumps(listing)
    assert secret not in text and "sk-cfg" not in text
    by_name = {k["name"]: k for k in listing["keys"]}
    assert by_name["cfg"]["source"] == "config" and by_name["made"]["id"] == made["id"]
    assert by_name["made"]["budget_remaining_usd"] <= 5
    st, _, one = gw.admin("GET", f"/api/keys/{made['id']}")
    assert st == 200 and one["name"] == "made" and "key" not in one
    # Config keys are changed in the config, not here.
    assert gw.admin("DELETE", f"/api/keys/{by_name['cfg']['id']}")[0] == 403
    assert gw.admin("POST", f"/api/keys/{by_name['cfg']['id']}/rotate")[0] == 403
    # Rotation: a new secret, the same key; the old secret stops working.
    before = key_by_name(gw, "made")
    st, _, rotated = gw.admin("POST", f"/api/keys/{made['id']}/rotate")
    assert st == 200, rotated
    assert rotated["id"] == made["id"] and rotated["key"] != secret
    assert rotated["spend_pico_usd"] == before["spend_pico_usd"]
    st, _, body = chat(gw, secret)
    assert st == 401 and body["error"]["code"] == "invalid_api_key"
    assert chat(gw, rotated["key"])[0] == 200
    # Revocation: 401 from then on; still listed, as revoked.
    st, _, revoked = gw.admin("DELETE", f"/api/keys/{made['id']}")
    assert st == 200 and revoked["revoked"] is True
    assert chat(gw, rotated["key"])[0] == 401
    assert gw.admin("DELETE", f"/api/keys/{made['id']}")[0] == 404
    assert key_by_name(gw, "made")["revoked"] is True
    # Bad input: a 400 naming the field; unknown ids 404; the admin token is required.
    for bad, field in (({"name": "x", "rpm": -1}, "body.rpm"), ({"name": "y", "models": ["zz"]},
                       "body.models"), ({"name": "a b"}, "body.name"),
                       ({"name": "z", "budget_duration": "1d"}, "budget_duration"),
                       ({"name": "w", "key": "sk-chosen"}, "unknown key"),
                       ({"name": "made"}, "exists")):
        st, _, body = gw.admin("POST", "/api/keys", bad)
        assert st == 400 and field in body["error"]["message"], (bad, body)
    # Every field is optional, the name too: such a key is shown by its id.
    st, _, unnamed = gw.admin("POST", "/api/keys", {"rpm": 5})
    assert st == 201 and unnamed["name"] is None and unnamed["rpm"] == 5, unnamed
    assert gw.admin("POST", "/api/keys", {})[0] == 201
    assert chat(gw, unnamed["key"])[0] == 200
    assert gw.admin("GET", "/api/keys/key_nope")[0] == 404
    assert gw.request("GET", "/api/keys")[0] == 401
    assert gw.admin("PUT", "/api/keys")[0] == 405


def test_api_keys_survive_a_restart_and_turn_keys_on(keyed_kvgate, kvgate_process_class,
                                                     kvgate_bin, sim, tmp_path):
    db = tmp_path / "keys.db"
    kg = keyed_kvgate("[]", name="open", db_path=db)
    gw = kg.gateway()
    assert chat(gw, "anything")[0] == 200  # no key configured: keys are off
    st, _, made = gw.admin("POST", "/api/keys", {"name": "later", "tpm": 100000})
    assert st == 201
    assert chat(gw, "anything")[0] == 401  # a key exists now: every request must show one
    assert chat(gw, made["key"])[0] == 200
    gw.admin("DELETE", f"/api/keys/{made['id']}")
    assert chat(gw, "anything")[0] == 401  # revoking the last key does not open the gateway
    assert kg.terminate() == 0
    kg2 = keyed_kvgate("[]", name="again", db_path=db)
    gw2 = kg2.gateway()
    assert key_by_name(gw2, "later")["revoked"] is True
    assert chat(gw2, made["key"])[0] == 401


def test_key_metrics_are_exposed_and_promtool_clean(keyed_kvgate):
    kg = keyed_kvgate("[{name: team-a, key: sk-team-a, rpm: 1, max_budget_usd: 10}]")
    gw = kg.gateway()
    st, hdrs, _ = chat(gw, "sk-team-a")
    assert st == 200
    assert chat(gw, "sk-team-a")[0] == 429
    settle(gw, hdrs["x-request-id"])
    st, _, text = gw.request("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else str(text)
    lines = text.splitlines()
    spend = [l for l in lines if l.startswith('kvgate_key_spend_usd{key="team-a"}')]
    assert len(spend) == 1 and float(spend[0].split()[-1]) > 0, spend
    remaining = [l for l in lines if l.startswith('kvgate_key_budget_remaining_usd{key="team-a"}')]
    assert len(remaining) == 1 and 9.9 < float(remaining[0].split()[-1]) < 10, remaining
    assert 'kvgate_key_rate_limited_total{key="team-a",limit="rpm"} 1' in lines
    assert 'kvgate_key_rate_limited_total{key="team-a",limit="budget"} 0' in lines
    promtool = shutil.which("promtool")
    if promtool:
        run = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                             capture_output=True, timeout=30)
        assert run.returncode == 0, run.stdout.decode() + run.stderr.decode()


def test_a_monitor_on_budget_fires_at_80_percent(keyed_kvgate):
    alerts = """\
alerts:
  monitors:
    - {name: budget80, metric: budget, scope: api_key, condition: above, threshold: 0.8,
       window: 10m, cooldown: 1h}
"""
    kg = keyed_kvgate("[{name: watched, key: sk-watched, max_budget_usd: 0.0001}]",
                      extra_yaml=alerts)
    gw = kg.gateway()
    key_id = key_by_name(gw, "watched")["id"]
    while key_by_name(gw, "watched")["spend_usd"] <= 0.00008:
        assert chat(gw, "sk-watched")[0] == 200
    deadline = time.monotonic() + 15
    firing = []
    while not firing and time.monotonic() < deadline:
        st, _, alerts_list = gw.admin("GET", "/api/alerts")
        assert st == 200, alerts_list
        events = alerts_list.get("alerts", alerts_list.get("data", []))
        firing = [a for a in events if a["kind"] == "firing" and a["metric"] == "budget"]
        time.sleep(0.1)
    assert firing, alerts_list
    assert firing[0]["scope"] == "api_key" and firing[0]["scope_key"] == key_id
    assert firing[0]["value"] > 0.8


def test_key_config_errors_name_the_field(kvgate_bin, tmp_path):
    for keys, needle in (("[{name: a, key: k, rpm: -1}]", "server.api_keys[0].rpm"),
                         ("[{name: a, key: k, models: [nope]}]", "server.api_keys[0].models[0]"),
                         ("[{name: a}]", "server.api_keys[0].key"),
                         ("[sk-x, {name: a, key: k, budget_duration: 1w, max_budget_usd: 1}]",
                          "server.api_keys[1].budget_duration"),
                         ("[{name: a, key: k, rpn: 5}]", "unknown key \"rpn\""),
                         ("[{name: a, key: k}, {name: a, key: j}]", "duplicate key name")):
        config = tmp_path / "bad.yaml"
        config.write_text(f"""\
server: {{listen: 127.0.0.1:0, api_keys: {keys}}}
storage: {{sqlite: {tmp_path / 'bad.db'}}}
providers:
  - {{name: p, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: k}}
models:
  - {{name: m, provider: p}}
""")
        run = subprocess.run([kvgate_bin, "serve", "--config", str(config)], capture_output=True,
                             timeout=30, cwd=tmp_path)
        err = run.stderr.decode(errors="replace")
        assert run.returncode != 0, (keys, err)
        assert needle in err, (keys, err)
