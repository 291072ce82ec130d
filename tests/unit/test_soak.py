"""``bench soak``'s parts that need no deployment: the kill schedule, the ack log
checked against pulls (what counts as lost), and how the processes of a deployment
are told apart (titles as Ray sets them, files as the actors hold them), through
psutil and through /proc. The soak itself: tests/services/test_soak.py (slow)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.bench import processes
from mqstore.bench.acklog import AckLog
from mqstore.bench.soak import Soak, _Queue, check_acks, key_hash


def soak(**kw) -> Soak:
    return Soak(server="127.0.0.1:1", store=Path("/nonexistent"), **kw)


def test_kills_start_half_an_interval_in_and_cover_every_actor_in_20_minutes() -> None:
    assert soak(serve_pid=1).kill_times() == [120.0, 360.0, 600.0, 840.0, 1080.0]  # 5 kills: every actor once
    assert len(soak(serve_pid=1, minutes=2, kill_every=0.4).kill_times()) == 5
    assert soak(serve_pid=1, kill_every=0).kill_times() == []
    assert soak().kill_times() == []  # without serve's pid nothing can be killed
    with pytest.raises(ValueError, match="kill_order"):
        soak(kill_order=("commitlog", "broker"))
    with pytest.raises(ValueError):
        soak(minutes=0)


def test_an_ack_not_pulled_at_its_offset_with_its_unique_key_is_lost(tmp_path: Path) -> None:
    keys = [f"{i:032X}" for i in range(10)]
    q0 = _Queue("T", 0)  # pulled in two pulls: offsets 0-4 and 5-9
    q0.offsets = [np.arange(0, 5, dtype=np.int64), np.arange(5, 10, dtype=np.int64)]
    q0.hashes = [
        np.array([key_hash(k) for k in keys[:5]], np.uint64),
        np.array([key_hash(k) for k in keys[5:]], np.uint64),
    ]
    q1 = _Queue("T", 1)  # nothing pulled
    path = tmp_path / "acks"
    log = AckLog(path)

    def line(q: int, off: int, key: str) -> str:
        return f'{{"topic":"T","queue_id":{q},"queue_offset":{off},"unique_key":"{key}","msg_id":"X"}}\n'

    log.write_lines([line(0, i, keys[i]) for i in range(10)])  # all found
    log.write_lines([line(0, 3, keys[4]), line(0, 10, "A" * 32), line(1, 0, keys[0]), line(2, 0, keys[0])])
    log.close()
    lines, lost, examples = check_acks(path, [q0, q1], chunk=3)  # several chunks
    assert lines == 14 and lost == 4
    assert [(e["queue_id"], e["queue_offset"]) for e in examples] == [(0, 3), (0, 10), (1, 0), (2, 0)]


def _wait_titles(pid: int, count: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = processes.deployment_processes(pid, [])
        if sum("ray::" in " ".join(processes._cmdline(p.pid)) for p in found) >= count:
            return
        time.sleep(0.05)
    raise AssertionError("the children did not take their titles")


@pytest.mark.parametrize("backend", ["psutil", "proc"])
def test_processes_are_labelled_by_title_and_held_files(tmp_path: Path, monkeypatch, backend: str) -> None:
    if backend == "proc":
        monkeypatch.setattr(processes, "psutil", None)
    elif processes.psutil is None:
        pytest.skip("psutil is not installed")
    shards = [tmp_path / "shard-0", tmp_path / "shard-1"]
    for d in shards:
        d.mkdir()
    children = [  # (title, file held open): the actors as Ray titles them, the files they lock
        ("ray::CommitLogActor", shards[1] / "lock"),
        ("ray::BuilderActor", shards[0] / "lock.consumequeue"),
        ("ray::BuilderActor.put_units", shards[1] / "lock.index"),  # a method running
        ("ray::front:FrontActor", None),  # as titled for a while after a restart
        ("ray::IDLE", None),
        ("ray::IDLE", None),
    ]
    script = "".join(f"({f'exec 3>{held}; ' if held else ''}exec -a '{title}' sleep 60) & " for title, held in children)
    root = subprocess.Popen(["bash", "-c", script + "wait"])
    try:
        _wait_titles(root.pid, len(children))
        found = processes.deployment_processes(root.pid, shards)
        labels = sorted(p.label for p in found)
        assert labels == sorted(
            ["serve", "commitlog-1", "consumequeue-0", "index-1", "front", "ray::IDLE", "ray::IDLE#2"]
        ), labels
        assert all(p.rss > 0 and 0 <= p.anon <= p.rss for p in found)
        by_label = {p.label: p.pid for p in found}
        assert processes.actor_pid(root.pid, shards, "index", 1) == by_label["index-1"]
        assert processes.actor_pid(root.pid, shards, "front") == by_label["front"]
        assert processes.actor_pid(root.pid, shards, "dispatcher", 0) is None  # none there (restarting)
        with pytest.raises(ValueError):
            processes.actor_pid(root.pid, shards, "broker")
    finally:
        for pid in processes._tree_proc(root.pid)[1:]:  # the children, by pid
            os.kill(pid, signal.SIGKILL)
        root.kill()
        root.wait()
    with pytest.raises(ProcessLookupError):
        processes.deployment_processes(root.pid, shards)
