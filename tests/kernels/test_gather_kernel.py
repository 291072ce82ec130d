"""The raw-record gather (``_decode.gather`` behind ``RawRecords.gather``, which a raw
pull's ``CommitLog.read_raw`` uses) against its reference model, Python slicing and a
join; and ``RawRecords``: concatenation, heads, and the sequence it is."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.message import MAGIC_V1, MAGIC_V2
from mqstore.formats.packed import RawRecords
from mqstore.kernels import _decode
from tests.tiers import examples


def model_gather(src: bytes, starts: list[int], sizes: list[int]) -> list[bytes]:
    """Each piece as the store used to slice it out of the map, cut at the end."""
    end = len(src)
    out = []
    for a, s in zip(starts, sizes):
        lo = min(max(a, 0), end)
        out.append(src[lo : min(max(a + max(s, 0), lo), end)])
    return out


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=300), st.lists(st.tuples(st.integers(-5, 320), st.integers(-3, 80)), max_size=40))
def test_gather_equals_model(src: bytes, pieces: list[tuple[int, int]]) -> None:
    starts = [a for a, _ in pieces]
    sizes = [s for _, s in pieces]
    got = RawRecords.gather(src, np.array(starts, np.int64), np.array(sizes, np.int64))
    want = model_gather(src, starts, sizes)
    assert list(got) == want
    assert got.data == b"".join(want)
    assert got.offsets[0] == 0 and got.lengths.tolist() == [len(w) for w in want]


def test_gather_refuses_mismatched_columns() -> None:
    with pytest.raises(ValueError, match="n \\+ 1 wanted"):
        _decode.gather(b"abc", np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros(3, np.int64))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(st.binary(max_size=20), max_size=6), max_size=5))
def test_concat_is_the_parts_in_order(parts: list[list[bytes]]) -> None:
    packed = [RawRecords.of(p)[1:] if p else RawRecords.of(p) for p in parts]  # parts not starting at 0
    whole = RawRecords.concat(packed)
    assert list(whole) == [r for p in packed for r in p]
    assert whole.nbytes == sum(p.nbytes for p in packed)


def test_heads_read_sizes_and_magics_zero_padded() -> None:
    full = (40).to_bytes(4, "big") + (MAGIC_V2 & 0xFFFFFFFF).to_bytes(4, "big") + b"x" * 32
    short = (MAGIC_V1 & 0xFFFFFFFF).to_bytes(4, "big")[:3]
    sizes, magics = RawRecords.of([full, short, b""]).heads()
    assert sizes.tolist() == [40, int.from_bytes(short + b"\0", "big", signed=True), 0]
    assert magics.tolist() == [MAGIC_V2, 0, 0]
    assert RawRecords.of([]).heads()[0].tolist() == []


def test_a_sequence_of_bytes() -> None:
    r = RawRecords.of([b"ab", b"", b"cde"])
    assert r == [b"ab", b"", b"cde"] and r != [b"ab"] and r[-1] == b"cde"
    assert r[::2] == [b"ab", b"cde"] and r[1:] == RawRecords(b"xcde", np.array([1, 1, 4]))
    assert pickle.loads(pickle.dumps(r)) == r
    with pytest.raises(IndexError):
        r[3]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.binary(max_size=30), max_size=20), st.binary(max_size=4))
def test_the_wire_pair_gives_the_same_records(items: list[bytes], lead: bytes) -> None:
    packed = RawRecords(lead + b"".join(items), np.cumsum([len(lead), *map(len, items)]))
    data, sizes = packed.to_wire()
    assert data == b"".join(items) and np.frombuffer(sizes, "<i4").tolist() == list(map(len, items))
    assert RawRecords.from_wire(data, sizes) == items


@pytest.mark.parametrize(
    ("data", "sizes", "match"),
    [
        (b"abc", b"\x01\x00\x00", "4 bytes each"),
        (b"abc", np.array([1, 1], "<i4").tobytes(), "add up to 2 bytes, the records hold 3"),
        (b"abc", np.array([4, -1], "<i4").tobytes(), "add up to 3"),
    ],
)
def test_a_wire_pair_that_does_not_add_up_is_refused(data: bytes, sizes: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RawRecords.from_wire(data, sizes)
