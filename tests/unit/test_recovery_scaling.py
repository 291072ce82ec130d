"""Opening a store reads the commitlog after its checkpoint, not the whole store: with
consume queues on disk the queue-offset table comes from them (as RocketMQ does), and
only when they are gone is every segment walked for it."""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from pathlib import Path

from mqstore.store import MessageBatch, StoreConfig, faults
from mqstore.store.message_store import MessageStore
from mqstore.store.recovery import RecoveryProgress

CFG = StoreConfig(
    segment_bytes=64 * 1024, consume_queue_file_bytes=20 * 100, index_hash_slots=512, index_max_entries=4096
)


class Past:
    """Store time starting an hour ago, one second per batch: the data spans minutes, so
    the checkpoint's 3-second margin covers the last segments only."""

    def __init__(self) -> None:
        self.t = time.time_ns() // 1_000_000 - 3_600_000

    def now_ms(self) -> int:
        return self.t

    def monotonic(self) -> float:
        return time.monotonic()


def fill(path: Path) -> dict[int, int]:
    """~40 segments of 1 KB messages over 4 queues; returns the next offset per queue."""
    clock = Past()
    with MessageStore(path, CFG, clock=clock) as s:
        for i in range(100):
            clock.t += 1000
            s.append(MessageBatch(topics="T", bodies=[bytes([i]) * 1000] * 25, queue_ids=[j % 4 for j in range(25)]))
        assert s.wait_dispatched()
        return {q: s.consume_queues.find("T", q).max_offset for q in range(4)}


def segments_read_on_open(path: Path) -> tuple[int, MessageStore]:
    faults.install("nothing.fires.here=EIO")  # a plan, so hits are counted
    try:
        s = MessageStore(path, CFG, progress=RecoveryProgress())
        return faults.hits().get("recovery.scan_segment", 0), s
    finally:
        faults.install(None)


def appended_offsets(s: MessageStore) -> list[int]:
    res = s.append(MessageBatch(topics="T", bodies=[b"x"] * 4, queue_ids=[0, 1, 2, 3]))
    return res.queue_offsets.tolist()


def test_clean_reopen_reads_the_last_segments_only(tmp_path: Path) -> None:
    nxt = fill(tmp_path)
    assert len(list((tmp_path / "commitlog").iterdir())) > 30
    read, s = segments_read_on_open(tmp_path)
    with s:
        assert read == 3  # RocketMQ's normal recovery window, nothing before it
        assert s.progress.phase == "ready"
        assert appended_offsets(s) == [nxt[q] for q in range(4)]  # queue offsets continue from the queues


def test_abnormal_reopen_reads_from_the_checkpoint_on(tmp_path: Path) -> None:
    nxt = fill(tmp_path)
    (tmp_path / "abort").touch()  # as a kill -9 leaves it
    read, s = segments_read_on_open(tmp_path)
    with s:
        assert not s.commitlog.recovery.clean_shutdown
        assert read <= 3
        assert appended_offsets(s) == [nxt[q] for q in range(4)]


def test_without_consume_queues_every_segment_is_walked_and_rebuilt(tmp_path: Path) -> None:
    nxt = fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    read, s = segments_read_on_open(tmp_path)
    with s:
        assert read == len(list((tmp_path / "commitlog").iterdir()))
        assert {q: s.consume_queues.find("T", q).max_offset for q in range(4)} == nxt  # rebuilt by the catch-up
        assert appended_offsets(s) == [nxt[q] for q in range(4)]


def test_after_a_crash_only_what_followed_the_last_thorough_flush_is_dispatched_again(tmp_path: Path) -> None:
    nxt = fill(tmp_path)  # closed cleanly: the thorough flush recorded the durable offset
    (tmp_path / "abort").touch()  # as a kill -9 leaves it
    index_files = sorted(p.name for p in (tmp_path / "index").iterdir())
    with MessageStore(tmp_path, CFG) as s:
        assert not s.commitlog.recovery.clean_shutdown
        assert s.dispatcher.dispatched_records <= 1  # only the last indexed record, which the index end points at
        assert sorted(p.name for p in (tmp_path / "index").iterdir()) == index_files  # the index was kept
        assert {q: s.consume_queues.find("T", q).max_offset for q in range(4)} == nxt
        assert appended_offsets(s) == [nxt[q] for q in range(4)]
    (tmp_path / "config" / "derivedOffset.json").unlink()
    (tmp_path / "config" / "derivedOffset.json.bak").unlink(missing_ok=True)
    (tmp_path / "abort").touch()
    with MessageStore(tmp_path, CFG) as s:  # without the record: RocketMQ's rule, from the recovery start
        assert s.dispatcher.dispatched_records > 0
        assert {q: s.consume_queues.find("T", q).max_offset for q in range(4)} == {q: nxt[q] + 1 for q in range(4)}


def test_progress_is_readable_while_the_store_opens_and_status_reports_it(tmp_path: Path) -> None:
    fill(tmp_path)
    (tmp_path / "abort").touch()
    progress = RecoveryProgress()
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:  # another thread, as a status endpoint would be
        while not stop.is_set():
            if not seen or seen[-1] != progress.phase:
                seen.append(progress.phase)
            time.sleep(0.0005)

    t = threading.Thread(target=watch)
    t.start()
    try:
        s = MessageStore(tmp_path, CFG, progress=progress)
    finally:
        stop.set()
        t.join()
    with s:
        assert progress.phase == "ready" and len(seen) >= 2  # the watcher saw the open move
        assert set(seen) <= {"starting", "commitlog", "consume_queues", "dispatch", "ready"}
        st = s.status()
        assert st["state"] == "ready" and st["progress"]["phase"] == "ready" and st["writable"]
        assert st["last_recovery"]["clean_shutdown"] is False and st["wrote"] == s.commitlog.wrote_offset


def test_after_a_crash_only_bytes_past_the_confirmed_offset_are_validated(tmp_path: Path) -> None:
    fill(tmp_path)
    from mqstore.store.checkpoint_file import read_checkpoint, write_checkpoint
    from mqstore.store.reader import CommitLogReader

    offsets = [r.physical_offset for r in CommitLogReader(tmp_path).records()]
    confirmed = offsets[len(offsets) * 3 // 4]  # a record start three quarters in
    cp = read_checkpoint(tmp_path)
    write_checkpoint(tmp_path, dataclasses.replace(cp, confirm_phy_offset=confirmed))
    (tmp_path / "abort").touch()
    with MessageStore(tmp_path, CFG) as s:
        rec = s.commitlog.recovery
        assert not rec.clean_shutdown and int(rec.start_segment) == confirmed - confirmed % CFG.segment_bytes
        assert rec.records == len(offsets) - len(offsets) * 3 // 4  # exactly the records from there on
        assert rec.bytes_validated <= s.commitlog.wrote_offset - confirmed  # (segment-end BLANKs are not counted)
        assert s.commitlog.wrote_offset > offsets[-1]  # nothing was cut
    write_checkpoint(tmp_path, dataclasses.replace(read_checkpoint(tmp_path), confirm_phy_offset=confirmed + 7))
    (tmp_path / "abort").touch()
    with MessageStore(tmp_path, CFG) as s:  # not a record start: the timestamp rule, from a segment's start
        rec = s.commitlog.recovery
        assert int(rec.start_segment) % CFG.segment_bytes == 0 and rec.records > 0
        assert s.commitlog.wrote_offset > offsets[-1] and rec.truncated_at is None
