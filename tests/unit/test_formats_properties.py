"""Hypothesis property tests for the format layer (records, properties, ids, names, hashes)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import string
import struct
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mqstore.errors import DecodeError, InvalidTopicError
from mqstore.formats import (
    CHECKPOINT_BYTES,
    Checkpoint,
    Host,
    PreparedRecords,
    ScanOutcome,
    SysFlag,
    UniqKeyGenerator,
    blank_record,
    body_crc,
    build_offset_msg_id,
    check_topic,
    decode_host,
    decode_record,
    encode_host,
    file_name_to_offset,
    index_key_hash,
    java_string_hash,
    offset_to_file_name,
    parse_offset_msg_id,
    parse_properties,
    record_size,
    scan_records,
    serialize_properties,
    tags_code,
)
from mqstore.formats.message import MAGIC_V1, MAGIC_V2, record_fields, topic_field
from tests.tiers import examples

# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------


def wide_ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], with the top of the range as likely as small values
    (plain st.integers favours small magnitudes)."""
    parts = [st.integers(lo, hi), st.integers(max(lo, hi >> 8), hi), st.sampled_from(sorted({lo, hi, max(lo, 0)}))]
    if lo < 0:
        parts.append(st.integers(lo, min(hi, lo >> 8)))
    return st.one_of(parts)


INT32 = wide_ints(-(1 << 31), (1 << 31) - 1)
INT64 = wide_ints(-(1 << 63), (1 << 63) - 1)
OFFSETS = wide_ints(0, (1 << 63) - 1)
TOPIC_ALPHABET = "%|" + string.ascii_letters + string.digits + "_-"
LONG_PREFIXES = ("%RETRY%", "%DLQ%")  # RocketMQ 5: these topics may have up to 255 characters


def legal_topic(topic: str) -> bool:
    """RocketMQ 5 TopicValidator, written out independently of names.check_topic."""
    limit = 255 if topic.startswith(LONG_PREFIXES) else 127
    return re.fullmatch(r"[%|a-zA-Z0-9_-]+", topic) is not None and len(topic) <= limit


V6_BITS = int(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
ALLOWED_SYSFLAG_BITS = 0x1 | 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x700

topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=127)
# Retry / dead-letter topics of 128..255 characters: written as V2 records.
long_topics = st.builds(
    lambda prefix, rest, n: (prefix + rest)[:n],
    st.sampled_from(LONG_PREFIXES),
    st.text(alphabet=TOPIC_ALPHABET, min_size=250, max_size=250),
    st.integers(128, 255),
)
any_topics = st.one_of(topics, long_topics)
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ports = st.integers(0, 65535)
hosts_v4 = st.builds(Host, ipv4, ports)
hosts_v6 = st.builds(Host, ipv6, ports)
hosts = st.one_of(hosts_v4, hosts_v6)
# Property text as records carry it: no NUL and none of the two separators.
prop_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"), min_size=1, max_size=16)
record_props = st.dictionaries(prop_text, prop_text, max_size=5)
sysflags = st.integers(0, 0x7FF).map(lambda v: v & ALLOWED_SYSFLAG_BITS)

RECORDS = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
FAST = settings(max_examples=examples(100), deadline=None)


@dataclass(frozen=True)
class Msg:
    """One message as a producer hands it to the store, plus its lock-time fields."""

    topic: str
    body: bytes
    props: dict[str, str]
    flag: int
    sysflag: int
    queue_id: int
    queue_offset: int
    born_timestamp: int
    born_host: Host
    reconsume_times: int
    prepared_tx_offset: int


messages = st.builds(
    Msg,
    topic=any_topics,
    body=st.binary(max_size=300),
    props=record_props,
    flag=INT32,
    sysflag=sysflags,
    queue_id=st.integers(0, 65535),
    queue_offset=INT64,
    born_timestamp=INT64,
    born_host=hosts,
    reconsume_times=INT32,
    prepared_tx_offset=INT64,
)
messages_v1 = messages.map(lambda m: m if len(m.topic) <= 127 else dataclasses.replace(m, topic=m.topic[:127]))


@dataclass(frozen=True)
class Batch:
    """A batch rendered back to back at ``base`` (commitlog offset of its first byte)."""

    msgs: list[Msg]
    store_host: Host
    store_timestamp: int
    base: int
    data: bytes
    rel_positions: list[int]  # positions within ``data``
    sizes: list[int]


def _runs(msgs: list[Msg]) -> list[tuple[int, int]]:
    """Maximal [lo, hi) runs of messages whose born hosts share one family."""
    out: list[tuple[int, int]] = []
    lo = 0
    for i in range(1, len(msgs) + 1):
        if i == len(msgs) or msgs[i].born_host.is_ipv6 != msgs[lo].born_host.is_ipv6:
            out.append((lo, i))
            lo = i
    return out


def render_batch(msgs: list[Msg], store_host: Host, store_ts: int, base: int, split_seed: int) -> Batch:
    """Encode ``msgs`` with one PreparedRecords per host-family run; each run is rendered
    in two slices (split point from ``split_seed``) to exercise ``render(lo, hi)``."""
    pieces: list[bytes] = []
    positions: list[int] = []
    sizes: list[int] = []
    at = base
    for lo, hi in _runs(msgs):
        run = msgs[lo:hi]
        pr = PreparedRecords(
            topics=[topic_field(m.topic) for m in run],
            bodies=[m.body for m in run],
            properties=[serialize_properties(m.props).encode() for m in run],
            flags=np.array([m.flag for m in run], np.int64),
            sysflags=np.array([m.sysflag for m in run], np.int64),
            born_timestamps=np.array([m.born_timestamp for m in run], np.int64),
            born_hosts=[encode_host(m.born_host) for m in run],
            store_host=encode_host(store_host),
            reconsume_times=np.array([m.reconsume_times for m in run], np.int64),
            prepared_transaction_offsets=np.array([m.prepared_tx_offset for m in run], np.int64),
        )
        assert len(pr) == len(run)
        run_sizes = [int(s) for s in pr.sizes]
        phys = np.array([at + sum(run_sizes[:k]) for k in range(len(run))], np.int64)
        qids = np.array([m.queue_id for m in run], np.int64)
        qoffs = np.array([m.queue_offset for m in run], np.int64)
        mid = split_seed % (len(run) + 1)
        for a, b in ((0, mid), (mid, len(run))):
            if a == b:
                continue
            out = pr.render(
                a,
                b,
                physical_offsets=phys[a:b],
                queue_ids=qids[a:b],
                queue_offsets=qoffs[a:b],
                store_timestamp=store_ts,
            )
            assert len(out) == sum(run_sizes[a:b])
            pieces.append(out)
        positions += [int(p) - base for p in phys]
        sizes += run_sizes
        at += sum(run_sizes)
    return Batch(msgs, store_host, store_ts, base, b"".join(pieces), positions, sizes)


@st.composite
def batches(draw: st.DrawFn, of: st.SearchStrategy[Msg] = messages) -> Batch:
    """1..20 messages rendered back to back from a random base offset (V1 records,
    and V2 ones for the long retry topics ``messages`` draws too)."""
    msgs = draw(st.lists(of, min_size=1, max_size=20))
    store_host = draw(hosts)
    store_ts = draw(INT64)
    base = draw(wide_ints(0, 1 << 62))
    split_seed = draw(st.integers(0, 1 << 16))
    return render_batch(msgs, store_host, store_ts, base, split_seed)


def expected_sysflag(m: Msg, store_host: Host) -> int:
    """The input sysflag plus the host-family bits the encoder sets."""
    return (
        m.sysflag
        | (int(SysFlag.BORNHOST_V6) if m.born_host.is_ipv6 else 0)
        | (int(SysFlag.STOREHOST_V6) if store_host.is_ipv6 else 0)
    )


# ---------------------------------------------------------------------------
# 1. records round trip
# ---------------------------------------------------------------------------


@RECORDS
@given(batches())
def test_records_round_trip_field_by_field(b: Batch) -> None:
    """Every field that goes into PreparedRecords comes back out of decode_record."""
    assert len(b.data) == sum(b.sizes)
    for m, rel, size in zip(b.msgs, b.rel_positions, b.sizes, strict=True):
        props_raw = serialize_properties(m.props).encode()
        sysflag = expected_sysflag(m, b.store_host)
        assert size == record_size(
            body_len=len(m.body), topic_len=len(m.topic.encode()), props_len=len(props_raw), sysflag=sysflag
        )
        rec = decode_record(b.data, rel)
        assert rec.total_size == size
        assert rec.magic == (MAGIC_V2 if len(m.topic) > 127 else MAGIC_V1)
        assert rec.body_crc == body_crc(m.body)
        assert rec.queue_id == m.queue_id
        assert rec.flag == m.flag
        assert rec.queue_offset == m.queue_offset
        assert rec.physical_offset == b.base + rel
        assert rec.sysflag == sysflag
        assert rec.born_timestamp == m.born_timestamp
        assert rec.born_host == m.born_host
        assert rec.store_timestamp == b.store_timestamp
        assert rec.store_host == b.store_host
        assert rec.reconsume_times == m.reconsume_times
        assert rec.prepared_transaction_offset == m.prepared_tx_offset
        assert rec.body == m.body
        assert rec.topic == m.topic
        assert rec.properties == m.props
        assert rec.msg_id == build_offset_msg_id(b.store_host, b.base + rel)
        assert parse_offset_msg_id(rec.msg_id) == (b.store_host, b.base + rel)
        # the record alone (sliced out) decodes identically
        assert decode_record(b.data[rel : rel + size]) == rec


@RECORDS
@given(batches())
def test_record_fields_agree_with_decode(b: Batch) -> None:
    """The bulk column gatherer reads the same keys as decode_record."""
    pos = np.array(b.rel_positions, np.int64)
    f = record_fields(b.data, pos)
    assert f.queue_ids.tolist() == [m.queue_id for m in b.msgs]
    assert f.queue_offsets.tolist() == [m.queue_offset for m in b.msgs]
    assert f.sysflags.tolist() == [expected_sysflag(m, b.store_host) for m in b.msgs]
    assert f.store_timestamps.tolist() == [b.store_timestamp] * len(b.msgs)
    assert [f.topics[c] for c in f.topic_codes.tolist()] == [m.topic for m in b.msgs]
    assert len(set(f.topics)) == len(f.topics)


@RECORDS
@given(batches(), st.binary(max_size=40), st.integers(8, 64))
def test_scan_finds_exactly_the_records_then_zeros(b: Batch, lead: bytes, pad: int) -> None:
    """Zeros after the data stop the scan with INVALID exactly at the end of the data."""
    buf = lead + b.data + bytes(pad)
    start = len(lead)
    end_of_data = start + len(b.data)
    res = scan_records(buf, start, len(buf), base_offset=b.base - start)
    assert res.positions.tolist() == [start + p for p in b.rel_positions]
    assert res.sizes.tolist() == b.sizes
    assert res.outcome is ScanOutcome.INVALID
    assert res.stop == end_of_data
    assert res.reason
    # without base_offset and without CRC checks: the same records
    res2 = scan_records(buf, start, len(buf), check_crc=False)
    assert res2.positions.tolist() == res.positions.tolist()
    assert (res2.stop, res2.outcome) == (end_of_data, ScanOutcome.INVALID)
    # ending exactly at the end of data: LIMIT
    res3 = scan_records(buf, start, end_of_data, base_offset=b.base - start)
    assert res3.positions.tolist() == res.positions.tolist()
    assert (res3.stop, res3.outcome, res3.reason) == (end_of_data, ScanOutcome.LIMIT, "")


@RECORDS
@given(batches(), st.integers(8, 1 << 20), st.integers(0, 32))
def test_scan_stops_at_blank_record(b: Batch, remaining: int, tail: int) -> None:
    """A BLANK record after the data ends the segment."""
    buf = b.data + blank_record(remaining) + bytes(tail)
    res = scan_records(buf, 0, len(buf), base_offset=b.base)
    assert res.positions.tolist() == b.rel_positions
    assert res.sizes.tolist() == b.sizes
    assert res.outcome is ScanOutcome.END_OF_SEGMENT
    assert res.stop == len(b.data)
    assert res.reason == ""
    with pytest.raises(DecodeError):
        decode_record(buf, len(b.data))


@RECORDS
@given(batches(), st.integers(1, 1 << 20))
def test_scan_with_wrong_base_offset_rejects_first_record(b: Batch, delta: int) -> None:
    """A PHYSICALOFFSET that is not the record's own position is invalid."""
    res = scan_records(b.data, 0, len(b.data), base_offset=b.base + delta)
    assert res.positions.tolist() == []
    assert (res.stop, res.outcome) == (0, ScanOutcome.INVALID)


@RECORDS
@given(batches(), st.data())
def test_scan_limits(b: Batch, data: st.DataObject) -> None:
    """max_records and max_bytes stop the walk with LIMIT at a record boundary."""
    n = len(b.sizes)
    k = data.draw(st.integers(1, n), label="max_records")
    res = scan_records(b.data, 0, len(b.data), max_records=k, base_offset=b.base)
    assert res.positions.tolist() == b.rel_positions[:k]
    assert res.outcome is ScanOutcome.LIMIT
    assert res.stop == (b.rel_positions[k] if k < n else len(b.data))

    max_bytes = data.draw(st.integers(0, len(b.data) + 10), label="max_bytes")
    res = scan_records(b.data, 0, len(b.data), max_bytes=max_bytes, base_offset=b.base)
    want = [p for p, s in zip(b.rel_positions, b.sizes) if p + s <= max_bytes] or b.rel_positions[:1]
    assert res.positions.tolist() == want
    assert res.outcome is ScanOutcome.LIMIT
    last = len(want) - 1
    assert res.stop == want[last] + b.sizes[last]


def to_v2(rec: bytes, m: Msg) -> bytes:
    """The V2 form of a V1 record of ``m``: MAGIC_V2 and a 2-byte topic length."""
    props_len = len(serialize_properties(m.props).encode())
    topic_len_at = len(rec) - props_len - 2 - len(m.topic) - 1
    assert rec[topic_len_at] == len(m.topic)
    return (
        struct.pack(">ii", len(rec) + 1, MAGIC_V2)
        + rec[8:topic_len_at]
        + struct.pack(">h", len(m.topic))
        + rec[topic_len_at + 1 :]
    )


@RECORDS
@given(batches(messages_v1))
def test_v2_records_read_like_v1(b: Batch) -> None:
    """Records rewritten with the V2 magic (2-byte topic length) scan and decode the same."""
    v1 = [b.data[p : p + s] for p, s in zip(b.rel_positions, b.sizes)]
    # PHYSICALOFFSET is not rewritten, so scan without base_offset
    v2 = [to_v2(r, m) for r, m in zip(v1, b.msgs)]
    buf = b"".join(v2) + bytes(8)
    res = scan_records(buf, 0, len(buf))
    assert res.sizes.tolist() == [s + 1 for s in b.sizes]
    assert (res.stop, res.outcome) == (len(buf) - 8, ScanOutcome.INVALID)
    for p, old in zip(res.positions.tolist(), v1):
        rec, want = decode_record(buf, p), decode_record(old)
        assert rec.magic == MAGIC_V2
        assert rec._replace(magic=MAGIC_V1, total_size=rec.total_size - 1) == want
    f = record_fields(buf, res.positions)
    assert [f.topics[c] for c in f.topic_codes.tolist()] == [m.topic for m in b.msgs]


# ---------------------------------------------------------------------------
# 2. corruption
# ---------------------------------------------------------------------------


@RECORDS
@given(batches(), st.data())
def test_flipped_body_byte_stops_scan_at_that_record(b: Batch, data: st.DataObject) -> None:
    """A single changed body byte fails the CRC: the scan keeps only the records before it."""
    candidates = [i for i, m in enumerate(b.msgs) if m.body]
    assume(candidates)
    i = data.draw(st.sampled_from(candidates), label="record")
    m = b.msgs[i]
    j = data.draw(st.integers(0, len(m.body) - 1), label="body byte")
    x = data.draw(st.integers(1, 255), label="xor")
    bad_body = bytearray(m.body)
    bad_body[j] ^= x
    # CRC-32 detects every single-byte change; the stored value drops the top bit, so
    # skip the (theoretical) case where only that bit differs.
    assume(body_crc(bytes(bad_body)) != body_crc(m.body))
    rel = b.rel_positions[i]
    topic_len_bytes = 2 if len(m.topic) > 127 else 1  # V2 for a long topic
    body_at = (
        rel
        + b.sizes[i]
        - (len(m.body) + topic_len_bytes + len(m.topic) + 2 + len(serialize_properties(m.props).encode()))
    )
    assert b.data[body_at : body_at + len(m.body)] == m.body
    buf = bytearray(b.data)
    buf[body_at + j] ^= x
    buf += bytes(16)
    for base in (b.base, None):
        res = scan_records(bytes(buf), 0, len(buf), check_crc=True, base_offset=base)
        assert res.positions.tolist() == b.rel_positions[:i]
        assert res.outcome is ScanOutcome.INVALID
        assert res.stop == rel
    # without the CRC check the damage is invisible to the scan
    res = scan_records(bytes(buf), 0, len(buf), check_crc=False, base_offset=b.base)
    assert res.positions.tolist() == b.rel_positions
    with pytest.raises(DecodeError):
        decode_record(bytes(buf), rel)
    assert decode_record(bytes(buf), rel, check_crc=False).body == bytes(bad_body)


# Header bytes whose change a scan always detects: TOTALSIZE and PHYSICALOFFSET, and
# BODYCRC when the body is not empty (RocketMQ checks no CRC for an empty body).
_CHECKED_HEADER_BYTES = [*range(0, 4), *range(28, 36)]
_CRC_BYTES = range(8, 12)


@RECORDS
@given(batches(), st.data())
def test_any_flipped_byte_keeps_a_valid_prefix(b: Batch, data: st.DataObject) -> None:
    """After any single-byte change the scan accepts a prefix of the true records; a
    change to TOTALSIZE, PHYSICALOFFSET or a non-empty body's BODYCRC stops it exactly
    at that record."""
    at = data.draw(st.integers(0, len(b.data) - 1), label="byte")
    x = data.draw(st.integers(1, 255), label="xor")
    i = max(k for k, p in enumerate(b.rel_positions) if p <= at)
    buf = bytearray(b.data)
    buf[at] ^= x
    buf += bytes(16)
    res = scan_records(bytes(buf), 0, len(buf), base_offset=b.base)
    got = res.positions.tolist()
    assert got == b.rel_positions[: len(got)]
    assert res.sizes.tolist() == b.sizes[: len(got)]
    into = at - b.rel_positions[i]
    if into in _CHECKED_HEADER_BYTES or (into in _CRC_BYTES and b.msgs[i].body):
        assert got == b.rel_positions[:i]
        assert (res.stop, res.outcome) == (b.rel_positions[i], ScanOutcome.INVALID)


@RECORDS
@given(batches(), st.data())
def test_truncated_last_record_is_not_scanned(b: Batch, data: st.DataObject) -> None:
    """Cutting the data anywhere inside the last record ends the scan before it."""
    last = b.rel_positions[-1]
    cut = data.draw(st.integers(last, len(b.data) - 1), label="cut")
    buf = b.data[:cut]
    res = scan_records(buf, 0, len(buf), base_offset=b.base)
    assert res.positions.tolist() == b.rel_positions[:-1]
    assert res.sizes.tolist() == b.sizes[:-1]
    assert res.stop == last
    assert res.outcome is (ScanOutcome.LIMIT if cut - last < 8 else ScanOutcome.INVALID)
    with pytest.raises(DecodeError):
        decode_record(buf, last)


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=400))
def test_decode_garbage_raises_only_decode_error(raw: bytes) -> None:
    """Random bytes never decode into anything but a DecodeError."""
    with pytest.raises(DecodeError):
        decode_record(raw)


@settings(max_examples=examples(400), deadline=None)
@given(st.sampled_from([MAGIC_V1, MAGIC_V2]), st.binary(max_size=300), st.integers(-8, 8), st.booleans())
def test_decode_garbage_with_plausible_head(magic: int, rest: bytes, size_delta: int, crc: bool) -> None:
    """Garbage behind a valid magic and a matching size: DecodeError or a record."""
    raw = struct.pack(">ii", 8 + len(rest) + size_delta, magic) + rest
    try:
        rec = decode_record(raw, check_crc=crc)
    except DecodeError:
        return
    assert rec.total_size == len(raw)


@settings(max_examples=examples(150), deadline=None)
@given(
    batches(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10_000),
    st.booleans(),
)
def test_decode_mutated_records_raises_only_decode_error(
    b: Batch, edits: list[tuple[int, int]], cut: int, crc: bool
) -> None:
    """Real records with overwritten bytes (and maybe cut short) either decode or raise
    DecodeError; never another exception type."""
    i = edits[0][0] % len(b.rel_positions)
    rel = b.rel_positions[i]
    buf = bytearray(b.data)
    for at, v in edits:
        buf[rel + at % b.sizes[i]] = v
    buf = buf[: rel + 1 + cut % (len(buf) - rel)]
    try:
        rec = decode_record(bytes(buf), rel, check_crc=crc)
    except DecodeError:
        return
    assert rec.total_size > 0
    assert rel + rec.total_size <= len(buf)


# ---------------------------------------------------------------------------
# 3. properties codec
# ---------------------------------------------------------------------------

codec_keys = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=20)
codec_values = st.text(st.characters(codec="utf-8", exclude_characters="\x02"), min_size=1, max_size=20)


@FAST
@given(st.dictionaries(codec_keys, codec_values, max_size=10))
def test_properties_round_trip(d: dict[str, str]) -> None:
    """parse(serialize(d)) == d; each entry ends with the property separator."""
    s = serialize_properties(d)
    assert parse_properties(s) == d
    assert s.count("\x02") == len(d)
    assert s == "" or s.endswith("\x02")
    assert serialize_properties(list(d.items())) == s


@FAST
@given(st.dictionaries(codec_keys, codec_values, max_size=6), st.lists(codec_keys, max_size=3))
def test_properties_none_values_are_skipped(d: dict[str, str], none_keys: list[str]) -> None:
    """Entries whose value is None are left out."""
    items: list[tuple[str, str | None]] = [(k, None) for k in none_keys if k not in d] + list(d.items())
    assert serialize_properties(items) == serialize_properties(d)


@settings(max_examples=examples(300), deadline=None)
@given(st.text(st.sampled_from("ab\x01\x02") | st.characters(), max_size=60))
def test_parse_properties_never_raises(s: str) -> None:
    """Arbitrary text parses; every entry it yields is well formed."""
    out = parse_properties(s)
    for k, v in out.items():
        assert k and v
        assert "\x01" not in k and "\x02" not in k and "\x02" not in v
        assert f"{k}\x01{v}" in s.split("\x02")


# ---------------------------------------------------------------------------
# 4. msgId and UNIQ_KEY
# ---------------------------------------------------------------------------


@FAST
@given(hosts, OFFSETS)
def test_offset_msg_id_round_trip(host: Host, offset: int) -> None:
    """build then parse returns the same host and offset; 32 hex chars iff IPv4."""
    mid = build_offset_msg_id(host, offset)
    assert len(mid) == (56 if host.is_ipv6 else 32)
    assert re.fullmatch(r"[0-9A-F]+", mid)
    assert parse_offset_msg_id(mid) == (host, offset)
    assert parse_offset_msg_id(mid.lower()) == (host, offset)


@FAST
@given(st.one_of(ipv4, ipv6), INT32)
def test_host_round_trip(address: str, port: int) -> None:
    """encode_host/decode_host are inverse for every signed 32-bit port."""
    host = Host(address, port)
    raw = encode_host(host)
    assert len(raw) == (20 if host.is_ipv6 else 8)
    assert decode_host(raw) == host


@FAST
@given(st.text(max_size=60) | st.text(alphabet="0123456789abcdefABCDEF ", min_size=32, max_size=32))
def test_parse_offset_msg_id_garbage(s: str) -> None:
    """Malformed msgIds raise DecodeError and nothing else."""
    try:
        host, off = parse_offset_msg_id(s)
    except DecodeError:
        return
    assert build_offset_msg_id(host, off) == s.upper()


def _month_ms(now_ms: int) -> int:
    """Milliseconds since the start of the UTC month, by integer arithmetic."""
    t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=now_ms)
    start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (t - start) // dt.timedelta(milliseconds=1)


NOW_MS = st.integers(946_684_800_000, 4_102_444_800_000)  # 2000 .. 2100


@settings(max_examples=examples(100), deadline=None)
@given(
    ipv4,
    wide_ints(0, 0xFFFF),
    wide_ints(0, 0xFFFFFFFF),
    st.lists(st.tuples(st.integers(1, 3000), NOW_MS), min_size=1, max_size=5),
)
def test_uniq_keys_layout(address: str, pid: int, loader_hash: int, calls: list[tuple[int, int]]) -> None:
    """batch(n) gives n distinct 32-hex keys in RocketMQ's layout, and reserve() the same."""
    client = Host(address, 1234)
    g1 = UniqKeyGenerator(client, pid=pid, loader_hash=loader_hash)
    g2 = UniqKeyGenerator(client, pid=pid, loader_hash=loader_hash)
    prefix = encode_host(client)[:4].hex().upper() + f"{pid:04X}{loader_hash:08X}"
    counter = 0
    for n, now in calls:
        keys = g1.batch(n, now_ms=now)
        head, tails = g2.reserve(n, now_ms=now)
        assert keys == [head + t for t in tails]
        assert len(keys) == n == len(set(keys))
        assert head == f"{prefix}{_month_ms(now):08X}"
        for k, key in enumerate(keys):
            assert len(key) == 32 and re.fullmatch(r"[0-9A-F]{32}", key)
            assert key[28:] == f"{(counter + k) & 0xFFFF:04X}"
        counter += n


def test_uniq_keys_counter_wraps_and_stays_distinct() -> None:
    """A full 65,536-key batch is distinct; the counter then wraps to 0000."""
    g = UniqKeyGenerator(Host("10.1.2.3", 0), pid=7, loader_hash=9)
    first = g.batch(5, now_ms=1_700_000_000_000)
    keys = g.batch(65536, now_ms=1_700_000_000_000)
    assert len(set(keys)) == 65536
    assert keys[0][28:] == "0005" and keys[65530][28:] == "FFFF" and keys[65531][28:] == "0000"
    assert first[0][28:] == "0000"


@FAST
@given(ipv6, st.integers(1, 50), NOW_MS)
def test_uniq_keys_ipv6_client(address: str, n: int, now: int) -> None:
    """An IPv6 client makes 56-hex-char keys with the same tail layout."""
    keys = UniqKeyGenerator(Host(address, 0), pid=1, loader_hash=2).batch(n, now_ms=now)
    assert all(len(k) == 56 and k[:32] == encode_host(Host(address, 0))[:16].hex().upper() for k in keys)
    assert len(set(keys)) == n


# ---------------------------------------------------------------------------
# 5. names
# ---------------------------------------------------------------------------


@FAST
@given(wide_ints(0, 10**20 - 1))
def test_file_name_round_trip(offset: int) -> None:
    """offset -> 20-digit name -> offset."""
    name = offset_to_file_name(offset)
    assert len(name) == 20 and name.isdigit()
    assert file_name_to_offset(name) == offset


@FAST
@given(st.text(max_size=25) | st.text(alphabet="0123456789", min_size=18, max_size=22))
def test_file_name_parse_is_strict(name: str) -> None:
    """Anything but exactly 20 ASCII digits raises DecodeError; the rest round-trips."""
    try:
        off = file_name_to_offset(name)
    except DecodeError:
        assert not (len(name) == 20 and re.fullmatch(r"[0-9]{20}", name))
        return
    assert offset_to_file_name(off) == name


# Characters a topic may not hold: every other ASCII character first, then any.
NON_TOPIC_CHARS = st.sampled_from(sorted(set(map(chr, range(128))) - set(TOPIC_ALPHABET))) | st.characters().filter(
    lambda c: c not in TOPIC_ALPHABET
)


@FAST
@given(any_topics)
def test_check_topic_accepts_valid_names(topic: str) -> None:
    assert legal_topic(topic)
    check_topic(topic)


@FAST
@given(
    st.text(alphabet=TOPIC_ALPHABET, max_size=70),
    NON_TOPIC_CHARS,
    st.text(alphabet=TOPIC_ALPHABET, max_size=70),
)
def test_check_topic_rejects_other_characters(pre: str, bad: str, post: str) -> None:
    with pytest.raises(InvalidTopicError):
        check_topic(pre + bad + post)


@FAST
@given(st.text(alphabet=TOPIC_ALPHABET, min_size=128, max_size=400).filter(lambda t: not t.startswith(LONG_PREFIXES)))
def test_check_topic_rejects_long_names(topic: str) -> None:
    with pytest.raises(InvalidTopicError, match=f"{len(topic)} characters long; the limit is 127"):
        check_topic(topic)


@FAST
@given(st.sampled_from(LONG_PREFIXES), st.text(alphabet=TOPIC_ALPHABET, min_size=251, max_size=400))
def test_check_topic_rejects_retry_topics_over_255(prefix: str, rest: str) -> None:
    with pytest.raises(InvalidTopicError, match="the limit is 255"):
        check_topic(prefix + rest)


@FAST
@given(
    st.sampled_from(("", *LONG_PREFIXES, "%RETRY", "%retry%", "RETRY%", "%DLQ")),
    st.text(st.sampled_from(TOPIC_ALPHABET) | NON_TOPIC_CHARS, max_size=260),
)
def test_check_topic_agrees_with_the_regex(prefix: str, rest: str) -> None:
    """Arbitrary text (with or without a retry / dead-letter prefix, around the 127 and
    255 limits): accepted exactly when RocketMQ 5's rule accepts it."""
    topic = prefix + rest
    valid = legal_topic(topic)
    if valid:
        check_topic(topic)
    else:
        with pytest.raises(InvalidTopicError):
            check_topic(topic)


def test_check_topic_rejects_empty() -> None:
    with pytest.raises(InvalidTopicError):
        check_topic("")


# ---------------------------------------------------------------------------
# 6. checkpoint
# ---------------------------------------------------------------------------


@FAST
@given(INT64, INT64, INT64, INT64, INT64)
def test_checkpoint_round_trip(a: int, b: int, c: int, d: int, e: int) -> None:
    """decode(encode(cp)) == cp; the file is 4096 bytes, zero after 40."""
    cp = Checkpoint(
        physic_msg_timestamp=a,
        logics_msg_timestamp=b,
        index_msg_timestamp=c,
        master_flushed_offset=d,
        confirm_phy_offset=e,
    )
    raw = cp.encode()
    assert len(raw) == CHECKPOINT_BYTES == 4096
    assert raw[40:] == bytes(4096 - 40)
    assert Checkpoint.decode(raw) == cp
    # a 4.9 file holds only the first three fields; the rest read as 0
    old = Checkpoint.decode(raw[:24])
    assert old == Checkpoint(physic_msg_timestamp=a, logics_msg_timestamp=b, index_msg_timestamp=c)
    assert cp.min_timestamp() == max(0, min(a, b) - 3000)
    assert cp.min_timestamp_index() == min(cp.min_timestamp(), c)


@FAST
@given(st.binary(max_size=23))
def test_checkpoint_too_short(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        Checkpoint.decode(raw)


# ---------------------------------------------------------------------------
# 7. javahash
# ---------------------------------------------------------------------------


def reference_java_hash(s: str) -> int:
    """Java String.hashCode written out: UTF-16 code units, 32-bit wraparound."""
    h = 0
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units = [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units = [cp]
        for u in units:
            h = (31 * h + u) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


any_text = st.text(
    st.characters()  # the whole range, astral planes included
    | st.characters(min_codepoint=0x10000)  # astral only: two UTF-16 units each
    | st.characters(categories=["Cs"]),  # lone surrogates, which Java strings may hold
    max_size=80,
)


@settings(max_examples=examples(300), deadline=None)
@given(any_text)
def test_java_string_hash_matches_reference(s: str) -> None:
    h = java_string_hash(s)
    assert h == reference_java_hash(s)
    assert -(1 << 31) <= h < 1 << 31
    k = index_key_hash(s)
    assert k >= 0
    assert k == (0 if h == -(1 << 31) else abs(h))
    assert tags_code(s) == (h if s else 0)
