"""Commitlog retention on real stores: expired and forced deletion, the derived files below
the new min offset, reads of deleted offsets, reopen, and reads racing the deletes."""

from __future__ import annotations

import gc
import os
import random
import sys
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from mqstore.errors import ConfigError, OffsetError
from mqstore.formats.consume_queue import UNIT, UNIT_SIZE
from mqstore.formats.message import decode_record
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.commitlog import DeleteReason
from mqstore.store.message_store import MessageStore
from mqstore.store.reads import PullStatus
from mqstore.store.retention import ConsumerLoss, Retention, RetentionConfig

CFG = StoreConfig(segment_bytes=64 * 1024, consume_queue_file_bytes=20 * 50)
HOUR_MS = 3_600_000
QUEUES = 4


def fill(store: MessageStore, batches: int = 20, topic: str = "T") -> list[int]:
    """About 27 KB per batch (25 messages of ~1 KB over 4 queues); returns the physical offsets."""
    offsets: list[int] = []
    for _ in range(batches):
        res = store.append(
            MessageBatch(
                topics=topic, bodies=[os.urandom(1000) for _ in range(25)], queue_ids=[j % QUEUES for j in range(25)]
            )
        )
        offsets += res.physical_offsets.tolist()
    return offsets


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def hour_of(ms: int) -> int:
    return time.localtime(ms / 1000).tm_hour


def segments(store_dir: Path) -> list[str]:
    return sorted(p.name for p in (store_dir / "commitlog").iterdir())


def age(store_dir: Path, names: list[str], hours: float, now: int) -> None:
    t = int((now - hours * HOUR_MS) * 1_000_000)
    for name in names:
        os.utime(store_dir / "commitlog" / name, ns=(t, t))


def retention(store: MessageStore, *, usage=0.1, index=None, **config) -> Retention:
    """Forced deletion is opted in here (the tests of what it does); off is the default
    (test_disk_pressure.py)."""
    config.setdefault("clean_forcibly_enable", True)
    return Retention(
        store.commitlog,
        store.consume_queues,
        dispatched_offset=lambda: store.dispatcher.dispatched_offset,
        index=index,
        config=RetentionConfig(**config),
        disk_usage=usage if callable(usage) else (lambda: usage),
        consumer_offsets=store.consumer_offsets,
    )


def test_expired_segments_go_only_at_the_configured_hour(tmp_path: Path) -> None:
    now = now_ms()
    here, other = hour_of(now), (hour_of(now) + 12) % 24
    with MessageStore(tmp_path, CFG) as s:
        offsets = fill(s)
        assert s.wait_dispatched()
        names = segments(tmp_path)
        assert len(names) >= 8
        age(tmp_path, names[:5], 73, now)
        age(tmp_path, names[5:7], 71, now)  # not expired yet

        rep = retention(s, delete_when=f"{other:02d}").run_once(now)
        assert rep.deleted == () and segments(tmp_path) == names and s.commitlog.min_offset == 0

        with capture_logs() as logs:
            rep = retention(s, delete_when=f"{other};{here}").run_once(now)
        assert rep.time_to_delete and not rep.forced and rep.forced_range is None
        assert [d.name for d in rep.deleted] == names[:5]
        assert {d.reason for d in rep.deleted} == {DeleteReason.EXPIRED}
        assert segments(tmp_path) == names[5:]
        new_min = int(names[5])
        assert s.commitlog.min_offset == rep.min_offset_after == new_min
        deleted_events = [e for e in logs if e["event"] == "segment_deleted"]
        assert [(e["segment"], e["reason"]) for e in deleted_events] == [(n, "expired") for n in names[:5]]

        for off in offsets:
            if off < new_min:
                with pytest.raises(OffsetError):
                    s.commitlog.read(off)
            else:
                assert s.commitlog.read(off).physical_offset == off
        with pytest.raises(OffsetError):
            s.commitlog.read_range(0)


def test_disk_above_max_used_ratio_deletes_expired_at_any_hour(tmp_path: Path) -> None:
    now = now_ms()
    other = f"{(hour_of(now) + 12) % 24:02d}"
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        names = segments(tmp_path)
        age(tmp_path, names[:3], 100, now)
        assert retention(s, usage=0.74, delete_when=other).run_once(now).deleted == ()
        rep = retention(s, usage=0.75, delete_when=other).run_once(now)
        assert rep.space_to_delete and not rep.forced
        assert [d.name for d in rep.deleted] == names[:3]  # the unexpired ones stay


def test_never_the_segment_holding_the_write_position(tmp_path: Path) -> None:
    now = now_ms()
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        names = segments(tmp_path)
        age(tmp_path, names, 1000, now)
        rep = retention(s, delete_when=f"{hour_of(now)}", max_deletes_per_run=100).run_once(now)
        assert [d.name for d in rep.deleted] == names[:-1]
        assert segments(tmp_path) == names[-1:]
        assert s.commitlog.min_offset == int(names[-1]) <= s.commitlog.wrote_offset
        assert retention(s, usage=0.99, delete_when=f"{hour_of(now)}").run_once(now).deleted == ()
        more = fill(s, 3)  # appends carry on, into new segments
        assert s.wait_dispatched()
        assert [s.commitlog.read(o).physical_offset for o in more] == more


def test_never_a_segment_not_yet_dispatched(tmp_path: Path) -> None:
    now = now_ms()
    here = f"{hour_of(now)}"
    with MessageStore(tmp_path, CFG, background_dispatch=False) as s:
        offsets = fill(s, 10)  # nothing dispatched: reput offset stays at 0
        names = segments(tmp_path)
        assert len(names) >= 4 and s.dispatcher.dispatched_offset == 0
        age(tmp_path, names, 100, now)
        rep = retention(s, usage=0.99, delete_when=here).run_once(now)  # even forced
        assert rep.deleted == () and rep.held_by_reput and rep.dispatched_offset == 0
        assert segments(tmp_path) == names

        s.dispatcher.run_once()  # dispatches the first segment only
        assert s.dispatcher.dispatched_offset == CFG.segment_bytes
        rep = retention(s, delete_when=here).run_once(now)
        assert [d.name for d in rep.deleted] == names[:1] and rep.held_by_reput

        s.dispatcher.catch_up()
        rep = retention(s, delete_when=here).run_once(now)
        assert [d.name for d in rep.deleted] == names[1:-1] and not rep.held_by_reput
        # Every record that survived is in its queue: nothing was lost to the dispatcher.
        kept = [o for o in offsets if o >= s.commitlog.min_offset]
        units = []
        for q in range(QUEUES):
            cq = s.consume_queues.find("T", q)
            units += cq.read_units(cq.min_offset, cq.max_offset - cq.min_offset)["commitlog_offset"].tolist()
        assert sorted(units) == kept


def test_forced_deletion_until_under_the_threshold(tmp_path: Path) -> None:
    now = now_ms()
    other = f"{(hour_of(now) + 12) % 24:02d}"
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        names = segments(tmp_path)
        assert len(names) >= 8
        s.commit_offset("G", "T", 0, 3)

        def usage() -> float:  # each segment file "uses" 2 %; under 85 % once 2 are left
            return 0.80 + 0.02 * len(segments(tmp_path))

        with capture_logs() as logs:
            rep = retention(s, usage=usage, delete_when=other).run_once(now)
        assert rep.forced and rep.disk_full and not rep.time_to_delete
        assert [d.name for d in rep.deleted] == names[:-2]
        assert {d.reason for d in rep.deleted} == {DeleteReason.FORCED}
        assert rep.forced_range == (0, int(names[-2])) == (rep.min_offset_before, rep.min_offset_after)
        loud = [e for e in logs if e["event"] == "commitlog_forced_deletion"]
        assert len(loud) == 1 and loud[0]["log_level"] == "error" and loud[0]["lost_to"] == int(names[-2])
        assert any(e["event"] == "disk_full" for e in logs)
        # What group G lost in T:0: it had read up to 3, the queue now starts later.
        before, after = rep.queue_min_offsets[("T", 0)]
        assert before == 0 and after > 3
        below = s.pull("T", 0, 3)  # what it would have read next is gone: the pull says where to go on
        assert (below.status, below.records, below.next_offset) == (PullStatus.OFFSET_TOO_SMALL, [], after)
        assert s.pull("T", 0, below.next_offset).records[0].queue_offset == after
        # ... is reported exactly, per group, and loudly; queues it never read are not its loss.
        assert rep.consumer_losses == (ConsumerLoss("G", "T", 0, 3, after, True),)
        (lost,) = [e for e in logs if e["event"] == "unconsumed_messages_deleted"]
        assert lost["log_level"] == "error" and lost["group"] == "G" and lost["messages"] == after - 3
        assert lost["ranges"] == [f"T-0:[3,{after})"]


def test_forced_deletion_is_capped_per_run(tmp_path: Path) -> None:
    now = now_ms()
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        names = segments(tmp_path)
        r = retention(s, usage=0.86, delete_when=f"{(hour_of(now) + 12) % 24}", max_deletes_per_run=3)
        assert [d.name for d in r.run_once(now).deleted] == names[:3]
        assert [d.name for d in r.run_once(now).deleted] == names[3:6]
        assert retention(s, usage=0.86, clean_forcibly_enable=False).run_once(now).deleted == ()


def test_consume_queue_files_below_the_new_min_go_and_pulls_start_there(tmp_path: Path) -> None:
    now = now_ms()

    class Index:
        def __init__(self) -> None:
            self.calls: list[int] = []

        def delete_files_below(self, offset: int) -> tuple[str, ...]:
            self.calls.append(offset)
            return ("idx",)

    index = Index()
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        names = segments(tmp_path)
        age(tmp_path, names[:6], 100, now)
        r = retention(s, index=index, delete_when=f"{hour_of(now)}")
        rep = r.run_once(now)
        cl_min = s.commitlog.min_offset
        assert cl_min == int(names[6]) and index.calls == [cl_min] and rep.index_files_deleted == ("idx",)
        assert rep.consume_queue_files_deleted  # 50-unit files: several lay wholly below
        for q in range(QUEUES):
            cq = s.consume_queues.find("T", q)
            qdir = tmp_path / "consumequeue" / "T" / str(q)
            for name in rep.consume_queue_files_deleted.get(("T", q), ()):
                assert not (qdir / name).exists()
            for name in cq.files[:-1]:  # every file kept but the last holds a unit at or above the min
                data = (qdir / name).read_bytes()
                assert UNIT.unpack(data[-UNIT_SIZE:])[0] >= cl_min
            (first,) = cq.read_units(cq.min_offset, 1)
            assert int(first["commitlog_offset"]) >= cl_min
            if cq.min_offset * UNIT_SIZE > int(cq.files[0]):
                prev = (qdir / cq.files[0]).read_bytes()[(cq.min_offset - 1) * UNIT_SIZE - int(cq.files[0]) :][
                    :UNIT_SIZE
                ]
                assert UNIT.unpack(prev)[0] < cl_min
            assert rep.queue_min_offsets[("T", q)] == (0, cq.min_offset)
            below = s.pull("T", q, 0, max_count=5)
            assert (below.status, below.next_offset, below.min_offset) == (
                PullStatus.OFFSET_TOO_SMALL,
                cq.min_offset,
                cq.min_offset,
            )
            pulled = s.pull("T", q, below.next_offset, max_count=5)
            assert [m.queue_offset for m in pulled.records] == list(range(cq.min_offset, cq.min_offset + 5))
            assert pulled.min_offset == cq.min_offset
            with pytest.raises(OffsetError):
                s.read_queue_offset("T", q, cq.min_offset - 1)
        assert r.run_once(now).deleted == () and index.calls == [cl_min]  # min did not move: no second pass


def test_reopen_after_deletion(tmp_path: Path) -> None:
    now = now_ms()
    with MessageStore(tmp_path, CFG) as s:
        offsets = fill(s)
        assert s.wait_dispatched()
        names = segments(tmp_path)
        age(tmp_path, names[:5], 100, now)
        retention(s, delete_when=f"{hour_of(now)}").run_once(now)
        mins = {q: s.consume_queues.find("T", q).min_offset for q in range(QUEUES)}
        maxs = {q: s.consume_queues.find("T", q).max_offset for q in range(QUEUES)}
    for abnormal in (False, True):
        if abnormal:
            (tmp_path / "abort").touch()
        with MessageStore(tmp_path, CFG) as s:
            assert s.commitlog.recovery.clean_shutdown is not abnormal
            assert s.commitlog.min_offset == int(names[5])
            assert s.commitlog.wrote_offset >= offsets[-1]
            for q in range(QUEUES):
                cq = s.consume_queues.find("T", q)
                assert (cq.min_offset, cq.max_offset) == (mins[q], maxs[q])
                assert s.pull("T", q, 0, max_count=1).next_offset == mins[q]
                assert s.pull("T", q, mins[q], max_count=1).records[0].queue_offset == mins[q]
            res = s.append(MessageBatch(topics="T", bodies=[b"after"] * QUEUES, queue_ids=list(range(QUEUES))))
            assert res.queue_offsets.tolist() == [maxs[q] for q in range(QUEUES)]
            assert s.wait_dispatched()
            for q in range(QUEUES):
                maxs[q] += 1
                assert s.pull("T", q, maxs[q] - 1).records[0].body == b"after"
            with pytest.raises(OffsetError):
                s.commitlog.read(offsets[0])


def _reopen_and_append_to_a_queue_whose_records_all_expired(tmp_path: Path, *, restore: bool) -> int:
    now = now_ms()
    with MessageStore(tmp_path, CFG) as s:
        s.append(MessageBatch(topics="Old", bodies=[b"x"] * 5, queue_ids=0))
        fill(s)
        assert s.wait_dispatched()
        age(tmp_path, segments(tmp_path)[:5], 100, now)
        retention(s, delete_when=f"{hour_of(now)}").run_once(now)
        assert s.consume_queues.find("Old", 0).max_offset == 5
    with MessageStore(tmp_path, CFG) as s:
        if restore:  # what MessageStore should do after the consume queues recovered
            s.commitlog.raise_queue_offsets({(cq.topic, cq.queue_id): cq.max_offset for cq in s.consume_queues.all()})
        return int(s.append(MessageBatch(topics="Old", bodies=[b"y"], queue_ids=0)).queue_offsets[0])


def test_queue_offsets_continue_after_retention_when_restored_from_the_consume_queues(tmp_path: Path) -> None:
    assert _reopen_and_append_to_a_queue_whose_records_all_expired(tmp_path, restore=True) == 5


def test_queue_offsets_continue_after_retention_through_the_store(tmp_path: Path) -> None:
    assert _reopen_and_append_to_a_queue_whose_records_all_expired(tmp_path, restore=False) == 5


def test_a_reader_holding_a_deleted_segment_keeps_valid_bytes(tmp_path: Path) -> None:
    now = now_ms()
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        seg = s.commitlog._segments.find(0)  # what a reader holds between find() and decode
        path, ref = str(seg.path), weakref.ref(seg)
        expected = s.commitlog.read(0)
        assert retention(s, usage=0.9, max_deletes_per_run=1).run_once(now).deleted[0].base_offset == 0
        assert not os.path.exists(path)
        with pytest.raises(OffsetError):
            s.commitlog.read(0)
        assert decode_record(seg.mm, 0, check_crc=True) == expected  # the map is still valid
        del seg
        gc.collect()
        assert ref() is None  # the last reference gone, the map (and the disk space) is released
        assert path not in Path("/proc/self/maps").read_text()


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_concurrent_reads_appends_and_deletes(tmp_path: Path) -> None:
    now = now_ms()
    with MessageStore(tmp_path, CFG) as s:
        offsets = fill(s, 30)
        assert s.wait_dispatched()
        sizes = {o: s.commitlog.read(o).total_size for o in offsets}
        stop = threading.Event()
        errors: list[BaseException] = []
        counts = {"ok": 0, "gone": 0, "pulled": 0}

        def reader(kind: str) -> None:
            rng = random.Random(kind)
            try:
                while not stop.is_set():
                    off = rng.choice(offsets)
                    try:
                        if kind == "read":
                            assert s.commitlog.read(off).physical_offset == off
                        elif kind == "range":
                            batch = s.commitlog.read_range(off, max_records=64)
                            assert batch.records[0].physical_offset == off
                        elif kind == "raw":
                            (raw,) = s.commitlog.read_raw(np.array([off]), np.array([sizes[off]]))
                            assert int.from_bytes(raw[28:36], "big") == off  # PHYSICALOFFSET: the right bytes
                        else:
                            q = rng.randrange(QUEUES)
                            recs = s.pull("T", q, rng.randrange(200), max_count=16).records
                            assert all(r.queue_id == q for r in recs)
                            counts["pulled"] += len(recs)
                        counts["ok"] += 1
                    except OffsetError:
                        counts["gone"] += 1
            except BaseException as e:  # noqa: BLE001  # reported below
                errors.append(e)

        def appender() -> None:
            try:
                while not stop.is_set():
                    fill(s, 1)
                    time.sleep(0.005)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(k,)) for k in ("read", "range", "pull", "raw", "raw")]
        threads.append(threading.Thread(target=appender))
        for t in threads:
            t.start()
        r = retention(s, usage=0.9, max_deletes_per_run=1)  # forced: one segment per run
        deleted = 0
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # threads change often: the races get a chance
        try:
            for _ in range(12):
                time.sleep(0.05)
                deleted += len(r.run_once(now).deleted)
        finally:
            stop.set()
            for t in threads:
                t.join()
            sys.setswitchinterval(switch)
        assert not errors, errors
        assert deleted == 12 and counts["ok"] > 0 and counts["gone"] > 0 and counts["pulled"] > 0
        assert s.wait_dispatched()
        assert s.commitlog.min_offset == 12 * CFG.segment_bytes


def test_config_is_checked() -> None:
    assert RetentionConfig(delete_when="04; 16").delete_hours == {4, 16}
    assert RetentionConfig().delete_hours == {4}
    for bad in (
        {"delete_when": "4am"},
        {"delete_when": "24"},
        {"disk_max_used_ratio": 1.5},
        {"warning_ratio": 0},
        {"max_deletes_per_run": 0},
        {"file_reserved_hours": -1},
    ):
        with pytest.raises(ConfigError):
            RetentionConfig(**bad)


def test_background_loop_runs_and_stops(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        r = retention(s, usage=0.9, max_deletes_per_run=1, check_interval_ms=10)
        r.start()
        deadline = time.monotonic() + 5
        while s.commitlog.min_offset < 2 * CFG.segment_bytes and time.monotonic() < deadline:
            time.sleep(0.01)
        r.stop()
        assert s.commitlog.min_offset >= 2 * CFG.segment_bytes and r.error is None
