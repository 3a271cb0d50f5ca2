"""A kvgate process for the benchmarks that replay traffic through it (router_replay, keep_warm):
started on its own config on 127.0.0.1 port 0, its stderr kept in the work directory, its admin
API read as JSON, stopped with SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path


class Kvgate:
    def __init__(self, binary: str, workdir: Path, config: str, admin_token: str,
                 start_timeout: float = 30.0):
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "kvgate.yaml"
        self.config.write_text(config)
        self.admin_token = admin_token
        self.log = open(workdir / "kvgate.stderr.log", "wb")
        self.proc = subprocess.Popen([binary, "serve", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.PIPE, cwd=workdir)
        self.port = None
        deadline = time.monotonic() + start_timeout
        for line in iter(self.proc.stderr.readline, b""):
            self.log.write(line)
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
            if time.monotonic() > deadline:
                break
        if self.port is None:
            raise RuntimeError(f"kvgate did not start; see {workdir / 'kvgate.stderr.log'}")
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in iter(self.proc.stderr.readline, b""):
            self.log.write(line)

    def get(self, path: str):
        """GET `path` of the admin API, as JSON."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     headers={"Authorization": f"Bearer {self.admin_token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
