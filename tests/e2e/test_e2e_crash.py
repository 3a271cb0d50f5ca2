"""kill -9 under load loses no answered request: every request a client saw answered (its whole
body, streamed or not) is in the store after a restart, once, with the outcome the client saw."""

from __future__ import annotations

import time

from gwctl import ChatLoad


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
    load = ChatLoad([kg.port], 8, "crash").start()
    time.sleep(3.0)
    kg.kill()  # SIGKILL: no drain, no flush
    seen = load.stop()
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
    ids = load.stored_ids(gw)
    assert len(ids) == len(set(ids)), "a request was stored twice"
    assert len(seen) <= len(ids) <= load.sent, (len(seen), len(ids), load.sent)
    assert kg.terminate() == 0
