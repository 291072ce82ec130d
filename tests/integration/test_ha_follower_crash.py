"""Issue 28 item 3: a follower killed while appending its master's batches (kill -9,
and a power cut that keeps only what syncs covered) keeps every byte it
acknowledged, holds no half-written run, and its log is the master's byte for byte
up to where it ends; it then continues from there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mqstore.store import CommitLog, FlushMode, MessageBatch, StoreConfig, faults
from mqstore.store.faults import POWER_IMAGE_ENV, POWER_STORE_ENV
from mqstore.store.ha import EpochCache, ReplicaFollower, next_batch

ROOT = Path(__file__).resolve().parents[2]
SEG = 256 * 1024

CHILD = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[4])
from pathlib import Path
from mqstore.logging import configure_logging
configure_logging(level="error")
from mqstore.store import CommitLog, FlushMode, StoreConfig, mapped_file
from mqstore.store.ha import EpochCache, ReplicaFollower, next_batch

if sys.argv[3] == "mid_copy":  # half of the 4th run's bytes reach the file
    real, calls = mapped_file.Segment.write, []
    def write(self, pos, data):
        if len(data) > 4096:
            calls.append(1)
            if len(calls) == 4:
                real(self, pos, bytes(data)[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
        real(self, pos, data)
    mapped_file.Segment.write = write
cfg = StoreConfig(segment_bytes=int(sys.argv[5]), flush_mode=FlushMode.SYNC, preallocate_segments=False)
master, follower = Path(sys.argv[1]), Path(sys.argv[2])
m, f = CommitLog(master, cfg), CommitLog(follower, cfg)
me = EpochCache(master)
fol = ReplicaFollower(f, EpochCache(follower))
while (b := next_batch(m, me, fol.end, 20000)) is not None:
    ack = fol.append(b.offset, b.data, epoch=b.epoch, epoch_start=b.epoch_start)
    print(ack, flush=True)
print("done", flush=True)
"""


def config() -> StoreConfig:
    return StoreConfig(segment_bytes=SEG, flush_mode=FlushMode.SYNC, preallocate_segments=False)


@pytest.fixture(scope="module")
def master(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("master") / "m"
    epochs = EpochCache(path)
    epochs.append(1, 0)
    with CommitLog(path, config()) as cl:
        for i in range(40):
            if i == 25:
                epochs.append(2, cl.wrote_offset)
            cl.append(MessageBatch(topics="T", bodies=[os.urandom(200) for _ in range(30)], queue_ids=i % 4))
    return path


def run_child(master: Path, follower: Path, mode: str, *, faults_spec: str | None, image: Path | None):
    env = {k: v for k, v in os.environ.items() if k not in ("MQSTORE_FAULTS", POWER_STORE_ENV, POWER_IMAGE_ENV)}
    if faults_spec:
        env["MQSTORE_FAULTS"] = faults_spec
    if image is not None:
        env[POWER_STORE_ENV], env[POWER_IMAGE_ENV] = str(follower), str(image)
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(master), str(follower), mode, str(ROOT), str(SEG)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.crash
@pytest.mark.parametrize(
    ("mode", "spec", "power"),
    [
        ("faults", "commitlog.written=kill@7", True),  # a batch written, not yet fsynced: power cut
        ("faults", "commitlog.flushed_before_checkpoint=kill@5", True),  # fsynced and acknowledged
        ("faults", "ha.file.tmp=kill@2", True),  # the second epoch being persisted
        ("mid_copy", None, False),  # half a run in the page cache
    ],
    ids=["written_power_cut", "flushed_power_cut", "epoch_write_power_cut", "mid_copy_kill"],
)
def test_a_killed_follower_keeps_what_it_acknowledged(tmp_path: Path, master: Path, mode, spec, power) -> None:
    follower = tmp_path / "f"
    image = tmp_path / "image" if power else None
    run = run_child(master, follower, mode, faults_spec=spec, image=image)
    assert run.returncode == -signal.SIGKILL, run.stdout[-1000:] + run.stderr[-3000:]
    acks = [int(x) for x in run.stdout.split() if x.isdigit()]
    if power:
        faults.power_cut(follower, image)
    with CommitLog(master, config()) as m, CommitLog(follower, config()) as f:
        end = f.wrote_offset
        assert end >= (acks[-1] if acks else 0)  # nothing acknowledged is lost
        assert all(m.read_log_bytes(o, SEG)[: end - o] == f.read_log_bytes(o, SEG) for o in range(0, end, SEG))
        fe, me = EpochCache(follower), EpochCache(master)
        mine, theirs = [e[:2] for e in fe.entries], [e[:2] for e in me.entries]
        assert mine == theirs[: len(mine)]  # a prefix of the master's epochs,
        assert all(e in mine for e in theirs if e[1] < end)  # with every one it holds records of
        fol = ReplicaFollower(f, fe)
        assert fol.consistent_point(me.entries, m.wrote_offset) == end  # nothing to cut: it continues
        while (b := next_batch(m, me, fol.end, 50000)) is not None:
            fol.append(b.offset, b.data, epoch=b.epoch, epoch_start=b.epoch_start)
        assert f.wrote_offset == m.wrote_offset
        assert all(m.read_log_bytes(o, SEG) == f.read_log_bytes(o, SEG) for o in range(0, end, SEG))
        assert EpochCache(follower).entries == me.entries
