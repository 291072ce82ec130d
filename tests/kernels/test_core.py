"""The compiled core is loaded, and the command line says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mqstore.kernels import _scan, core_status


def test_mqstore_version_names_the_loaded_extension() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == f"mqstore 0.1.0 (compiled core: {core_status()})"
    assert out.endswith(
        f"(compiled core: loaded, _decode _dispatch _encode _files _intern _probe _queues _scan _verify from {os.path.dirname(_scan.__file__)})"
    )
    assert Path(_scan.__file__).suffix == ".so"
