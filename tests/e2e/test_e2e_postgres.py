"""kvgate on PostgreSQL (storage.postgres): requests through the provider simulator land in the
PostgreSQL database and come back through /api/threads and /api/requests exactly as the SDK saw
them; two replicas on one database diagnose a thread's turns whichever of them served the turn
before, send a monitor's alert once, and lose nothing answered when one of them is killed; a
PostgreSQL restart is survived (answers go on, /healthz says degraded, nothing answered is lost);
a config naming both stores is refused."""

from __future__ import annotations

import http.server
import json
import random
import subprocess
import threading
import time
import uuid

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, ONE_SECOND_OPENAI_TTL, ChatLoad, with_config_tail
from pgctl import PgServer

MODEL = "gpt-4o-mini"


@pytest.fixture(scope="module")
def pg():
    server = PgServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


def postgres_kvgate(kvgate_process_class, pg: PgServer, database: str):
    class OnPostgres(kvgate_process_class):
        """The harness's config with the telemetry store on PostgreSQL."""

        def _write_config(self):
            super()._write_config()
            text = self.config_path.read_text()
            storage = (f"storage:  {{postgres: \"{pg.uri(database)}\", "
                       f"journal_path: {self.workdir / 'journal'}}}")
            self.config_path.write_text(text.replace(f"storage:  {{sqlite: {self.db_path}}}",
                                                     storage))
    return OnPostgres


def send_turns(gw, thread_id: str, n: int) -> list[tuple[str, dict]]:
    """n turns of one conversation; returns (response id, the SDK's usage) per turn."""
    client = gw.client()
    messages = [{"role": "system", "content": "You answer briefly. " * 400}]
    sent = []
    for i in range(n):
        messages.append({"role": "user", "content": f"question {i} of {thread_id}"})
        r = client.chat.completions.create(model=MODEL, messages=messages,
                                           extra_body={"thread_identifier": thread_id})
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
        details = r.usage.prompt_tokens_details
        sent.append((r.id, {"prompt": r.usage.prompt_tokens,
                            "completion": r.usage.completion_tokens,
                            "cached": details.cached_tokens if details else None}))
    return sent


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f}s")
        time.sleep(0.05)


def test_threads_and_requests_are_stored_in_postgres(kvgate_bin, sim, tmp_path, pg,
                                                     kvgate_process_class):
    database = pg.new_database()
    kg = postgres_kvgate(kvgate_process_class, pg, database)(kvgate_bin, tmp_path / "pg",
                                                             sim.port, name="pg").start()
    try:
        gw = kg.gateway()
        thread_id = f"pg-{uuid.uuid4().hex[:10]}"
        sent = send_turns(gw, thread_id, 3)
        turns = gw.wait_turns(thread_id, 3)
        for (response_id, usage), turn in zip(sent, turns):
            assert turn["response_id"] == response_id
            assert turn["model"] == MODEL and turn["status"] == "ok"
            assert turn["usage"]["output"] == usage["completion"]
            assert turn["usage"]["cache_read"] == usage["cached"]
            assert turn["usage"]["cache_read"] + turn["usage"]["uncached"] == usage["prompt"]
        assert turns[-1]["usage"]["cache_read"] > 0, "the sim caches the repeated prefix"

        st, _, listed = gw.admin_get("/api/threads?limit=10")
        assert st == 200, listed
        [entry] = [t for t in listed["threads"] if t["thread_id"] == thread_id]
        assert entry["turns"] == 3 and entry["models"] == [MODEL]
        assert entry["tokens"]["output"] == sum(u["completion"] for _, u in sent)

        st, _, requests = gw.admin_get(f"/api/requests?thread_id={thread_id}")
        assert st == 200, requests
        assert [r["response_id"] for r in requests["requests"]] == [rid for rid, _ in
                                                                   reversed(sent)]
        request_id = requests["requests"][0]["request_id"]
        st, _, one = gw.admin_get(f"/api/requests/{request_id}")
        assert st == 200 and one["thread_id"] == thread_id and one["provider_type"] == "openai"

        # The rows are PostgreSQL's (no SQLite file was made), with their aggregates.
        assert pg.psql(database, f"SELECT count(*) FROM requests WHERE thread_id = '{thread_id}'") == "3"
        assert pg.psql(database, f"SELECT turns FROM threads WHERE thread_id = '{thread_id}'") == "3"
        assert not (kg.workdir / "kvgate.db").exists()
        st, _, health = gw.request("GET", "/healthz")
        assert st == 200 and health == {"status": "ok"}
    finally:
        assert kg.terminate() == 0, kg.stderr_tail()


def test_two_replicas_diagnose_a_thread_whichever_served_its_last_turn(
        kvgate_bin, sim, tmp_path, pg, kvgate_process_class):
    """A client alternating between two replicas on one database, through a thread whose cache
    expires, whose prompt changes and which switches model: each turn's diagnosis is the one a
    single gateway gives (tests/e2e/test_e2e_diagnosis.py), and either replica shows every turn."""
    database = pg.new_database()
    on_pg = postgres_kvgate(kvgate_process_class, pg, database)

    ShortTtl = with_config_tail(on_pg, ONE_SECOND_OPENAI_TTL)

    replicas = [ShortTtl(kvgate_bin, tmp_path / f"r{i}", sim.port, name=f"r{i}").start()
                for i in range(2)]
    sim.client.config(openai_ttl=1)
    try:
        gws = [kg.gateway() for kg in replicas]
        thread = f"pg-replicas-{uuid.uuid4().hex[:8]}"
        rng = random.Random(7)
        system = {"role": "system", "content": " ".join(f"w{rng.randrange(10**6)}" for _ in range(1300))}
        first = [system, {"role": "user", "content": "first question"}]
        second = first + [{"role": "user", "content": "second question"}]
        third = second + [{"role": "user", "content": "third question"}]
        edited = [{"role": "system", "content": "EDITED " + system["content"]}] + third[1:]
        turns_sent = [("gpt-4o-mini", first), ("gpt-4o-mini", second), ("gpt-4o-mini", third),
                      ("gpt-4o-mini", edited),
                      ("deepseek-chat", edited + [{"role": "user", "content": "q5"}])]
        for i, (model, messages) in enumerate(turns_sent):
            if i == 2:
                time.sleep(1.5)  # past the 1 s idle TTL: turn 2 finds its cache expired
            served_by = gws[i % 2]
            served_by.client().chat.completions.create(
                model=model, messages=messages, max_tokens=8,
                extra_body={"thread_identifier": thread})
            # The next turn goes to the other replica once this one's record is in the database,
            # as it is within a commit interval of the answer.
            gws[(i + 1) % 2].wait_turns(thread, i + 1, timeout=15)
        for gw in gws:
            turns = gw.wait_turns(thread, 5)
            causes = [(t["cache_diagnosis"] or {}).get("cause") for t in turns]
            assert causes == [None, None, "expired", "prompt_changed", "model_switch"], causes
            assert turns[3]["cache_diagnosis"]["message_index"] == 0
            assert turns[4]["cache_diagnosis"]["previous_model"] == "gpt-4o-mini"
    finally:
        sim.client.config(openai_ttl=300)
        for kg in replicas:
            assert kg.terminate() == 0, kg.stderr_tail()


class WebhookReceiver:
    """A real HTTP endpoint that answers 200 to every POST and keeps the bodies."""

    def __init__(self):
        bodies = self.bodies = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kinds(self) -> list[str]:
        return [b["type"] for b in self.bodies]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_monitor_fires_once_across_replicas(kvgate_bin, sim, tmp_path, pg,
                                              kvgate_process_class):
    """Two replicas on one database, both watching a spend monitor that every request crosses:
    the webhook hears one firing, whichever replica evaluated first, and both replicas list that
    one alert. A monitor created through one replica's API is listed by the other."""
    database = pg.new_database()
    hook = WebhookReceiver()
    alerts = f"""\
alerts:
  channels:
    - {{name: hook, type: webhook, url: "{hook.url}", secret: "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM="}}
  monitors:
    - {{name: spend, metric: cost, condition: above, threshold: 0.0000001, window: 5m,
       cooldown: 1h, channels: [hook]}}
"""
    on_pg = with_config_tail(postgres_kvgate(kvgate_process_class, pg, database), alerts)
    replicas = [on_pg(kvgate_bin, tmp_path / f"m{i}", sim.port, name=f"m{i}").start()
                for i in range(2)]
    try:
        gws = [kg.gateway() for kg in replicas]
        for round_ in range(3):  # both replicas see the crossing, on several of their ticks
            for i, gw in enumerate(gws):
                send_turns(gw, f"pg-alert-{round_}-{i}", 1)
            time.sleep(1.2)
        wait_until(lambda: hook.kinds(), 15, "no alert was delivered")
        time.sleep(3)  # three more evaluation ticks on each replica: no second firing
        assert hook.kinds() == ["alert.firing"], hook.bodies
        fired = hook.bodies[0]["data"]
        for gw in gws:
            st, _, listed = gw.admin_get("/api/alerts")
            assert st == 200
            assert [a["id"] for a in listed["alerts"]] == [fired["id"]], listed
        # The replica that did not announce it counts the crossing it left to the other.
        held_elsewhere = 0
        for gw in gws:
            st, _, text = gw.request("GET", "/metrics")
            for line in text.decode().splitlines():
                if line.startswith("kvgate_alerts_held_elsewhere_total{"):
                    held_elsewhere += float(line.rsplit(" ", 1)[1])
        assert held_elsewhere >= 1

        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
        st, _, created = gws[0].request("POST", "/api/monitors", json.dumps(
            {"name": "errors", "metric": "error_rate", "condition": "above", "threshold": 0.5,
             "window": "5m", "channels": ["hook"]}), headers=headers)
        assert st in (200, 201), created
        st, _, listed = gws[1].admin_get("/api/monitors")
        assert created["id"] in [m["id"] for m in listed["monitors"]], listed
    finally:
        hook.close()
        for kg in replicas:
            assert kg.terminate() == 0, kg.stderr_tail()


def test_sigkill_of_one_replica_under_load_loses_nothing_it_answered(
        kvgate_bin, sim, tmp_path, pg, kvgate_process_class):
    """Two replicas under load on one database, committing every 5 s; one is killed (no drain, no
    flush). The other keeps answering; the killed one, restarted on its own journal, writes what
    it had answered, so every answer either replica gave is in the database once."""
    database = pg.new_database()
    on_pg = postgres_kvgate(kvgate_process_class, pg, database)

    class SlowCommit(on_pg):
        def _write_config(self):
            super()._write_config()
            text = self.config_path.read_text()
            self.config_path.write_text(text.replace("journal_path:",
                                                     "commit_interval_ms: 5000, journal_path:"))

    replicas = [SlowCommit(kvgate_bin, tmp_path / f"k{i}", sim.port, name=f"k{i}").start()
                for i in range(2)]
    try:
        load = ChatLoad([kg.port for kg in replicas], 8, "pg-kill").start()
        time.sleep(3.0)
        replicas[0].kill()
        time.sleep(1.0)  # the survivor goes on answering its clients
        seen = load.stop()
        assert len(seen) > 100, f"only {len(seen)} requests were answered"

        replicas[0].start()
        assert "recovered" in replicas[0].stderr_tail(), replicas[0].stderr_tail()
        survivor = replicas[1].gateway()
        deadline = time.monotonic() + 30
        missing = list(seen)
        while missing and time.monotonic() < deadline:
            missing = [rid for rid in missing
                       if survivor.admin_get(f"/api/requests/{rid}")[0] != 200]
            time.sleep(0.2)
        assert not missing, f"{len(missing)} of {len(seen)} answered requests lost: {missing[:5]}"
        ids = load.stored_ids(survivor)
        assert len(ids) == len(set(ids)), "a request was stored twice"
        assert len(seen) <= len(ids) <= load.sent, (len(seen), len(ids), load.sent)
    finally:
        for kg in replicas:
            assert kg.terminate() == 0, kg.stderr_tail()


def test_keys_and_their_budgets_are_shared_by_replicas(kvgate_bin, sim, tmp_path, pg,
                                                       kvgate_process_class):
    """A key made through one replica's /api/keys works on the other; the budget the first one
    spends refuses the key on the second too; a revoke on the second reaches the first."""
    database = pg.new_database()
    on_pg = postgres_kvgate(kvgate_process_class, pg, database)
    replicas = [on_pg(kvgate_bin, tmp_path / f"v{i}", sim.port, name=f"v{i}").start()
                for i in range(2)]
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}

    def chat(gw, key):
        return gw.request("POST", "/v1/chat/completions", json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]}),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})

    try:
        a, b = (kg.gateway() for kg in replicas)
        st, _, made = a.request("POST", "/api/keys", json.dumps(
            {"name": "shared", "max_budget_usd": 0.00004}), headers=admin)
        assert st == 201, made
        secret = made["key"]
        wait_until(lambda: chat(b, secret)[0] == 200, 10, "replica b did not take the new key")
        for _ in range(40):  # spend it on replica a, each request recorded before the next
            st, hdrs, body = chat(a, secret)
            if st != 200:
                break
            a.wait_request(hdrs["x-request-id"])
        assert st == 429 and body["error"]["code"] == "budget_exceeded", body
        # Replica b counts a's spend within its refresh period.
        refused = wait_until(lambda: (lambda r: r if r[0] == 429 else None)(chat(b, secret)), 10,
                             "replica b did not see the spent budget")
        assert refused[2]["error"]["code"] == "budget_exceeded", refused
        st, _, seen = b.admin_get(f"/api/keys/{made['id']}")
        assert st == 200 and seen["budget_remaining_usd"] == 0, seen

        st, _, _ = b.request("DELETE", f"/api/keys/{made['id']}", headers=admin)
        assert st == 200
        wait_until(lambda: chat(a, secret)[0] == 401, 10, "replica a did not see the revoke")
    finally:
        for kg in replicas:
            assert kg.terminate() == 0, kg.stderr_tail()


def test_a_postgres_restart_loses_nothing_answered(kvgate_bin, sim, tmp_path, pg,
                                                   kvgate_process_class):
    database = pg.new_database()
    kg = postgres_kvgate(kvgate_process_class, pg, database)(kvgate_bin, tmp_path / "restart",
                                                             sim.port, name="restart").start()
    try:
        gw = kg.gateway()
        thread_id = f"pg-restart-{uuid.uuid4().hex[:8]}"
        before = send_turns(gw, thread_id, 2)
        gw.wait_turns(thread_id, 2)

        pg.stop()
        # kvgate keeps answering while its database is away...
        during = send_turns(gw, thread_id + "-down", 3)
        assert len(during) == 3
        # ...and says that telemetry is not being written.
        health = wait_until(lambda: (lambda r: r[2] if r[2].get("status") == "degraded" else None)(
            gw.request("GET", "/healthz")), 30, "/healthz did not say degraded")
        assert "PostgreSQL" in health["telemetry"] or "connect" in health["telemetry"], health

        pg.start()
        after = send_turns(gw, thread_id, 1)
        turns = gw.wait_turns(thread_id, 3, timeout=30)
        assert [t["response_id"] for t in turns] == [rid for rid, _ in before + after]
        down = gw.wait_turns(thread_id + "-down", 3, timeout=30)
        assert [t["response_id"] for t in down] == [rid for rid, _ in during]
        wait_until(lambda: gw.request("GET", "/healthz")[2] == {"status": "ok"}, 30,
                   "/healthz did not recover")
    finally:
        assert kg.terminate() == 0, kg.stderr_tail()


def test_a_config_naming_both_stores_is_refused(kvgate_bin, tmp_path, pg):
    config = tmp_path / "both.yaml"
    config.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {tmp_path / 'x.db'}, postgres: "{pg.uri('postgres')}"}}
providers:
  - {{name: openai, type: openai, base_url: http://127.0.0.1:9/v1, api_key: sk-x}}
models:
  - {{name: {MODEL}, provider: openai}}
""")
    done = subprocess.run([kvgate_bin, "serve", "--config", str(config)], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "sqlite" in done.stderr and "postgres" in done.stderr, done.stderr
    assert not (tmp_path / "x.db").exists()
