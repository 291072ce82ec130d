"""The official RocketMQ 5 Python client (rocketmq-python-client), imported for tests.

The client fixes its log folder (``~/logs/rocketmq_python``) when ``rocketmq`` is
first imported, so ``load()`` points HOME at a folder of its own for that import:
tests never write into the real home.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path

HOME = Path(tempfile.gettempdir()) / "mqstore-rocketmq-client-home"


def load():
    """The ``rocketmq`` package, imported with HOME at ``HOME`` (logs: HOME/logs)."""
    if "rocketmq" in sys.modules:
        return sys.modules["rocketmq"]
    HOME.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(HOME)
    try:
        return importlib.import_module("rocketmq")
    finally:
        if saved is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved
