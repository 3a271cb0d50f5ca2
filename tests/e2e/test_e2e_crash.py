"""kill -9 under load loses no answered request: every request a client saw answered (its whole
body, streamed or not) is in the store after a restart, once, with the outcome the client saw."""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid

from gwctl import GATEWAY_KEY

CHAT = "/v1/chat/completions"


def test_sigkill_under_load_loses_no_answered_request(kvgate_bin, sim, tmp_path,
                                                      kvgate_process_class):
    class SlowCommit(kvgate_process_class):
        """Commits every 5 s: a SIGKILL then lands with many answered records uncommitted."""

        def _write_config(self):
            super()._write_config()
            text = self.config_path.read_text()
            self.config_path.write_text(
                text.replace(f"storage:  {{sqlite: {self.db_path}}}",
                             f"storage:  {{sqlite: {self.db_path}, commit_interval_ms: 5000}}"))

    kg = SlowCommit(kvgate_bin, tmp_path / "crash", sim.port, name="crash").start()
    answered: dict[str, bool] = {}  # request id -> stream
    sent = [0]  # requests written to kvgate
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int):
        conn = None
        i = 0
        while not stop.is_set():
            stream = (n + i) % 2 == 1
            i += 1
            body = json.dumps({"model": "gpt-4o-mini", "stream": stream,
                               "thread_identifier": f"crash-{n}",
                               "messages": [{"role": "user", "content": f"q {uuid.uuid4().hex}"}]})
            try:
                conn = conn or http.client.HTTPConnection("127.0.0.1", kg.port, timeout=10)
                conn.request("POST", CHAT, body=body, headers={
                    "Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"})
                with lock:
                    sent[0] += 1
                resp = conn.getresponse()
                data = resp.read()  # the whole body: only then has the client seen the answer
                rid = resp.getheader("x-request-id")
                complete = resp.status == 200 and (not stream or data.endswith(b"data: [DONE]\n\n"))
                if complete and rid:
                    with lock:
                        answered[rid] = stream
            except (OSError, http.client.HTTPException):
                conn = None  # the process is gone
                time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(8)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    kg.kill()  # SIGKILL: no drain, no flush
    stop.set()
    for t in threads:
        t.join(15)
    with lock:
        seen = dict(answered)
    assert len(seen) > 100, f"only {len(seen)} requests were answered before the kill"

    kg.start()
    gw = kg.gateway()
    assert "recovered" in kg.stderr_tail(), kg.stderr_tail()
    missing = [rid for rid in seen if gw.admin_get(f"/api/requests/{rid}")[0] != 200]
    assert not missing, f"{len(missing)} of {len(seen)} answered requests lost: {missing[:5]}"
    for rid, stream in list(seen.items())[:50]:
        row = gw.admin_get(f"/api/requests/{rid}")[2]
        assert row["status"] == "ok" and row["stream"] == stream, row
    # Exactly once: one row per request, none for a request that was never sent.
    rows = []
    for n in range(8):
        cursor = ""
        while True:
            page = gw.admin_get(f"/api/requests?thread_id=crash-{n}&limit=1000&cursor={cursor}")[2]
            rows += page["requests"]
            cursor = page["next_cursor"]
            if not cursor:
                break
    ids = [r["request_id"] for r in rows]
    assert len(ids) == len(set(ids)), "a request was stored twice"
    assert len(seen) <= len(ids) <= sent[0], (len(seen), len(ids), sent[0])
    assert kg.terminate() == 0
