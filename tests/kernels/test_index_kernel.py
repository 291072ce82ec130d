"""Differential tests of the compiled index put (mqstore/kernels/_dispatch.pyx
``index_put``, behind ``IndexFileView.put_hashes``) against its reference model
(model_index.py, the numpy put it replaced): after the same sequence of batches put
into two copies of a file (new, created after a full one, with garbage in its slot
table, filling up), both copies must be equal byte for byte, and so must the counts."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.formats.index_file import IndexFileView, index_file_size
from tests.kernels.model_index import model_put_hashes
from tests.tiers import examples

CASES = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])

_I64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    out = []
    t = draw(st.integers(-5000, 1 << 42))
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 30))
        hashes = draw(st.lists(st.one_of(st.integers(0, 40), st.integers(0, (1 << 31) - 1)), min_size=n, max_size=n))
        phys = draw(st.lists(st.one_of(st.integers(0, 1 << 40), _I64), min_size=n, max_size=n))
        steps = draw(st.lists(st.one_of(st.integers(-3000, 100_000), _I64), min_size=n, max_size=n))
        times = []
        for s in steps:
            t = (t + s + (1 << 63)) % (1 << 64) - (1 << 63)  # any int64, wrapping
            times.append(t)
        out.append(tuple(np.array(c, np.int64) for c in (hashes, phys, times)))
    return out


@CASES
@given(
    st.integers(1, 17),
    st.integers(2, 60),
    st.integers(-1, 1 << 40),
    st.integers(-1, 1 << 42),
    st.lists(st.tuples(st.integers(0, 16), st.integers(-(1 << 31), (1 << 31) - 1)), max_size=6),
    batches(),
)
def test_index_put_equals_the_model(slots, max_entries, end_phy, end_ts, garbage, puts) -> None:
    size = index_file_size(slots, max_entries)
    got_buf, want_buf = bytearray(size), bytearray(size)
    got = IndexFileView.create(got_buf, slots, max_entries, end_phy_offset=end_phy, end_timestamp=end_ts)
    want = IndexFileView.create(want_buf, slots, max_entries, end_phy_offset=end_phy, end_timestamp=end_ts)
    for slot, value in garbage:  # slot values no putKey wrote (negative, past the count): read as empty
        if slot < slots:
            at = 40 + 4 * slot
            got_buf[at : at + 4] = want_buf[at : at + 4] = value.to_bytes(4, "big", signed=True)
    for hashes, phys, times in puts:
        calls = []
        n_got = got.put_hashes(hashes, phys, times, before_header=lambda: calls.append("got"))
        n_want = model_put_hashes(want, hashes, phys, times, before_header=lambda: calls.append("want"))
        assert n_got == n_want
        assert calls.count("got") == calls.count("want")
        assert bytes(got_buf) == bytes(want_buf)


def test_index_put_refuses_hashes_out_of_range_before_writing() -> None:
    buf = bytearray(index_file_size(4, 8))
    view = IndexFileView.create(buf, 4, 8)
    before = bytes(buf)
    for bad in (-1, 1 << 31):
        try:
            view.put_hashes(np.array([1, bad]), np.array([1, 2]), np.array([1, 2]))
        except ValueError:
            pass
        else:
            raise AssertionError("a hash out of range was taken")
        assert bytes(buf) == before


def test_index_put_many_entries_equals_the_model() -> None:
    rng = np.random.default_rng(5)
    slots, max_entries = 1009, 200_000
    size = index_file_size(slots, max_entries)
    got_buf, want_buf = bytearray(size), bytearray(size)
    got, want = IndexFileView.create(got_buf, slots, max_entries), IndexFileView.create(want_buf, slots, max_entries)
    t = 1_700_000_000_000
    while True:
        n = int(rng.integers(1, 30_000))
        hashes = rng.integers(0, 1 << 31, n)
        phys = np.sort(rng.integers(0, 1 << 40, n))
        times = t + np.cumsum(rng.integers(0, 5, n))
        t = int(times[-1])
        k = got.put_hashes(hashes, phys, times)
        assert k == model_put_hashes(want, hashes, phys, times)
        assert got_buf == want_buf
        if k < n:
            break


@CASES
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), max_size=60),
    st.sampled_from(["in_order", "shuffled", "one_big_record"]),
    st.lists(st.integers(0, 5), max_size=3),
)
def test_repeated_equals_the_model(pairs, shape, held) -> None:
    """Entries (record step, hash): in commitlog order, out of order, or one record with
    more than 64 entries; with and without hashes the files hold for the end record."""
    from mqstore.store.index_service import _repeated
    from tests.kernels.model_index import model_repeated

    steps = np.array([s for _, s in pairs] or [0], np.int64)[: len(pairs)]
    hashes = np.array([h for h, _ in pairs], np.int64)
    phys = 1000 + np.cumsum(steps)
    if shape == "shuffled" and len(phys):
        phys = phys[np.random.default_rng(len(phys)).permutation(len(phys))]
    elif shape == "one_big_record":
        hashes = np.arange(70, dtype=np.int64) % 50
        phys = np.full(70, 1000, np.int64)
    end = int(phys[0]) if len(phys) else 0
    held_arr = np.array(held, np.int64)
    got, want = _repeated(hashes, phys, held_arr, end), model_repeated(hashes, phys, held_arr, end)
    assert got.dtype == want.dtype == bool
    assert got.tolist() == want.tolist()
