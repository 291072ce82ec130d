"""Encoded appends (mqstore/store/encoded_batch.py): records a client encoded are
stored byte for byte as the columnar path stores the same batch, and every record a
columnar append would refuse refuses the whole encoded batch, nothing written."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.errors import (
    InvalidMessageError,
    InvalidTopicError,
    MessageTooLargeError,
    ReservedTopicError,
    TopicPermissionError,
    TransactionNotSupportedError,
)
from mqstore.formats.msgid import Host
from mqstore.store.config import StoreConfig
from mqstore.store.encoded_batch import parse_encoded
from mqstore.store.log_store import LogStore
from mqstore.store.message_rules import MAX_TIME_MS
from mqstore.store.messages import AUTO_QUEUE, MessageBatch
from mqstore.store.record_batch import BatchEncoder, encode_for_send
from mqstore.store.topic_configs import PERM_READ
from tests.tiers import examples


class FixedClock:
    def now_ms(self) -> int:
        return 1_700_000_000_000

    def monotonic(self) -> float:
        return 0.0


def cfg(**kw) -> StoreConfig:
    return StoreConfig(segment_bytes=1 << 20, preallocate_segments=False, **kw)


def open_log(path: Path, config: StoreConfig | None = None) -> LogStore:
    log = LogStore(path, config or cfg(), clock=FixedClock())
    log.attach_queue_ends({}, 0)
    return log


def client_encode(batch: MessageBatch, store_host: Host = StoreConfig.store_host) -> bytes:
    return encode_for_send(BatchEncoder(StoreConfig(store_host=store_host), FixedClock()), batch).data


def written(log: LogStore) -> bytes:
    """The commitlog's bytes so far (one segment)."""
    return (log.store_dir / "commitlog" / f"{0:020d}").read_bytes()[: log.commitlog.wrote_offset]


texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02 "), min_size=1, max_size=6)
names = texts.map(lambda t: "p" + t)  # never a name the store reserves


@st.composite
def batches(draw: st.DrawFn) -> MessageBatch:
    n = draw(st.integers(1, 12))
    pick = lambda s: draw(st.lists(s, min_size=n, max_size=n))  # noqa: E731
    return MessageBatch(
        topics=pick(st.sampled_from(["TopicA", "TopicB", "%RETRY%" + "t" * 130])),
        bodies=pick(st.binary(max_size=300)),
        queue_ids=pick(st.sampled_from([AUTO_QUEUE, 0, 3, 7])),
        tags=pick(st.none() | texts),
        keys=pick(st.none() | st.lists(texts, max_size=3).map(" ".join)),
        unique_keys=pick(st.text("0123456789ABCDEF", min_size=32, max_size=32)),
        properties=pick(st.none() | st.dictionaries(names, texts, max_size=3)),
        flags=pick(st.integers(-(2**31), 2**31 - 1)),
        sysflags=pick(st.sampled_from([0, 0x1, 0x10])),
        born_timestamps=pick(st.integers(0, MAX_TIME_MS)),  # the rules' range (message_rules.py)
        born_hosts=pick(st.sampled_from([Host("10.0.0.7", 5000), Host("::1", 40000)])),
        reconsume_times=pick(st.integers(0, 16)),
    )


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches())
def test_encoded_append_stores_what_the_columnar_append_stores(tmp_path_factory, batch: MessageBatch) -> None:
    root = tmp_path_factory.mktemp("stores")
    columnar, encoded = open_log(root / "columnar"), open_log(root / "encoded")
    try:
        want = columnar.append(batch)
        got = encoded.append_encoded(parse_encoded(client_encode(batch), encoded.config))
        assert written(encoded) == written(columnar)
        for field in ("physical_offsets", "sizes", "queue_ids", "queue_offsets"):
            assert np.array_equal(getattr(got, field), getattr(want, field)), field
        assert got.msg_ids == want.msg_ids and got.status is want.status
    finally:
        columnar.close()
        encoded.close()


def one(**kw) -> MessageBatch:
    return MessageBatch(**{"topics": "TopicA", "bodies": [b"hello", b"world"], **kw})


def record_starts(data: bytes) -> list[int]:
    out, at = [], 0
    while at < len(data):
        out.append(at)
        at += struct.unpack_from(">i", data, at)[0]
    return out


def with_crc_broken(data: bytes) -> bytes:
    second = record_starts(data)[1]
    return data[: second + 8] + bytes([data[second + 8] ^ 1]) + data[second + 9 :]


def with_props(props: bytes) -> bytes:
    """One record whose properties string is ``props``: the properties end a record,
    after their 2-byte length, so the head is kept and TOTALSIZE set again."""
    data = client_encode(one(bodies=[b"x"], unique_keys=["U" * 32]))
    head = data[: len(data) - 2 - len(b"UNIQ_KEY\x01" + b"U" * 32 + b"\x02")]
    out = head + struct.pack(">h", len(props)) + props
    return struct.pack(">i", len(out)) + out[4:]


def with_port(data: bytes, port: int) -> bytes:
    """The first record's born host port (IPv4: bytes 52..56) set to ``port``."""
    return data[:52] + struct.pack(">i", port) + data[56:]


REFUSED = [
    ("an empty batch", lambda: b"", InvalidMessageError, "at least one record"),
    ("a torn last record", lambda: client_encode(one())[:-3], InvalidMessageError, "encoded record 1"),
    ("trailing bytes", lambda: client_encode(one()) + b"\0" * 5, InvalidMessageError, "encoded record 2"),
    ("a CRC that does not match", lambda: with_crc_broken(client_encode(one())), InvalidMessageError, "CRC"),
    ("DELAY", lambda: client_encode(one(properties={"DELAY": "3"})), InvalidMessageError, "SendBatch"),
    ("SCHEDULE_SOURCE", lambda: client_encode(one(properties={"SCHEDULE_SOURCE": "x"})), InvalidMessageError, "store"),
    ("properties not UTF-8", lambda: with_props(b"A\x01\xff\x02"), InvalidMessageError, "UTF-8"),
    ("a property without a value", lambda: with_props(b"A\x01\x02"), InvalidMessageError, "pairs"),
    ("a born port out of range", lambda: with_port(client_encode(one()), 70_000), InvalidMessageError, "70000"),
    ("a store host of the wrong kind", lambda: client_encode(one(), Host("::1", 1)), InvalidMessageError, "IPv"),
]


@pytest.mark.parametrize(("what", "make", "error", "match"), REFUSED, ids=[r[0] for r in REFUSED])
def test_bad_batches_are_refused_whole(tmp_path: Path, what, make, error, match) -> None:
    log = open_log(tmp_path)
    try:
        with pytest.raises(error, match=match):
            log.append_encoded(parse_encoded(make(), log.config))
        assert log.commitlog.wrote_offset == log.commitlog.min_offset
    finally:
        log.close()


def test_store_policy_applies_to_encoded_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path, cfg(max_message_bytes=64))
    log.update_topic("ReadOnly", perm=PERM_READ)
    cases = [
        (one(topics="SCHEDULE_TOPIC_XXXX"), ReservedTopicError),
        (one(topics="ReadOnly"), TopicPermissionError),
        (one(topics="bad topic!"), InvalidTopicError),
        (one(sysflags=0x4), TransactionNotSupportedError),
        (one(queue_ids=70_000), InvalidMessageError),
        (one(bodies=[b"x" * 65]), MessageTooLargeError),
    ]
    try:
        for batch, error in cases:
            with pytest.raises(error):
                log.append_encoded(parse_encoded(client_encode(batch), log.config))
        assert log.commitlog.wrote_offset == log.commitlog.min_offset
        log.append_encoded(parse_encoded(client_encode(one()), log.config))
        assert log.commitlog.wrote_offset > 0
    finally:
        log.close()


def test_distinct_topics_in_order_of_first_appearance_from_any_buffer() -> None:
    """A batch over many topics names each once, in the order records first carry it,
    whether the records come as bytes, a bytearray or a memoryview; a topic that is
    not UTF-8 is refused naming the record that first carries it."""
    names = [f"T{i % 700}" for i in range(2_000)][::-1]
    data = client_encode(MessageBatch(topics=names, bodies=[b"x"] * len(names)))
    want = list(dict.fromkeys(names))
    for buf in (data, bytearray(data), memoryview(data)):
        assert parse_encoded(buf, cfg()).topics == want
    starts = record_starts(data)
    at = data.index(b"T5", starts[3])  # record 3 is the first with topic "T5..."
    assert names[3].startswith("T5") and at < starts[4]
    bad = data[:at] + b"\xff" + data[at + 1 :]
    for buf in (bad, memoryview(bad)):
        with pytest.raises(InvalidTopicError, match="encoded record 3: its topic is not UTF-8"):
            parse_encoded(buf, cfg())


def test_topic_names_are_kept_across_batches_and_start_again_past_the_cap(monkeypatch) -> None:
    """A served producer's topics arrive as bytes every batch: each distinct topic is
    decoded once and its name is the same object batch after batch (the topic table
    finds it by object); a name not UTF-8 is refused every time; past its cap the
    table starts again and names stay right."""
    from mqstore.store import encoded_batch

    table = encoded_batch._TopicNames(max_ids=50)
    monkeypatch.setattr(encoded_batch, "_TOPIC_NAMES", table)
    names = [f"T{i}" for i in range(40)]
    data = client_encode(MessageBatch(topics=names, bodies=[b"x"] * len(names)))
    first = parse_encoded(data, cfg()).topics
    again = parse_encoded(bytearray(data), cfg()).topics
    assert first == names and all(a is b for a, b in zip(first, again))
    at = data.index(b"T3", record_starts(data)[3])
    bad = data[:at] + b"\xff" + data[at + 1 :]
    for _ in range(2):
        with pytest.raises(InvalidTopicError, match="encoded record 3: its topic is not UTF-8"):
            parse_encoded(bad, cfg())
    more = [f"U{i}" for i in range(40)]
    assert parse_encoded(client_encode(MessageBatch(topics=more, bodies=[b"x"] * 40)), cfg()).topics == more
    assert len(table._ids) > 50  # past the cap: the next batch starts a new table
    assert parse_encoded(data, cfg()).topics == names
    assert len(table._ids) == 40
