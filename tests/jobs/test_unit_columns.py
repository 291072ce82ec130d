"""Reconcile's units as columns, without Spark: the queue tasks' units
(check_queues) cut by chunk (UnitColumns.by_chunk) are all a chunk task needs to
join its records with their units: it opens no queue file (at 400,000 queues,
every chunk task opening and searching every queue file was most of the job)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mqstore.jobs.reconcile.planning import plan
from mqstore.jobs.unit_columns import UnitColumns
from mqstore.jobs.units import check_chunk, check_queues
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore

CFG = StoreConfig(
    segment_bytes=256 << 10, consume_queue_file_bytes=20 * 64, index_hash_slots=256, index_max_entries=1024
)
TOPICS = 40
MESSAGES = 2_000
CHUNK = 64 << 10


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("units") / "store"
    with MessageStore(path, CFG) as s:
        for i in range(0, MESSAGES, 100):
            s.append(
                MessageBatch.of([Message(f"T{j % TOPICS}", bytes(80), tags=f"tag{j % 3}") for j in range(i, i + 100)])
            )
    return path


def cols(topics: list[str], rows: list[tuple[int, int, int, int]]) -> UnitColumns:
    """(topic index, queue id, queue offset, commitlog offset) rows, size 10, tags 0."""
    parts = [(t, q, np.array([qo]), np.array([ph]), np.array([10]), np.array([0])) for t, q, qo, ph in rows]
    return UnitColumns.from_parts(topics, parts)


def test_from_parts_orders_by_commitlog_offset_and_take_keeps_used_topics() -> None:
    u = cols(["a", "b", "c"], [(0, 1, 5, 300), (1, 0, 2, 100), (2, 3, 9, 200)])
    assert u.phys.tolist() == [100, 200, 300]
    assert [u.queue_of(i) for i in range(3)] == [("b", 0), ("c", 3), ("a", 1)]
    part = u.take(slice(0, 2))
    assert part.topics == ["b", "c"] and [part.queue_of(i) for i in range(2)] == [("b", 0), ("c", 3)]


def test_concat_merges_topic_names_and_by_chunk_cuts_at_start_and_end() -> None:
    one = cols(["x", "y"], [(0, 0, 0, 10), (1, 0, 0, 40)])
    two = cols(["y", "z"], [(0, 1, 0, 20), (1, 2, 0, 70)])
    u = UnitColumns.concat([one, UnitColumns.empty(), two])
    assert u.phys.tolist() == [10, 20, 40, 70]
    assert sorted(u.topics) == ["x", "y", "z"]
    assert [u.queue_of(i) for i in range(4)] == [("x", 0), ("y", 1), ("y", 0), ("z", 2)]
    got = {n: part.phys.tolist() for n, part in u.by_chunk([(7, 0, 20), (8, 20, 40), (9, 40, 1 << 62)])}
    assert got == {7: [10], 8: [20], 9: [40, 70]}
    keys = u.queue_keys({"y": 3, "z": 0})
    assert keys.tolist() == [-1, (3 << 32) | 1, 3 << 32, 2]


def chunk_units(store: Path) -> tuple[list, dict[int, UnitColumns], int]:
    p = plan(store, CHUNK)
    res = check_queues(str(store), CFG.consume_queue_file_bytes, p.queues)
    units = res["units"]
    bounds = [(c.number, c.start, (1 << 62) if c.open_end else c.end) for c in p.chunks]
    return p.chunks, dict(units.by_chunk(bounds)), len(units)


def check(spec, units: UnitColumns):
    return check_chunk(spec, units, [], running=False, index_sample=(0, 0), index_end=-1, flushed_ts=0)


def test_chunks_join_their_units_without_opening_a_queue_file(pristine: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    chunks, per_chunk, total = chunk_units(store)
    assert total == MESSAGES and len(chunks) > 3 and len(per_chunk) > 3
    shutil.rmtree(store / "consumequeue")  # a chunk task that opened one would find no units
    results = [check(spec, per_chunk.get(spec.number, UnitColumns.empty())) for spec in chunks]
    assert sum(r.units_checked for r in results) == MESSAGES
    assert sum(r.records for r in results) == MESSAGES
    for r in results:
        assert not r.findings.counts and not r.unmatched_units and not r.unmatched_records and not r.bad_queues
    queues = set().union(*(r.queues for r in results))
    assert len(queues) == TOPICS * 4


def test_wrong_units_are_found_column_wise_in_their_own_queues(pristine: Path) -> None:
    chunks, per_chunk, _ = chunk_units(pristine)
    spec = chunks[1]
    u = per_chunk[spec.number]
    u.tags_code[3] += 1
    u.size[5] += 1
    u.phys[7] += 1  # points inside a record: no record starts there
    r = check(spec, u)
    assert r.findings.counts == {("cq_tags_mismatch", "error"): 1, ("cq_size_mismatch", "error"): 1}
    rows = {row[0]: row[2] for row in r.findings.rows}
    topic, qid = u.queue_of(3)
    assert rows["cq_tags_mismatch"] == f"consumequeue/{topic}/{qid}#{int(u.queue_offset[3])}"
    assert r.bad_queues == {u.queue_of(3), u.queue_of(5)}
    (q, (qoffs, phys)), *_ = r.unmatched_units.items()
    assert q == u.queue_of(7) and phys.tolist() == [int(u.phys[7])] and len(r.unmatched_units) == 1
    assert r.unmatched_records[u.queue_of(7)][0].tolist() == [int(u.queue_offset[7])]


# ---------------------------------------------------------------- few queues: chunk tasks read the files


@pytest.fixture(scope="module")
def few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 topics of 4 queues: 125 units a queue, in two files each."""
    path = tmp_path_factory.mktemp("few") / "store"
    with MessageStore(path, CFG) as s:
        for i in range(0, MESSAGES, 100):
            s.append(MessageBatch.of([Message(f"T{j % 4}", bytes(80), tags=f"tag{j % 3}") for j in range(i, i + 100)]))
    return path


def patch_last_unit(store: Path, topic: str, qid: int, field: str, value) -> None:
    """The last real unit of a queue changed in its file (a unit past the commitlog's
    end, or a wrong size, stays in commitlog order)."""
    from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE

    last = max((store / "consumequeue" / topic / str(qid)).iterdir())
    data = bytearray(last.read_bytes())
    units = np.frombuffer(bytes(data), UNIT_DTYPE).copy()
    i = int(np.count_nonzero(units["size"] > 0)) - 1
    units[i][field] = value(units[i])
    data[i * UNIT_SIZE : (i + 1) * UNIT_SIZE] = units[i : i + 1].tobytes()
    last.write_bytes(bytes(data))


def unit_past_end(store: Path) -> None:
    patch_last_unit(store, "T1", 1, "commitlog_offset", lambda u: 10 << 30)


def wrong_size(store: Path) -> None:
    patch_last_unit(store, "T2", 2, "size", lambda u: u["size"] + 1)


def deleted_unit(store: Path) -> None:
    patch_last_unit(store, "T3", 0, "size", lambda u: 0)


def rows(u: UnitColumns) -> list[tuple]:
    return [
        (*u.queue_of(i), int(u.queue_offset[i]), int(u.phys[i]), int(u.size[i]), int(u.tags_code[i]))
        for i in range(len(u))
    ]


@pytest.mark.parametrize("damage", [None, unit_past_end, wrong_size, deleted_unit], ids=lambda d: d and d.__name__)
def test_chunk_tasks_reading_queue_files_get_what_the_shuffle_gives_them(few: Path, tmp_path: Path, damage) -> None:
    """Few queues (plan.chunks_read_queues): each chunk task reads the units that
    point into its chunk from the queue files job 1 listed (read_units_in); it must
    get the same rows, in the same order, as the units shuffle gives it."""
    from mqstore.jobs.reconcile.run import _file_table
    from mqstore.jobs.units import read_units_in

    store = tmp_path / "store"
    shutil.copytree(few, store)
    if damage is not None:
        damage(store)
    p = plan(store, CHUNK)
    listed = check_queues(str(store), CFG.consume_queue_file_bytes, p.queues, with_units=False)
    assert "units" not in listed
    table = _file_table([], CFG, listed["files"])
    assert len(table.queue_files) > len(p.queues)  # several files a queue
    chunks, per_chunk, total = chunk_units(store)
    got = 0
    for spec in chunks:
        end = (1 << 62) if spec.open_end else spec.end
        mine = read_units_in(table.queues_for_chunk(spec), spec.start, end)
        assert rows(mine) == rows(per_chunk.get(spec.number, UnitColumns.empty())), spec.number
        got += len(mine)
    assert got == total == MESSAGES - (damage is deleted_unit)
    if damage is unit_past_end:  # the last (open-ended) chunk has it
        assert (10 << 30) in per_chunk[chunks[-1].number].phys.tolist()
