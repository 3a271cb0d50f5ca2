"""Admin input kvgate would refuse to load is refused at the API (400 naming the field), so that a
restart always works; and a bad row already in the database (an older kvgate's, a hand edit)
costs that monitor or key, with a warning naming it, never the start.

Before this, `POST /api/monitors` took `"window": "99999999999d"` (201), stored it as
"8639999999913600s", and every later start exited blaming the config file."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from gwctl import with_config_tail

# A channel for monitors to name; nothing is delivered in these tests.
ALERTS = """alerts:
  channels:
    - {name: hook, type: webhook, url: "http://127.0.0.1:9/hook", secret: whsec_c2VjcmV0LWtleQ==}
"""

MONITOR = {"name": "spend", "metric": "cost", "condition": "above", "threshold": 1}


def assert_refused(gw, path: str, body: dict, field: str):
    status, _, answer = gw.admin("POST", path, body)
    assert status == 400, (body, status, answer)
    error = answer["error"]
    assert field in error["message"], (body, error)
    assert error["type"] == "invalid_request_error", error
    assert error["code"] == "invalid_argument", error


def spawn(kvgate_process_class, kvgate_bin, sim, workdir, db_path=None):
    cls = with_config_tail(kvgate_process_class, ALERTS)
    return cls(kvgate_bin, workdir, sim.port, db_path=db_path, name="gw")


def test_bad_admin_input_is_a_400_naming_the_field_and_restarts_work(
        kvgate_process_class, kvgate_bin, sim, tmp_path):
    kg = spawn(kvgate_process_class, kvgate_bin, sim, tmp_path / "gw").start()
    try:
        gw = kg.gateway()
        for field, value in [("window", "99999999999d"), ("window", "367d"),
                             ("window", 2**63 - 1), ("cooldown", "99999999999d"),
                             ("cooldown", 10**12), ("min_requests", 10**12)]:
            assert_refused(gw, "/api/monitors", {**MONITOR, field: value}, f"monitor.{field}")
        # A channel that is not configured (channels come from the config file only).
        assert_refused(gw, "/api/monitors", {**MONITOR, "channels": ["pager"]},
                       "monitor.channels")
        # Key bodies: counts beyond their bounds, a period beyond 3650 days.
        assert_refused(gw, "/api/keys", {"name": "k1", "rpm": 2**63 - 1}, "body.rpm")
        assert_refused(gw, "/api/keys", {"name": "k2", "max_parallel": 10**7},
                       "body.max_parallel")
        assert_refused(gw, "/api/keys", {"name": "k3", "tpm": 10**13}, "body.tpm")
        assert_refused(gw, "/api/keys", {"name": "k4", "max_budget_usd": 1,
                                         "budget_duration": "99999999999d"},
                       "body.budget_duration")

        # At the bounds, accepted; and a PUT is checked the same.
        edge = {**MONITOR, "id": "mon_edge", "window": "366d", "cooldown": 366 * 86400,
                "min_requests": 10**9, "channels": ["hook"]}
        status, _, created = gw.admin("POST", "/api/monitors", edge)
        assert status == 201, created
        status, _, answer = gw.admin("PUT", "/api/monitors/mon_edge",
                                  {**MONITOR, "cooldown": "99999999999d"})
        assert status == 400 and "monitor.cooldown" in answer["error"]["message"], answer
        status, _, key = gw.admin("POST", "/api/keys", {"name": "edge", "rpm": 10**9})
        assert status == 201, key

        status, _, listed = gw.admin("GET", "/api/monitors")
        assert status == 200
        assert [m["id"] for m in listed["monitors"]] == ["mon_edge"], listed
        assert listed["invalid"] == []
    finally:
        assert kg.terminate() == 0, kg.stderr_tail()

    # Everything the API accepted loads again.
    kg.start()
    try:
        gw = kg.gateway()
        status, _, listed = gw.admin("GET", "/api/monitors")
        assert status == 200
        assert listed["monitors"][0]["window"] == f"{366 * 86400}s", listed
        assert listed["invalid"] == []
        status, _, keys = gw.admin("GET", "/api/keys")
        assert status == 200 and keys["invalid"] == [], keys
        assert "edge" in [k["name"] for k in keys["keys"]]
        chat = gw.client().chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert chat.choices[0].message.content
    finally:
        kg.terminate()


def test_bad_stored_rows_are_disabled_with_a_warning_and_kvgate_serves(
        kvgate_process_class, kvgate_bin, sim, tmp_path):
    kg = spawn(kvgate_process_class, kvgate_bin, sim, tmp_path / "gw").start()
    gw = kg.gateway()
    status, _, good = gw.admin("POST", "/api/monitors", {**MONITOR, "id": "mon_good"})
    assert status == 201, good
    assert kg.terminate() == 0, kg.stderr_tail()

    # What an older kvgate wrote for "99999999999d", a row that is not JSON, and a key whose
    # budget period overflows.
    db = sqlite3.connect(kg.db_path)
    with db:
        old_rule = {**MONITOR, "id": "mon_from_old", "window": "8639999999913600s"}
        db.execute("INSERT INTO monitors (id, rule_json) VALUES (?, ?)",
                   ("mon_from_old", json.dumps(old_rule)))
        db.execute("INSERT INTO monitors (id, rule_json) VALUES ('mon_junk', '{oops')")
        db.execute("INSERT INTO api_keys (id, name, key_hash, limits, created_at_us) "
                   "VALUES ('key_from_old', 'old', ?, ?, 1)",
                   (hashlib.sha256(b"sk-from-old").hexdigest(),
                    json.dumps({"max_budget_usd": 1,
                                          "budget_duration": "99999999999d"})))
    db.close()

    kg.start()
    try:
        log = kg.stderr_tail(20000)
        assert "stored monitor mon_from_old is disabled: monitor.window" in log, log
        assert "stored monitor mon_junk is disabled" in log, log
        assert "stored key key_from_old is disabled: api key key_from_old.budget_duration" in log, \
            log
        gw = kg.gateway()
        # It serves.
        chat = gw.client().chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert chat.choices[0].message.content
        status, _, listed = gw.admin("GET", "/api/monitors")
        assert status == 200
        assert [m["id"] for m in listed["monitors"]] == ["mon_good"], listed
        invalid = {m["id"]: m for m in listed["invalid"]}
        assert set(invalid) == {"mon_from_old", "mon_junk"}, listed
        assert invalid["mon_from_old"]["enabled"] is False
        assert "monitor.window" in invalid["mon_from_old"]["error"]
        status, _, keys = gw.admin("GET", "/api/keys")
        assert status == 200
        assert [k["id"] for k in keys["invalid"]] == ["key_from_old"], keys
        assert "key_from_old" not in [k["id"] for k in keys["keys"]]
        status, _, _ = gw.request("POST", "/v1/chat/completions", body=json.dumps(
            {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}),
            headers={"Authorization": "Bearer sk-from-old", "Content-Type": "application/json"})
        assert status == 401
        # The bad rows can be repaired or removed through the API.
        status, _, fixed = gw.admin("PUT", "/api/monitors/mon_from_old",
                                 {**MONITOR, "window": "1d"})
        assert status == 200 and fixed["window"] == "86400s", fixed
        status, _, _ = gw.admin("DELETE", "/api/monitors/mon_junk")
        assert status == 200
        status, _, listed = gw.admin("GET", "/api/monitors")
        assert listed["invalid"] == [], listed
        assert sorted(m["id"] for m in listed["monitors"]) == ["mon_from_old", "mon_good"]
    finally:
        assert kg.terminate() == 0, kg.stderr_tail()
