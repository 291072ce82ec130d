"""ConsumeQueues as the dispatcher's sink: units are buffered per queue and written
behind, new queues touch no file on the dispatch path, readers always see every unit,
and flushing many queues makes all of them durable at once."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from mqstore.bench.workload import Workload
from mqstore.store import CommitLog, StoreConfig
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR, ConsumeQueues
from mqstore.store.dispatch import ReputLoop
from mqstore.store.file_pool import FilePool, PooledFile

TOPICS, QUEUES = 50, 4  # 200 queues: past the one-fsync-per-queue limit of 64


def dispatched_store(tmp_path: Path, messages: int = 2000) -> tuple[CommitLog, ConsumeQueues]:
    cl = CommitLog(tmp_path, StoreConfig(segment_bytes=8 << 20))
    w = Workload(body_size=32, topics=TOPICS, queues=QUEUES)
    for start in range(0, messages, 500):
        cl.append(w.batch(start, 500))
    cqs = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    cqs.load()
    ReputLoop(cl, [cqs], dispatched_offset=0).catch_up()
    return cl, cqs


def queue_dirs(tmp_path: Path) -> list[Path]:
    root = tmp_path / CONSUME_QUEUE_DIR
    return [q for t in root.iterdir() for q in t.iterdir()] if root.is_dir() else []


def test_new_queues_touch_no_file_until_written_behind(tmp_path: Path) -> None:
    cl, cqs = dispatched_store(tmp_path)
    assert queue_dirs(tmp_path) == []  # dispatch only buffered
    assert len(cqs.all()) == TOPICS * QUEUES
    assert sum(cq.max_offset for cq in cqs.all()) == 2000
    assert cqs.write_behind(everything=False) == TOPICS * QUEUES  # every new queue gets its files
    assert len(queue_dirs(tmp_path)) == TOPICS * QUEUES
    assert all(cq.buffered_bytes == 0 for cq in cqs.all())
    cqs.close()
    cl.close()


def test_readers_see_buffered_units(tmp_path: Path) -> None:
    cl, cqs = dispatched_store(tmp_path)
    cq = cqs.find("BenchTopic7", 2)
    assert cq is not None and cq.buffered_bytes > 0
    units = cq.read_units(0, 1000)  # writes the queue's units first
    assert len(units) == cq.max_offset == 10
    for q, unit in enumerate(units):
        rec = cl.read(int(unit["commitlog_offset"]))
        assert (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size) == ("BenchTopic7", 2, q, int(unit["size"]))
    assert cq.buffered_bytes == 0
    cqs.close()
    cl.close()


def test_thorough_flush_of_many_queues_makes_all_durable_and_reopens_equal(tmp_path: Path) -> None:
    cl, cqs = dispatched_store(tmp_path)
    cqs.flush(thorough=True)  # > 64 queues: one syncfs
    before = {(cq.topic, cq.queue_id): (cq.max_offset, cq.max_physical_offset) for cq in cqs.all()}
    assert all(cq.flushed_offset == cq.max_offset for cq in cqs.all())
    cqs.close()
    again = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    again.load()
    assert {(cq.topic, cq.queue_id): (cq.max_offset, cq.max_physical_offset) for cq in again.all()} == before
    again.close()
    cl.close()


def test_every_second_flush_leaves_small_queues_buffered(tmp_path: Path) -> None:
    cl, cqs = dispatched_store(tmp_path)
    cqs.write_behind(everything=False)  # creates the files
    w = Workload(body_size=32, topics=TOPICS, queues=QUEUES)
    loop = ReputLoop(cl, [cqs], dispatched_offset=cl.wrote_offset)
    cl.append(w.batch(2000, 400))
    loop.catch_up()
    cqs.flush(thorough=False)  # a few units per queue: not worth a write yet
    assert sum(cq.buffered_bytes for cq in cqs.all()) == 400 * 20
    assert all(cq.flushed_offset < cq.max_offset for cq in cqs.all() if cq.buffered_bytes)
    cqs.flush(thorough=True)
    assert all(cq.buffered_bytes == 0 and cq.flushed_offset == cq.max_offset for cq in cqs.all())
    assert sum(cq.max_offset for cq in cqs.all()) == 2400
    cqs.close()
    cl.close()


def test_a_repeated_run_goes_through_the_full_rules(tmp_path: Path) -> None:
    cl, cqs = dispatched_store(tmp_path)
    ReputLoop(cl, [cqs], dispatched_offset=0).catch_up()  # everything again: already built, skipped
    assert sum(cq.max_offset for cq in cqs.all()) == 2000
    cqs.close()
    cl.close()


def test_pool_bound_holds_with_threads_opening_at_once(tmp_path: Path) -> None:
    """Descriptors are opened outside the pool's lock; threads opening at once still
    stay inside the bound (it is only passed when more files are in use at once than
    the bound allows, which the store's few threads never come near)."""
    pool = FilePool(6)
    files = [
        PooledFile.create(tmp_path / f"f{i}", 0, 4096, pool, preallocate=False, data=bytes([i]) * 8) for i in range(40)
    ]
    errors: list[BaseException] = []

    def reader(k: int) -> None:
        try:
            for j in range(200):
                f = files[(k * 7 + j) % len(files)]
                assert f.read(0, 8) == bytes([files.index(f)]) * 8
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert pool.peak_open <= 6
    assert pool.open_count <= 6
    open_now = sum(
        os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path))
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )
    assert open_now <= 6
    pool.close_all()
    assert np.all([f.path.stat().st_size == 4096 for f in files])


def test_buffered_units_are_served_while_they_cannot_be_written(tmp_path: Path) -> None:
    """A full disk stops write-out (the units stay buffered); pulls keep working from the
    buffer, and the units reach their files once space is back."""
    from mqstore.store import faults

    cl, cqs = dispatched_store(tmp_path)
    faults.install("cq.create=ENOSPCx0")  # every queue file creation fails: a full disk
    try:
        cq = cqs.find("BenchTopic3", 1)
        units = cq.read_units(0, 1000)  # the write-out fails; the buffer answers
        assert len(units) == cq.max_offset == 10 and cq.buffered_bytes == 10 * 20
        for q, unit in enumerate(units):
            rec = cl.read(int(unit["commitlog_offset"]))
            assert (rec.topic, rec.queue_id, rec.queue_offset) == ("BenchTopic3", 1, q)
        assert [int(u["commitlog_offset"]) for u in cq.read_units(4, 3)] == [
            int(u) for u in units["commitlog_offset"][4:7]
        ]
    finally:
        faults.install(None)
    assert len(cq.read_units(0, 1000)) == 10 and cq.buffered_bytes == 0  # written now
    assert queue_dirs(tmp_path) and (tmp_path / "consumequeue" / "BenchTopic3" / "1").is_dir()
    cqs.close()
    cl.close()
