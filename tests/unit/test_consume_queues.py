"""ConsumeQueues as the dispatcher's sink: units are journaled and written behind,
new queues touch no file on the dispatch path (a creator thread makes them, and
``make_ahead`` at topic creation), readers always see every unit, and flushing many
queues makes all of them durable at once."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import numpy as np

from mqstore.bench.workload import Workload
from mqstore.formats.consume_queue import encode_units
from mqstore.kernels import _files
from mqstore.store import CommitLog, StoreConfig, faults
from mqstore.store.consume_queue import ConsumeQueue
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


def test_new_queues_are_made_by_the_creator_and_their_units_stay_buffered(tmp_path: Path) -> None:
    """Dispatch only journals units; the creator thread makes each new queue's
    directory and first file, so the first write-out of a queue is a plain pwrite."""
    cl, cqs = dispatched_store(tmp_path)
    assert cqs.wait_made(60)
    dirs = queue_dirs(tmp_path)
    assert len(dirs) == TOPICS * QUEUES and cqs.made_ahead == TOPICS * QUEUES
    assert all(os.listdir(d) == ["00000000000000000000"] for d in dirs)
    assert cqs.write_behind(everything=False) == 0  # 10 units a queue: not a page yet
    assert cqs._journal_units == 2000  # noqa: SLF001 - every unit still journaled
    assert all(cq.has_files for cq in cqs.all())  # (all(): every queue given its units, written out)
    assert sum(cq.max_offset for cq in cqs.all()) == 2000
    cqs.flush(thorough=True)
    assert all(cq.buffered_bytes == 0 and cq.flushed_offset == cq.max_offset == 10 for cq in cqs.all())
    cqs.close()
    cl.close()


def test_new_queues_take_units_without_an_object_until_used(tmp_path: Path) -> None:
    """A new queue gets a dense id and journaled units but no ConsumeQueue object (the
    dispatcher made 40,000 of them in a pass over 10,000 new topics): the creator makes
    its files by name, and the object, made at first use, takes that file and holds
    every unit; the queue counts and is listed meanwhile."""
    cl, cqs = dispatched_store(tmp_path)
    assert not cqs._queues  # noqa: SLF001 - 200 new queues dispatched to, none made
    assert cqs.count() == TOPICS * QUEUES and len(cqs.keys()) == TOPICS * QUEUES
    assert cqs.wait_made(60) and cqs.made_ahead == TOPICS * QUEUES
    assert len(queue_dirs(tmp_path)) == TOPICS * QUEUES and not cqs._queues  # noqa: SLF001
    cq = cqs.find("BenchTopic7", 2)
    units = cq.read_units(0, 1000)
    assert len(units) == cq.max_offset == 10 and cq.files == [f"{0:020d}"]
    assert [cl.read(int(u["commitlog_offset"])).queue_offset for u in units] == list(range(10))
    assert len(cqs._queues) == 1  # noqa: SLF001
    cqs.flush(thorough=True)  # the rest made at once, each taking its file
    assert len(cqs._queues) == TOPICS * QUEUES and cqs.count() == TOPICS * QUEUES  # noqa: SLF001
    assert all(cq.files == [f"{0:020d}"] and cq.flushed_offset == cq.max_offset == 10 for cq in cqs.all())
    assert all(os.listdir(d) == [f"{0:020d}"] for d in queue_dirs(tmp_path))
    cqs.close()
    again = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    again.load()
    assert sorted(c.max_offset for c in again.all()) == [10] * (TOPICS * QUEUES)
    again.close()
    cl.close()


def test_new_queues_written_out_before_the_creator_comes(tmp_path: Path) -> None:
    """The write-out makes new queues' objects and files before the creator gets to
    them (a flush at once): the creator then takes the files there (no second file,
    no object left without units), and each queue holds its units once."""
    cl, cqs = dispatched_store(tmp_path)
    cqs.flush(thorough=True)
    assert cqs.wait_made(60)
    assert all(os.listdir(d) == [f"{0:020d}"] for d in queue_dirs(tmp_path))
    assert len(queue_dirs(tmp_path)) == TOPICS * QUEUES
    for cq in cqs.all():
        units = cq.read_units(0, 100)
        assert len(units) == 10 and cq.files == [f"{0:020d}"]
        assert [cl.read(int(u["commitlog_offset"])).queue_offset for u in units] == list(range(10))
    cqs.close()
    cl.close()


def test_every_second_step_takes_only_page_full_queues_from_the_journal(tmp_path: Path) -> None:
    """The every-second write-out finds the queues with a page of units in the
    journal's counts and gives units to those only; the others stay journaled."""
    cl, cqs = dispatched_store(tmp_path)  # 10 units in each of 200 queues
    hot = Workload(body_size=32, topics=1, queues=1)  # BenchTopic0 queue 0: 500 more
    loop = ReputLoop(cl, [cqs], dispatched_offset=cl.wrote_offset)
    cl.append(hot.batch(0, 500))
    loop.catch_up()
    assert cqs.write_behind(everything=False) == 1
    assert cqs._journal_units == 1990  # noqa: SLF001 - the other queues were given nothing
    cq = cqs.find("BenchTopic0", 0)
    assert cq.buffered_bytes == 0 and cq.max_offset == 510
    units = cq.read_units(0, 1000)
    assert [cl.read(int(u["commitlog_offset"])).queue_offset for u in units] == list(range(510))
    assert sum(c.max_offset for c in cqs.all()) == 2500
    cqs.close()
    cl.close()


def _check_units(cl: CommitLog, cqs: ConsumeQueues, per_queue: int) -> None:
    for cq in cqs.all():
        units = cq.read_units(0, 1000)
        assert len(units) == cq.max_offset == per_queue
        recs = [cl.read(int(u["commitlog_offset"])) for u in units]
        assert [(r.topic, r.queue_id, r.queue_offset) for r in recs] == [
            (cq.topic, cq.queue_id, q) for q in range(per_queue)
        ]


def _check_reopened(tmp_path: Path, cl: CommitLog, per_queue: int) -> None:
    again = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    again.load()
    _check_units(cl, again, per_queue)
    again.close()


def test_a_write_out_of_many_queues_writes_their_runs_straight_into_their_files(tmp_path: Path) -> None:
    """Past _DIRECT_FROM queues, journaled runs that continue their queues' last files
    are written straight into them (open, pwrite and close per queue in one compiled
    loop without the GIL: kernels/_files.pyx), not through each queue's buffer and
    the descriptor pool (at 200,000 queues each write opened one pooled file and
    closed another from Python): 200 queues' write-outs open no pooled descriptor,
    the queues end as they would, and every unit reads back."""
    cl, cqs = dispatched_store(tmp_path)
    assert cqs.wait_made(60)
    opened = cqs.pool.opened
    cqs.flush(thorough=True)  # new queues: objects made, each taking its made file
    w = Workload(body_size=32, topics=TOPICS, queues=QUEUES)
    loop = ReputLoop(cl, [cqs], dispatched_offset=cl.wrote_offset)
    cl.append(w.batch(2000, 2000))
    loop.catch_up()
    cqs.flush(thorough=True)
    assert cqs.pool.opened == opened
    assert all(cq.buffered_bytes == 0 and cq.flushed_offset == cq.max_offset == 20 for cq in cqs.all())
    _check_units(cl, cqs, 20)
    cqs.close()
    _check_reopened(tmp_path, cl, 20)
    cl.close()


def test_runs_the_direct_write_out_could_not_write_stay_buffered(tmp_path: Path, monkeypatch) -> None:
    """A run the compiled write-out could not write (a full disk) is buffered in its
    queue instead: reads serve it and write it, and the next write-out writes the rest."""
    cl, cqs = dispatched_store(tmp_path)
    assert cqs.wait_made(60)
    real = _files.write_queue_runs

    def every_other_fails(paths, at, data, lo, hi, status) -> None:
        odd = np.zeros(len(paths) // 2, np.int32)
        real(paths[1::2], at[1::2].copy(), data, lo[1::2].copy(), hi[1::2].copy(), odd)
        status[1::2] = odd
        status[::2] = errno.ENOSPC

    monkeypatch.setattr(_files, "write_queue_runs", every_other_fails)
    buffered = [cq.buffered_bytes for cq in cqs.all()]  # (all(): the journal is written out first)
    assert 0 < buffered.count(10 * 20) < TOPICS * QUEUES and buffered.count(0) + buffered.count(10 * 20) == len(
        buffered
    )
    monkeypatch.setattr(_files, "write_queue_runs", real)
    assert cqs.write_behind(everything=False) == 0  # not a page: they wait
    assert cqs.write_behind(everything=True) == buffered.count(10 * 20)
    assert all(cq.buffered_bytes == 0 for cq in cqs.all())
    _check_units(cl, cqs, 10)
    cqs.flush(thorough=True)
    assert all(cq.buffered_bytes == 0 and cq.flushed_offset == cq.max_offset == 10 for cq in cqs.all())
    cqs.close()
    _check_reopened(tmp_path, cl, 10)
    cl.close()


def test_a_fault_at_the_compiled_write_out_buffers_that_slices_runs(tmp_path: Path) -> None:
    """The fault point ``cq.write_runs`` (crash tests kill there) fails one compiled
    call's runs with its errno as their pwrite would: those queues keep their runs
    buffered and serve them, the other threads' slices are written, and the next
    write-out writes the rest (the direct path stays on while faults are installed)."""
    cl, cqs = dispatched_store(tmp_path)
    assert cqs.wait_made(60)
    faults.install("cq.write_runs=EIO")
    try:
        buffered = [cq.buffered_bytes for cq in cqs.all()]  # (all(): the journal is written out first)
        assert faults.hits()["cq.write_runs"] == 4  # one compiled call per writer thread
    finally:
        faults.install(None)
    assert buffered.count(10 * 20) == TOPICS * QUEUES // 4 and buffered.count(0) == TOPICS * QUEUES * 3 // 4
    _check_units(cl, cqs, 10)
    cqs.flush(thorough=True)
    assert all(cq.buffered_bytes == 0 and cq.flushed_offset == cq.max_offset == 10 for cq in cqs.all())
    cqs.close()
    _check_reopened(tmp_path, cl, 10)
    cl.close()


def test_make_ahead_makes_a_topics_queues_before_its_first_message(tmp_path: Path) -> None:
    cl = CommitLog(tmp_path, StoreConfig(segment_bytes=8 << 20))
    cqs = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    cqs.load()
    assert cqs.make_ahead("BenchTopic0", range(4)) == 4 and cqs.wait_made(60)
    assert sorted(d.name for d in queue_dirs(tmp_path)) == ["0", "1", "2", "3"]
    assert cqs.make_ahead("BenchTopic0", range(4)) == 0  # there already
    w = Workload(body_size=32, topics=1, queues=4)
    cl.append(w.batch(0, 1000))  # 250 a queue: files 0, 1 and 2 of 100 units
    ReputLoop(cl, [cqs], dispatched_offset=0).catch_up()
    cqs.flush(thorough=True)
    for q in range(4):
        cq = cqs.find("BenchTopic0", q)
        assert cq.files == [f"{b:020d}" for b in (0, 2000, 4000)]
        units = cq.read_units(0, 1000)
        assert [cl.read(int(u["commitlog_offset"])).queue_offset for u in units] == list(range(250))
    cqs.close()
    again = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    again.load()
    assert sorted((c.queue_id, c.min_offset, c.max_offset) for c in again.all()) == [(q, 0, 250) for q in range(4)]
    again.close()
    cl.close()


def test_a_file_made_ahead_at_the_wrong_place_goes_with_the_first_unit(tmp_path: Path) -> None:
    """A queue made ahead for offset 0 whose first unit has queue offset 250 (files of
    100 units): that unit goes to the file at unit 200 and the empty file goes."""
    for put in ("put_units", "append_run"):
        store = tmp_path / put
        cq = ConsumeQueue(store, "T", 0, file_bytes=20 * 100, preallocate=False, fresh=True)
        assert cq.make_files(0) and cq.has_files and cq.journal_state() == (-1, -1)
        if put == "put_units":
            cq.put_units([250], [4000], [100], [7])
        else:
            assert cq.append_run(250, 1, 4100, 4100, encode_units([4000], [100], [7])) > 0
            cq.write_behind()
        assert cq.files == ["00000000000000004000"] and (cq.min_offset, cq.max_offset) == (250, 251)
        assert os.listdir(cq.directory) == ["00000000000000004000"]
        assert int(cq.read_units(250, 1)[0]["commitlog_offset"]) == 4000
        cq.close()


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
    cqs.flush(thorough=True)  # the first 2,000 units written out
    w = Workload(body_size=32, topics=TOPICS, queues=QUEUES)
    loop = ReputLoop(cl, [cqs], dispatched_offset=cl.wrote_offset)
    cl.append(w.batch(2000, 400))
    loop.catch_up()
    cqs.flush(thorough=False)  # a few units per queue: not worth a write yet
    assert cqs._journal_units == 400  # noqa: SLF001 - every one still journaled
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


def test_listed_queues_take_units_without_an_object_until_used(tmp_path: Path) -> None:
    """After a clean close, the queues the summary of queue ends lists get a dense id
    and journaled units without a ConsumeQueue object (its row says what the next
    unit must continue); the object is made at first use and holds every unit."""
    from mqstore.store.message_store import MessageStore

    cfg = StoreConfig(segment_bytes=1 << 20, consume_queue_file_bytes=20 * 50)
    w = Workload(body_size=32, topics=TOPICS, queues=QUEUES)
    store = tmp_path / "s"
    with MessageStore(store, cfg) as s:
        for i in range(0, 2000, 500):
            s.append(w.batch(i, 500))
    with MessageStore(store, cfg) as s:
        cqs = s.consume_queues
        assert cqs.summary_queues == TOPICS * QUEUES
        for i in range(2000, 4000, 500):
            s.append(w.batch(i, 500))
        assert s.wait_dispatched(timeout_s=30)
        assert not cqs._queues  # noqa: SLF001 - 200 queues dispatched to, none made
        cq = cqs.find("BenchTopic7", 2)
        units = cq.read_units(0, 100)
        assert len(units) == cq.max_offset == 20
        assert [s.log.commitlog.read(int(u["commitlog_offset"])).queue_offset for u in units] == list(range(20))
        assert len(cqs._queues) == 1  # noqa: SLF001
    with MessageStore(store, cfg) as s:
        assert sorted(cq.max_offset for cq in s.consume_queues.all()) == [20] * (TOPICS * QUEUES)
