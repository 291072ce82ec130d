"""mqstore.kernels._verify against its reference models (model_verify.py, the numpy
checks verify ran before): index files built by RocketMQ's putKey rules, then
damaged (a prev, a slot, a hash, an offset changed), must give the same chain
report; key matching must give the same presence for any pairs in commitlog order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.index_file import INDEX_ENTRY_BYTES, INDEX_HEADER_BYTES
from mqstore.kernels import _verify
from tests.kernels import model_verify
from tests.tiers import examples


def index_bytes(hashes: list[int], phys: list[int], hash_slots: int) -> bytearray:
    """An index file's bytes as putKey writes them (header left zero: not checked here)."""
    n = len(hashes)
    buf = bytearray(INDEX_HEADER_BYTES + hash_slots * 4 + (n + 1) * INDEX_ENTRY_BYTES)
    table = np.zeros(hash_slots, np.int64)
    at = INDEX_HEADER_BYTES + hash_slots * 4
    for i, (h, p) in enumerate(zip(hashes, phys), start=1):
        slot = (h if h >= 0 else 0) % hash_slots
        buf[at + i * 20 : at + i * 20 + 20] = (
            h.to_bytes(4, "big", signed=True)
            + p.to_bytes(8, "big", signed=True)
            + bytes(4)
            + int(table[slot]).to_bytes(4, "big", signed=True)
        )
        table[slot] = i
    buf[INDEX_HEADER_BYTES:at] = table.astype(">i4").tobytes()
    return buf


damage = st.tuples(
    st.sampled_from(["prev", "slot", "hash", "phy"]), st.integers(0, 10**6), st.integers(-(2**31), 2**31 - 1)
)


@settings(max_examples=examples(300), deadline=None)
@given(
    hashes=st.lists(st.integers(0, 2**31 - 1) | st.integers(0, 40), max_size=60),
    hash_slots=st.integers(1, 17),
    damages=st.lists(damage, max_size=4),
)
def test_chains_equal_the_model(hashes, hash_slots, damages):
    phys = [100 * i for i in range(len(hashes))]
    buf = index_bytes(hashes, phys, hash_slots)
    at = INDEX_HEADER_BYTES + hash_slots * 4
    n = len(hashes)
    for kind, where, value in damages:
        if kind == "slot":
            s = where % hash_slots
            buf[INDEX_HEADER_BYTES + 4 * s : INDEX_HEADER_BYTES + 4 * s + 4] = (value % (n + 2)).to_bytes(4, "big")
        elif n:
            i = 1 + where % n
            off = {"hash": 0, "phy": 4, "prev": 16}[kind]
            width = 8 if kind == "phy" else 4
            v = value % (n + 2) if kind == "prev" else value
            buf[at + i * 20 + off : at + i * 20 + off + width] = v.to_bytes(width, "big", signed=True)
    assert _verify.index_chains(bytes(buf), hash_slots, n) == model_verify.index_chains(bytes(buf), hash_slots, n)


def test_a_clean_file_has_nothing_to_report():
    buf = index_bytes([5, 12, 5, 3, 12], [0, 10, 20, 30, 40], 7)
    assert _verify.index_chains(bytes(buf), 7, 5) == (2, 0, -1, 0, -1, 0, 0, -1, 0, 0)  # slots 5 and 3


def test_chains_refuse_a_buffer_too_short():
    import pytest

    with pytest.raises(ValueError, match="do not fit"):
        _verify.index_chains(bytes(100), 7, 5)


pairs = st.lists(st.tuples(st.integers(0, 30), st.integers(-5, 5)), max_size=50)


@settings(max_examples=examples(300), deadline=None)
@given(have=pairs, want=pairs)
def test_keys_present_equals_the_model(have, want):
    have, want = sorted(have, key=lambda p: p[0]), sorted(want, key=lambda p: p[0])
    hp, hh = (np.array([p[i] for p in have], np.int64) for i in (0, 1))
    wp, wh = (np.array([p[i] for p in want], np.int64) for i in (0, 1))
    present = np.zeros(len(want), np.uint8)
    found = _verify.keys_present(hp, hh, wp, wh, present)
    expected = model_verify.keys_present(hp, hh, wp, wh)
    assert present.view(bool).tolist() == expected.tolist() and found == int(expected.sum())


@settings(max_examples=examples(300), deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 12), st.integers(-3, 3)), max_size=80))
def test_repeated_pairs_equal_the_model(entries):
    entries.sort(key=lambda e: e[0])  # commitlog order; hashes in any order within a record
    phys, hashes = (np.array([e[i] for e in entries], np.int64) for i in (0, 1))
    out = np.empty(len(entries), np.int64)
    got = out[: _verify.repeated_pairs(phys, hashes, out)]
    assert got.tolist() == model_verify.repeated_pairs(phys, hashes).tolist()


@settings(max_examples=examples(300), deadline=None)
@given(starts=st.sets(st.integers(0, 60)), phys=st.lists(st.integers(-2, 64), max_size=60))
def test_starts_found_equals_the_model(starts, phys):
    s, p = np.array(sorted(starts), np.int64), np.array(sorted(phys), np.int64)
    found = np.zeros(len(p), np.uint8)
    hits = _verify.starts_found(s, p, found)
    want = model_verify.starts_found(s, p)
    assert found.view(bool).tolist() == want.tolist() and hits == int(want.sum())
