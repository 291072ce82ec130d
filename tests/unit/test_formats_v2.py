"""RocketMQ 5 V2 records (magic 0xDAA320AB, 2-byte topic length) for topics over 127
characters: the exact bytes mqstore writes, V1 kept byte-identical for shorter topics,
and every reader (single record, bulk scan, bulk fields) taking both versions.

The expected bytes are written out field by field with ``struct`` from the layout in
docs/spec section 3 (not with the encoder under test)."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import InvalidTopicError
from mqstore.formats import Host, PreparedRecords, ScanOutcome, check_topic, decode_record, encode_host, scan_records
from mqstore.formats.message import (
    MAGIC_V1,
    MAGIC_V2,
    record_fields,
    record_size,
    topic_field,
    topic_field_lengths,
)
from tests.tiers import examples

BORN = Host("10.1.2.3", 54321)
STORE = Host("192.168.0.7", 10911)
ALPHABET = "%|abcXYZ019_-"
PROPS = b"KEYS\x01order-1\x02UNIQ_KEY\x01AC1100010001\x02"


def expected_record(
    topic: bytes, *, v2: bool, body: bytes, props: bytes, phys: int, queue_id: int, queue_offset: int, store_ts: int
) -> bytes:
    """A record written out from the spec's table (IPv4 hosts, sysflag 0)."""
    fixed = struct.pack(
        ">iiqqiq4si q4si iq",
        queue_id,
        7,
        queue_offset,
        phys,
        0,
        1_700_000_000_000,
        bytes(map(int, BORN.address.split("."))),
        BORN.port,
        store_ts,
        bytes(map(int, STORE.address.split("."))),
        STORE.port,
        3,
        0,
    )
    rest = (
        struct.pack(">i", len(body))
        + body
        + (struct.pack(">h", len(topic)) if v2 else struct.pack(">b", len(topic)))
        + topic
        + struct.pack(">h", len(props))
        + props
    )
    crc = zlib.crc32(body) & 0x7FFFFFFF
    total = 12 + len(fixed) + len(rest)
    magic = 0xDAA320AB if v2 else 0xDAA320A7
    return struct.pack(">iIi", total, magic, crc) + fixed + rest


def encode(
    topic: str,
    *,
    body: bytes = b"hello v2",
    props: bytes = PROPS,
    phys: int = 4096,
    queue_id: int = 2,
    queue_offset: int = 11,
    store_ts: int = 1_700_000_000_123,
) -> bytes:
    pr = PreparedRecords(
        topics=[topic_field(topic)],
        bodies=[body],
        properties=[props],
        flags=7,
        sysflags=0,
        born_timestamps=1_700_000_000_000,
        born_hosts=[encode_host(BORN)],
        store_host=encode_host(STORE),
        reconsume_times=3,
    )
    return pr.render(
        0,
        1,
        physical_offsets=np.array([phys]),
        queue_ids=np.array([queue_id]),
        queue_offsets=np.array([queue_offset]),
        store_timestamp=store_ts,
    )


def test_a_200_char_retry_topic_is_written_as_v2_byte_for_byte() -> None:
    topic = "%RETRY%" + "consumer_group-" * 12 + "x" * 13
    assert len(topic) == 200
    check_topic(topic)
    raw = encode(topic)
    want = expected_record(
        topic.encode(),
        v2=True,
        body=b"hello v2",
        props=PROPS,
        phys=4096,
        queue_id=2,
        queue_offset=11,
        store_ts=1_700_000_000_123,
    )
    assert raw == want
    assert raw[4:8] == bytes.fromhex("DAA320AB")
    body_end = 88 + len(b"hello v2")  # the IPv4 head up to and including body_len is 88 bytes
    assert raw[body_end : body_end + 2] == b"\x00\xc8"  # the 2-byte topic length: 200
    assert raw[body_end + 2 : body_end + 202] == topic.encode()
    assert len(raw) == 91 + 1 + len(b"hello v2") + 200 + len(PROPS)  # one byte more than V1 would be
    assert len(raw) == record_size(body_len=8, topic_len=200, props_len=len(PROPS))
    rec = decode_record(raw)
    assert (rec.magic, rec.topic, rec.body, rec.total_size) == (MAGIC_V2, topic, b"hello v2", len(raw))
    assert (rec.queue_id, rec.queue_offset, rec.physical_offset, rec.flag, rec.reconsume_times) == (2, 11, 4096, 7, 3)
    assert rec.keys == "order-1" and rec.born_host == BORN and rec.store_host == STORE


def test_a_127_char_topic_stays_v1_byte_for_byte() -> None:
    topic = "T" * 127
    raw = encode(topic)
    want = expected_record(
        topic.encode(),
        v2=False,
        body=b"hello v2",
        props=PROPS,
        phys=4096,
        queue_id=2,
        queue_offset=11,
        store_ts=1_700_000_000_123,
    )
    assert raw == want
    assert raw[4:8] == bytes.fromhex("DAA320A7")
    assert raw[88 + 8] == 0x7F  # one length byte, after the 8-byte body
    assert decode_record(raw).magic == MAGIC_V1


@pytest.mark.parametrize(
    ("topic", "magic", "field_head"),
    [
        ("%DLQ%" + "g" * 122, MAGIC_V1, b"\x7f"),  # 127: the last V1 length
        ("%RETRY%" + "g" * 121, MAGIC_V2, b"\x00\x80"),  # 128: the first V2 one
        ("%DLQ%" + "g" * 250, MAGIC_V2, b"\x00\xff"),  # 255: the longest legal topic
    ],
)
def test_the_version_switches_above_127(topic: str, magic: int, field_head: bytes) -> None:
    check_topic(topic)
    field = topic_field(topic)
    assert field == field_head + topic.encode()
    assert topic_field_lengths([field]).tolist() == [len(topic)]
    raw = encode(topic)
    assert decode_record(raw).magic == magic and decode_record(raw).topic == topic
    assert raw == expected_record(
        topic.encode(),
        v2=magic == MAGIC_V2,
        body=b"hello v2",
        props=PROPS,
        phys=4096,
        queue_id=2,
        queue_offset=11,
        store_ts=1_700_000_000_123,
    )


def test_a_200_char_ordinary_topic_is_refused_with_a_clear_message() -> None:
    with pytest.raises(
        InvalidTopicError,
        match=r"200 characters long; the limit is 127 \(255 only for topics "
        r"starting with %RETRY% or %DLQ%\)",
    ):
        check_topic("OrderTopic" * 20)
    with pytest.raises(InvalidTopicError, match="256 characters long; the limit is 255"):
        check_topic("%RETRY%" + "g" * 249)
    with pytest.raises(InvalidTopicError, match="outside"):
        check_topic("%RETRY%" + "g" * 150 + "/")


long_or_short = st.one_of(
    st.text(ALPHABET, min_size=1, max_size=127),
    st.builds(
        lambda p, r: (p + r)[:255], st.sampled_from(["%RETRY%", "%DLQ%"]), st.text(ALPHABET, min_size=123, max_size=260)
    ),
)


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(
        st.tuples(long_or_short, st.binary(max_size=64), st.integers(0, 65535), st.integers(0, 1 << 40)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 1 << 40),
)
def test_mixed_versions_round_trip_through_every_reader(msgs, base: int) -> None:
    """A batch mixing V1 and V2 records: the encoder picks the version per record, and
    decode_record, scan_records (with fields) and record_fields read them all back."""
    topics = [t for t, _, _, _ in msgs]
    pr = PreparedRecords(
        topics=[topic_field(t) for t in topics],
        bodies=[b for _, b, _, _ in msgs],
        properties=[PROPS] * len(msgs),
        flags=7,
        sysflags=0,
        born_timestamps=1_700_000_000_000,
        born_hosts=encode_host(BORN),
        store_host=encode_host(STORE),
        reconsume_times=3,
    )
    sizes = pr.sizes.tolist()
    phys = base + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    raw = pr.render(
        0,
        len(msgs),
        physical_offsets=phys,
        queue_ids=np.array([q for _, _, q, _ in msgs]),
        queue_offsets=np.array([o for _, _, _, o in msgs]),
        store_timestamp=99,
    )
    assert len(raw) == sum(sizes)
    positions = (phys - base).tolist()
    for (t, body, q, o), p, size in zip(msgs, positions, sizes, strict=True):
        rec = decode_record(raw, p)
        assert rec.magic == (MAGIC_V2 if len(t) > 127 else MAGIC_V1)
        assert (rec.topic, rec.body, rec.queue_id, rec.queue_offset, rec.total_size) == (t, body, q, o, size)
        assert size == record_size(body_len=len(body), topic_len=len(t), props_len=len(PROPS))
        assert raw[p : p + size] == expected_record(
            t.encode(), v2=len(t) > 127, body=body, props=PROPS, phys=base + p, queue_id=q, queue_offset=o, store_ts=99
        )
    buf = raw + bytes(16)
    res = scan_records(buf, 0, len(buf), base_offset=base, fields=True)
    assert res.positions.tolist() == positions and res.sizes.tolist() == sizes
    assert (res.stop, res.outcome) == (len(raw), ScanOutcome.INVALID)
    assert [res.fields.topics[c] for c in res.fields.topic_codes.tolist()] == topics
    f = record_fields(raw, np.array(positions, np.int64))
    assert [f.topics[c] for c in f.topic_codes.tolist()] == topics
    assert f.queue_ids.tolist() == [q for _, _, q, _ in msgs]
    props = [bytes(raw[a : a + n]) for a, n in zip(f.properties_at.tolist(), f.properties_len.tolist())]
    assert props == [PROPS] * len(msgs)  # the properties are found past either topic length field
