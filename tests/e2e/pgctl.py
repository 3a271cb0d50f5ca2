"""A real PostgreSQL server for the end-to-end tests: Debian's `postgresql` binaries (initdb,
pg_ctl) in a temporary directory on a free loopback port, so CI needs no service. PostgreSQL
refuses to run as root; under root the server runs as `nobody` (runuser). Missing binaries are a
test failure, not a skip: scripts/setup.sh installs them."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _bin_dir() -> str:
    env = os.environ.get("KVGATE_PG_BINDIR")
    if env:
        return env
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.fail("PostgreSQL's server binaries were not found (/usr/lib/postgresql/*/bin or "
                    "$KVGATE_PG_BINDIR): apt-get install postgresql", pytrace=False)
    return str(Path(found[-1]).parent)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self):
        self.bin = _bin_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="kvgate_e2e_pg_"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.as_nobody = os.geteuid() == 0
        if self.as_nobody:
            shutil.chown(self.dir, user="nobody")
        self._run("initdb", "-D", str(self.data), "-U", "kvgate", "--auth=trust",
                  "--encoding=UTF8", "--locale=C.UTF-8", "-N")
        self.running = False
        self.databases = 0

    def _run(self, tool: str, *args: str) -> str:
        cmd = [f"{self.bin}/{tool}", *args]
        if self.as_nobody:
            cmd = ["runuser", "-u", "nobody", "--", *cmd]
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              cwd=self.dir, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n"
                               f"{done.stderr}")
        return done.stdout

    def start(self):
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "server.log"), "-w",
                  "-t", "60", "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 "
                  f"-c unix_socket_directories={self.dir} -c fsync=off", "start")
        self.running = True

    def stop(self):
        if self.running:
            self.running = False
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def uri(self, database: str) -> str:
        return f"postgresql://kvgate@127.0.0.1:{self.port}/{database}"

    def psql(self, database: str, sql: str) -> str:
        """Runs SQL, returns the unaligned tuples-only output."""
        return self._run("psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", str(self.port),
                         "-U", "kvgate", "-d", database, "-c", sql).strip()

    def new_database(self) -> str:
        self.databases += 1
        name = f"kvgate_e2e_{self.databases}"
        self.psql("postgres", f"CREATE DATABASE {name}")
        return name

    def close(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
