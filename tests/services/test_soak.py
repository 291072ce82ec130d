"""The soak of issue 16 (item 7) for 2 minutes: ``bash bench/soak.sh`` starts
``mqstore serve`` (its own local Ray) on a fresh store and runs ``mqstore bench soak``
against it, an actor SIGKILLed every 24 s (commitlog, dispatcher, consume-queue
builder, index builder, front: each once). Nothing acknowledged may be lost, every
killed actor comes back, and the store, stopped cleanly, verifies clean.
The 20-minute run and its figures: BENCHMARKS.md, "Soak"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


def test_two_minute_soak_loses_nothing_and_verifies_clean(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "MQSTORE": str(Path(sys.executable).with_name("mqstore")),
        "MINUTES": "2",
        "KILL_EVERY": "0.4",
        "TMPDIR": str(tmp_path),
    }
    p = subprocess.run(
        ["bash", "bench/soak.sh", "--rate", "5000", "--rss-every", "10"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert p.stdout.strip(), p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    print("\n".join(p.stdout.splitlines()[:-1]))  # the table and RSS per process, for -s
    assert p.returncode == 0 and summary["ok"], (summary, p.stderr[-3000:])
    assert summary["lost"] == 0 and summary["lost_examples"] == []
    assert summary["acked"] > 100_000 and summary["pulled"] >= summary["acked"]
    assert summary["verify"]["ok"] and summary["verify"]["shards"][0]["records"] >= summary["acked"]
    assert summary["clean_close"] and summary["dispatch_caught_up"]
    kills = summary["kills"]
    assert [k["actor"] for k in kills] == ["commitlog-0", "dispatcher-0", "consumequeue-0", "index-0", "front"]
    assert all(k["back_s"] is not None and k["new_pid"] != k["pid"] for k in kills), kills
    assert len(summary["p99_ms_per_minute"]) == 2 and all(summary["p99_ms_per_minute"])
    rss = summary["rss_mb"]
    assert len(rss["t_s"]) >= 12  # every 10 s, plus the first and the last
    assert {"serve", "raylet", "gcs_server", "commitlog-0", "front", "client (soak)"} <= set(rss["processes"])
    assert summary["key_queries"]["final_found"] == summary["key_queries"]["final_checked"] > 0
    assert not list(tmp_path.glob("mqstore-soak.*")), "the temp directory is removed after a passing soak"
