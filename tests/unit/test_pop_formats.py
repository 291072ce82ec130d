"""mqstore/formats/pop_journal.py and formats/receipt_handle.py: round trips of
journal records and snapshots, torn tails, damage, handle tags, and golden vectors
(bytes written by the code before the formats moved, so files and handles made
before stay readable)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import CorruptFileError
from mqstore.formats.pop_journal import (
    InFlight,
    PopDelta,
    decode_body,
    decode_snapshot,
    encode_body,
    encode_frame,
    encode_snapshot_head,
    whole_frames,
)
from mqstore.formats.receipt_handle import ReceiptHandle, authentic, handle_tag, signed
from tests.tiers import examples

I32, I64 = (1 << 31) - 1, (1 << 63) - 1
names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40)
i32 = st.integers(-(1 << 31), I32)
i64 = st.integers(-(1 << 63), I64)
entries = st.builds(InFlight, i64, i64, i32, i64, i32, i64)
deltas = st.builds(
    PopDelta,
    names,
    names,
    st.lists(st.tuples(i32, i64), max_size=5),
    st.lists(st.tuples(i32, entries), max_size=5),
    st.lists(st.tuples(i32, i64), max_size=5),
)
handles = st.builds(
    ReceiptHandle,
    st.integers(0, I32),
    st.integers(0, I32),
    *(st.integers(0, I64) for _ in range(5)),
)
SECRET = bytes(range(32))

# one record of seq 9 as the journal held it before the formats moved
GOLDEN_DELTA = PopDelta("GID_a", "TopicB", [(1, 10)], [(2, InFlight(5, 1234, 99, 1_700_000_000_000, 1, 7))], [(3, 4)])
GOLDEN_RECORD = bytes.fromhex(
    "000000614b0b3e6600000000000000090001000500060000000100000001000000014749445f61546f706963420000000100000000"
    "0000000a00000002000000000000000500000000000004d2000000630000018bcfe5680000000001000000000000000700000003"
    "0000000000000004"
)


@settings(max_examples=examples(200))
@given(deltas)
def test_body_round_trip(d: PopDelta) -> None:
    body = encode_body(d)
    assert decode_body(body, 0, len(body), "x") == d


@settings(max_examples=examples(100))
@given(st.lists(deltas, min_size=1, max_size=4), st.data())
def test_a_journal_cut_anywhere_reads_as_a_prefix(ds: list[PopDelta], data: st.DataObject) -> None:
    records = [encode_frame(seq, encode_body(d)) for seq, d in enumerate(ds, 1)]
    journal = b"".join(records)
    cut = data.draw(st.integers(0, len(journal)))
    frames = list(whole_frames(journal[:cut]))
    whole = sum(1 for k in range(1, len(records) + 1) if len(b"".join(records[:k])) <= cut)
    assert [f.seq for f in frames] == list(range(1, whole + 1))
    assert [decode_body(journal, f.body_start, f.end, "x") for f in frames] == ds[:whole]


@settings(max_examples=examples(100))
@given(st.lists(deltas, max_size=4), st.integers(0, I64), st.data())
def test_snapshot_round_trip_and_any_flipped_byte_is_corruption(
    ds: list[PopDelta], seq: int, data: st.DataObject
) -> None:
    snap = encode_snapshot_head(seq, len(ds)) + b"".join(encode_frame(seq, encode_body(d)) for d in ds)
    assert decode_snapshot(snap, "x") == (seq, ds)
    at = data.draw(st.integers(0, len(snap) - 1))
    flipped = bytearray(snap)
    flipped[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptFileError):
        decode_snapshot(bytes(flipped), "x")
    with pytest.raises(CorruptFileError):
        decode_snapshot(snap[:-1] if ds else snap + b"\0", "x")


def test_golden_journal_record() -> None:
    assert encode_frame(9, encode_body(GOLDEN_DELTA)) == GOLDEN_RECORD
    (f,) = whole_frames(GOLDEN_RECORD)
    assert f.seq == 9 and decode_body(GOLDEN_RECORD, f.body_start, f.end, "x") == GOLDEN_DELTA


@settings(max_examples=examples(200))
@given(handles, names, names)
def test_signed_handles_are_authentic_for_their_group_and_topic_only(h: ReceiptHandle, g: str, t: str) -> None:
    s = signed(SECRET, g, t, h)
    assert s == h and ReceiptHandle.parse(s.encode()) == s
    assert authentic(SECRET, h.shard, g, t, ReceiptHandle.parse(s.encode()))
    assert not authentic(SECRET, h.shard, g + "x", t, s)
    assert not authentic(SECRET, h.shard, g, t + "x", s)
    assert not authentic(bytes(32), h.shard, g, t, s)
    assert not authentic(SECRET, h.shard, g, t, h)  # unsigned
    moved = ReceiptHandle(h.shard, h.queue_id, h.offset ^ 1, h.generation, h.pop_ms, h.invisible_ms,
                          h.commitlog_offset, tag=s.tag)  # fmt: skip
    assert not authentic(SECRET, h.shard, g, t, moved)


def test_golden_handle_tag() -> None:
    h = ReceiptHandle(1, 2, 3, 4, 5, 6, 7)
    mac = hmac.new(SECRET, b"1:G1:T1 2 3 4 5 6 7", hashlib.sha256).digest()[:16]
    assert handle_tag(SECRET, "G", "T", h) == base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert handle_tag(SECRET, "G", "T", h) == "LKW3URqxpYJPuXKJclvQzw"  # as handed out before the move
    assert signed(SECRET, "G", "T", h).encode() == "m2 1 2 3 4 5 6 7 LKW3URqxpYJPuXKJclvQzw"
