"""Crashes with a summary of queue ends on disk (config/queueEnds.bin): after a
kill -9 (or a power cut) the summary is a starting point only, written at the last
thorough flush or clean close, while the queues went on; the open must find what
was appended after it, cut torn bytes past it, and lose no acknowledged message.
Each case compares the queues the open makes with those of an open that reads
every queue (a copy without the summary) and runs verify."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mqstore.store import faults
from mqstore.store import queue_ends as qe
from mqstore.store.message_store import MessageStore
from tests.integration.crash_workload import check_messages, open_store, run_child, verify_errors

# A child that opens the store, appends, makes the consume queues durable (a thorough
# flush: the summary is written), appends more, some to a topic the summary does not
# know, and dies: by SIGKILL after its acks, or (torn=1) by the fault point cq.write
# in the write-out of one queue's last units, after half of them reached its file.
CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from mqstore.logging import configure_logging
from mqstore.store import faults
from mqstore.store.messages import MessageBatch
from mqstore.store.message_store import MessageStore
from tests.integration.crash_workload import retention_config, store_config

configure_logging(level="error")
store_dir, torn = Path(sys.argv[1]), sys.argv[2] == "1"
store = MessageStore(store_dir, store_config(), retention=retention_config())


def send(topics, first, n):
    ids = [f"m{first + j}" for j in range(n)]
    res = store.append(MessageBatch(
        topics=[topics[j % len(topics)] for j in range(n)], queue_ids=[(j // len(topics)) % 2 for j in range(n)],
        bodies=[(m + "|").encode().ljust(200, b"x") for m in ids],
    ))
    acks = [[topics[j % len(topics)], (j // len(topics)) % 2, int(res.queue_offsets[j]), int(res.physical_offsets[j]), ids[j]]
            for j in range(n)]
    print(json.dumps({"ack": acks}), flush=True)


for b in range(30):
    send(["T0", "T1"], b * 10, 10)
assert store.wait_dispatched()
store.flush_derived()  # thorough: the queues durable, then the summary
for b in range(30, 42):
    send(["T0", "T1", "T2"], b * 10, 10)
assert store.wait_dispatched()
if torn:  # T0:1 (60 units in the summary, 84 now) written out: torn inside its file, then killed
    cq = store.consume_queues.find("T0", 1)
    assert cq.max_offset == 84  # (takes its units from the dispatch journal)
    faults.install("cq.write=kill")
    cq.write_behind()
os.kill(os.getpid(), signal.SIGKILL)
"""


def run_summary_child(store: Path, *, torn: bool) -> list[list]:
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in (faults.ENV, faults.POWER_STORE_ENV, faults.POWER_IMAGE_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), "1" if torn else "0"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        env=env,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    return [a for line in proc.stdout.splitlines() for a in json.loads(line)["ack"]]


def began_a_file_since(store: Path, ends: qe.QueueEnds) -> set[tuple[str, int]]:
    """Queues with more files than the summary lists: their directory changed since,
    so the open reads them."""
    return {
        (t, q)
        for (t, q), files in zip(ends.keys(), ends.rows["files"].tolist())
        if len(list((store / "consumequeue" / t / str(q)).iterdir())) > files
    }


def queues_of(s: MessageStore) -> dict[tuple[str, int], tuple[int, int, int, list]]:
    out = {}
    for cq in s.consume_queues.all():
        units = cq.read_units(cq.min_offset, max(cq.max_offset - cq.min_offset, 1)).tolist()
        out[(cq.topic, cq.queue_id)] = (cq.min_offset, cq.max_offset, cq.max_physical_offset, units)
    return out


def check_open(store: Path, acked: list[list], tmp_path: Path, *, summary_queues: int) -> None:
    """Open the crashed store (the summary used for ``summary_queues`` queues) and
    a copy without the summary: same queues, every acknowledged message served,
    verify clean."""
    copy = tmp_path / "read-every-queue"
    shutil.copytree(store, copy)
    qe.path_of(copy).unlink()
    s = open_store(copy)
    try:
        assert s.consume_queues.summary_queues == 0
        assert s.wait_dispatched(30)
        want = queues_of(s)
    finally:
        s.close()
    s = open_store(store)
    try:
        assert not s.commitlog.recovery.clean_shutdown
        assert s.consume_queues.summary_queues == summary_queues
        assert s.wait_dispatched(30)
        assert queues_of(s) == want
        assert check_messages(s, acked) == len(acked)
    finally:
        s.close()
    assert verify_errors(store) == []


@pytest.mark.crash
@pytest.mark.parametrize("torn", [False, True], ids=["kill", "torn-write-then-kill"])
def test_summary_of_a_thorough_flush_then_kill9(tmp_path: Path, torn: bool) -> None:
    store = tmp_path / "store"
    acked = run_summary_child(store, torn=torn)
    assert len(acked) == 420
    ends = qe.read(store)
    assert ends.keys() == [("T0", 0), ("T0", 1), ("T1", 0), ("T1", 1)]  # T2 came after it
    assert sum(ends.rows["max_offset"].tolist()) == 300  # and 80 more units after it, 40 of T2
    assert began_a_file_since(store, ends) == set()
    if torn:
        last = store / "consumequeue" / "T0" / "1" / f"{0:020d}"
        data = last.read_bytes()
        assert data[60 * 20 : 61 * 20] != bytes(20) and data[72 * 20 : 73 * 20] != bytes(20)  # past the summary
        assert data[84 * 20 - 20 : 84 * 20] == bytes(20)  # torn before its end
    check_open(store, acked, tmp_path, summary_queues=4)


@pytest.mark.crash
@pytest.mark.parametrize("acks", [60, 1500])
def test_stale_summary_from_a_clean_close_then_kill9(tmp_path: Path, acks: int) -> None:
    """A clean session writes the summary; the next one appends (60: its queues'
    units stay in memory, the files are as the summary says; 1500: they are written
    behind into files the summary does not list) and is killed before any thorough
    flush."""
    store = tmp_path / "store"
    first = run_child(store, batches=40, close=True, retention_every=0)
    assert first.returncode == 0, first.stderr[-3000:]
    ends = qe.read(store)
    assert len(ends) == 4 and ends.progress_offset > 0
    killed = run_child(store, kill_after_acks=acks, retention_every=0, round=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert qe.read(store).progress_offset == ends.progress_offset  # no thorough flush since
    began = began_a_file_since(store, ends)
    assert len(began) == (0 if acks == 60 else 4)
    check_open(store, first.acks + killed.acks, tmp_path, summary_queues=4 - len(began))


@pytest.mark.crash
def test_stale_summary_then_power_cut(tmp_path: Path) -> None:
    """As above, but the power goes: queue files keep only what syncs covered (the
    summary's state), files made after it are gone. (The power cut rewrites every
    file, so their mtimes say nothing: the summary's is set after theirs, as it was
    before the cut, for the open to use its rows.)"""
    store = tmp_path / "store"
    first = run_child(store, batches=40, close=True, retention_every=0)
    assert first.returncode == 0, first.stderr[-3000:]
    killed = run_child(store, power_image=tmp_path / "image", kill_after_acks=1200, retention_every=0, round=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    faults.power_cut(store, tmp_path / "image")
    os.utime(qe.path_of(store))
    ends = qe.read(store)
    began = began_a_file_since(store, ends)
    check_open(store, first.acks + killed.acks, tmp_path, summary_queues=4 - len(began))
