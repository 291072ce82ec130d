"""mqstore.kernels._probe.probe_queue_tails against its reference model,
queue_tails.probe (model_probe.py): queue directories with files missing, empty, of
another size, whole and sparse with units from the start, data in the stop byte's
page or past it, holes only, a directory in a file's place or a file in the
directory's, probed at any byte (a file boundary, a file's end, a page boundary)
with any number of listed files, give the same status per queue."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.kernels import _probe
from mqstore.kernels._probe import probe_queue_tails
from mqstore.store import queue_ends as qe
from mqstore.store import queue_tails
from mqstore.store.known_queues import KnownQueues
from tests.kernels.model_probe import model_probe_queue_tails
from tests.tiers import examples

FB = 20000  # 5 pages, the last one partial
FILE = st.sampled_from(["missing", "empty", "short", "whole", "whole", "whole", "dir"])
ONE_FILE = st.tuples(FILE, st.integers(0, FB // 20), st.none() | st.integers(0, FB - 1))
STOP = st.integers(0, 3 * FB) | st.sampled_from([0, FB, 2 * FB, 3 * FB, FB - 20, 2 * FB - 20, 4096, 8192, 16384])
QUEUE = st.tuples(
    st.sampled_from(["T0", "T1", "Tö-x"]),
    st.booleans(),  # the queue's directory is a file
    st.lists(ONE_FILE, min_size=3, max_size=3),
    STOP,
    st.integers(0, 3),  # files the row lists
)


def _lay_out(root: Path, i: int, queue) -> None:
    topic, dir_is_file, files, _, _ = queue
    d = root / topic / str(i)
    d.parent.mkdir(parents=True, exist_ok=True)
    if dir_is_file:
        d.write_bytes(b"")
        return
    d.mkdir()
    for k, (state, units, junk) in enumerate(files):
        f = d / f"{k * FB:020d}"
        if state == "dir":
            f.mkdir()
        elif state != "missing":
            with open(f, "wb") as out:
                out.truncate({"empty": 0, "short": FB - 20, "whole": FB}[state])
                if state == "whole":
                    out.write(b"\x07" * (units * 20))
                    if junk is not None:
                        out.seek(junk)
                        out.write(b"\x01")


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(QUEUE, max_size=12))
def test_probe_queue_tails_equals_the_model(tmp_path_factory, queues) -> None:
    root = tmp_path_factory.mktemp("cq")
    for i, q in enumerate(queues):
        _lay_out(root, i, q)
    topics = [q[0] for q in queues]
    ids = list(range(len(queues)))
    stops = [q[3] for q in queues]
    ends = [q[4] * FB for q in queues]
    status = np.full(len(queues), 99, np.int32)
    probe_queue_tails(
        str(root), topics, np.array(ids, np.int32), np.array(stops, np.int64), np.array(ends, np.int64), FB, status
    )
    assert status.tolist() == model_probe_queue_tails(str(root), topics, ids, stops, ends, FB)


def test_the_kernels_codes_are_queue_tails_codes() -> None:
    assert (_probe.CLEAN, _probe.DIRTY, _probe.UNFIT) == (queue_tails.CLEAN, queue_tails.DIRTY, queue_tails.UNFIT)


def test_probe_rows_raises_what_probe_raises(tmp_path) -> None:
    """A queue's directory that is a file: the model raises NotADirectoryError, and so
    does the compiled loop's caller; the queues around it are probed as before."""
    (tmp_path / "T" / "1").mkdir(parents=True)
    for q in (0, 2):
        (tmp_path / "T" / str(q)).mkdir()
        with open(tmp_path / "T" / str(q) / f"{0:020d}", "wb") as f:
            f.truncate(FB)
            f.write(b"\x07" * 200)
    rows = [("T", q, 0, 1, 0, 10, 1000) for q in range(3)]
    known = KnownQueues(qe.build(rows, file_bytes=FB, progress_offset=2000, cleaned_min=0))
    known.keep(np.arange(3))
    rows = known.live_rows()
    want = [(0, queue_tails.DIRTY), (1, queue_tails.UNFIT)]  # data past 5; a listed file gone
    assert queue_tails.probe_rows(str(tmp_path), known, rows, np.array([5, 10, 10]), FB) == want
    (tmp_path / "T" / "1").rmdir()
    (tmp_path / "T" / "1").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        queue_tails.probe(f"{tmp_path}/T/1", 200, FB, FB)
    with pytest.raises(NotADirectoryError) as got:
        queue_tails.probe_rows(str(tmp_path), known, rows, np.array([5, 10, 10]), FB)
    assert got.value.errno == errno.ENOTDIR and got.value.filename == os.path.join(str(tmp_path), "T", "1")


def test_a_root_that_is_not_there(tmp_path) -> None:
    """Without the consume-queue root the kernel opens each path whole, as the model:
    every listed file is gone (UNFIT), a queue listing none has nothing (CLEAN)."""
    root = str(tmp_path / "none")
    args = (["T", "T"], [0, 1], [200, 0], [FB, 0])
    status = np.full(2, 99, np.int32)
    probe_queue_tails(root, args[0], np.array(args[1], np.int32), np.array(args[2]), np.array(args[3]), FB, status)
    assert status.tolist() == model_probe_queue_tails(root, *args, FB) == [queue_tails.UNFIT, queue_tails.CLEAN]
