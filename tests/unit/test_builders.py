"""The store split in three (log_store.py, builders.py), in one process: the
commitlog side and the two builders open, feed and recover apart, and together hold
what MessageStore, their composition in one process, holds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqstore.bench.workload import Workload
from mqstore.errors import StoreLockedError, StoreNotWritableError
from mqstore.store import StoreConfig, builders
from mqstore.store.builders import GapError, IndexBuilder, LocalCommitLogView, QueueBuilder
from mqstore.store.config import FlushMode
from mqstore.store.dispatch import build_dispatch_batch
from mqstore.store.lockfile import builder_files
from mqstore.store.log_store import LogStore
from mqstore.store.message_store import MessageStore

TOPICS, QUEUES = 3, 4


def cfg() -> StoreConfig:
    return StoreConfig(segment_bytes=1 << 20, index_hash_slots=64, index_max_entries=4000)


class Split:
    """A LogStore and both builders, fed by a dispatch loop in this process."""

    def __init__(self, root: Path) -> None:
        self.log = LogStore(root, cfg())
        view = LocalCommitLogView(self.log.commitlog)
        self.cq = QueueBuilder(root, cfg(), view, on_durable=lambda o, t: self.log.note_derived("consume_queue", o, t))
        self.ix = IndexBuilder(root, cfg(), view, on_durable=lambda o, t: self.log.note_derived("index", o, t))
        ends = {(q.topic, q.queue_id): q.max_offset for q in self.cq.consume_queues.all()}
        self.log.attach_queue_ends(ends, self.cq.progress_offset)

    def dispatch(self) -> None:
        cl = self.log.commitlog
        pos = min(self.cq.progress_offset, self.ix.progress_offset)
        while pos < cl.wrote_offset:
            chunk = cl.scan(pos)
            b = build_dispatch_batch(chunk)
            self.cq.put(b, pos, chunk.next_offset)
            self.ix.put(b.index_entries(), pos, chunk.next_offset)
            pos = chunk.next_offset
        self.log.note_dispatched(pos)

    def close(self) -> None:
        self.cq.close()
        self.ix.close()
        self.log.close()


def units(split: Split) -> dict[tuple[str, int], list[int]]:
    out = {}
    for q in split.cq.consume_queues.all():
        out[(q.topic, q.queue_id)] = q.read_units(q.min_offset, q.max_offset - q.min_offset)[
            "commitlog_offset"
        ].tolist()
    return out


def test_the_parts_build_and_reopen_apart(tmp_path: Path) -> None:
    """The parts fed by hand (as the services feed them over gRPC): every record in a
    queue once, keys indexed; a clean reopen rebuilds nothing and queue offsets go on."""
    w = Workload(body_size=40, topics=TOPICS, queues=QUEUES)
    s = Split(tmp_path / "split")
    res = [s.log.append(w.batch(i, 500)) for i in range(0, 3000, 500)]
    s.dispatch()
    got = units(s)
    rec = s.log.commitlog.read(int(res[2].physical_offsets[7]))
    assert s.ix.index.query(rec.topic, rec.unique_key) == [int(res[2].physical_offsets[7])]
    appended = sorted(o for r in res for o in r.physical_offsets.tolist())
    assert sorted(o for v in got.values() for o in v) == appended and all(v == sorted(v) for v in got.values())
    s.close()

    s = Split(tmp_path / "split")  # clean reopen: nothing to rebuild, queue offsets continue
    assert s.cq.clean and s.ix.clean
    assert s.cq.progress_offset == s.log.commitlog.wrote_offset
    more = s.log.append(w.batch(3000, 12))
    assert min(more.queue_offsets.tolist()) >= 3000 // (TOPICS * QUEUES)
    s.dispatch()
    assert sum(q.max_offset for q in s.cq.consume_queues.all()) == 3012
    s.close()


def test_a_crashed_builder_rebuilds_what_it_lost(tmp_path: Path) -> None:
    w = Workload(body_size=40, topics=TOPICS, queues=QUEUES)
    s = Split(tmp_path)
    for i in range(0, 2000, 500):
        s.log.append(w.batch(i, 500))
    s.dispatch()
    s.cq.flush(thorough=True)  # durable up to here: derivedOffset.json says so
    durable = s.cq.durable_offset
    for i in range(2000, 3000, 500):
        s.log.append(w.batch(i, 500))
    s.dispatch()
    want = units(s)
    # The queue builder "dies": its buffered units are lost, its marker and files stay.
    s.cq._stop.set()
    s.cq._lock_file.release()
    view = LocalCommitLogView(s.log.commitlog)
    cq = QueueBuilder(tmp_path, cfg(), view)
    assert cq.crashed and not cq.clean
    assert cq.progress_offset <= durable < s.log.commitlog.wrote_offset  # what must be dispatched again
    with pytest.raises(GapError):
        cq.put(
            build_dispatch_batch(s.log.commitlog.scan(s.log.commitlog.wrote_offset)),
            s.log.commitlog.wrote_offset,
            s.log.commitlog.wrote_offset,
        )
    s.cq = cq
    s.dispatch()  # from the minimum of both builders: the index skips what it has
    assert units(s) == want
    s.close()
    assert not (tmp_path / builder_files("consumequeue")[1]).exists()


def test_builders_hold_their_own_locks_and_appends_wait_for_queue_ends(tmp_path: Path) -> None:
    log = LogStore(tmp_path, cfg())
    with pytest.raises(StoreNotWritableError, match="waits for the consume queues"):
        log.append(Workload(body_size=8, topics=1, queues=1).batch(0, 1))
    view = LocalCommitLogView(log.commitlog)
    cq = QueueBuilder(tmp_path, cfg(), view)
    with pytest.raises(StoreLockedError):
        QueueBuilder(tmp_path, cfg(), view)
    with pytest.raises(StoreLockedError):
        MessageStore(tmp_path, cfg())  # the commitlog side holds the store's lock
    cq.close()
    log.close()


def test_message_store_opens_a_store_whose_builder_crashed(tmp_path: Path) -> None:
    """The CLI's in-process store after the services: a builder's abort marker makes
    it recover consume queues as after a crash (re-dispatching what was lost)."""
    w = Workload(body_size=40, topics=TOPICS, queues=QUEUES)
    s = Split(tmp_path)
    for i in range(0, 2000, 500):
        s.log.append(w.batch(i, 500))
    s.dispatch()
    s.cq._stop.set()  # the queue builder dies with its units only in memory
    s.cq._lock_file.release()
    s.ix.close()
    s.log.close()
    assert (tmp_path / builder_files("consumequeue")[1]).exists()
    with MessageStore(tmp_path, cfg()) as m:
        assert m.queue_builder.crashed and not m.index_builder.crashed
        assert sum(q.max_offset for q in m.consume_queues.all()) == 2000
    assert not (tmp_path / builder_files("consumequeue")[1]).exists()  # the builder's own marker, gone at its close


def test_log_store_reports_each_flush_sync_time(tmp_path: Path) -> None:
    """The flusher's timing hook (metrics' fsync latency): one observation per sync."""
    seen: list[float] = []
    log = LogStore(tmp_path, StoreConfig(flush_mode=FlushMode.SYNC, segment_bytes=1 << 20), on_sync_seconds=seen.append)
    log.attach_queue_ends({}, 0)
    for i in range(5):
        log.append(Workload(body_size=8, topics=1, queues=1).batch(i, 1))  # sync flush: a sync per append
    log.close()
    assert len(seen) >= 5 and all(0 <= s < 10 for s in seen)


class _SetClock:
    """Monotonic time set by the test; wall time is real."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return self.t


def test_a_callers_thorough_flush_restarts_the_loops_count(tmp_path: Path, monkeypatch) -> None:
    """The loop's thorough flush is due THOROUGH_FLUSH_S after the last one, whoever
    asked for it: right after a caller's (flush_derived) it would write every queue
    again (at 200,000 queues, seconds of work in the middle of the next appends)."""
    clock = _SetClock()
    log = LogStore(tmp_path, cfg())
    config = StoreConfig(**{**cfg().__dict__, "flush_consume_queue_interval_ms": 5})
    cq = QueueBuilder(tmp_path, config, LocalCommitLogView(log.commitlog), clock=clock)
    thorough = []
    write_out = cq._write_out
    monkeypatch.setattr(cq, "_write_out", lambda t: (thorough.append(t) if t else None, write_out(t))[1])

    def loops_thorough_flushes() -> int:
        time.sleep(0.1)  # some 20 turns of the loop
        return len([t for t in thorough if t])

    clock.t += 59
    cq.flush(thorough=True)  # the caller's, 59 s after the open
    before = loops_thorough_flushes()
    clock.t += 2  # 61 s after the open, 2 s after the caller's
    assert loops_thorough_flushes() == before
    clock.t += builders.THOROUGH_FLUSH_S  # 60 s after the caller's
    assert loops_thorough_flushes() > before
    cq.close()
    log.close()
