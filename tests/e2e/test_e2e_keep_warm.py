"""Keep-warm pings, through a real kvgate against the simulator with Anthropic's 5-minute TTL
scaled down to 4 s (kvgate told the same through pricing.caching_rules): a thread idle past most
of its TTL gets a ping recorded with purpose keep_warm, its next turn reads the renewed cache (no
"expired" diagnosis) and the thread shows the net saving; a model without keep_warm sends no
ping; a model whose per-day cap cannot hold one ping sends none either. With the 1-hour TTL
scaled to 30 s, a thread whose gaps outlive the short TTL gets 1-hour writes, which its next turn
reads without a ping; with choose_write_ttl off it never does."""
import json
import random
import re
import shutil
import subprocess
import time
import urllib.parse

import pytest

from gwctl import GATEWAY_KEY

TTL = 4  # seconds, the simulator's and kvgate's
LONG_TTL = 30  # the 1-hour TTL, scaled
HOT, COLD, CAPPED = "claude-sonnet-4-5", "sonnet-cold", "sonnet-capped"
SHORT_ONLY = "sonnet-5m-only"


@pytest.fixture
def warm_gw(kvgate_bin, sim, tmp_path, kvgate_process_class):
    class KeepWarmKvgate(kvgate_process_class):
        def _write_config(self):
            simurl = f"http://127.0.0.1:{self.sim_port}"
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: test-admin, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
pricing:
  caching_rules:
    anthropic: {{automatic: false, min_cacheable_tokens: 1024, granularity_tokens: 1, ttl_seconds: {TTL},
                max_ttl_seconds: {LONG_TTL}}}
providers:
  - {{name: claude, type: anthropic, base_url: {simurl}/anthropic, api_key: sk-ant-test}}
models:
  - {{name: {HOT}, provider: claude, upstream_model: claude-sonnet-4-5,
     keep_warm: {{enabled: true, max_usd_per_day: 5, max_pings_per_thread: 2}}}}
  - {{name: {COLD}, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: {CAPPED}, provider: claude, upstream_model: claude-sonnet-4-5,
     keep_warm: {{enabled: true, max_usd_per_day: 0.000001}}}}
  - {{name: {SHORT_ONLY}, provider: claude, upstream_model: claude-sonnet-4-5,
     keep_warm: {{enabled: true, max_pings_per_thread: 2, choose_write_ttl: false}}}}
""")

    kg = KeepWarmKvgate(kvgate_bin, tmp_path / "kw", sim.port, name="kw").start()
    sim.client.config(anthropic_ttl_5m=TTL, anthropic_ttl_1h=LONG_TTL)
    yield kg.gateway()
    sim.client.config(anthropic_ttl_5m=300, anthropic_ttl_1h=3600)
    assert kg.terminate() == 0


def long_text(seed, n=1500):
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(n))


def turn(gw, model, thread, system, questions):
    """One Messages turn with the conversation so far, the breakpoint on its last message."""
    messages = []
    for i, q in enumerate(questions):
        messages.append({"role": "user", "content": [{"type": "text", "text": q}]})
        if i < len(questions) - 1:
            messages.append({"role": "assistant", "content": f"answer {i}"})
    messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    body = {"model": model, "max_tokens": 16, "system": system, "messages": messages}
    st, _, answer = gw.request("POST", "/v1/messages", json.dumps(body),
                               {"x-api-key": GATEWAY_KEY, "content-type": "application/json",
                                "anthropic-version": "2023-06-01", "x-thread-id": thread})
    assert st == 200, answer
    return answer


def requests_of(gw, thread, purpose=None):
    q = f"/api/requests?thread_id={urllib.parse.quote(thread)}&limit=100"
    if purpose:
        q += f"&purpose={purpose}"
    st, _, body = gw.admin_get(q)
    assert st == 200, body
    return body["requests"]


def metric(gw, name, **labels):
    _, _, text = gw.request("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else str(text)
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}\{{{re.escape(want)}\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_ping_renews_the_cache_and_the_thread_shows_the_net(warm_gw):
    gw = warm_gw
    system = [{"type": "text", "text": long_text(1)}]
    systems = {HOT: system, COLD: [{"type": "text", "text": long_text(2)}],
               CAPPED: [{"type": "text", "text": long_text(3)}]}
    threads = {m: f"kw-{m}-{random.randrange(10**9)}" for m in (HOT, COLD, CAPPED)}
    for m in (HOT, COLD, CAPPED):
        turn(gw, m, threads[m], systems[m], ["first"])
    # With no evidence yet that threads come back after such a gap, nothing is pinged: the
    # second turns find their caches expired, and are that evidence.
    time.sleep(TTL + 1.2)
    for m in (HOT, COLD, CAPPED):
        turn(gw, m, threads[m], systems[m], ["first", "second"])
    assert requests_of(gw, threads[HOT], "keep_warm") == []
    # Idle past the TTL again: now the kept-warm thread's cache survives it, renewed by a ping
    # sent shortly before it would have expired.
    time.sleep(TTL + 1.2)
    for m in (HOT, COLD, CAPPED):
        turn(gw, m, threads[m], systems[m], ["first", "second", "third"])

    hot = gw.wait_turns(threads[HOT], 4)
    pings = [t for t in hot if t["purpose"] == "keep_warm"]
    client_turns = [t for t in hot if t["purpose"] == "client"]
    assert len(pings) == 1 and len(client_turns) == 3, hot
    assert (client_turns[1]["cache_diagnosis"] or {}).get("cause") == "expired", client_turns[1]
    ping = pings[0]
    assert ping["status"] == "ok", ping
    assert ping["usage"]["cache_read"] > 1000, ping             # it read the cached prefix
    assert ping["usage"]["output"] == 1, ping                   # the smallest answer
    assert ping["cache_diagnosis"] is None, ping                # a ping is never diagnosed
    third = client_turns[-1]
    assert third["cache_diagnosis"] is None, third              # not "expired": the ping renewed it
    assert third["usage"]["cache_read"] > 1000, third
    assert third["keep_warm_saved_usd"] > 0, third

    st, thread = gw.thread(threads[HOT])
    assert st == 200
    assert thread["summary"]["turns"] == 3, thread["summary"]   # the ping is not a turn
    kw = thread["keep_warm"]
    assert kw["pings"] == 1
    assert kw["cost_usd"] == pytest.approx(ping["cost_usd"]["total"])
    assert kw["saved_usd"] == pytest.approx(third["keep_warm_saved_usd"])
    assert kw["net_usd"] == pytest.approx(kw["saved_usd"] - kw["cost_usd"])
    assert kw["net_usd"] > 0, kw
    # ...but its cost is the thread's.
    assert thread["summary"]["cost_usd"]["total"] == pytest.approx(
        sum(t["cost_usd"]["total"] for t in hot))

    # The ping as a request of its own, found by purpose.
    listed = requests_of(gw, threads[HOT], "keep_warm")
    assert [r["request_id"] for r in listed] == [ping["request_id"]]
    assert listed[0]["thread_id"] == threads[HOT]
    st, _, one = gw.admin_get(f"/api/requests/{ping['request_id']}")
    assert st == 200 and one["purpose"] == "keep_warm", one
    assert all(r["purpose"] == "client" for r in requests_of(gw, threads[HOT], "client"))
    st, _, bad = gw.admin_get("/api/requests?purpose=warmish")
    assert st == 400 and "purpose" in json.dumps(bad), bad

    # Keep-warm off: no ping, and the turn after the gap found the cache expired.
    cold = gw.wait_turns(threads[COLD], 3)
    assert all(t["purpose"] == "client" for t in cold), cold
    assert (cold[-1]["cache_diagnosis"] or {}).get("cause") == "expired", cold[-1]

    # The per-day cap holds no ping: none is sent, the skip is counted.
    capped = gw.wait_turns(threads[CAPPED], 3)
    assert all(t["purpose"] == "client" for t in capped), capped
    assert (capped[-1]["cache_diagnosis"] or {}).get("cause") == "expired", capped[-1]
    assert metric(gw, "kvgate_keep_warm_skipped_total", model=CAPPED, reason="daily_cap") >= 1
    assert metric(gw, "kvgate_keep_warm_pings_total", model=CAPPED) == 0

    assert metric(gw, "kvgate_keep_warm_pings_total", model=HOT) == 1
    assert metric(gw, "kvgate_keep_warm_cost_usd_total", model=HOT) == pytest.approx(
        kw["cost_usd"], rel=1e-6)
    assert metric(gw, "kvgate_keep_warm_saved_usd_total", model=HOT) == pytest.approx(
        kw["saved_usd"], rel=1e-6)

    # promtool accepts the keep-warm families as kvgate exposes them.
    if shutil.which("promtool"):
        _, _, text = gw.request("GET", "/metrics")
        text = text.decode() if isinstance(text, bytes) else str(text)
        ours = "".join(line + "\n" for line in text.splitlines()
                       if "kvgate_keep_warm_" in line)
        assert "# TYPE kvgate_keep_warm_skipped_total counter" in ours, ours
        check = subprocess.run(["promtool", "check", "metrics"], input=ours.encode(),
                               capture_output=True, timeout=30)
        assert check.returncode == 0, (check.stdout, check.stderr, ours)

    st, _, overview = gw.admin_get("/api/overview?window=1h")
    assert st == 200, overview
    assert overview["keep_warm"]["pings"] == 1, overview["keep_warm"]
    assert overview["keep_warm"]["net_usd"] == pytest.approx(kw["net_usd"], rel=1e-6)


def test_gaps_past_the_short_ttl_get_one_hour_writes(warm_gw):
    gw = warm_gw
    threads = {m: f"kw-long-{m}-{random.randrange(10**9)}" for m in (HOT, SHORT_ONLY)}
    systems = {HOT: [{"type": "text", "text": long_text(4)}],
               SHORT_ONLY: [{"type": "text", "text": long_text(5)}]}
    questions = ["first", "second", "third", "fourth"]
    for n in range(1, 5):
        if n > 1:
            time.sleep(TTL + 1.2)  # past the short TTL, well within the long one
        for m in (HOT, SHORT_ONLY):
            turn(gw, m, threads[m], systems[m], questions[:n])

    def clients(ts):
        return [t for t in ts if t["purpose"] == "client"]

    every = gw.wait_turns(threads[HOT], 4, until=lambda ts: len(clients(ts)) >= 4)
    hot = clients(every)
    assert len(hot) == 4, hot
    # The first turns wrote for 5 minutes; once a gap past that was seen, the thread's writes are
    # for the hour, and the next turn after a gap past the short TTL read them, with no ping.
    assert hot[0]["usage"]["cache_write_1h"] == 0 and hot[0]["usage"]["cache_write_5m"] > 1000, hot[0]
    assert (hot[1]["cache_diagnosis"] or {}).get("cause") == "expired", hot[1]
    long_turns = [i for i, t in enumerate(hot) if t["usage"]["cache_write_1h"] > 0]
    assert long_turns and long_turns[0] in (1, 2), [t["usage"] for t in hot]
    after = hot[long_turns[0] + 1]
    assert after["cache_diagnosis"] is None, after
    assert after["usage"]["cache_read"] >= hot[long_turns[0]]["usage"]["cache_read"], after
    pings = [t for t in every if t["purpose"] == "keep_warm"
             and t["created_at"] > hot[long_turns[0]]["created_at"]]
    assert pings == [], pings  # the hour-long entry needed none
    assert metric(gw, "kvgate_keep_warm_long_writes_total", model=HOT) >= 1

    # choose_write_ttl: false: every write stays at 5 minutes.
    short = clients(gw.wait_turns(threads[SHORT_ONLY], 4, until=lambda ts: len(clients(ts)) >= 4))
    assert all(t["usage"]["cache_write_1h"] == 0 for t in short), [t["usage"] for t in short]
    assert metric(gw, "kvgate_keep_warm_long_writes_total", model=SHORT_ONLY) == 0
