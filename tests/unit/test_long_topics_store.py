"""A store holding RocketMQ 5 V2 records (``%RETRY%`` / ``%DLQ%`` topics over 127
characters, 2-byte topic length) end to end with MessageStore: written by mqstore or
by hand as a RocketMQ 5.1+ broker writes them, opened, recovered after a torn tail,
queried (pull, msgId, key, unique key, queue offset, topic status, consumer offsets)
and appended to. Real files, real fsync."""

from __future__ import annotations

import os
import struct
import time
import zlib
from pathlib import Path

import pytest

from mqstore.errors import InvalidTopicError, OffsetError
from mqstore.formats import Host, build_offset_msg_id
from mqstore.formats.message import MAGIC_V1, MAGIC_V2, decode_record
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.verify import verify_store

CFG = StoreConfig(
    segment_bytes=64 * 1024, consume_queue_file_bytes=20 * 64, index_hash_slots=256, index_max_entries=1024
)
RETRY = "%RETRY%" + "order_processing_consumer_group-" * 6 + "x" * 1  # 200 characters
DLQ = "%DLQ%" + "d" * 250  # 255: the longest legal topic
SHORT = "Orders"


def segment_path(store_dir: Path, offset: int) -> Path:
    return store_dir / "commitlog" / f"{offset - offset % CFG.segment_bytes:020d}"


def magic_at(store_dir: Path, offset: int) -> int:
    with open(segment_path(store_dir, offset), "rb") as f:
        f.seek(offset % CFG.segment_bytes + 4)
        return struct.unpack(">i", f.read(4))[0]


def append(s: MessageStore, topic: str, n: int, tag: str, start: int = 0) -> list[str]:
    res = s.append(
        MessageBatch.of(
            [
                Message(
                    topic, f"{topic[:8]}-{start + i}".encode() * 3, queue_id=i % 2, tags=tag, keys=[f"key-{start + i}"]
                )
                for i in range(n)
            ]
        )
    )
    return res.msg_ids


def bodies(s: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    return [r.body for r in s.pull(topic, queue_id, 0, max_count=1000).records]


def keys_found(s: MessageStore, topic: str, key: str) -> list:
    try:
        return s.query_by_key(topic, key)
    except OffsetError:  # NotFoundError: no message with that key
        return []


def test_long_topics_are_written_as_v2_and_survive_a_torn_tail(tmp_path: Path) -> None:
    assert len(RETRY) == 200 and len(DLQ) == 255
    with MessageStore(tmp_path, CFG) as s:
        # one batch mixing the versions: V2 for the long topics, V1 for the short one
        mixed = s.append(
            MessageBatch.of(
                [Message(t, f"mixed-{t[:4]}".encode(), queue_id=0, keys=["mixed"]) for t in (SHORT, RETRY, DLQ, SHORT)]
            )
        )
        assert [magic_at(tmp_path, int(p)) for p in mixed.physical_offsets] == [MAGIC_V1, MAGIC_V2, MAGIC_V2, MAGIC_V1]
        retry_ids = append(s, RETRY, 40, "TagR")
        append(s, DLQ, 10, "TagD")
        append(s, SHORT, 10, "TagS")
        last_ids = append(s, RETRY, 1, "TagR", start=40)  # the record the crash will tear
        assert s.wait_dispatched()
        s.commit_offset("order_processing_consumer_group", RETRY, 1, 7)
        assert len(bodies(s, RETRY, 0)) == 1 + 20 + 1 and len(bodies(s, RETRY, 1)) == 20
        assert s.read_msg_id(last_ids[0]).topic == RETRY
        last = s.read_msg_id(last_ids[0])
        wrote = s.commitlog.wrote_offset
    assert last.physical_offset + last.total_size == wrote

    # A torn write of the last record: its second half never reached the disk, and
    # the broker died (the abort marker stays). Derived files already point at it.
    seg = segment_path(tmp_path, last.physical_offset)
    cut = last.physical_offset % CFG.segment_bytes + last.total_size // 2
    with open(seg, "r+b") as f:
        f.seek(cut)
        f.write(bytes(CFG.segment_bytes - cut))
        f.flush()
        os.fsync(f.fileno())
    (tmp_path / "abort").touch()
    torn = verify_store(tmp_path, index_keys="full")
    kinds = {f.kind for f in torn.findings}
    assert {"commitlog_torn_tail", "cq_unit_beyond_end", "index_entry_beyond_end"} <= kinds, torn.findings
    (cut_unit,) = [f for f in torn.findings if f.kind == "cq_unit_beyond_end"]
    assert cut_unit.location == f"consumequeue/{RETRY}/0#21"
    assert torn.messages == 4 + 40 + 10 + 10  # verify's walk stops before the torn V2 record too

    with MessageStore(tmp_path, CFG) as s:
        assert s.commitlog.wrote_offset == last.physical_offset  # recovery's walk stopped at the torn V2 record
        assert s.wait_dispatched()
        # pull: the torn message is gone from queue 0, everything before it is there
        q0 = bodies(s, RETRY, 0)
        assert len(q0) == 1 + 20 and q0[0] == b"mixed-%RET"
        assert q0[1:] == [f"{RETRY[:8]}-{i}".encode() * 3 for i in range(0, 40, 2)]
        assert bodies(s, DLQ, 0)[0] == b"mixed-%DLQ" and len(bodies(s, DLQ, 1)) == 5
        # by msgId, key, unique key and queue offset
        rec = s.read_msg_id(retry_ids[3])
        assert (rec.magic, rec.topic, rec.body, rec.queue_id, rec.queue_offset) == (
            MAGIC_V2,
            RETRY,
            f"{RETRY[:8]}-3".encode() * 3,
            1,
            1,
        )
        assert rec.msg_id == retry_ids[3]
        assert [r.body for r in s.query_by_key(RETRY, "key-3")] == [rec.body]
        assert [r.msg_id for r in s.query_by_key(RETRY, "mixed")] == [
            build_offset_msg_id(rec.store_host, int(mixed.physical_offsets[1]))
        ]
        assert s.query_by_unique_key(RETRY, rec.unique_key)[0].msg_id == rec.msg_id
        assert s.read_queue_offset(RETRY, 1, 1) == rec
        assert s.read_queue_offset(DLQ, 0, 0).topic == DLQ
        assert keys_found(s, RETRY, "key-40") == []  # the torn record is not in the index any more
        status = {q.queue_id: (q.min_offset, q.max_offset) for q in s.topic_status(RETRY)}
        assert status == {0: (0, 21), 1: (0, 20)}
        assert s.fetch_offset("order_processing_consumer_group", RETRY, 1) == 7
        # appends go on, as V2, from where the torn record was
        again = s.append(MessageBatch.of([Message(RETRY, b"after the crash", queue_id=0, keys=["after"])]))
        assert int(again.physical_offsets[0]) == last.physical_offset
        assert int(again.queue_offsets[0]) == 21
        assert magic_at(tmp_path, last.physical_offset) == MAGIC_V2
        assert s.wait_dispatched()
        assert s.query_by_key(RETRY, "after")[0].body == b"after the crash"

    with MessageStore(tmp_path, CFG) as s:  # a clean reopen reads the same
        assert bodies(s, RETRY, 0)[-1] == b"after the crash"
        assert s.read_queue_offset(RETRY, 0, 21).magic == MAGIC_V2
        assert {q.queue_id: q.max_offset for q in s.topic_status(DLQ)} == {0: 6, 1: 5}
        assert s.topic_status(SHORT)[0].max_offset == 2 + 5
    report = verify_store(tmp_path, index_keys="full")  # verify's own walk, queue and index checks read V2 too
    assert report.ok and report.findings == [], report.findings
    assert report.messages == 4 + 40 + 10 + 10 + 1
    assert report.counts["index_keys_checked"] == 2 * report.messages  # UNIQ_KEY and one KEYS each


def rocketmq5_record(
    topic: str, body: bytes, props: str, *, phys: int, queue_id: int, queue_offset: int, store_ts: int
) -> bytes:
    """A record as RocketMQ 5.1+'s MessageExtEncoder writes it (spec section 3), with
    struct only: V2 (0xDAA320AB, int16 topic length) for a topic over 127 characters."""
    v2 = len(topic) > 127
    t, p = topic.encode(), props.encode()
    head = struct.pack(
        ">iiqqiq4si q4si iq",
        queue_id,
        0,
        queue_offset,
        phys,
        0,
        store_ts - 5,
        bytes([10, 0, 0, 9]),
        40000,
        store_ts,
        bytes([10, 0, 0, 1]),
        10911,
        0,
        0,
    )
    rest = (
        struct.pack(">i", len(body))
        + body
        + (struct.pack(">h", len(t)) if v2 else struct.pack(">b", len(t)))
        + t
        + struct.pack(">h", len(p))
        + p
    )
    total = 12 + len(head) + len(rest)
    return struct.pack(">iIi", total, 0xDAA320AB if v2 else 0xDAA320A7, zlib.crc32(body) & 0x7FFFFFFF) + head + rest


def test_a_store_written_by_rocketmq5_opens_and_answers(tmp_path: Path) -> None:
    """Only a commitlog segment, as a 5.1+ broker leaves it with a long retry topic in
    it (no consume queues, index or configs): opening rebuilds them from the records."""
    records, pos = [], 0
    plan = [(RETRY, 0), (SHORT, 0), (RETRY, 1), (RETRY, 0), (DLQ, 0), (SHORT, 1), (RETRY, 1)]
    counters: dict[tuple[str, int], int] = {}
    for i, (topic, qid) in enumerate(plan):
        qo = counters.get((topic, qid), 0)
        counters[(topic, qid)] = qo + 1
        props = f"KEYS\x01k{i}\x02UNIQ_KEY\x01UNIQ{i:04d}\x02TAGS\x01T{i % 2}\x02"
        raw = rocketmq5_record(
            topic, f"body-{i}".encode(), props, phys=pos, queue_id=qid, queue_offset=qo, store_ts=1_700_000_000_000 + i
        )
        records.append((pos, raw))
        pos += len(raw)
    (tmp_path / "commitlog").mkdir()
    data = b"".join(r for _, r in records)
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(data + bytes(CFG.segment_bytes - len(data)))
    store_host = Host("10.0.0.1", 10911)
    with MessageStore(tmp_path, CFG) as s:
        assert s.commitlog.wrote_offset == pos
        assert s.wait_dispatched()
        assert bodies(s, RETRY, 0) == [b"body-0", b"body-3"] and bodies(s, RETRY, 1) == [b"body-2", b"body-6"]
        assert bodies(s, DLQ, 0) == [b"body-4"] and bodies(s, SHORT, 1) == [b"body-5"]
        rec = s.read_msg_id(build_offset_msg_id(store_host, records[6][0]))
        assert (rec.magic, rec.topic, rec.body, rec.keys) == (MAGIC_V2, RETRY, b"body-6", "k6")
        assert decode_record(records[6][1]) == rec
        assert [r.body for r in s.query_by_key(RETRY, "k3")] == [b"body-3"]
        assert [r.body for r in s.query_by_unique_key(DLQ, "UNIQ0004")] == [b"body-4"]
        assert s.read_queue_offset(RETRY, 1, 1).body == b"body-6"
        assert [r.body for r in s.pull(RETRY, 0, 0, tags={"T1"}).records] == [b"body-3"]  # tagsCode of V2 records
        assert {q.queue_id: q.max_offset for q in s.topic_status(RETRY)} == {0: 2, 1: 2}
        res = s.append(MessageBatch.of([Message(RETRY, b"mine", queue_id=1)]))
        assert int(res.physical_offsets[0]) == pos and int(res.queue_offsets[0]) == 2
        assert magic_at(tmp_path, pos) == MAGIC_V2
    report = verify_store(tmp_path, index_keys="full")
    assert report.ok and report.findings == [] and report.messages == len(plan) + 1, report.findings


def test_a_long_ordinary_topic_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        before = s.commitlog.wrote_offset
        with pytest.raises(
            InvalidTopicError,
            match="200 characters long; the limit is 127 .255 only for topics starting with %RETRY% or %DLQ%.",
        ):
            s.append(MessageBatch.of([Message("OrderTopic" * 20, b"x")]))
        with pytest.raises(InvalidTopicError, match="256 characters long; the limit is 255"):
            s.append(MessageBatch.of([Message("%RETRY%" + "g" * 249, b"x")]))
        with pytest.raises(InvalidTopicError, match="the limit is 127"):
            s.pull("OrderTopic" * 20, 0, 0)
        assert s.commitlog.wrote_offset == before


class StepClock:
    """Wall time the test moves by hand (monotonic time stays real)."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


def test_a_delayed_retry_reaches_its_long_retry_topic(tmp_path: Path) -> None:
    """RocketMQ's consumer send-back: a retry waits in SCHEDULE_TOPIC_XXXX (a V1 record
    whose REAL_TOPIC property names the long retry topic), then is delivered to that
    topic as a V2 record; a reopen finds the delivery and does not repeat it."""
    clock = StepClock(1_700_000_000_000)
    with MessageStore(tmp_path, CFG, clock=clock, background_dispatch=False) as s:
        res = s.append(
            MessageBatch.of([Message(RETRY, b"retry me", queue_id=0, keys=["r-1"], properties={"DELAY": "3"})])
        )
        assert magic_at(tmp_path, int(res.physical_offsets[0])) == MAGIC_V1  # stored under the schedule topic first
        s.dispatcher.catch_up()
        assert s.pull(RETRY, 0, 0).records == []
        clock.now += 10_000  # level 3: 10 s
        assert s.scheduler.deliver_due(clock.now) == 1
        s.dispatcher.catch_up()
        (got,) = s.pull(RETRY, 0, 0).records
        assert (got.magic, got.topic, got.body, got.keys) == (MAGIC_V2, RETRY, b"retry me", "r-1")
    with MessageStore(tmp_path, CFG, clock=clock, background_dispatch=False) as s:
        assert s.scheduler.deliver_due(clock.now + 100_000) == 0
        s.dispatcher.catch_up()
        assert [r.body for r in s.pull(RETRY, 0, 0).records] == [b"retry me"]
        assert [r.body for r in s.query_by_key(RETRY, "r-1")] == [b"retry me"]
