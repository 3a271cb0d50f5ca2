"""Fixtures for kvgate's end-to-end tests: the provider simulator and real kvgate processes.

The kvgate binary is $KVGATE_BIN (default <repo>/build/bin/kvgate). A missing binary is a test
failure, not a skip: in CI the binary is built before ctest runs these tests.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "sim"))
sys.path.insert(0, str(HERE))

from simctl import SimProcess  # noqa: E402

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, Gateway  # noqa: E402

SIM_OPENAI_KEY = "sk-openai-sim"  # passed to kvgate through ${SIM_OPENAI_KEY}


def kvgate_binary() -> str:
    path = os.environ.get("KVGATE_BIN") or str(REPO / "build" / "bin" / "kvgate")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"kvgate binary not found or not executable at {path!r}: build it "
                    f"(cmake --build build) or set KVGATE_BIN", pytrace=False)
    return path


class KvgateProcess:
    """One `kvgate serve --config FILE` process, on 127.0.0.1 with an OS-chosen port."""

    LISTEN_RE = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")

    def __init__(self, binary: str, workdir: Path, sim_port: int, db_path: Path | None = None,
                 server_extra: dict | None = None, name: str = "kvgate"):
        self.binary = binary
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db_path = Path(db_path) if db_path else self.workdir / "kvgate.db"
        self.config_path = self.workdir / f"{name}.yaml"
        self.log_path = self.workdir / f"{name}.stderr.log"
        self.sim_port = sim_port
        self.server_extra = server_extra or {}
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.exit_code: int | None = None
        self._write_config()

    def _write_config(self):
        sim = f"http://127.0.0.1:{self.sim_port}"
        server = {"listen": "127.0.0.1:0", "admin_token": "test-admin",
                  "api_keys": "[sk-gw-test]", **{k: str(v) for k, v in self.server_extra.items()}}
        server_yaml = ", ".join(f"{k}: {v}" for k, v in server.items())
        self.config_path.write_text(f"""\
server:   {{{server_yaml}}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: openai, type: openai, base_url: {sim}/openai/v1, api_key: "${{SIM_OPENAI_KEY}}"}}
  - {{name: claude, type: anthropic, base_url: {sim}/anthropic, api_key: sk-ant-test}}
  - {{name: ds, type: deepseek, base_url: {sim}/deepseek/v1, api_key: sk-ds-test}}
models:
  - {{name: gpt-4o-mini, provider: openai, upstream_model: gpt-4o-mini}}
  - {{name: claude-sonnet-4-5, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: deepseek-chat, provider: ds, upstream_model: deepseek-chat}}
""")

    def start(self, timeout: float = 20.0) -> "KvgateProcess":
        env = dict(os.environ, SIM_OPENAI_KEY=SIM_OPENAI_KEY)
        self.exit_code = None
        self.port = None
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "serve", "--config", str(self.config_path)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.PIPE,
                                     env=env, cwd=self.workdir)
        found = threading.Event()

        def pump(stream, log=log):
            # Copies stderr to the log file (kvgate must never block on a full pipe) and finds
            # the listening line.
            for line in iter(stream.readline, b""):
                log.write(line)
                log.flush()
                m = self.LISTEN_RE.search(line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    found.set()
            stream.close()
            log.close()
            found.set()

        threading.Thread(target=pump, args=(self.proc.stderr,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not found.is_set():
            found.wait(0.05)
        if self.port is None:
            rc = self.proc.poll()
            self.kill()
            raise RuntimeError(f"kvgate did not print 'listening on http://127.0.0.1:<port>' within "
                               f"{timeout:.0f}s (exit code {rc}); config {self.config_path}; "
                               f"stderr:\n{self.stderr_tail()}")
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def gateway(self) -> Gateway:
        return Gateway(self.port)

    def stderr_tail(self, n: int = 6000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def terminate(self, timeout: float = 40.0) -> int:
        """SIGTERM, then wait; returns the exit code (kills and raises if it does not exit)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"kvgate did not exit within {timeout:.0f}s of SIGTERM; "
                                     f"stderr:\n{self.stderr_tail()}")
        self.exit_code = self.proc.returncode
        return self.exit_code

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture(scope="session")
def kvgate_bin():
    return kvgate_binary()


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    proc = SimProcess(openai_key=SIM_OPENAI_KEY, log_dir=str(tmp_path_factory.mktemp("sim")))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def kvgate_main(kvgate_bin, sim, tmp_path_factory):
    """The shared kvgate instance most tests use."""
    kg = KvgateProcess(kvgate_bin, tmp_path_factory.mktemp("kvgate-main"), sim.port)
    kg.start()
    try:
        yield kg
    finally:
        if kg.alive:
            rc = kg.terminate()
            assert rc == 0, f"kvgate exited with {rc} on SIGTERM; stderr:\n{kg.stderr_tail()}"


@pytest.fixture
def gw(kvgate_main):
    """A handle on the shared kvgate; restarted if an earlier test crashed it."""
    if not kvgate_main.alive:
        kvgate_main.start()
    yield kvgate_main.gateway()
    if not kvgate_main.alive:
        rc = kvgate_main.proc.returncode
        pytest.fail(f"kvgate died during this test (exit code {rc}); stderr tail:\n"
                    f"{kvgate_main.stderr_tail()}", pytrace=False)


@pytest.fixture
def spawn_kvgate(kvgate_bin, sim, tmp_path):
    """Factory for extra kvgate instances (own config knobs / db); all killed at teardown."""
    procs: list[KvgateProcess] = []

    def spawn(name="kvgate", db_path=None, **server_extra) -> KvgateProcess:
        kg = KvgateProcess(kvgate_bin, tmp_path / name, sim.port, db_path=db_path,
                           server_extra=server_extra, name=name)
        procs.append(kg)
        return kg.start()

    yield spawn
    for kg in procs:
        kg.kill()


@pytest.fixture(autouse=True)
def _fresh_sim(request):
    """Empty sim caches, logs and faults for every test that uses the simulator."""
    if "sim" in request.fixturenames:
        s = request.getfixturevalue("sim")
        s.client.reset()
        yield
        s.client.clear_faults()
    else:
        yield


@pytest.fixture(scope="session")
def kvgate_process_class():
    """KvgateProcess, for tests that subclass it to write another config. (Importing it with
    `from conftest import ...` is ambiguous: tests/sim has a conftest too, in the same session.)"""
    return KvgateProcess


BUNDLED_MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


class LocalKvgateProcess(KvgateProcess):
    """kvgate serving only the bundled model, as `smollm2`, on the built-in engine."""

    def _write_config(self):
        self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: local, type: local, model_path: {BUNDLED_MODEL}, kv_cache_tokens: 8192, threads: 2}}
models:
  - {{name: smollm2, provider: local}}
""")


@pytest.fixture
def local_gw(kvgate_bin, tmp_path):
    """A kvgate on the built-in engine (LocalKvgateProcess); must exit 0 on SIGTERM."""
    if not BUNDLED_MODEL.exists():
        pytest.fail(f"bundled model missing: {BUNDLED_MODEL} (scripts/fetch_model.sh fetches it)")
    kg = LocalKvgateProcess(kvgate_bin, tmp_path / "local", sim_port=0, name="local").start(timeout=60)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


@pytest.fixture(scope="session")
def bundled_model() -> Path:
    """The bundled GGUF model; a missing file fails the test (scripts/fetch_model.sh fetches it)."""
    if not BUNDLED_MODEL.exists():
        pytest.fail(f"bundled model missing: {BUNDLED_MODEL} (scripts/fetch_model.sh fetches it)")
    return BUNDLED_MODEL


@pytest.fixture(scope="session")
def local_kvgate_class():
    """LocalKvgateProcess, for tests that restart a kvgate on the built-in engine."""
    return LocalKvgateProcess
