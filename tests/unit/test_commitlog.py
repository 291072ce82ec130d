"""CommitLog core: append, read, rollover, reopen, recovery of damaged tails, bad input."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.errors import (
    InvalidMessageError,
    InvalidTopicError,
    MessageTooLargeError,
    OffsetError,
    PropertiesTooLongError,
    StoreClosedError,
    StoreLockedError,
)
from mqstore.formats import BLANK_MAGIC, Host, ScanOutcome, decode_record, offset_to_file_name, scan_records
from mqstore.store import CommitLog, FlushMode, Message, MessageBatch, PutStatus, StoreConfig

SEG = 64 * 1024


def open_log(path: Path, **kw) -> CommitLog:
    kw.setdefault("segment_bytes", SEG)
    return CommitLog(path, StoreConfig(**kw))


def write_records(path: Path, count: int, *, body: int = 100, **kw) -> list[int]:
    """Append ``count`` messages one batch at a time; returns their offsets."""
    with open_log(path, **kw) as cl:
        res = cl.append(
            MessageBatch(
                topics="TopicTest",
                bodies=[bytes([i % 251]) * body for i in range(count)],
                queue_ids=0,
                tags="TagA",
                keys="k1 k2",
            )
        )
        return res.physical_offsets.tolist()


def segment(path: Path, base: int = 0) -> Path:
    return path / "commitlog" / offset_to_file_name(base)


def read_offsets(path: Path) -> list[int]:
    with open_log(path) as cl:
        return [r.physical_offset for r in cl.read_range(cl.min_offset, max_records=10**6).records]


def test_append_then_read_every_field(tmp_path: Path) -> None:
    with open_log(tmp_path) as cl:
        res = cl.append(
            MessageBatch.of(
                [
                    Message(
                        "TopicA",
                        b"hello",
                        queue_id=2,
                        tags="TagA",
                        keys=["k1", "k2"],
                        properties={"p": "v"},
                        flag=7,
                        born_timestamp=1700000000000,
                        born_host=Host("192.168.1.10", 54321),
                    ),
                    Message("TopicA", b"", queue_id=2, unique_key="MYKEY"),
                    Message("TopicB", b"x" * 10, born_host=Host("2001:db8::1", 4000)),
                ]
            )
        )
        assert res.status is PutStatus.PUT_OK
        assert res.queue_offsets.tolist() == [0, 1, 0]
        assert res.queue_ids.tolist()[:2] == [2, 2]
        assert res.physical_offsets[0] == 0
        assert res.physical_offsets[1] == res.sizes[0]
        first = cl.read(int(res.physical_offsets[0]))
        assert (first.topic, first.body, first.queue_id, first.flag) == ("TopicA", b"hello", 2, 7)
        assert first.born_host == Host("192.168.1.10", 54321)
        assert first.born_timestamp == 1700000000000
        assert first.properties["TAGS"] == "TagA"
        assert first.properties["KEYS"] == "k1 k2"
        assert first.properties["p"] == "v"
        assert first.properties["UNIQ_KEY"] == res.unique_keys[0]
        assert first.msg_id == res.msg_ids[0]
        assert first.store_timestamp == res.store_timestamp
        second = cl.read(int(res.physical_offsets[1]))
        assert second.unique_key == "MYKEY" and second.body == b"" and second.body_crc == 0
        third = cl.read(int(res.physical_offsets[2]))
        assert third.born_host == Host("2001:db8::1", 4000)
        assert third.sysflag & 0x10
        rows = list(res)
        assert [r.queue_offset for r in rows] == [0, 1, 0]
        assert rows[1].unique_key == "MYKEY"


def test_queue_offsets_per_queue_and_round_robin(tmp_path: Path) -> None:
    with open_log(tmp_path, default_queue_nums=3) as cl:
        a = cl.append(MessageBatch(topics="T", bodies=[b"a"] * 7))
        assert a.queue_ids.tolist() == [0, 1, 2, 0, 1, 2, 0]
        assert a.queue_offsets.tolist() == [0, 0, 0, 1, 1, 1, 2]
        cl.set_queue_nums("U", 2)
        b = cl.append(MessageBatch(topics=["T", "U", "U", "T"], bodies=[b"b"] * 4, queue_ids=[1, -1, -1, 1]))
        assert b.queue_ids.tolist() == [1, 0, 1, 1]
        assert b.queue_offsets.tolist() == [2, 0, 0, 3]
    with open_log(tmp_path) as cl:
        assert cl.recovery.clean_shutdown
        assert cl.queue_offset("T", 0) == 3 and cl.queue_offset("T", 1) == 4 and cl.queue_offset("U", 1) == 1
        c = cl.append(MessageBatch(topics="T", bodies=[b"c"], queue_ids=1))
        assert c.queue_offsets.tolist() == [4]


def test_prepared_and_rollback_messages_keep_queue_offset_zero(tmp_path: Path) -> None:
    with open_log(tmp_path) as cl:
        res = cl.append(
            MessageBatch(topics="T", bodies=[b"a", b"b", b"c", b"d"], queue_ids=0, sysflags=[0, 0x4, 0xC, 0x8])
        )
        assert res.queue_offsets.tolist() == [0, 0, 0, 1]
    with open_log(tmp_path) as cl:
        assert cl.queue_offset("T", 0) == 2


def test_rollover_never_splits_a_record(tmp_path: Path) -> None:
    with open_log(tmp_path) as cl:
        offsets, sizes = [], []
        for i in range(40):
            res = cl.append(MessageBatch(topics="T", bodies=[os.urandom(1500 + i)] * 5, queue_ids=0))
            offsets += res.physical_offsets.tolist()
            sizes += res.sizes.tolist()
        assert len(cl.stats().__dict__) and cl.stats().segments > 3
        for off, size in zip(offsets, sizes):
            assert off // SEG == (off + size + 8 - 1) // SEG  # fits with room for a BLANK
        # Every segment but the last ends with a BLANK record covering the rest.
        for base in range(0, (cl.stats().segments - 1) * SEG, SEG):
            mm = segment(tmp_path, base).read_bytes()
            res = scan_records(mm, 0, SEG, base_offset=base)
            assert res.outcome is ScanOutcome.END_OF_SEGMENT
            assert int.from_bytes(mm[res.stop + 4 : res.stop + 8], "big", signed=True) == BLANK_MAGIC
            assert int.from_bytes(mm[res.stop : res.stop + 4], "big") == SEG - res.stop
        walked = cl.read_range(0, max_records=10**6).records
        assert [r.physical_offset for r in walked] == offsets
        assert [r.queue_offset for r in walked] == list(range(200))
        # A bounded read continues where it stopped, across segments.
        got, pos = [], 0
        while pos < cl.wrote_offset:
            batch = cl.read_range(pos, max_records=7)
            got += [r.physical_offset for r in batch.records]
            pos = batch.next_offset
        assert got == offsets
        assert len(cl.read_range(0, max_bytes=1).records) == 1
        # Raw reads gather records from every segment into one buffer, in the order asked.
        order = np.array(offsets[::-3] + offsets[1::3], np.int64)
        size_of = dict(zip(offsets, sizes))
        raw = cl.read_raw(order, np.array([size_of[o] for o in order.tolist()], np.int64))
        assert [decode_record(r).physical_offset for r in raw] == order.tolist()
        assert raw.nbytes == sum(size_of[o] for o in order.tolist())


def test_reopen_continues_at_the_write_position(tmp_path: Path) -> None:
    offsets = write_records(tmp_path, 50)
    with open_log(tmp_path) as cl:
        assert cl.recovery.truncated_at is None
        res = cl.append(MessageBatch(topics="TopicTest", bodies=[b"more"], queue_ids=0))
        assert res.queue_offsets.tolist() == [50]
        assert res.physical_offsets[0] == offsets[-1] + cl.read(offsets[-1]).total_size
    assert read_offsets(tmp_path)[:-1] == offsets


def tear(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def leave_abort(path: Path) -> None:
    (path / "abort").touch()


@pytest.mark.parametrize("damage", ["zeros", "garbage", "half_record"])
def test_recovery_cuts_torn_tail(tmp_path: Path, damage: str) -> None:
    offsets = write_records(tmp_path, 20)
    seg = segment(tmp_path)
    end = offsets[-1] + 400
    payload = {
        "zeros": bytes(end - offsets[7] - 5),
        "garbage": os.urandom(end - offsets[7] - 5),
        "half_record": bytes(0),
    }[damage]
    if damage == "half_record":
        tear(seg, offsets[8], bytes(SEG - offsets[8]))
        tear(seg, offsets[7] + 60, bytes(offsets[8] - offsets[7] - 60))
    else:
        tear(seg, offsets[7] + 5, payload)
    leave_abort(tmp_path)
    with open_log(tmp_path) as cl:
        assert not cl.recovery.clean_shutdown
        assert cl.wrote_offset == offsets[7]
        assert cl.recovery.truncated_at == offsets[7]
        res = cl.append(MessageBatch(topics="TopicTest", bodies=[b"after"], queue_ids=0))
        assert res.physical_offsets.tolist() == [offsets[7]]
        assert res.queue_offsets.tolist() == [7]  # queue offsets continue from the kept prefix
    assert read_offsets(tmp_path) == offsets[:8]
    raw = seg.read_bytes()
    assert raw[offsets[7] + res.sizes[0] :] == bytes(SEG - offsets[7] - int(res.sizes[0]))  # stale tail zeroed


def test_recovery_stops_at_a_corrupt_body(tmp_path: Path) -> None:
    offsets = write_records(tmp_path, 20)
    rec = decode_record(segment(tmp_path).read_bytes(), offsets[12])
    body_at = (
        offsets[12]
        + rec.total_size
        - len(rec.body)
        - 1
        - len("TopicTest")
        - 2
        - len("TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01\x02")
        - len(rec.unique_key)
    )
    assert segment(tmp_path).read_bytes()[body_at : body_at + len(rec.body)] == rec.body
    tear(segment(tmp_path), body_at + 3, bytes([rec.body[3] ^ 0xFF]))
    leave_abort(tmp_path)
    with open_log(tmp_path) as cl:
        assert cl.wrote_offset == offsets[12]
        assert "CRC" in cl.recovery.reason
    assert read_offsets(tmp_path) == offsets[:12]


def test_recovery_deletes_segments_after_the_cut(tmp_path: Path) -> None:
    offsets = write_records(tmp_path, 200, body=1000)
    last_base = offsets[-1] - offsets[-1] % SEG
    assert last_base >= 2 * SEG
    victim = offsets[len(offsets) // 2]
    seg_base = victim - victim % SEG
    tear(segment(tmp_path, seg_base), victim - seg_base + 4, b"\x00\x00\x00\x00")  # break its magic
    leave_abort(tmp_path)
    with open_log(tmp_path) as cl:
        assert cl.wrote_offset == victim
        assert str(offset_to_file_name(last_base)) in cl.recovery.deleted_segments
    assert not segment(tmp_path, last_base).exists()


def test_normal_recovery_validates_only_the_last_three_segments(tmp_path: Path) -> None:
    offsets = write_records(tmp_path, 400, body=1000)
    with open_log(tmp_path) as cl:
        nseg = cl.stats().segments
        assert cl.recovery.start_segment == offset_to_file_name((nseg - 3) * SEG)
        assert cl.wrote_offset == offsets[-1] + cl.read(offsets[-1]).total_size


def test_segment_size_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    write_records(tmp_path, 3)
    from mqstore.errors import ConfigError

    with pytest.raises(ConfigError, match="segment_bytes"):
        CommitLog(tmp_path, StoreConfig(segment_bytes=2 * SEG))


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        (MessageBatch(topics="", bodies=[b"x"]), InvalidTopicError, "empty"),
        (MessageBatch(topics="../etc", bodies=[b"x"]), InvalidTopicError, "characters"),
        (MessageBatch(topics="a/b", bodies=[b"x"]), InvalidTopicError, "characters"),
        (MessageBatch(topics="t" * 128, bodies=[b"x"]), InvalidTopicError, "127"),
        (MessageBatch(topics="Tópico", bodies=[b"x"]), InvalidTopicError, "characters"),
        (MessageBatch(topics="T", bodies=[b"x" * (4 * 1024 * 1024 + 1)]), MessageTooLargeError, "max_message_bytes"),
        (MessageBatch(topics="T", bodies=[b"x"], properties={"k": "v" * 40000}), PropertiesTooLongError, "32767"),
        (MessageBatch(topics="T", bodies=[b"x"], queue_ids=70000), InvalidMessageError, "queue id"),
        (MessageBatch(topics="T", bodies=[b"x"], queue_ids=-5), InvalidMessageError, "queue id"),
        (MessageBatch(topics="T", bodies=["text"]), InvalidMessageError, "bytes"),
        (MessageBatch(topics="T", bodies=b"abc"), InvalidMessageError, "sequence"),
        (MessageBatch(topics="T", bodies=[b"x"], tags="a\x02b"), InvalidMessageError, "separator"),
        (MessageBatch(topics="T", bodies=[b"x"], tags="ok", keys="k\x01"), InvalidMessageError, "separator"),
        (MessageBatch(topics=["T", "T"], bodies=[b"x"]), InvalidMessageError, "2 values"),
        (MessageBatch(topics="T", bodies=[b"x"], born_hosts=Host("not-an-ip", 1)), InvalidMessageError, "born host"),
        (MessageBatch(topics="T", bodies=[b"x"], queue_ids=["q"]), InvalidMessageError, "queue_ids"),
        (MessageBatch(topics="T", bodies=[b"x"], flags=["f"]), InvalidMessageError, "flags"),
    ],
)
def test_bad_input_gets_a_typed_error_and_writes_nothing(tmp_path: Path, batch, error, match) -> None:
    with open_log(tmp_path, segment_bytes=8 << 20) as cl:
        with pytest.raises(error, match=match):
            cl.append(batch)
        assert cl.wrote_offset == 0
        cl.append(MessageBatch(topics="T", bodies=[b"fine"]))
        assert cl.queue_offset("T", 0) == 1


def test_record_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    with open_log(tmp_path) as cl, pytest.raises(MessageTooLargeError):
        cl.append(MessageBatch(topics="T", bodies=[b"x" * SEG]))


def test_closed_store_refuses_calls(tmp_path: Path) -> None:
    cl = open_log(tmp_path)
    cl.close()
    with pytest.raises(StoreClosedError):
        cl.append(MessageBatch(topics="T", bodies=[b"x"]))
    with pytest.raises(StoreClosedError):
        cl.read(0)
    cl.close()  # idempotent


def test_second_open_is_refused_while_locked(tmp_path: Path) -> None:
    with open_log(tmp_path):
        with pytest.raises(StoreLockedError, match="already open"):
            open_log(tmp_path)
    open_log(tmp_path).close()


def test_reads_outside_the_log_are_offset_errors(tmp_path: Path) -> None:
    offsets = write_records(tmp_path, 5)
    with open_log(tmp_path) as cl:
        for bad in (-1, cl.wrote_offset, cl.wrote_offset + 100, offsets[1] + 3):
            with pytest.raises(OffsetError):
                cl.read(bad)
        with pytest.raises(OffsetError):
            cl.read_range(offsets[1] + 3)


def test_clean_close_writes_checkpoint_and_removes_abort(tmp_path: Path) -> None:
    from mqstore.store.checkpoint_file import read_checkpoint

    with open_log(tmp_path) as cl:
        assert (tmp_path / "abort").exists()
        res = cl.append(MessageBatch(topics="T", bodies=[b"x"] * 3))
    assert not (tmp_path / "abort").exists()
    cp = read_checkpoint(tmp_path)
    assert cp.physic_msg_timestamp == res.store_timestamp
    assert cp.confirm_phy_offset == res.end_offset
    assert (tmp_path / "checkpoint").stat().st_size == 4096


def test_sync_flush_acknowledges_after_fsync(tmp_path: Path) -> None:
    with open_log(tmp_path, flush_mode=FlushMode.SYNC) as cl:
        res = cl.append(MessageBatch(topics="T", bodies=[b"x"] * 10))
        assert res.status is PutStatus.PUT_OK
        assert cl.flushed_offset >= res.end_offset


def test_concurrent_sync_appenders_share_fsyncs(tmp_path: Path) -> None:
    """Group commit: one fsync covers every append written while the one before it ran.
    The first fsync is held until all four producers have written a batch, so the
    next covers at least three appends however the threads are scheduled (it used to
    rely on the threads overlapping by chance: ``100 < 100`` under load)."""

    def batch() -> MessageBatch:
        return MessageBatch(topics="T", bodies=[b"y" * 100] * 20, queue_ids=0)

    with open_log(tmp_path, flush_mode=FlushMode.SYNC, segment_bytes=4 << 20) as cl:
        warm = cl.append(MessageBatch(topics="W", bodies=[b"y" * 100] * 20, queue_ids=0))  # as long as a batch()
        batch_bytes = warm.end_offset - int(warm.physical_offsets[0])
        all_wrote = cl.wrote_offset + 4 * batch_bytes
        calls = []
        real = cl._segments.sync_range

        def counting(a: int, b: int) -> None:
            if not calls:  # hold the first fsync until every producer has written once
                deadline = time.monotonic() + 30
                while cl.wrote_offset < all_wrote and time.monotonic() < deadline:
                    time.sleep(0.001)
            calls.append((a, b))
            real(a, b)

        cl._segments.sync_range = counting  # count, don't change, the real fdatasyncs
        results = []

        def producer() -> None:
            for _ in range(25):
                results.append(cl.append(batch()))

        threads = [threading.Thread(target=producer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert max(r.end_offset for r in results) <= cl.flushed_offset
        covered = [sum(a < r.end_offset <= b for r in results) for a, b in calls]
        assert sum(covered) == len(results)  # every append made durable by exactly one fsync
        assert max(covered) >= 3  # ... and one fsync made three appends durable at once
        assert len(calls) < len(results)
        offs = np.sort(np.concatenate([r.queue_offsets for r in results]))
        assert offs.tolist() == list(range(2000))


def test_sync_flush_timeout_is_reported_not_hung(tmp_path: Path) -> None:
    with open_log(tmp_path, flush_mode=FlushMode.SYNC, sync_flush_timeout_ms=50) as cl:
        real = cl._segments.sync_range
        gate = threading.Event()

        def slow(a: int, b: int) -> None:  # a disk that takes longer than the timeout
            gate.wait(5)
            real(a, b)

        cl._segments.sync_range = slow
        res = cl.append(MessageBatch(topics="T", bodies=[b"x"]))
        assert res.status is PutStatus.FLUSH_DISK_TIMEOUT
        gate.set()
    with open_log(tmp_path) as cl:
        assert cl.read(0).body == b"x"  # written, and kept after a clean close


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A real 1 MiB tmpfs, so the disk really fills up (needs root, as CI has)."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root to mount a small tmpfs")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    rc = os.system(f"mount -t tmpfs -o size=1m tmpfs {mnt}")
    assert rc == 0, "mount tmpfs failed"
    yield mnt
    os.system(f"umount {mnt}")


def test_disk_full_is_an_error_and_the_store_stays_consistent(tiny_disk: Path) -> None:
    from mqstore.errors import StoreNotWritableError

    store = tiny_disk / "store"
    with CommitLog(store, StoreConfig(segment_bytes=256 * 1024)) as cl:
        acked = []
        with pytest.raises(StoreNotWritableError, match="disk full") as info:
            for _ in range(100):
                acked.append(cl.append(MessageBatch(topics="T", bodies=[b"z" * 1000] * 20, queue_ids=0)))
        assert info.value.cause == "disk_full"
        wrote = cl.wrote_offset
        assert cl.read(int(acked[-1].physical_offsets[-1])).body == b"z" * 1000  # reads still work
        with pytest.raises(StoreNotWritableError):
            cl.append(MessageBatch(topics="T", bodies=[b"z" * 1000] * 20, queue_ids=0))
        assert cl.wrote_offset == wrote  # nothing half-written
    with CommitLog(store, StoreConfig(segment_bytes=256 * 1024)) as cl:
        assert cl.wrote_offset == wrote
        assert cl.queue_offset("T", 0) == 20 * len(acked)
