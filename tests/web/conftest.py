"""Fixtures for the dashboard's browser tests: the provider simulator, a kvgate (admin token set)
that records real threads through it and serves the built-in engine too, and a headless
chromium driven by Selenium.

The browser is Debian's (/usr/bin/chromium, /usr/bin/chromedriver; CHROMIUM_BIN and
CHROMEDRIVER_BIN override the paths). A missing browser is a test failure, not a skip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "sim"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from simctl import SimProcess  # noqa: E402

from gwctl import ADMIN_TOKEN, GATEWAY_KEY  # noqa: E402

# tests/e2e/conftest.py holds KvgateProcess; loaded under its own name (both dirs have a
# conftest module).
_spec = importlib.util.spec_from_file_location("e2e_conftest", REPO / "tests" / "e2e" / "conftest.py")
e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e)

BUNDLED_MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SIM_OPENAI_KEY = e2e.SIM_OPENAI_KEY


class DashboardKvgate(e2e.KvgateProcess):
    """The simulator's three providers, the bundled model on the built-in engine, OpenAI's idle
    TTL at 1 s (so a real pause of 1.5 s is an expiry kvgate can see on its own clock), and
    a webhook channel for the monitors page."""

    def __init__(self, *args, admin_token: str | None = ADMIN_TOKEN, **kw):
        self.admin_token = admin_token
        super().__init__(*args, **kw)

    def _write_config(self):
        sim = f"http://127.0.0.1:{self.sim_port}"
        token = f"admin_token: {self.admin_token}, " if self.admin_token else ""
        self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, {token}api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: openai, type: openai, base_url: {sim}/openai/v1, api_key: "${{SIM_OPENAI_KEY}}"}}
  - {{name: claude, type: anthropic, base_url: {sim}/anthropic, api_key: sk-ant-test}}
  - {{name: claude-diag, type: anthropic, base_url: {sim}/anthropic, api_key: sk-ant-test,
     anthropic_auto_cache: true, anthropic_cache_diagnostics: true}}
  - {{name: ds, type: deepseek, base_url: {sim}/deepseek/v1, api_key: sk-ds-test}}
  - {{name: local, type: local, model_path: {BUNDLED_MODEL}, kv_cache_tokens: 4096, threads: 2}}
models:
  - {{name: gpt-4o-mini, provider: openai, upstream_model: gpt-4o-mini}}
  - {{name: claude-sonnet-4-5, provider: claude, upstream_model: claude-sonnet-4-5}}
  - {{name: claude-diag, provider: claude-diag, upstream_model: claude-sonnet-4-5}}
  - {{name: deepseek-chat, provider: ds, upstream_model: deepseek-chat}}
  - {{name: smollm2, provider: local}}
pricing:
  caching_rules:
    openai: {{min_cacheable_tokens: 1024, granularity_tokens: 128, ttl_seconds: 1}}
alerts:
  channels:
    - {{name: ops-hook, type: webhook, url: {sim}/_sim/hook, secret: whsec_a3ZnYXRlLWRhc2hib2FyZC10ZXN0LXNlY3JldC0zMmI=}}
""")


def _binary(env: str, default: str) -> str:
    path = os.environ.get(env) or shutil.which(default) or f"/usr/bin/{default}"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"{default} not found at {path}: install Debian's chromium and chromium-driver "
                    f"(scripts/setup.sh does) or set {env}", pytrace=False)
    return path


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    proc = SimProcess(openai_key=SIM_OPENAI_KEY, log_dir=str(tmp_path_factory.mktemp("sim")))
    proc.client.config(openai_ttl=1)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def kvgate(sim, tmp_path_factory):
    if not BUNDLED_MODEL.exists():
        pytest.fail(f"bundled model missing: {BUNDLED_MODEL} (scripts/fetch_model.sh fetches it)")
    kg = DashboardKvgate(e2e.kvgate_binary(), tmp_path_factory.mktemp("kvgate-web"), sim.port,
                         name="web")
    kg.start(timeout=60)
    try:
        yield kg
    finally:
        if kg.alive:
            assert kg.terminate() == 0, kg.stderr_tail()


@pytest.fixture(scope="session")
def open_kvgate(sim, tmp_path_factory):
    """A kvgate without an admin token, for the warning banner."""
    kg = DashboardKvgate(e2e.kvgate_binary(), tmp_path_factory.mktemp("kvgate-open"), sim.port,
                         name="open", admin_token=None)
    kg.start(timeout=60)
    try:
        yield kg
    finally:
        kg.kill()


@pytest.fixture(scope="session")
def browser():
    # Both paths are given, so Selenium Manager has nothing to find; offline, it could not
    # download a browser or a driver even if it tried.
    os.environ.setdefault("SE_OFFLINE", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _binary("CHROMIUM_BIN", "chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--force-device-scale-factor=1",
                "--disable-extensions", "--no-first-run", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_binary("CHROMEDRIVER_BIN", "chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
