"""Verify reads a queue's last file only up to the end of its data (issue 26 item 4):
past it a sparse file is a hole, so a 6 MB file with a few units is one small read;
what it finds must be what reading the whole file finds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mqstore.formats.consume_queue import encode_units
from mqstore.store.verify import queues as vq
from mqstore.store.verify.report import Damage, Findings

FILE_BYTES = 20 * 300_000  # the store's default: 6 MB


def sparse_queue(qdir: Path, units: int, *, garbage_at: int | None = None) -> Path:
    qdir.mkdir(parents=True)
    path = qdir / f"{0:020d}"
    with open(path, "wb") as f:
        f.truncate(FILE_BYTES)
        f.write(encode_units([100 * (i + 1) for i in range(units)], [90] * units, [7] * units))
        if garbage_at is not None:
            f.seek(garbage_at)
            f.write(b"\x01garbage")
    return path


def findings_of(qdir: Path) -> tuple[int, list[str]]:
    findings = Findings()
    q = vq.read_queue(qdir, "T", 0, FILE_BYTES, findings, Damage())
    return len(q.units), sorted(findings._per_kind.elements())


@pytest.mark.parametrize("garbage_at", [None, 20 * 5 + 3, 3_000_000, FILE_BYTES - 8])
def test_reading_the_data_finds_what_reading_the_whole_file_finds(tmp_path: Path, garbage_at, monkeypatch) -> None:
    qdir = tmp_path / "T" / "0"
    path = sparse_queue(qdir, 5, garbage_at=garbage_at)
    data = vq._read_data(path)
    assert data == path.read_bytes()[: len(data)] and not any(path.read_bytes()[len(data) :])
    if garbage_at is None:
        assert len(data) < 64 << 10  # one extent, not 6 MB
    got = findings_of(qdir)
    monkeypatch.setattr(vq, "_read_data", lambda p: p.read_bytes())
    assert got == findings_of(qdir)
    assert got[0] == (6 if garbage_at == 20 * 5 + 3 else 5)  # there the garbage reads as a sixth unit, both ways
    if garbage_at == 3_000_000:
        assert got[1] == ["cq_gap"]


def test_a_file_that_is_all_hole(tmp_path: Path) -> None:
    qdir = tmp_path / "T" / "0"
    qdir.mkdir(parents=True)
    path = qdir / f"{0:020d}"
    with open(path, "wb") as f:
        f.truncate(FILE_BYTES)
    assert vq._read_data(path) == b"" or not any(vq._read_data(path))
    assert os.path.getsize(path) == FILE_BYTES
