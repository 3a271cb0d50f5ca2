"""Starting the provider simulator as a subprocess and driving its /_sim control API.

Shared by the simulator's self-tests (tests/sim) and kvgate's end-to-end tests (tests/e2e).
Standard library only.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SIM_SCRIPT = Path(__file__).resolve().parent / "provider_sim.py"


def read_line_with_timeout(stream, timeout: float) -> str | None:
    """Reads one line from a pipe in a helper thread; None on timeout or EOF."""
    box: list[str] = []

    def reader():
        box.append(stream.readline())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    if not box:
        return None
    return box[0].decode() if isinstance(box[0], bytes) else box[0]


class SimProcess:
    """The simulator running in its own process on 127.0.0.1, port chosen by the OS."""

    def __init__(self, openai_key="sk-openai-sim", anthropic_key="sk-ant-test",
                 deepseek_key="sk-ds-test", extra_args=(), log_dir: str | None = None):
        self.keys = {"openai": openai_key, "anthropic": anthropic_key, "deepseek": deepseek_key}
        log_dir = log_dir or tempfile.mkdtemp(prefix="kvgate-sim-")
        self.log_path = os.path.join(log_dir, "sim.stderr.log")
        self._log = open(self.log_path, "wb")
        args = [sys.executable, str(SIM_SCRIPT), "--port", "0",
                "--openai-key", openai_key, "--anthropic-key", anthropic_key,
                "--deepseek-key", deepseek_key, *extra_args]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log,
                                     stdin=subprocess.DEVNULL)
        line = read_line_with_timeout(self.proc.stdout, 15.0)
        if not line or not line.startswith("SIM_PORT="):
            self.stop()
            raise RuntimeError(f"simulator did not start (first line {line!r}); see "
                               f"{self.log_path}: {self.stderr_tail()}")
        self.port = int(line.strip().split("=", 1)[1])
        self.client = SimClient(self.port)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            return Path(self.log_path).read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()


class SimClient:
    """The /_sim control API."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.port = port
        self.timeout = timeout

    def _call(self, method: str, path: str, payload=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            body = None if payload is None else json.dumps(payload)
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"sim {method} {path} -> {resp.status}: {data[:500]!r}")
            return json.loads(data)
        finally:
            conn.close()

    def reset(self):
        return self._call("POST", "/_sim/reset")

    def advance_clock(self, seconds: float):
        return self._call("POST", "/_sim/clock", {"advance_seconds": seconds})

    def clock(self):
        return self._call("GET", "/_sim/clock")

    def add_faults(self, *faults: dict):
        return self._call("POST", "/_sim/faults", list(faults))["faults"]

    def faults(self):
        return self._call("GET", "/_sim/faults")["faults"]

    def clear_faults(self):
        return self._call("DELETE", "/_sim/faults")

    def requests(self, limit: int = 0) -> list[dict]:
        q = f"?limit={limit}" if limit else ""
        return self._call("GET", f"/_sim/requests{q}")["requests"]

    def usage_log(self) -> list[dict]:
        return self._call("GET", "/_sim/usage_log")["entries"]

    def config(self, **kwargs):
        return self._call("POST", "/_sim/config", kwargs)

    def wait_for(self, predicate, timeout: float = 10.0, interval: float = 0.05):
        """Polls predicate() until truthy; returns its value or the last value after timeout."""
        deadline = time.monotonic() + timeout
        value = predicate()
        while not value and time.monotonic() < deadline:
            time.sleep(interval)
            value = predicate()
        return value


# --- Expected numbers, from the simulator's documented rules -----------------------------------


def openai_cached_for_prefix(common_prefix: int) -> int:
    if common_prefix < 1024:
        return 0
    return 1024 + 128 * ((common_prefix - 1024) // 128)


def deepseek_cached_for_prefix(common_prefix: int) -> int:
    return 64 * (common_prefix // 64)


def chat_prompt_tokens(messages: list[dict]) -> int:
    """Token count of an OpenAI-format chat prompt (string contents) under the sim's tokenizer."""
    n = 1  # the <|assistant|> primer
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            n += sum(len(p.get("text", "").split()) for p in content)
        else:
            n += len((content or "").split())
        n += 2
    return n
