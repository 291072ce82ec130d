"""Issue 28 item 5: a replica's truncation to its consistent point, killed (-9) at
every step, in a real child process; then the store is opened again and must end
exactly at the point with everything below it and nothing of the stale tail
(apache/rocketmq#10666: there the stale tail came back). Each point runs twice: a
plain kill -9 (the page cache survives) and a power cut (faults.power_cut: only what
syncs covered survives), which is what shows that the point was made durable before
any byte was cut.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mqstore.store import CommitLog, faults
from mqstore.store.faults import POWER_IMAGE_ENV, POWER_STORE_ENV
from mqstore.store.ha import EpochCache, pending_truncation
from tests.ha_stores import build_stale_tail, check_truncated, config

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[4])
from mqstore.logging import configure_logging
configure_logging(level="error")
from mqstore.store import mapped_file
from mqstore.store.ha import truncate_store
from tests.ha_stores import config

if sys.argv[3] == "mid_delete":  # between two of the stale segments' deletions
    real, calls = mapped_file.Segment.delete, []
    def delete(self):
        calls.append(self)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        real(self)
    mapped_file.Segment.delete = delete
if sys.argv[5] == "no_marker":  # RocketMQ's way: cut the log, nothing made durable first
    from pathlib import Path
    from mqstore.store.segments import SegmentQueue
    queue = SegmentQueue(Path(sys.argv[1]) / "commitlog", config().segment_bytes)
    queue.load()
    queue.truncate_after(int(sys.argv[2]))
else:
    truncate_store(sys.argv[1], int(sys.argv[2]), config())
print("finished", flush=True)
"""

# Each step of truncation.py's table, and the writes inside the steps.
POINTS = [
    "ha.truncate.marker",  # before the point is durable: the store stays as it was
    "ha.truncate.epochs",
    "ha.file.tmp",  # the epoch file's new content in its .tmp
    "ha.file.bak",  # the epoch file renamed to .bak, the new one not in place
    "ha.truncate.checkpoint",
    "checkpoint.write.tmp",
    "config.write.tmp",  # derivedOffset.json lowered: its .tmp
    "ha.truncate.commitlog",
    "mid_delete",
    "commitlog.sync",  # the stale segments gone, the point's segment zeroed, not yet synced
    "ha.truncate.done",
    "cq.sync",  # the cut finished; the consume queues being cut by the open that follows
    "index.sync",
]


def crash(tmp_path: Path, original: Path, at: int, point: str, *, power: bool, how: str = "store") -> Path:
    """A copy of ``original`` truncated to ``at`` by a child killed at ``point``
    (then power-cut if ``power``); returns the copy."""
    store = tmp_path / "store"
    shutil.copytree(original, store)
    env = {k: v for k, v in os.environ.items() if k not in ("MQSTORE_FAULTS", POWER_STORE_ENV, POWER_IMAGE_ENV)}
    if point != "mid_delete":
        env["MQSTORE_FAULTS"] = f"{point}=kill"
    if power:
        env[POWER_STORE_ENV], env[POWER_IMAGE_ENV] = str(store), str(tmp_path / "image")
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), str(at), point, str(ROOT), how],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, f"{point} was not reached: {run.stdout[-2000:]} {run.stderr[-3000:]}"
    if power:
        faults.power_cut(store, tmp_path / "image")
    return store


@pytest.fixture(scope="module")
def stale_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("stale") / "store"
    return store, build_stale_tail(store)


@pytest.mark.crash
@pytest.mark.parametrize("power", [False, True], ids=["kill", "power_cut"])
@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_any_step_never_revives_the_stale_tail(tmp_path: Path, stale_store, point: str, power: bool):
    original, tail = stale_store
    store = crash(tmp_path, original, tail.point, point, power=power)
    if point == "ha.truncate.marker":
        assert pending_truncation(store) is None
        assert [e.epoch for e in EpochCache(store).entries] == [1, 2]  # nothing was cut: nothing was asked
        return
    assert pending_truncation(store) in (tail.point, None)
    check_truncated(store, tail)  # the open finishes the cut (and the builders theirs)
    check_truncated(store, tail)  # and it stays so


@pytest.mark.crash
def test_without_the_marker_a_power_cut_revives_the_stale_tail(tmp_path: Path, stale_store) -> None:
    """Negative control: the same cut without the durable point first (RocketMQ's
    order), killed between two segment deletions and power-cut, opens with the stale
    tail's segments back: what the marker prevents."""
    original, tail = stale_store
    store = crash(tmp_path, original, tail.point, "mid_delete", power=True, how="no_marker")
    with CommitLog(store, config()) as cl:
        assert cl.wrote_offset > tail.point  # stale records are valid again
