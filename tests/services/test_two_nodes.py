"""Two shards on two Ray nodes (a simulated cluster: ray.cluster_utils.Cluster),
placed by `mqstore serve --placement resource`; send and pull through the front,
a node replaced under a shard. The cluster runs in a process of its own
(two_nodes_workload.py): it can not share one with another Ray session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parents[2]


def test_two_shards_on_two_nodes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "services" / "two_nodes_workload.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=ROOT,
    )
    serve_err = tmp_path / "serve.err"
    detail = p.stderr[-6000:] + ("\n--- serve ---\n" + serve_err.read_text()[-6000:] if serve_err.exists() else "")
    assert p.returncode == 0, detail
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["ok"] and summary["placed"] == {"shard-0": "head", "shard-1": "worker"}, summary
