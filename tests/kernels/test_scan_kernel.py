"""Differential tests of the compiled record scan (mqstore/kernels/_scan.pyx, behind
``formats.message.scan_records``) against its reference model (model_scan.py, the
numpy/Python scan it replaced): for valid and malformed buffers (truncated records,
bad magic, wrong lengths, bad CRC, BLANK ends, V2 long topics, IPv6 hosts, zero-filled
tails, garbage) and any limits, both must return the same ScanResult, field by field."""

from __future__ import annotations

import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.formats import Host, PreparedRecords, ScanResult, scan_records
from mqstore.formats.message import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, topic_field, topic_names_of
from tests.kernels.model_scan import model_scan_records
from tests.tiers import examples
from tests.unit.test_formats_properties import Batch, Msg, batches, render_batch

CASES = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_same(got: ScanResult, want: ScanResult) -> None:
    assert got.positions.dtype == want.positions.dtype == np.int64
    assert got.sizes.dtype == want.sizes.dtype == np.int64
    assert got.positions.tolist() == want.positions.tolist()
    assert got.sizes.tolist() == want.sizes.tolist()
    assert (got.stop, got.outcome, got.reason) == (want.stop, want.outcome, want.reason)
    assert (got.fields is None) == (want.fields is None)
    if want.fields is not None:
        assert topic_names_of(got.fields.topic_ids) == got.fields.topics  # the model has no process-wide ids
        for name in want.fields._fields:
            g, w = getattr(got.fields, name), getattr(want.fields, name)
            if name == "topic_ids":
                continue
            if name == "topics":
                assert g == w
            else:
                assert g.dtype == w.dtype == np.int64, name
                assert g.tolist() == w.tolist(), name


def both(buf, start: int, end: int, **kw) -> ScanResult:
    want = model_scan_records(buf, start, end, **kw)
    got = scan_records(buf, start, end, **kw)
    assert_same(got, want)
    return got


def layout(data: bytes, at: int) -> dict[str, int] | None:
    """Byte positions of a record's fields (the model's arithmetic, written out); None
    if an earlier mutation left no message there whose fields can be found."""
    size, magic = struct.unpack_from(">ii", data, at)
    if magic not in (MAGIC_V1, MAGIC_V2) or size < 91 or at + size > len(data):
        return None
    sysflag = struct.unpack_from(">i", data, at + 36)[0]
    body_len_at = at + 68 + (20 if sysflag & 0x10 else 8) + (20 if sysflag & 0x20 else 8)
    if body_len_at + 4 > at + size:  # a changed sysflag moved the fields past the record
        return None
    body_len = struct.unpack_from(">i", data, body_len_at)[0]
    topic_len_at = body_len_at + 4 + body_len
    tlb = 2 if magic == MAGIC_V2 else 1
    if body_len < 0 or topic_len_at + tlb > at + size:
        return None
    topic_len = int.from_bytes(data[topic_len_at : topic_len_at + tlb], "big", signed=True)
    if topic_len < 0 or topic_len_at + tlb + topic_len + 2 > at + size:
        return None
    return {
        "v1": magic == MAGIC_V1,
        "total_size": at,
        "magic": at + 4,
        "body_crc": at + 8,
        "physical_offset": at + 28,
        "sysflag": at + 36,
        "body_len": body_len_at,
        "body": body_len_at + 4,
        "topic_len": topic_len_at,
        "props_len": topic_len_at + tlb + topic_len,
        "end": at + size,
    }


FIELD_WIDTH = {"total_size": 4, "magic": 4, "body_crc": 4, "physical_offset": 8, "sysflag": 4, "body_len": 4}


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, int, Batch]:
    """A batch of valid records with up to three mutations and a tail; returns the
    buffer, where the records start in it, and the batch."""
    b = draw(batches())
    lead = draw(st.binary(max_size=12))
    buf = bytearray(lead + b.data)
    starts = [len(lead) + p for p in b.rel_positions]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.sampled_from(starts))
        kind = draw(st.sampled_from(["field", "field", "field", "byte", "blank", "v1v2", "size_delta"]))
        fields = layout(bytes(buf), at)
        if kind == "byte" or fields is None:
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] = draw(st.integers(0, 255))
        elif kind == "field":
            name = draw(st.sampled_from([*FIELD_WIDTH, "topic_len", "props_len", "body"]))
            pos = fields[name]
            if name == "body":  # a flipped body byte: the CRC no longer matches
                if pos < fields["topic_len"]:
                    buf[pos] ^= 1 << draw(st.integers(0, 7))
                continue
            width = FIELD_WIDTH.get(name, 1 if name == "topic_len" and fields["v1"] else 2)
            old = int.from_bytes(buf[pos : pos + width], "big", signed=True)
            new = draw(
                st.one_of(
                    st.integers(old - 3, old + 3), st.integers(-(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1)
                )
            )
            if -(1 << (8 * width - 1)) <= new < 1 << (8 * width - 1):
                buf[pos : pos + width] = new.to_bytes(width, "big", signed=True)
        elif kind == "blank":  # a BLANK end-of-segment record, zeros (or not) after it
            remaining = draw(st.sampled_from([len(buf) - at, 8, len(buf) - at + 1, 0]))
            buf[at : at + 8] = struct.pack(">ii", remaining, BLANK_MAGIC)
            if draw(st.booleans()):
                buf[at + 8 :] = bytes(len(buf) - at - 8)
        elif kind == "v1v2":  # the other version's magic: every later field is off by one
            buf[at + 4 : at + 8] = struct.pack(">i", MAGIC_V2 if fields["v1"] else MAGIC_V1)
        else:  # TOTALSIZE a little off
            size = struct.unpack_from(">i", buf, at)[0] + draw(st.integers(-9, 9))
            buf[at : at + 4] = struct.pack(">i", size)
    tail = draw(st.sampled_from(["none", "zeros", "blank", "garbage", "cut", "partial_head"]))
    if tail == "zeros":
        buf += bytes(draw(st.integers(1, 200)))
    elif tail == "blank":
        buf += struct.pack(">ii", draw(st.sampled_from([8, 100, 7])), BLANK_MAGIC) + bytes(draw(st.integers(0, 100)))
    elif tail == "garbage":
        buf += draw(st.binary(min_size=1, max_size=120))
    elif tail == "cut" and len(buf) > len(lead):  # a torn last write
        del buf[draw(st.integers(len(lead), len(buf) - 1)) :]
    elif tail == "partial_head":
        buf += draw(st.binary(min_size=1, max_size=7))
    return bytes(buf), len(lead), b


@CASES
@given(mutated(), st.data())
def test_kernel_equals_model(case: tuple[bytes, int, Batch], data: st.DataObject) -> None:
    buf, lead, b = case
    start = data.draw(st.one_of(st.just(lead), st.integers(0, len(buf))), "start")
    end = data.draw(st.one_of(st.just(len(buf)), st.integers(start, len(buf))), "end")
    kw = {
        "check_crc": data.draw(st.booleans(), "check_crc"),
        "max_records": data.draw(st.one_of(st.none(), st.integers(0, 25)), "max_records"),
        "max_bytes": data.draw(st.one_of(st.none(), st.integers(0, len(buf) + 10)), "max_bytes"),
        "base_offset": data.draw(st.sampled_from([None, b.base - lead, b.base - lead + 1, 0]), "base_offset"),
        "fields": data.draw(st.booleans(), "fields"),
    }
    view = data.draw(st.sampled_from([bytes, bytearray, memoryview]), "buffer type")
    both(view(buf), start, end, **kw)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_valid_batches_scan_whole_with_every_option(b: Batch) -> None:
    """Unmutated records (V1 and V2, IPv4 and IPv6) with every combination of options,
    followed by zeros as in a pre-allocated segment."""
    buf = b.data + bytes(64)
    for fields in (False, True):
        for check_crc in (False, True):
            res = both(buf, 0, len(buf), check_crc=check_crc, base_offset=b.base, fields=fields)
            assert res.positions.tolist() == b.rel_positions
            for k in (1, 2, len(b.sizes)):
                both(buf, 0, len(buf), max_records=k, base_offset=b.base, fields=fields)
                both(buf, 0, len(b.data), max_bytes=sum(b.sizes[:k]) - 1, base_offset=b.base, fields=fields)


def many_records(n: int, topics: int = 3, long_every: int = 0) -> tuple[bytes, int]:
    """``n`` small records (several topics, some V2 ones) from base offset 1 << 40."""
    base = 1 << 40
    names = [f"T{i}" for i in range(topics)]
    if long_every:
        names.append("%RETRY%" + "x" * 200)
    fields = [topic_field(t) for t in names]
    which = np.arange(n) % len(names)
    pr = PreparedRecords(
        topics=[fields[i] for i in which.tolist()],
        bodies=[b"b" * (i % 5) for i in range(n)],
        properties=[b"TAGS\x01t\x02" for _ in range(n)],
        flags=0,
        sysflags=0,
        born_timestamps=1,
        born_hosts=bytes(8),
        store_host=bytes(8),
    )
    phys = base + np.concatenate([[0], np.cumsum(pr.sizes)[:-1]])
    data = pr.render(0, n, physical_offsets=phys, queue_ids=which, queue_offsets=np.arange(n), store_timestamp=7)
    return data, base


@pytest.mark.parametrize(
    "max_records",  # the edges at one kernel call's 65,536 fast; the bigger runs in the full suite
    [None, 65536, 65537, pytest.param(70_000, marks=pytest.mark.slow), pytest.param(200_000, marks=pytest.mark.slow)],
)
def test_more_records_than_one_kernel_call_holds(max_records: int | None) -> None:
    """Past 65,536 records the output arrays grow between kernel calls; the result is
    still the model's (limits, fields and the tail after the last record)."""
    data, base = many_records(150_000, long_every=7)
    buf = data + struct.pack(">ii", 64, BLANK_MAGIC) + bytes(56)
    res = both(buf, 0, len(buf), max_records=max_records, base_offset=base, fields=True)
    assert len(res.positions) == min(150_000, max_records or 150_000)
    both(buf, 0, len(buf), max_bytes=len(data) // 2, base_offset=base, check_crc=False)


def test_a_buffer_shorter_than_a_record_head() -> None:
    """Found by hypothesis: 8 bytes whose size field claims a record (the model took a
    view of heads the buffer cannot hold)."""
    for kw in ({}, {"check_crc": False}, {"fields": True}):
        got = both(b"\x00\x00\x00\x08\xcb\xd41\x94", 0, 8, **kw)
        assert got.positions.tolist() == []


def test_bad_ranges_are_refused() -> None:
    data, base = many_records(3)
    with pytest.raises(ValueError):
        scan_records(data, 0, len(data) + 1)
    with pytest.raises(ValueError):
        scan_records(data, -1, len(data))


def test_a_missing_extension_says_how_to_build_it() -> None:
    code = "import sys; sys.modules['mqstore.kernels._scan'] = None\nimport mqstore.kernels"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode != 0
    assert "ImportError: mqstore's compiled core" in p.stderr
    assert "pip install -e ." in p.stderr and "C compiler" in p.stderr


def mixed_batch() -> Batch:
    """V1 and V2 records, IPv4 and IPv6 hosts, empty and non-empty bodies and properties."""
    v4, v6 = Host("10.0.0.1", 1), Host("::1", 2)
    msgs = [
        Msg("T", b"", {}, 0, 0, 0, 0, 0, v4, 0, 0),
        Msg("TopicA", b"body" * 9, {"TAGS": "a", "KEYS": "k1 k2"}, 1, 0, 1, 5, 9, v4, 0, 0),
        Msg("%RETRY%" + "g" * 150, b"x", {"UNIQ_KEY": "u"}, 2, 0, 2, 6, 9, v4, 0, 0),
        Msg("TopicB", b"y" * 40, {}, 3, 0, 3, 7, 9, v6, 0, 0),
        Msg("%DLQ%" + "h" * 200, b"", {"a": "b"}, 4, 0, 3, 8, 9, v6, 0, 0),
        Msg("TopicA", b"z", {"TAGS": "b"}, 5, 0, 1, 9, 9, v4, 0, 0),
    ]
    return render_batch(msgs, v6, 1234, 1 << 33, 3)


FIELDS = [*FIELD_WIDTH, "topic_len", "props_len"]


@pytest.mark.parametrize("field", FIELDS)
def test_every_field_of_every_record_off_by_a_little(field: str) -> None:
    """Each length, size, magic and offset field of each record changed by -2..+2 and
    to extreme values; also a flipped body byte (CRC) and a BLANK or zeros in its place."""
    b = mixed_batch()
    for at in b.rel_positions:
        f = layout(b.data, at)
        assert f is not None
        pos = f[field]
        width = FIELD_WIDTH.get(field, 1 if field == "topic_len" and f["v1"] else 2)
        old = int.from_bytes(b.data[pos : pos + width], "big", signed=True)
        lo, hi = -(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1
        for new in {old - 2, old - 1, old + 1, old + 2, lo, hi, 0, MAGIC_V1, MAGIC_V2, BLANK_MAGIC}:
            if new == old or not lo <= new <= hi:
                continue
            buf = bytearray(b.data + bytes(16))
            buf[pos : pos + width] = new.to_bytes(width, "big", signed=True)
            for kw in ({"base_offset": b.base}, {"check_crc": False}, {"fields": True, "base_offset": b.base - 1}):
                both(bytes(buf), 0, len(buf), **kw)
                both(bytes(buf), at, len(b.data), max_records=2, **kw)


def test_bodies_blanks_and_zeros_in_place_of_each_record() -> None:
    b = mixed_batch()
    for at in b.rel_positions:
        f = layout(b.data, at)
        for kind in ("crc", "blank", "blank_short", "zeros"):
            buf = bytearray(b.data)
            if kind == "crc":
                if f["body"] == f["topic_len"]:
                    continue
                buf[f["body"]] ^= 0x40
            elif kind.startswith("blank"):
                buf[at : at + 8] = struct.pack(">ii", len(buf) - at - (kind == "blank_short"), BLANK_MAGIC)
            else:
                buf[at:] = bytes(len(buf) - at)
            for kw in ({"base_offset": b.base, "fields": True}, {"check_crc": False}):
                both(bytes(buf), 0, len(buf), **kw)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.binary(max_size=40) | st.sampled_from([b"", b"a", b"T0", b"T" * 17, b"T" * 16]), max_size=3000))
def test_topic_codes_number_topics_in_order_of_first_appearance(topics: list[bytes]) -> None:
    """The kernel's table (grown past half full, topics sharing prefixes and lengths)
    gives what a dict gives."""
    from mqstore.kernels import _scan

    buf = b"".join(topics) + bytes(8)
    at = np.cumsum([0] + [len(t) for t in topics])[:-1].astype(np.int64)
    length = np.array([len(t) for t in topics], np.int64)
    codes, first = np.empty(len(topics), np.int64), np.empty(len(topics), np.int64)
    k = _scan.topic_codes(buf, at, length, codes, first)
    seen: dict[bytes, int] = {}
    want = [seen.setdefault(t, len(seen)) for t in topics]
    assert k == len(seen) and codes.tolist() == want
    assert [topics[i] for i in first[:k].tolist()] == list(seen)
