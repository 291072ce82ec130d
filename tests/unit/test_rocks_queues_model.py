"""RocksQueues against ConsumeQueues, the default layout, as its model: the same
dispatched chunks (new units, and chunks dispatched again as after a restart, whole
or in part) and the same retention pass give every queue the same ends, the same
units and the same moved min offsets, before and after a reopen."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.store.consume_queues import ConsumeQueues
from mqstore.store.dispatch import DispatchBatch
from mqstore.store.retention import clean_all_queues, clean_queues_below
from mqstore.store.rocks_queues import RocksQueues
from tests.tiers import examples


def _batch(rows: list[tuple[int, int, int, int]], names: list[str]) -> DispatchBatch:
    """rows: (commitlog offset, topic, queue id, queue offset)."""
    a = np.array(rows, np.int64).reshape(-1, 4)
    used, codes = np.unique(a[:, 1], return_inverse=True)
    z = np.zeros(len(a), np.int64)
    return DispatchBatch(
        a[:, 0], np.full(len(a), 100), [names[u] for u in used.tolist()], codes, a[:, 2], a[:, 3], z,
        a[:, 0] + 1_700_000_000_000, a[:, 0] % 7, b"", z - 1, z, z - 1, z,
    )  # fmt: skip


def _state(q) -> dict:
    out = {}
    for topic, qid in q.keys():
        cq = q.find(topic, qid)
        units = cq.read_units(cq.min_offset, max(1, cq.max_offset - cq.min_offset))
        out[(topic, qid)] = (cq.min_offset, cq.max_offset, units.tobytes())
    return out


@settings(max_examples=examples(60), deadline=None)
@given(
    picks=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), min_size=1, max_size=120),
    chunk=st.integers(1, 40),
    again=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60)), max_size=4),
    clean_at=st.integers(0, 130),
)
def test_rocks_queues_end_as_the_file_layout(picks, chunk: int, again, clean_at: int) -> None:
    names = [f"T{i}" for i in range(6)]
    next_qo: dict[tuple[int, int], int] = {}
    rows = []
    for i, (t, q) in enumerate(picks):
        qo = next_qo.get((t, q), 0)
        next_qo[(t, q)] = qo + 1
        rows.append((i * 100, t, q, qo))
    chunks = [rows[k : k + chunk] for k in range(0, len(rows), chunk)]
    for at, n in again:  # a restart dispatches an earlier stretch again, then goes on
        cut = min(at, len(rows))
        chunks.insert(min(len(chunks), cut // chunk + 1), rows[max(0, cut - n) : cut] or rows[:1])
    with tempfile.TemporaryDirectory() as d:
        files, rocks = Path(d, "files"), Path(d, "rocks")
        a = ConsumeQueues(files, file_bytes=20 * 16)
        b = RocksQueues(rocks)
        for c in chunks:
            a.dispatch(_batch(c, names))
            b.dispatch(_batch(c, names))
        assert _state(b) == _state(a)
        losses_a: tuple[dict, dict] = ({}, {})
        losses_b: tuple[dict, dict] = ({}, {})
        a.flush(thorough=True)  # (a queue whose units are not in files yet is not cleaned there)
        clean_queues_below(a.all(), clean_at * 100, *losses_a)  # retention: the commitlog starts there now
        clean_all_queues(b, clean_at * 100, *losses_b)
        assert _state(b) == _state(a) and losses_b[1] == losses_a[1]
        a.flush(thorough=True)
        a.close()
        b.close()
        a, b = ConsumeQueues(files, file_bytes=20 * 16), RocksQueues(rocks)
        try:
            a.load()
            clean_queues_below(a.all(), clean_at * 100, {}, {})  # queue files keep no min: the open corrects it
            assert _state(b) == _state(a)  # the RocksDB kept its min offsets
            assert b.max_physical_offset() == max(r[0] for r in rows) + 100
        finally:
            a.close()
            b.close()


def test_a_min_entry_lost_after_retention_is_moved_to_the_first_unit_left(tmp_path: Path) -> None:
    """A crash after the database flush and before the offset family's (the fault
    point rocks.units_flushed) keeps retention's deletes of a queue's first units
    and loses its new min entry: the open must move the min past the missing units
    (it had stayed at the old min, and pulls there found nothing)."""
    from types import SimpleNamespace

    from rocksdict import Options, Rdict

    from mqstore.formats.rocks_queue import MIN, OFFSET_FAMILY, OFFSET_VALUE, offset_key

    q = RocksQueues(tmp_path)
    q.dispatch(_batch([(i * 100, 0, 0, i) for i in range(20)], ["T0"]))
    q.flush(thorough=True)
    clean_all_queues(q, 1_000, {}, {})  # the commitlog starts at unit 10's record now
    assert q.find("T0", 0).min_offset == 10
    q.close()
    db = Rdict(str(tmp_path / "consumequeue"), Options(raw_mode=True))
    db.get_column_family(OFFSET_FAMILY).put(offset_key("T0", 0, MIN), OFFSET_VALUE.pack(0, 0))  # the old entry
    db.close()
    q = RocksQueues(tmp_path)
    try:
        assert q.find("T0", 0).min_offset == 0  # as a crash left it
        commitlog = SimpleNamespace(
            wrote_offset=2_000, min_offset=1_000, recovery=SimpleNamespace(queue_offsets={("T0", 0): 20})
        )
        q.recover(commitlog, verify_tail=False)
        cq = q.find("T0", 0)
        assert (cq.min_offset, cq.max_offset) == (10, 20)
        assert cq.read_units(10, 10)["commitlog_offset"].tolist() == [i * 100 for i in range(10, 20)]
    finally:
        q.close()


def test_an_emptied_queue_that_meets_a_gap_starts_at_the_unit_taken(tmp_path: Path) -> None:
    """Retention took every unit of a queue (min = max = 10) and a crash lost the units
    after them whose records retention deleted too (the fault point
    rocks.offsets_written: crash_every_point saw it): the re-dispatch meets the queue's
    next record at queue offset 20. The queue must start there; it kept its min at 10
    with nothing stored in 10..19, and every pull at 10 answered 10 again."""
    q = RocksQueues(tmp_path)
    try:
        q.dispatch(_batch([(i * 100, 0, 0, i) for i in range(10)], ["T0"]))
        q.flush(thorough=True)
        clean_all_queues(q, 1_000, {}, {})
        assert (q.find("T0", 0).min_offset, q.find("T0", 0).max_offset) == (10, 10)
        q.dispatch(_batch([(2_000 + i * 100, 0, 0, 20 + i) for i in range(5)], ["T0"]))
        cq = q.find("T0", 0)
        assert (cq.min_offset, cq.max_offset) == (20, 25)
        assert cq.read_units(20, 10)["commitlog_offset"].tolist() == [2_000 + i * 100 for i in range(5)]
        q.flush(thorough=True)
    finally:
        q.close()
    q = RocksQueues(tmp_path)  # the new min is kept
    try:
        assert (q.find("T0", 0).min_offset, q.find("T0", 0).max_offset) == (20, 25)
    finally:
        q.close()
