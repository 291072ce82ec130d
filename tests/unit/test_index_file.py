"""IndexFile bytes: golden files made by RocketMQ's IndexFile, and hypothesis models."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import DecodeError
from mqstore.formats import IndexFileView, IndexHeader, index_file_size, index_key_hash, index_key_hashes
from mqstore.formats.index_file import INDEX_HEADER_BYTES
from tests.conftest import GOLDEN_DIR
from tests.tiers import examples

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


def build_golden(vec: dict) -> tuple[bytearray, IndexFileView, list[bool]]:
    buf = bytearray(index_file_size(vec["hashSlotNum"], vec["indexNum"]))
    view = IndexFileView.create(
        buf,
        vec["hashSlotNum"],
        vec["indexNum"],
        end_phy_offset=vec["ctor_endPhyOffset"],
        end_timestamp=vec["ctor_endTimestamp"],
    )
    oks = [view.put(p["key"], p["phyOffset"], p["storeTimestamp"]) for p in vec["puts"]]
    return buf, view, oks


@pytest.fixture(params=["index_small_fresh", "index_small_rolled"])
def index_vec(request: pytest.FixtureRequest, golden: dict) -> dict:
    (vec,) = [v for v in golden["index_files"] if v["file"] == request.param]
    return vec


def check_header(h: IndexHeader, vec: dict) -> None:
    assert h.begin_timestamp == vec["beginTimestamp"]
    assert h.end_timestamp == vec["endTimestamp"]
    assert h.end_phy_offset == vec["endPhyOffset"]
    ok_puts = [p for p in vec["puts"] if p["ok"]]
    assert h.begin_phy_offset == ok_puts[0]["phyOffset"]
    assert h.index_count == vec["indexNum"] == len(ok_puts) + 1
    assert h.entries == len(ok_puts)
    slots = {index_key_hash(p["key"]) % vec["hashSlotNum"] for p in ok_puts}
    assert h.hash_slot_count == len(slots)


# ---------------------------------------------------------------------------
# golden files, byte for byte
# ---------------------------------------------------------------------------


def test_golden_file_rebuilt_byte_for_byte(index_vec: dict) -> None:
    buf, view, oks = build_golden(index_vec)
    assert len(buf) == index_vec["size"]
    assert oks == [p["ok"] for p in index_vec["puts"]]
    assert bytes(buf) == (GOLDEN_DIR / index_vec["file"]).read_bytes()
    assert view.is_full()
    check_header(view.header, index_vec)


def test_golden_file_rebuilt_by_put_many(index_vec: dict) -> None:
    vec = index_vec
    buf = bytearray(vec["size"])
    view = IndexFileView.create(
        buf,
        vec["hashSlotNum"],
        vec["indexNum"],
        end_phy_offset=vec["ctor_endPhyOffset"],
        end_timestamp=vec["ctor_endTimestamp"],
    )
    puts = vec["puts"]
    n = view.put_many([p["key"] for p in puts], [p["phyOffset"] for p in puts], [p["storeTimestamp"] for p in puts])
    assert n == sum(p["ok"] for p in puts)
    assert bytes(buf) == (GOLDEN_DIR / vec["file"]).read_bytes()


@pytest.mark.parametrize("chunks", [1, 2, 5, 1000])
def test_golden_file_rebuilt_by_put_hashes(index_vec: dict, chunks: int) -> None:
    """The vectorised put, in one batch or several, writes RocketMQ's bytes; the puts
    past the full file are refused in every split."""
    vec = index_vec
    buf = bytearray(vec["size"])
    view = IndexFileView.create(
        buf,
        vec["hashSlotNum"],
        vec["indexNum"],
        end_phy_offset=vec["ctor_endPhyOffset"],
        end_timestamp=vec["ctor_endTimestamp"],
    )
    puts = vec["puts"]
    hashes = index_key_hashes([p["key"] for p in puts])
    phys = np.array([p["phyOffset"] for p in puts], np.int64)
    times = np.array([p["storeTimestamp"] for p in puts], np.int64)
    done = sum(
        view.put_hashes(h, o, t)
        for h, o, t in zip(np.array_split(hashes, chunks), np.array_split(phys, chunks), np.array_split(times, chunks))
    )
    assert done == sum(p["ok"] for p in puts)
    assert bytes(buf) == (GOLDEN_DIR / vec["file"]).read_bytes()


def test_golden_lookups(index_vec: dict) -> None:
    _, built, _ = build_golden(index_vec)
    # The real file, opened read-only, answers the same as the rebuilt one.
    real = IndexFileView((GOLDEN_DIR / index_vec["file"]).read_bytes(), index_vec["hashSlotNum"], index_vec["indexNum"])
    for view in (built, real):
        for q in index_vec["queries"]:
            assert view.select(q["key"], q["maxNum"], q["begin"], q["end"]) == q["result"], q
            assert view.is_time_matched(q["begin"], q["end"]) == q["isTimeMatched"]


def test_golden_header_decodes(index_vec: dict) -> None:
    raw = (GOLDEN_DIR / index_vec["file"]).read_bytes()
    h = IndexHeader.decode(raw)
    check_header(h, index_vec)
    assert h.encode() == raw[:INDEX_HEADER_BYTES]


def test_rolled_file_shows_first_entry_quirk(golden: dict) -> None:
    """The first entry's time_diff is taken against the previous file's end time."""
    files = {v["file"]: v for v in golden["index_files"]}
    rolled = files["index_small_rolled"]
    entries = {}
    for name in ("index_small_fresh", "index_small_rolled"):
        entries[name] = IndexFileView((GOLDEN_DIR / name).read_bytes(), 8, 16).entries()
    first = rolled["puts"][0]["storeTimestamp"]
    assert entries["index_small_fresh"]["time_diff"][0] == 0
    assert entries["index_small_rolled"]["time_diff"][0] == (first - rolled["ctor_endTimestamp"]) // 1000 == 10
    # Everything else is the same: begin_timestamp was reset to the first entry's time.
    assert (entries["index_small_fresh"][1:] == entries["index_small_rolled"][1:]).all()


# ---------------------------------------------------------------------------
# putKey details
# ---------------------------------------------------------------------------


def test_create_writes_only_what_java_constructor_writes() -> None:
    buf = bytearray(b"\xff" * index_file_size(4, 4))
    IndexFileView.create(buf, 4, 4, end_phy_offset=77, end_timestamp=0)
    h = IndexHeader.decode(buf)
    assert h == IndexHeader(begin_phy_offset=77, end_phy_offset=77, index_count=0)
    assert bytes(buf[INDEX_HEADER_BYTES : INDEX_HEADER_BYTES + 16]) == bytes(16)  # slot table cleared
    view = IndexFileView(buf, 4, 4)
    assert view.header.index_count == 1 and not view.is_full()  # 0 on disk reads as 1
    assert view.select("k", 10, 0, LONG_MAX) == []


def test_time_diff_clamps_and_garbage_slot_reads_as_empty() -> None:
    buf = bytearray(index_file_size(1, 8))
    view = IndexFileView.create(buf, 1, 8, end_timestamp=10_000_000)
    assert view.put("a", 1, 9_000_000)  # before begin: clamped to 0
    assert view.put("b", 2, 10_000_000 + (INT_MAX + 5) * 1000)  # clamped to Integer.MAX_VALUE
    assert view.put("c", 3, 9_000_000 + 1999)  # 1.999 s after begin: truncated to 1
    assert view.entries()["time_diff"].tolist() == [0, INT_MAX, 1]
    assert view.entries()["prev"].tolist() == [0, 1, 2]  # one slot: one chain
    assert view.header.hash_slot_count == 1
    buf[INDEX_HEADER_BYTES : INDEX_HEADER_BYTES + 4] = (99).to_bytes(4, "big")  # > index_count
    assert view.put("d", 4, 9_000_000)
    assert view.entries()["prev"].tolist()[-1] == 0
    assert view.header.hash_slot_count == 2  # a slot read as empty counts again
    assert view.select("d", 10, 0, LONG_MAX) == [4]


def test_select_stops_after_first_entry_older_than_begin() -> None:
    """The walk ends at the first entry older than ``begin`` even when an older entry
    behind it (here the rolled file's inflated first entry) would be in range."""
    buf = bytearray(index_file_size(1, 8))
    view = IndexFileView.create(buf, 1, 8, end_timestamp=1_000_000)
    view.put_many(["k", "other", "k"], [10, 20, 30], [1_100_000, 1_101_000, 1_300_000])
    assert view.entries()["time_diff"].tolist() == [100, 1, 200]  # entry 1 reads as 1_200_000
    assert view.select("k", 10, 1_000_000, LONG_MAX) == [30, 10]
    assert view.select("k", 10, 1_150_000, LONG_MAX) == [30]  # stopped at "other" (1_101_000)
    assert view.select("k", 10, 1_150_000, 1_250_000) == []
    assert view.select("k", 0, 0, LONG_MAX) == []


def test_put_hashes_rejects_bad_input() -> None:
    buf = bytearray(index_file_size(2, 4))
    view = IndexFileView.create(buf, 2, 4)
    before = bytes(buf)
    for args in (
        ([1, 2], [1], [1, 2]),  # ragged
        ([[1]], [[1]], [[1]]),  # not 1-D
        ([-1], [1], [1]),  # a negative hash: Java's slot would be negative
        ([INT_MAX + 1], [1], [1]),
    ):
        with pytest.raises(ValueError):
            view.put_hashes(*args)
    assert bytes(buf) == before
    assert view.put_hashes([], [], []) == 0
    assert bytes(buf) == before  # nothing written, not even index_count


def test_put_many_rejects_ragged_input() -> None:
    view = IndexFileView.create(bytearray(index_file_size(2, 4)), 2, 4)
    with pytest.raises(ValueError):
        view.put_many(["a", "b"], [1], [1, 2])


def test_geometry_and_short_buffers() -> None:
    assert index_file_size(8, 16) == 392
    with pytest.raises(ValueError):
        index_file_size(0, 16)
    with pytest.raises(ValueError):
        IndexFileView(bytearray(391), 8, 16)
    with pytest.raises(DecodeError):
        IndexHeader.decode(bytes(39))


def test_reopen_through_mmap(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    size = index_file_size(16, 64)
    path.write_bytes(bytes(size))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), size) as m:
        view = IndexFileView.create(m, 16, 64, end_phy_offset=500, end_timestamp=1_700_000_000_000)
        keys = [f"T#k{i % 5}" for i in range(20)]
        times = range(1_700_000_000_000, 1_700_000_020_000, 1000)
        assert view.put_many(keys, range(1000, 1020), times) == 20
        m.flush()
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = IndexFileView(m, 16, 64)
        assert view.select("T#k3", 64, 0, LONG_MAX) == [1018, 1013, 1008, 1003]
        assert view.header.entries == 20


# ---------------------------------------------------------------------------
# hypothesis: a model of the file
# ---------------------------------------------------------------------------


INT64 = st.integers(-(1 << 63), LONG_MAX)
INT32 = st.integers(-(1 << 31), INT_MAX)
headers = st.builds(
    IndexHeader,
    begin_timestamp=INT64,
    end_timestamp=INT64,
    begin_phy_offset=INT64,
    end_phy_offset=INT64,
    hash_slot_count=INT32,
    index_count=INT32,
)


@settings(max_examples=examples(300), deadline=None)
@given(headers)
def test_header_round_trip(h: IndexHeader) -> None:
    raw = h.encode()
    assert len(raw) == INDEX_HEADER_BYTES
    assert IndexHeader.decode(raw) == h


# Few distinct keys (repeats), plus "TopicTest#aW_TRVQ" whose hash is 0 (abs(MIN_VALUE)).
keys_st = st.lists(
    st.sampled_from(["a", "b", "c", "TopicTest#aW_TRVQ", "polygenelubricants"]) | st.text(max_size=6),
    min_size=1,
    max_size=40,
)


@settings(max_examples=examples(150), deadline=None)
@given(
    keys=keys_st,
    hash_slots=st.integers(1, 8),
    max_entries=st.integers(1, 24),
    rolled_from=st.sampled_from([0, 1_699_999_000_000]),
    data=st.data(),
    max_num=st.integers(1, 40),
    batch=st.booleans(),
)
def test_select_matches_model(keys, hash_slots, max_entries, rolled_from, data, max_num, batch) -> None:
    def steps(hi: int) -> np.ndarray:
        return np.cumsum(data.draw(st.lists(st.integers(0, hi), min_size=len(keys), max_size=len(keys))))

    offsets = 1 + steps(500)  # never decreasing, like commitlog offsets of dispatched messages
    times = 1_700_000_000_000 + steps(3000)
    buf = bytearray(index_file_size(hash_slots, max_entries))
    view = IndexFileView.create(
        buf, hash_slots, max_entries, end_timestamp=rolled_from, end_phy_offset=rolled_from and 1
    )
    if batch:
        accepted = view.put_many(keys, offsets, times)
        oks = [True] * accepted + [False] * (len(keys) - accepted)
    else:
        oks = [view.put(k, int(o), int(t)) for k, o, t in zip(keys, offsets, times)]
    # Full exactly at max_entries - 1 entries: every put before succeeds, none after.
    room = max_entries - 1
    assert oks == [True] * min(room, len(keys)) + [False] * max(0, len(keys) - room)
    assert view.is_full() == (len(keys) >= room)
    n = min(room, len(keys))
    kept = list(zip(keys[:n], offsets[:n].tolist(), times[:n].tolist()))
    h = view.header
    assert h.entries == n
    if n:
        assert (h.begin_phy_offset, h.begin_timestamp) == (kept[0][1], kept[0][2])
        assert (h.end_phy_offset, h.end_timestamp) == (kept[-1][1], kept[-1][2])
        assert h.hash_slot_count == len({index_key_hash(k) % hash_slots for k, _, _ in kept})
    for key in set(keys):
        want = [o for k, o, _ in reversed(kept) if index_key_hash(k) == index_key_hash(key)]
        assert view.select(key, max_num, 0, LONG_MAX) == want[:max_num]
    if rolled_from or not n:
        return
    # A fresh file: reconstructed times never decrease along a chain, so a time window
    # returns exactly the hash matches whose reconstructed time lies inside it.
    begin_ts = kept[0][2]
    rebuilt = [begin_ts + (t - begin_ts) // 1000 * 1000 for _, _, t in kept]
    edges = st.sampled_from([*rebuilt, begin_ts - 1, rebuilt[-1] + 1])
    lo, hi = sorted(data.draw(st.lists(edges, min_size=2, max_size=2)))
    newest_first = list(zip(kept, rebuilt))[::-1]
    for key in set(keys):
        kh = index_key_hash(key)
        want = [o for (k, o, _), t in newest_first if index_key_hash(k) == kh and lo <= t <= hi]
        assert view.select(key, max_num, lo, hi) == want[:max_num]


# put_hashes against the scalar putKey: hashes with collisions in few slots, 0, the
# largest hash; timestamps around 0 and at the int64 edges (Java long wrap-around).
hash_st = st.sampled_from([0, 1, 2, 3, 7, 8, 16, INT_MAX, INT_MAX - 1]) | st.integers(0, INT_MAX)
ts_st = (
    st.integers(1_700_000_000_000, 1_700_000_100_000)
    | st.sampled_from([0, -1, 1, 999, 1000, -(1 << 63), LONG_MAX, LONG_MAX - 999])
    | st.integers(-(1 << 63), LONG_MAX)
)
phy_st = st.integers(0, 1 << 40) | st.sampled_from([-1, LONG_MAX])
entry_st = st.tuples(hash_st, phy_st, ts_st)


@settings(max_examples=examples(400), deadline=None)
@given(
    hash_slots=st.integers(1, 8),
    max_entries=st.integers(1, 24),
    start=st.sampled_from(["fresh", "rolled", "rolled_ts_only", "junk_slots"]),
    batches=st.lists(st.lists(entry_st, max_size=30), min_size=1, max_size=4),
    data=st.data(),
)
def test_put_hashes_equals_scalar_puts(hash_slots, max_entries, start, batches, data) -> None:
    """Batch after batch, put_hashes leaves exactly the bytes of putKey called once per
    entry, and accepts exactly as many entries (batches overflow the small files)."""
    size = index_file_size(hash_slots, max_entries)
    vec_buf, loop_buf = bytearray(size), bytearray(size)
    ctor = {
        "fresh": {},
        "rolled": {"end_phy_offset": 4242, "end_timestamp": 1_699_999_990_123},
        "rolled_ts_only": {"end_timestamp": 1_700_000_050_000},
        "junk_slots": {"end_timestamp": 5},
    }[start]
    vec = IndexFileView.create(vec_buf, hash_slots, max_entries, **ctor)
    loop = IndexFileView.create(loop_buf, hash_slots, max_entries, **ctor)
    if start == "junk_slots":  # stale slot values, some pointing past index_count
        junk = data.draw(st.lists(st.integers(-3, max_entries + 2), min_size=hash_slots, max_size=hash_slots))
        for buf in (vec_buf, loop_buf):
            np.frombuffer(buf, ">i4", hash_slots, INDEX_HEADER_BYTES)[:] = junk
    for batch in batches:
        hashes, phys, times = (list(col) for col in zip(*batch)) if batch else ([], [], [])
        want = sum(loop._put_hashed([h], [o], [t]) for h, o, t in batch)  # the scalar putKey, one entry a call
        got = vec.put_hashes(np.array(hashes, np.int64), np.array(phys, np.int64), np.array(times, np.int64))
        assert got == want
        assert bytes(vec_buf) == bytes(loop_buf)
    assert vec.is_full() == loop.is_full()


@settings(max_examples=examples(200), deadline=None)
@given(
    hash_slots=st.integers(1, 6),
    max_entries=st.integers(2, 20),
    rolled=st.booleans(),
    data=st.data(),
)
def test_truncate_equals_never_having_put(hash_slots, max_entries, rolled, data) -> None:
    """Cutting at a commitlog offset leaves the bytes of a file that only got the entries
    below it (end_timestamp aside: reconstructed), and puts after the cut give the bytes
    of a file that never held the dropped entries at all."""
    n = data.draw(st.integers(1, max_entries - 1))
    hashes = np.array(data.draw(st.lists(hash_st, min_size=n, max_size=n)), np.int64)
    phys = np.cumsum(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))).astype(np.int64)
    times = 1_700_000_000_000 + np.cumsum(data.draw(st.lists(st.integers(0, 2500), min_size=n, max_size=n)))
    ctor = {"end_phy_offset": 7, "end_timestamp": 1_699_999_987_654} if rolled else {}
    cut = data.draw(st.integers(int(phys[0]) + 1, int(phys[-1]) + 1))
    keep = int(np.searchsorted(phys, cut))  # entries below the cut
    size = index_file_size(hash_slots, max_entries)
    cut_buf, ref_buf = bytearray(size), bytearray(size)
    cut_view = IndexFileView.create(cut_buf, hash_slots, max_entries, **ctor)
    ref_view = IndexFileView.create(ref_buf, hash_slots, max_entries, **ctor)
    assert cut_view.put_hashes(hashes, phys, times) == n
    assert ref_view.put_hashes(hashes[:keep], phys[:keep], times[:keep]) == keep
    assert cut_view.entries_below(cut) == keep
    cut_view.truncate(keep)
    h = cut_view.header
    assert cut_buf[:8] + cut_buf[16:] == ref_buf[:8] + ref_buf[16:]
    begin = int(times[0])
    if keep == n:  # nothing at or past the cut: the file is untouched
        want_end = int(times[-1])
    else:
        want_end = begin if keep == 1 else begin + int(cut_view.entries()["time_diff"][-1]) * 1000
    assert h.end_timestamp == want_end
    assert 0 <= int(times[keep - 1]) - h.end_timestamp < (1000 if keep > 1 else 1)
    # New entries after the cut: both files agree to the byte.
    more = data.draw(st.lists(entry_st, max_size=max_entries))
    if more:
        mh, mp, mt = (np.array(col, np.int64) for col in zip(*more))
        assert cut_view.put_hashes(mh, mp, mt) == ref_view.put_hashes(mh, mp, mt)
        assert cut_buf == ref_buf


def test_truncate_limits() -> None:
    buf = bytearray(index_file_size(2, 8))
    view = IndexFileView.create(buf, 2, 8)
    assert view.entries_below(0) == 0
    with pytest.raises(ValueError):
        view.truncate(0)  # an empty file: nothing to keep
    view.put_hashes([1, 2, 3], [10, 20, 30], [1000, 2000, 3000])
    assert [view.entries_below(o) for o in (10, 11, 30, 31)] == [0, 1, 2, 3]
    before = bytes(buf)
    view.truncate(3)  # keeps everything: unchanged
    assert bytes(buf) == before
    for bad in (0, 4):
        with pytest.raises(ValueError):
            view.truncate(bad)


any_text = st.text(
    st.characters() | st.characters(min_codepoint=0x10000) | st.characters(categories=["Cs"]),
    max_size=40,
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(any_text, max_size=30))
def test_vectorised_hash_equals_scalar(keys: list[str]) -> None:
    got = index_key_hashes(keys)
    assert got.dtype == np.int32
    assert got.tolist() == [index_key_hash(k) for k in keys]


def test_vectorised_hash_golden(golden: dict) -> None:
    vecs = golden["hashes"]
    assert index_key_hashes([v["s"] for v in vecs]).tolist() == [v["indexKeyHash"] for v in vecs]
