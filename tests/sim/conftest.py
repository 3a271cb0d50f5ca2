"""Fixtures for the provider simulator's self-tests: one simulator process per session."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from simctl import SimProcess  # noqa: E402


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    proc = SimProcess(log_dir=str(tmp_path_factory.mktemp("sim")))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(autouse=True)
def _fresh_sim(request):
    """Every test starts with empty caches, logs and faults."""
    if "sim" in request.fixturenames:
        sim = request.getfixturevalue("sim")
        sim.client.reset()
    yield
