"""The tree keeps one style: `ruff format` would change nothing and `ruff check`
finds nothing (the settings: pyproject.toml [tool.ruff])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["format", "--check", "."], ["check", "."]], ids=["format", "lint"])
def test_ruff(args: list[str]) -> None:
    p = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
