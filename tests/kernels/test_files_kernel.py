"""mqstore.kernels._files against its reference models (model_files.py).

make_queue_files: any mix of queues whose topic directory, queue directory or file is
already there (a file made ahead, empty, of the queue file size or of another size, or
a directory in the file's place) ends with the same files and the same status per
queue. write_queue_runs: runs written into files that are there, missing, or a
directory, the same file more than once, end with the same bytes and statuses."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.kernels._files import make_queue_files, write_queue_runs
from tests.kernels.model_files import model_make_queue_files, model_write_queue_runs
from tests.tiers import examples

SIZE = 6000
THERE = st.sampled_from(["nothing", "topic dir", "queue dir", "empty file", "whole file", "other file", "dir as file"])


def _lay_out(root: Path, plan: list[tuple[int, int, str]]) -> tuple[list[str], list[str]]:
    dirs, paths = [], []
    for topic, qid, there in plan:
        d = root / f"T{topic}" / str(qid)
        f = d / f"{0:020d}"
        if there != "nothing":
            d.parent.mkdir(exist_ok=True)
        if there not in ("nothing", "topic dir"):
            d.mkdir(exist_ok=True)
        if there in ("empty file", "whole file", "other file") and not f.exists():
            f.write_bytes(bytes({"empty file": 0, "whole file": SIZE, "other file": 7}[there]))
        if there == "dir as file" and not f.exists():
            f.mkdir()
        dirs.append(str(d))
        paths.append(str(f))
    return dirs, paths


def _tree(root: Path) -> dict[str, int | None]:
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else None) for p in sorted(root.rglob("*"))}


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), THERE), max_size=30))
def test_make_queue_files_equals_the_model(tmp_path_factory, plan) -> None:
    got_root, want_root = tmp_path_factory.mktemp("got"), tmp_path_factory.mktemp("want")
    dirs, paths = _lay_out(got_root, plan)
    status = np.full(len(paths), 99, np.int32)
    make_queue_files(dirs, paths, SIZE, status)
    want = model_make_queue_files(*_lay_out(want_root, plan), SIZE)
    assert status.tolist() == want
    assert _tree(got_root) == _tree(want_root)


def test_files_are_sparse_and_a_failure_is_an_errno(tmp_path) -> None:
    d = tmp_path / "consumequeue" / "T" / "0"
    (tmp_path / "a file").write_bytes(b"")
    bad = tmp_path / "a file" / "0"
    status = np.empty(2, np.int32)
    make_queue_files([str(d), str(bad)], [str(d / "f"), str(bad / "f")], 1 << 20, status)
    assert status.tolist() == [0, errno.ENOTDIR]
    st_ = (d / "f").stat()
    assert st_.st_size == 1 << 20 and st_.st_blocks == 0


def test_a_whole_file_there_is_taken_untouched(tmp_path) -> None:
    """A file of the queue file size already there (a write-out made it first) keeps its
    mtime: the open after a clean close trusts queues whose files are older than the
    summary of queue ends, and a late truncate would have it read them all."""
    d = tmp_path / "T" / "0"
    d.mkdir(parents=True)
    f = d / f"{0:020d}"
    f.write_bytes(bytes(SIZE))
    os.utime(f, ns=(10**18, 10**18))
    status = np.empty(1, np.int32)
    make_queue_files([str(d)], [str(f)], SIZE, status)
    assert status.tolist() == [0] and f.stat().st_mtime_ns == 10**18 and f.stat().st_size == SIZE


RUN_FILE = st.sampled_from(["file", "file", "file", "missing", "dir"])


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(RUN_FILE, min_size=5, max_size=5),
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, SIZE - 1), st.integers(0, 400), st.integers(0, 60)), max_size=30
    ),
    st.binary(min_size=0, max_size=400),
)
def test_write_queue_runs_equals_the_model(tmp_path_factory, files, runs, data) -> None:
    got_root, want_root = tmp_path_factory.mktemp("got"), tmp_path_factory.mktemp("want")
    for root in (got_root, want_root):
        for k, kind in enumerate(files):
            f = root / f"{k:020d}"
            if kind == "file":
                f.write_bytes(bytes([k]) * SIZE)
            elif kind == "dir":
                f.mkdir()
    lo = [min(r[2], len(data)) for r in runs]
    hi = [min(a + r[3], len(data)) for a, r in zip(lo, runs, strict=True)]
    at = [r[1] for r in runs]
    names = [f"{r[0]:020d}" for r in runs]
    status = np.full(len(runs), 99, np.int32)
    write_queue_runs(
        [str(got_root / n) for n in names],
        np.array(at, np.int64),
        np.frombuffer(data, np.uint8),
        np.array(lo, np.int64),
        np.array(hi, np.int64),
        status,
    )
    want = model_write_queue_runs([str(want_root / n) for n in names], at, data, lo, hi)
    assert status.tolist() == want
    assert _bytes(got_root) == _bytes(want_root)


def _bytes(root: Path) -> dict[str, bytes | None]:
    return {p.name: (p.read_bytes() if p.is_file() else None) for p in sorted(root.iterdir())}


def test_write_queue_runs_refuses_runs_outside_the_data(tmp_path) -> None:
    f = tmp_path / "f"
    f.write_bytes(bytes(100))
    status = np.empty(1, np.int32)
    one = np.ones(1, np.int64)
    with pytest.raises(ValueError):
        write_queue_runs([str(f)], one, np.zeros(4, np.uint8), one, np.array([5], np.int64), status)
    assert f.read_bytes() == bytes(100)
