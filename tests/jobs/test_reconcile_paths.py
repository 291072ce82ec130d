"""``mqstore reconcile``'s two ways of giving a chunk task its units (run.py): with
few queues each chunk task reads them from the queue files, with many the queue
tasks shuffle them to it (Plan.chunks_read_queues, planning.QUEUES_READ_BY_CHUNKS). The
same store, clean and damaged, must give the same findings either way, and each way
the findings its damage calls for. One SparkSession (local[2]) for the module."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # Spark

CFG = StoreConfig(
    segment_bytes=1 << 20, consume_queue_file_bytes=20 * 100, index_hash_slots=512, index_max_entries=2048
)
MESSAGES = 2_400
CHUNK = 128 << 10
PATHS = {"files": 1 << 40, "shuffle": 0}  # QUEUES_READ_BY_CHUNKS that makes each path the one taken


@pytest.fixture(scope="module")
def spark():
    from mqstore.jobs.spark import session

    s = session("local[2]", app_name="mqstore-tests", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 topics of 4 queues, 200 units a queue in two files each."""
    path = tmp_path_factory.mktemp("paths") / "store"
    with MessageStore(path, CFG) as s:
        for i in range(MESSAGES // 60):
            s.append(
                MessageBatch.of(
                    [Message(f"T{j % 3}", bytes(100 + j), queue_id=j % 4, tags=f"Tag{j % 5}") for j in range(60)]
                )
            )
    return path


def patch_unit(store: Path, topic: str, qid: int, which: int, field: str, value) -> None:
    """Unit number ``which`` of a queue's real units (-1: the last) changed in its file."""
    files = sorted((store / "consumequeue" / topic / str(qid)).iterdir())
    units = np.concatenate([np.frombuffer(f.read_bytes(), UNIT_DTYPE) for f in files])
    i = range(int(np.count_nonzero(units["size"] > 0)))[which]
    per_file = CFG.consume_queue_file_bytes // UNIT_SIZE
    path, at = files[i // per_file], (i % per_file) * UNIT_SIZE
    data = bytearray(path.read_bytes())
    unit = np.frombuffer(bytes(data[at : at + UNIT_SIZE]), UNIT_DTYPE).copy()
    unit[field] = value(unit[0])
    data[at : at + UNIT_SIZE] = unit.tobytes()
    path.write_bytes(bytes(data))


def unit_past_commitlog(store: Path) -> None:
    """The last unit of a queue points past the commitlog's end (and its checkpoint):
    set aside as in flight (reconcile cannot tell it from a write under way)."""
    patch_unit(store, "T1", 1, -1, "commitlog_offset", lambda u: 10 << 30)


def wrong_size(store: Path) -> None:
    patch_unit(store, "T2", 3, 150, "size", lambda u: u["size"] + 7)  # in the queue's second file


def missing_message(store: Path) -> None:
    """A unit points 4 bytes into its record: no message starts there."""
    patch_unit(store, "T0", 2, 40, "commitlog_offset", lambda u: u["commitlog_offset"] + 4)


DAMAGE = {
    "clean": (None, {}),
    "unit_past_commitlog": (unit_past_commitlog, {}),  # its record: the last, taken as not yet dispatched
    "wrong_size": (wrong_size, {"cq_size_mismatch": 1}),
    "missing_message": (missing_message, {"cq_unit_dangling": 1}),
}


def reconcile_by(spark, store: Path, path: str, monkeypatch: pytest.MonkeyPatch):
    """Reconcile with the given path forced; returns the result and how many queue
    files the chunk tasks were told to read (none when the units were shuffled)."""
    from mqstore.jobs.reconcile import planning, reconcile, run

    listed: list[int] = []
    file_table = run._file_table

    def spy(index_paths, cfg, queue_files):
        listed.append(len(queue_files))
        return file_table(index_paths, cfg, queue_files)

    with monkeypatch.context() as m:
        m.setattr(planning, "QUEUES_READ_BY_CHUNKS", PATHS[path])
        m.setattr(run, "_file_table", spy)
        result = reconcile(spark, store, chunk_bytes=CHUNK)
    return result, listed


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_both_paths_give_the_same_findings(
    spark, pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    make, kinds = DAMAGE[damage]
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    if make is not None:
        make(store)
    got = {path: reconcile_by(spark, store, path, monkeypatch) for path in PATHS}
    assert got["files"][1][0] > 12 and got["shuffle"][1] == [0]  # each path was the one taken
    for path, (result, _) in got.items():
        errors = {k: n for k, n in result.by_kind.items() if result.kind_severity[k] == "error"}
        assert errors == kinds, (path, result.findings)
        assert result.counts["units"] == MESSAGES and result.counts["chunks"] > 3
        assert result.counts["units_checked"] == MESSAGES, path
        assert result.in_flight["findings"] == (damage == "unit_past_commitlog"), path
    files, shuffle = got["files"][0], got["shuffle"][0]
    assert sorted(files.findings) == sorted(shuffle.findings)
    timing = {"commitlog_seconds"}
    assert {k: v for k, v in files.counts.items() if k not in timing} == {
        k: v for k, v in shuffle.counts.items() if k not in timing
    }
