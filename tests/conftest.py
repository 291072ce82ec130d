"""Shared fixtures: golden vectors made by Apache RocketMQ 5.3.3's own classes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import structlog

GOLDEN_DIR = Path(__file__).parent / "golden"

# Ray keeps its token authentication in tests too (ray.init makes ~/.ray/auth_token
# on first use), whatever a developer's environment says.
os.environ["RAY_AUTH_MODE"] = "token"


# <base>/ray/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store.<n>: Ray refuses a
# Unix socket path over 107 bytes.
_RAY_SOCKET_TAIL = len("/ray/session_2026-01-01_00-00-00_000000_1234567/sockets/plasma_store.10")


@pytest.fixture(scope="session", autouse=True)
def _ray_sessions_in_the_run_dir(tmp_path_factory: pytest.TempPathFactory):
    """Ray (``ray.init`` here, or a ``mqstore serve`` a test starts) keeps its session
    directories (logs, sockets, spilled objects) under this run's base temporary
    directory instead of /tmp/ray, so they go with it when the run passes (pyproject:
    ``tmp_path_retention_policy``). A RAY_TMPDIR of the developer's own is kept, and so
    is Ray's default when the base directory is too deep for Ray's socket paths."""
    base = str(tmp_path_factory.getbasetemp())
    if "RAY_TMPDIR" in os.environ or len(base) + _RAY_SOCKET_TAIL > 107:
        yield
        return
    os.environ["RAY_TMPDIR"] = base
    try:
        yield
    finally:
        os.environ.pop("RAY_TMPDIR", None)


@pytest.fixture(scope="session")
def golden() -> dict:
    return json.loads((GOLDEN_DIR / "rocketmq_vectors.json").read_text())


@pytest.fixture(autouse=True)
def _structlog_unconfigured():
    """A test that configures logging in this process (the CLI run in-process, the
    logging test) leaves structlog as it found it: with ``cache_logger_on_first_use``
    every logger used later would keep that configuration, and ``capture_logs`` in
    later tests would see nothing."""
    yield
    if structlog.is_configured():
        structlog.reset_defaults()
