"""Recovery on two cores gives exactly what the sequential walk gives.

Recovery forks a child for the second half of a big segment, starting at a record
found by signature. These tests shrink the threshold so small stores take that path,
and compare every outcome with a sequential recovery of an identical copy.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mqstore.formats import MAGIC_V1
from mqstore.store import CommitLog, MessageBatch, StoreConfig, recovery

SEG = 8 << 20


def build(path: Path, *, fake_at_split: bool = False) -> list[int]:
    """~6 MiB of records over 3 topics x 4 queues; returns their offsets."""
    offsets: list[int] = []
    with CommitLog(path, StoreConfig(segment_bytes=SEG)) as cl:
        for i in range(60):
            body = [os.urandom(200 + (i * 37 + j) % 900) for j in range(100)]
            if fake_at_split and i == 30:
                # A body that holds a fake record head claiming its own absolute position.
                at = cl.wrote_offset + 88 + 16
                fake = bytearray(os.urandom(600))
                fake[16:20] = (400).to_bytes(4, "big")
                fake[20:24] = (MAGIC_V1 & 0xFFFFFFFF).to_bytes(4, "big")
                fake[16 + 28 : 16 + 36] = at.to_bytes(8, "big")
                body[0] = bytes(fake)
            res = cl.append(
                MessageBatch(
                    topics=["Ta", "Tbb", "T" + "c" * 20][i % 3], bodies=body, queue_ids=[j % 4 for j in range(100)]
                )
            )
            offsets += res.physical_offsets.tolist()
    return offsets


def recover_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple:
    twin = path.parent / (path.name + "-sequential")
    shutil.copytree(path, twin)
    (path / "abort").touch()
    (twin / "abort").touch()
    monkeypatch.setattr(recovery, "_PARALLEL_MIN_BYTES", 1 << 20)
    forks = []
    real_fork = os.fork

    def counting_fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(recovery.os, "fork", counting_fork)
    with CommitLog(path, StoreConfig(segment_bytes=SEG)) as cl:
        par = cl.recovery
    assert forks, "the two-core path did not run"
    monkeypatch.setattr(recovery.os, "fork", real_fork)
    monkeypatch.setattr(recovery, "_PARALLEL_MIN_BYTES", 1 << 40)
    with CommitLog(twin, StoreConfig(segment_bytes=SEG)) as cl:
        seq = cl.recovery
    return par, seq


def same(par, seq) -> None:
    assert par.wrote_offset == seq.wrote_offset
    assert par.truncated_at == seq.truncated_at
    assert par.records == seq.records
    assert par.queue_offsets == seq.queue_offsets
    assert par.last_store_timestamp == seq.last_store_timestamp


def flip(path: Path, at: int) -> None:
    with open(path / "commitlog" / "00000000000000000000", "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def test_split_point_is_a_real_record(tmp_path: Path) -> None:
    offsets = build(tmp_path / "s")
    seg = CommitLog(tmp_path / "s", StoreConfig(segment_bytes=SEG))
    try:
        end = recovery.data_end_estimate(seg._segments.segments[0])
        assert end >= offsets[-1]
        split = recovery.record_start_after(seg._segments.segments[0], end // 2)
        assert split in offsets
    finally:
        seg.close()


def test_clean_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = build(tmp_path / "s")
    par, seq = recover_both(tmp_path / "s", monkeypatch)
    same(par, seq)
    assert par.records == len(offsets) and par.truncated_at is None
    assert par.queue_offsets[("Ta", 0)] == 20 * 25


@pytest.mark.parametrize("where", [0.2, 0.8])
def test_damage_in_either_half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: float) -> None:
    offsets = build(tmp_path / "s")
    victim = offsets[int(len(offsets) * where)]
    flip(tmp_path / "s", victim + 200)  # inside the body: a CRC failure
    par, seq = recover_both(tmp_path / "s", monkeypatch)
    same(par, seq)
    assert par.wrote_offset == victim


def test_a_fake_record_in_a_body_cannot_fool_the_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = build(tmp_path / "s", fake_at_split=True)
    store = tmp_path / "s"
    with CommitLog(store, StoreConfig(segment_bytes=SEG)) as cl:
        seg = cl._segments.segments[0]
        fake_search_from = offsets[30 * 100] + 1
        found = recovery.record_start_after(seg, fake_search_from)
        assert found not in offsets  # the crafted head is found first...
        monkeypatch.setattr(recovery, "data_end_estimate", lambda s: 2 * fake_search_from)
    par, seq = recover_both(store, monkeypatch)
    same(par, seq)  # ...and the walk, which never lands on it, still gets everything right
    assert par.records == len(offsets) and par.truncated_at is None
