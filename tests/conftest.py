"""Shared fixtures: golden vectors made by Apache RocketMQ 5.3.3's own classes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"

# Tests never talk to a real Ray cluster by accident, and never need auth tokens.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def golden() -> dict:
    return json.loads((GOLDEN_DIR / "rocketmq_vectors.json").read_text())
