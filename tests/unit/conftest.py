"""tests/unit/: the store in-process (and its CLI in subprocesses); no Ray, no Spark."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_clusters(no_clusters: None) -> None:
    """Starting Ray or Spark here fails the test (tests/conftest.py: no_clusters)."""
