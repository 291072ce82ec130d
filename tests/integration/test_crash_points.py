"""kill -9 at named points of the append path, in a real child process.

The child appends batches; at the chosen point it sends itself SIGKILL. The parent
then reopens the store and checks that everything acknowledged before the crash is
there, nothing of the interrupted batch is half-visible, and the store still works.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mqstore.store import CommitLog, MessageBatch, StoreConfig
from mqstore.store.reader import CommitLogReader

SEG = 1 << 20

CHILD = r"""
import json, os, signal, sys
from pathlib import Path
import numpy as np
from mqstore.logging import configure_logging
from mqstore.store import CommitLog, MessageBatch, StoreConfig
from mqstore.store import mapped_file

configure_logging(level="error")
store, point, crash_at = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
calls = {"n": 0}

def crash_now():
    os.kill(os.getpid(), signal.SIGKILL)

def counted():
    calls["n"] += 1
    return calls["n"] == crash_at

if point == "mid_copy":
    real = mapped_file.Segment.write
    def write(self, pos, data):
        if len(data) > 8 and counted():
            real(self, pos, data[: len(data) // 2])  # half the batch's bytes reach the map
            crash_now()
        real(self, pos, data)
    mapped_file.Segment.write = write
elif point == "before_sizes":
    real = mapped_file.Segment.write
    def write(self, pos, data):
        if len(data) == 4 and counted():
            crash_now()  # every byte of the run copied, its first TOTALSIZE not set yet
        real(self, pos, data)
    mapped_file.Segment.write = write
elif point == "segment_create":
    real = os.posix_fallocate
    def fallocate(fd, off, size):
        if size == int(sys.argv[4]) and counted():
            crash_now()  # the new segment file exists, its blocks are not reserved
        return real(fd, off, size)
    os.posix_fallocate = fallocate

cl = CommitLog(store, StoreConfig(segment_bytes=int(sys.argv[4])))
i = 0
while True:
    res = cl.append(MessageBatch(topics="T", bodies=[os.urandom(300) for _ in range(40)], queue_ids=i % 2,
                                 tags="TagA", keys=[f"k{i}-{j} x" for j in range(40)]))
    cl.flush()
    print(json.dumps({"end": res.end_offset, "last": int(res.physical_offsets[-1]), "queue": i % 2,
                      "queue_offset": int(res.queue_offsets[-1])}), flush=True)
    i += 1
"""


def crash_child(store: Path, point: str, crash_at: int) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), point, str(crash_at), str(SEG)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def check_recovered(store: Path, acked: list[dict]) -> None:
    with CommitLog(store, StoreConfig(segment_bytes=SEG)) as cl:
        assert not cl.recovery.clean_shutdown
        last_acked_end = acked[-1]["end"] if acked else 0
        # Nothing of the interrupted batch survives: the log ends at the last ack.
        assert cl.wrote_offset == last_acked_end or (
            cl.wrote_offset % SEG == 0 and cl.wrote_offset - last_acked_end < SEG
        )
        for a in acked:
            rec = cl.read(a["last"])
            assert (rec.queue_id, rec.queue_offset) == (a["queue"], a["queue_offset"])
            assert rec.properties["TAGS"] == "TagA" and len(rec.body) == 300
        for q in (0, 1):
            mine = [a["queue_offset"] for a in acked if a["queue"] == q]
            assert cl.queue_offset("T", q) == (mine[-1] + 1 if mine else 0)
        res = cl.append(MessageBatch(topics="T", bodies=[b"after"] * 3, queue_ids=0))
        assert cl.read(int(res.physical_offsets[0])).body == b"after"
    records = list(CommitLogReader(store).records(check_crc=True))
    assert [r.body for r in records[-3:]] == [b"after"] * 3
    assert all(r.properties.get("TAGS") == "TagA" for r in records[:-3])  # no torn properties anywhere


@pytest.mark.crash
@pytest.mark.parametrize("crash_at", [1, 7])
def test_kill_mid_copy_leaves_no_half_record(tmp_path: Path, crash_at: int) -> None:
    acked = crash_child(tmp_path, "mid_copy", crash_at)
    assert len(acked) == crash_at - 1
    check_recovered(tmp_path, acked)


@pytest.mark.crash
@pytest.mark.parametrize("crash_at", [1, 9])
def test_kill_after_copy_before_sizes_hides_the_batch(tmp_path: Path, crash_at: int) -> None:
    acked = crash_child(tmp_path, "before_sizes", crash_at)
    assert len(acked) == crash_at - 1
    check_recovered(tmp_path, acked)


@pytest.mark.crash
@pytest.mark.parametrize("crash_at", [1, 3])
def test_kill_while_creating_a_segment_keeps_the_store_openable(tmp_path: Path, crash_at: int) -> None:
    acked = crash_child(tmp_path, "segment_create", crash_at)
    leftovers = sorted(p.name for p in (tmp_path / "commitlog").iterdir())
    assert any(name.endswith(".tmp") for name in leftovers)  # the crash hit mid-creation
    check_recovered(tmp_path, acked)
    names = sorted(p.name for p in (tmp_path / "commitlog").iterdir())
    assert not any(name.endswith(".tmp") for name in names)
    assert all((tmp_path / "commitlog" / n).stat().st_size == SEG for n in names)


def test_an_empty_last_segment_is_removed_on_open(tmp_path: Path) -> None:
    """A 0-byte last segment (RocketMQ deletes these too) must not stop a start."""
    with CommitLog(tmp_path, StoreConfig(segment_bytes=SEG)) as cl:
        cl.append(MessageBatch(topics="T", bodies=[b"x"] * 5))
    (tmp_path / "commitlog" / f"{SEG:020d}").touch()
    with CommitLog(tmp_path, StoreConfig(segment_bytes=SEG)) as cl:
        assert cl.stats().segments == 1
        assert len(cl.read_range(0).records) == 5
