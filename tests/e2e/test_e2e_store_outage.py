"""The SQLite database on a full disk (issue 36): answers go on, /healthz says "degraded" with what
waits, and once space is back every answered request is stored (before, most of them were lost:
SQLite's "disk is full" counted as failed batches whose records were dropped)."""

from __future__ import annotations

import errno
import os
import subprocess
import time

import pytest

from gwctl import ChatLoad


def wait_for(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(what)


def fill(path):
    """Writes `path` until the file system refuses: no space is left for anyone else."""
    chunk = b"x" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    # What is left is smaller than a chunk: take it too.
    with open(str(path) + ".tail", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 512)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise


def test_a_full_disk_loses_no_answered_request(kvgate_bin, sim, tmp_path, kvgate_process_class):
    fs = tmp_path / "fs"
    fs.mkdir()
    # Room for the database and the journal's first segment (8 MiB, preallocated), little more.
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(fs)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    kg = None
    try:
        kg = kvgate_process_class(kvgate_bin, tmp_path / "store", sim.port,
                                  db_path=fs / "kvgate.db", name="store").start()
        gw = kg.gateway()
        assert gw.request("GET", "/healthz")[2] == {"status": "ok"}

        fill(fs / "filler")
        load = ChatLoad([kg.port], 4, "full").start()
        # The writer meets the full disk, keeps the records and says so.
        health = wait_for(lambda: (lambda h: h if h.get("status") == "degraded" else None)(
            gw.request("GET", "/healthz")[2]), 15, "/healthz did not say degraded on a full disk")
        assert "full" in health["telemetry"], health
        assert health["telemetry_queue"]["records"] > 0 and health["telemetry_queue"]["dropped"] == 0
        time.sleep(1.0)  # answers go on meanwhile
        answered = load.stop()
        assert len(answered) > 50, f"only {len(answered)} requests answered on a full disk"
        health = gw.request("GET", "/healthz")[2]
        assert health["status"] == "degraded", health
        assert health["telemetry_queue"]["oldest_age_s"] >= 1.0, health

        os.remove(fs / "filler")
        os.remove(str(fs / "filler") + ".tail")
        wait_for(lambda: gw.request("GET", "/healthz")[2] == {"status": "ok"}, 15,
                 "/healthz did not recover once space was back")
        missing = [rid for rid in answered if gw.admin_get(f"/api/requests/{rid}")[0] != 200]
        print(f"\nfull disk: {len(answered)} answered, {len(answered) - len(missing)} stored, "
              f"{len(missing)} lost")
        assert not missing, f"{len(missing)} of {len(answered)} answered requests lost: {missing[:5]}"
        assert kg.terminate() == 0, kg.stderr_tail()
        assert "cannot be written now" in kg.stderr_tail(), kg.stderr_tail()
        kg = None
    finally:
        if kg is not None:
            kg.kill()
        subprocess.run(["umount", "-l", str(fs)], capture_output=True)
