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
