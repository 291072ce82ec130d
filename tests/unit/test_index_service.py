"""IndexService over real files: rollover with the first-entry quirk, queries across
files, re-dispatch, reopen, abnormal load, truncate, expiry, wrong sizes."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from mqstore.errors import ConfigError, CorruptFileError, StoreClosedError
from mqstore.formats import IndexFileView, index_file_size, index_key_hashes
from mqstore.store.dispatch import IndexEntries
from mqstore.store.index_service import INDEX_DIR, IndexService, index_file_name
from mqstore.store.mapped_file import Segment

SLOTS, ENTRIES = 4, 8  # 7 entries a file
PER_FILE = ENTRIES - 1
T0 = 1_700_000_000_000
LONG_MAX = (1 << 63) - 1


class FakeClock:
    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000


def off(i: int) -> int:
    """Commitlog offset of message i."""
    return 1000 * (i + 1)


def ts(i: int) -> int:
    """Store time of message i: one a second, whole seconds (reconstructed times are exact)."""
    return T0 + 1000 * i


def key_of(i: int) -> str:
    return "k" if i % 3 == 0 else f"o{i}"


def entries(msgs: list[int], *, topic: str = "T", keys=key_of, times=ts) -> IndexEntries:
    return IndexEntries(
        index_key_hashes([f"{topic}#{keys(i)}" for i in msgs]),
        np.array([off(i) for i in msgs], np.int64),
        np.array([times(i) for i in msgs], np.int64),
    )


def service(tmp_path: Path, clock: FakeClock | None = None, **kw) -> IndexService:
    svc = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES, clock=clock or FakeClock(), **kw)
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    return svc


def reference_files(msgs: list[int], *, keys=key_of, times=ts) -> list[bytes]:
    """The files RocketMQ's putKey writes for these messages, one after the other."""
    out, end_phy, end_ts = [], 0, 0
    for start in range(0, len(msgs), PER_FILE):
        buf = bytearray(index_file_size(SLOTS, ENTRIES))
        view = IndexFileView.create(buf, SLOTS, ENTRIES, end_phy_offset=end_phy, end_timestamp=end_ts)
        for i in msgs[start : start + PER_FILE]:
            assert view.put(f"T#{keys(i)}", off(i), times(i))  # the scalar putKey
        out.append(bytes(buf))
        end_phy, end_ts = view.header.end_phy_offset, view.header.end_timestamp
    return out


def file_bytes(svc: IndexService) -> list[bytes]:
    return [(svc.directory / name).read_bytes() for name in svc.files]


def k_offsets(msgs, pred=lambda i: True) -> list[int]:
    return [off(i) for i in sorted(msgs, reverse=True) if key_of(i) == "k" and pred(i)]


# ---------------------------------------------------------------------------
# puts and rollover
# ---------------------------------------------------------------------------


def test_puts_roll_over_files_byte_for_byte(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = service(tmp_path, clock)
    assert svc.max_physical_offset == -1 and svc.files == []
    msgs = list(range(22))
    results = []
    for lo, hi in ((0, 3), (3, 12), (12, 13), (13, 22)):  # batches that end mid-file and span files
        clock.ms += 1
        results.append(svc.put(entries(msgs[lo:hi])))
    assert [r.indexed for r in results] == [3, 9, 1, 9] and all(r.skipped == 0 for r in results)
    assert [len(r.created_files) for r in results] == [1, 1, 0, 2]
    assert [n for r in results for n in r.created_files] == svc.files
    assert len(svc.files) == 4 and svc.files == sorted(svc.files)
    for name in svc.files:
        assert len(name) == 17 and name.isdigit()
        assert (svc.directory / name).stat().st_size == index_file_size(SLOTS, ENTRIES)
    # Each file is what RocketMQ writes, including each rolled file's first-entry quirk.
    assert file_bytes(svc) == reference_files(msgs)
    second = IndexFileView((svc.directory / svc.files[1]).read_bytes(), SLOTS, ENTRIES)
    assert second.entries()["time_diff"][0] == (ts(7) - ts(6)) // 1000 == 1  # against the previous end
    assert second.header.begin_timestamp == ts(7)
    # The last full file (messages 14..20) was flushed and moved the checkpoint value.
    assert svc.index_msg_timestamp == ts(20)
    assert svc.max_physical_offset == off(21)
    st = svc.stats()
    assert (st.files, st.entries, st.index_msg_timestamp, st.max_physical_offset) == (4, 22, ts(20), off(21))
    svc.close()


def test_new_file_names_follow_the_clock_and_never_repeat(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    svc = service(tmp_path, clock)
    svc.put(entries(list(range(3 * PER_FILE))))  # three files in the same millisecond
    first = datetime.fromtimestamp(T0 / 1000)
    want = [f"{first + timedelta(milliseconds=d):%Y%m%d%H%M%S}{(T0 + d) % 1000:03d}" for d in range(3)]
    assert svc.files == want
    assert want[0] == index_file_name(T0)
    clock.ms = T0 - 3_600_000  # the clock went back an hour
    svc.put(entries([3 * PER_FILE]))
    assert svc.files[-1] == f"{first + timedelta(milliseconds=3):%Y%m%d%H%M%S}{(T0 + 3) % 1000:03d}"
    clock.ms = T0 + 86_400_000
    svc.put(entries(list(range(3 * PER_FILE + 1, 4 * PER_FILE + 1))))
    assert svc.files[-1] == index_file_name(T0 + 86_400_000)
    assert svc.files == sorted(svc.files) and len(set(svc.files)) == 5
    svc.close()


def test_redispatch_is_skipped_below_the_end_offset(tmp_path: Path) -> None:
    svc = service(tmp_path)
    assert svc.put(entries(list(range(10)))).indexed == 10
    r = svc.put(entries(list(range(5, 13))))  # a restart re-dispatches from message 5
    assert (r.indexed, r.skipped) == (3, 5)  # 5..8 skipped; 9 (at the end offset) is in the files already
    assert svc.query("T", "k") == [off(12), off(9), off(6), off(3), off(0)]
    # Two keys of one message share its offset: both are indexed; a later batch's
    # entry for the same key at that offset is not (RocketMQ compares with <: it would be).
    two = IndexEntries(index_key_hashes(["T#a", "T#b"]), np.array([off(13)] * 2), np.array([ts(13)] * 2))
    assert svc.put(two).indexed == 2
    assert svc.put(IndexEntries(index_key_hashes(["T#a"]), np.array([off(13)]), np.array([ts(13)]))).indexed == 0
    # ... but a key of that message not indexed yet is (a put cut short, then retried).
    assert svc.put(IndexEntries(index_key_hashes(["T#c"]), np.array([off(13)]), np.array([ts(13)]))).indexed == 1
    assert svc.query("T", "a") == [off(13)]
    # Out-of-order offsets inside a batch: each is compared with the end of the moment.
    r = svc.put(
        IndexEntries(
            index_key_hashes(["T#x", "T#y", "T#z"]), np.array([off(20), off(15), off(20)]), np.array([ts(20)] * 3)
        )
    )
    assert (r.indexed, r.skipped) == (2, 1)
    assert svc.stats().entries == 10 + 3 + 2 + 1 + 2
    svc.close()


def test_put_rejects_bad_input_before_writing(tmp_path: Path) -> None:
    svc = service(tmp_path)
    with pytest.raises(ValueError):
        svc.put(IndexEntries(np.array([1, 2]), np.array([1]), np.array([1, 2])))
    with pytest.raises(ValueError):
        svc.put(IndexEntries(np.array([-5]), np.array([1]), np.array([1])))
    assert svc.stats().entries == 0 and svc.files == []  # not even a file was created
    assert svc.put(IndexEntries(np.array([], np.int64), np.array([], np.int64), np.array([], np.int64))).indexed == 0
    svc.close()


def test_dispatch_sink(tmp_path: Path) -> None:
    class Batch:
        def index_entries(self) -> IndexEntries:
            return entries([0, 1, 2, 3])

    svc = service(tmp_path)
    svc.dispatch(Batch())
    assert svc.query("T", "k") == [off(3), off(0)]
    svc.close()


# ---------------------------------------------------------------------------
# queries
# ---------------------------------------------------------------------------


def test_query_newest_first_across_files_with_time_ranges(tmp_path: Path) -> None:
    svc = service(tmp_path)
    msgs = list(range(22))  # files: 0-6, 7-13, 14-20, 21
    svc.put(entries(msgs))
    assert svc.query("T", "k") == k_offsets(msgs)
    assert svc.query("T", "k", max_num=3) == k_offsets(msgs)[:3]
    assert svc.query("T", "k", max_num=0) == []
    assert svc.query("T", "o4") == [off(4)]
    assert svc.query("U", "k") == []  # another topic: another key
    assert svc.query("T", "k", begin=ts(9), end=ts(15)) == [off(15), off(12), off(9)]
    assert svc.query("T", "k", begin=ts(14)) == [off(21), off(18), off(15)]
    assert svc.query("T", "k", end=ts(5)) == [off(3), off(0)]
    assert svc.query("T", "k", begin=ts(30)) == []
    svc.close()


def test_query_shows_the_first_entry_quirk(tmp_path: Path) -> None:
    """Message 7 opens the second file after a 10 s gap: its time_diff is taken against
    message 6's time, so the index places it 10 s after its real store time."""
    gap = 10_000
    times = lambda i: ts(i) + (gap if i >= 7 else 0)  # noqa: E731
    svc = service(tmp_path)
    svc.put(entries(list(range(9)), keys=lambda i: f"m{i}", times=times))
    assert file_bytes(svc) == reference_files(list(range(9)), keys=lambda i: f"m{i}", times=times)
    real = times(7)
    placed = real + (real - times(6)) // 1000 * 1000  # 11 s late, past the file's own end (times(8))
    assert svc.query("T", "m7", begin=real, end=real) == []
    assert svc.query("T", "m7", begin=real, end=placed - 1) == []
    assert svc.query("T", "m7", begin=real, end=placed) == [off(7)]
    assert svc.query("T", "m7", begin=placed, end=LONG_MAX) == []  # no file's range holds ``placed``
    assert svc.query("T", "m8", begin=times(8), end=times(8)) == [off(8)]  # later entries are exact
    svc.close()


def test_query_stops_after_a_file_that_begins_before_begin(tmp_path: Path) -> None:
    """The clock went back 5 s at message 7, so the second file's time range overlaps
    the first's. A query whose ``begin`` lies after the second file's begin stops
    there, even though the first file holds a match (RocketMQ queryOffset)."""
    times = lambda i: ts(i) - (5000 if i >= 7 else 0)  # noqa: E731
    svc = service(tmp_path)
    svc.put(entries(list(range(14)), keys=lambda i: f"m{i}", times=times))
    assert svc.query("T", "m5", begin=times(7) + 1000) == []  # times(5) is later, but the first file is not searched
    assert svc.query("T", "m5", begin=times(7)) == [off(5)]
    svc.close()


def test_query_is_capped_at_64(tmp_path: Path) -> None:
    svc = service(tmp_path)
    msgs = list(range(70))
    svc.put(entries(msgs, keys=lambda i: "same"))
    assert len(svc.files) == 10
    assert svc.query("T", "same", max_num=1000) == [off(i) for i in reversed(msgs)][:64]
    svc.close()


def test_queries_run_alongside_the_writer(tmp_path: Path) -> None:
    svc = service(tmp_path)
    stop, errors, seen = threading.Event(), [], []

    def reader() -> None:
        try:
            while not stop.is_set():
                got = svc.query("T", "k", max_num=64)
                assert got == sorted(got, reverse=True)  # newest first, never a torn chain
                seen.append(len(got))
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    for lo in range(0, 300, 5):
        svc.put(entries(list(range(lo, lo + 5))))
        if lo % 50 == 0:
            svc.delete_files_below(off(lo - 40))
    stop.set()
    t.join()
    assert not errors and seen
    assert svc.query("T", "k", max_num=10) == k_offsets(range(300))[:10]
    svc.close()


# ---------------------------------------------------------------------------
# lifecycle: reopen, abnormal load
# ---------------------------------------------------------------------------


def test_reopen_after_close_continues_the_same_files(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(entries(list(range(10))))
    ckpt = svc.index_msg_timestamp
    names = svc.files
    svc.close()
    svc.close()  # twice is fine
    with pytest.raises(StoreClosedError):
        svc.query("T", "k")
    again = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES, clock=FakeClock())
    report = again.load(clean_shutdown=True, index_msg_timestamp=ckpt)
    assert report.files == tuple(names) and report.deleted_files == ()
    assert again.index_msg_timestamp == ckpt == ts(6)
    assert again.max_physical_offset == off(9)
    assert again.query("T", "k") == k_offsets(range(10))
    again.put(entries(list(range(10, 16))))  # into the half-full second file, then a third
    assert file_bytes(again) == reference_files(list(range(16)))
    again.flush()
    again.close()


def test_a_file_loaded_full_moves_the_checkpoint_when_the_next_is_made(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(entries(list(range(PER_FILE))))  # exactly full, no next file yet
    svc.close()
    again = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES, clock=FakeClock(T0 + 5))
    again.load(clean_shutdown=True, index_msg_timestamp=0)  # the checkpoint never saw it full
    assert again.index_msg_timestamp == 0
    assert len(again.put(entries([PER_FILE])).created_files) == 1
    assert again.index_msg_timestamp == ts(PER_FILE - 1)
    assert file_bytes(again) == reference_files(list(range(PER_FILE + 1)))
    again.close()


def test_abnormal_load_deletes_files_past_index_msg_timestamp(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(entries(list(range(17))))  # full 0-6, full 7-13, current 14-16
    ckpt = svc.index_msg_timestamp
    assert ckpt == ts(13)
    names = svc.files
    svc.close()
    crashed = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES, clock=FakeClock(T0 + 99))
    report = crashed.load(clean_shutdown=False, index_msg_timestamp=ckpt)
    assert report.deleted_files == (names[2],) and report.files == tuple(names[:2])
    assert not (crashed.directory / names[2]).exists()
    assert crashed.max_physical_offset == off(13)
    # Recovery re-dispatches from an earlier message: 13 (at the end offset, in the full
    # file) is not indexed again (RocketMQ would), 14-16 go into a new file.
    r = crashed.put(entries(list(range(10, 17))))
    assert (r.indexed, r.skipped) == (3, 4)
    assert crashed.query("T", "o13") == [off(13)]
    crashed.close()
    # A lower checkpoint value deletes more: everything that ends after it.
    again = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES, clock=FakeClock())
    assert again.load(clean_shutdown=False, index_msg_timestamp=ts(6)).files == (names[0],)
    again.close()


def test_load_refuses_wrong_size_and_cleans_leftovers(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(entries(list(range(3))))
    name = svc.files[0]
    svc.close()
    d = tmp_path / INDEX_DIR
    (d / "20991231235959999.tmp").write_bytes(b"half")
    (d / "notes.txt").write_text("not an index file")
    (d / "20000101000000000").write_bytes(bytes(index_file_size(SLOTS, ENTRIES) - 1))
    bad = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES)
    with pytest.raises(CorruptFileError, match="20000101000000000"):
        bad.load(clean_shutdown=False, index_msg_timestamp=0)
    assert (d / name).exists()  # nothing deleted on the way to the error
    (d / "20000101000000000").unlink()
    other_geometry = IndexService(tmp_path, hash_slots=SLOTS * 2, max_entries=ENTRIES)
    with pytest.raises(CorruptFileError):
        other_geometry.load(clean_shutdown=True, index_msg_timestamp=0)
    ok = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES)
    assert ok.load(clean_shutdown=True, index_msg_timestamp=0).files == (name,)
    assert not (d / "20991231235959999.tmp").exists() and (d / "notes.txt").exists()
    with pytest.raises(RuntimeError):
        ok.load(clean_shutdown=True, index_msg_timestamp=0)
    ok.close()
    with pytest.raises(ConfigError):
        IndexService(tmp_path, hash_slots=4, max_entries=1)
    with pytest.raises(RuntimeError):
        IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES).put(entries([1]))  # load() first


# ---------------------------------------------------------------------------
# truncate and expiry
# ---------------------------------------------------------------------------


def test_truncate_cuts_in_place_and_redispatch_rebuilds(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(entries(list(range(20))))  # full 0-6, full 7-13, current 14-19
    names = svc.files
    assert svc.index_msg_timestamp == ts(13)
    r = svc.truncate(off(10))  # the commitlog was cut at message 10
    assert r.deleted_files == (names[2],) and r.truncated_file == names[1]
    assert r.dropped_entries == 10 and r.max_physical_offset == off(9) == svc.max_physical_offset
    assert svc.files == names[:2]
    assert svc.index_msg_timestamp == ts(9)  # lowered to the end of what is left
    assert svc.query("T", "k") == k_offsets(range(10))
    # The commitlog is written again from message 10 on, with other keys: nothing is
    # skipped, and the files end up as if the dropped entries had never been put.
    newkeys = lambda i: key_of(i) if i < 10 else f"new{i % 2}"  # noqa: E731
    assert svc.put(entries(list(range(10, 20)), keys=newkeys)).indexed == 10
    assert file_bytes(svc) == reference_files(list(range(20)), keys=newkeys)
    assert svc.query("T", "new0") == [off(i) for i in range(18, 9, -2)]
    assert svc.truncate(off(25)).dropped_entries == 0  # nothing past the end: a no-op
    svc.close()


def test_truncate_to_nothing_and_empty_last_file(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(entries(list(range(14))))  # two full files, no third yet
    names = svc.files
    svc.close()
    # A file created after the full one, then a crash before its first entry: it holds
    # the previous end offset (13) and no entries.
    seg = Segment.create(tmp_path / INDEX_DIR / "20991231235959999", 0, index_file_size(SLOTS, ENTRIES))
    IndexFileView.create(seg.mm, SLOTS, ENTRIES, end_phy_offset=off(13), end_timestamp=ts(13))
    seg.close()
    svc = IndexService(tmp_path, hash_slots=SLOTS, max_entries=ENTRIES, clock=FakeClock())
    svc.load(clean_shutdown=False, index_msg_timestamp=ts(13))  # its end equals the checkpoint: kept
    assert len(svc.files) == 3
    r = svc.truncate(off(12))
    assert r.deleted_files == ("20991231235959999",) and r.truncated_file == names[1] and r.dropped_entries == 2
    assert svc.files == names and svc.max_physical_offset == off(11)
    r = svc.truncate(off(0))  # everything
    assert r.deleted_files == tuple(reversed(names)) and r.max_physical_offset == -1
    assert svc.files == [] and svc.query("T", "k") == []
    assert svc.put(entries([0, 1])).indexed == 2  # starts over with a fresh first file
    assert file_bytes(svc) == reference_files([0, 1])
    svc.close()


def test_delete_files_below_keeps_the_last(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(entries(list(range(4 * PER_FILE + 2))))  # five files; ends at messages 6, 13, 20, 27, 29
    names = svc.files
    assert svc.delete_files_below(off(6)) == ()  # end offset 6 is not below 6
    assert svc.delete_files_below(off(7)) == (names[0],)
    assert svc.delete_files_below(off(21)) == (names[1], names[2])
    assert svc.files == names[3:]
    assert svc.delete_files_below(LONG_MAX) == (names[3],)  # never the last file
    assert svc.files == names[4:] and (svc.directory / names[4]).exists()
    assert not any((svc.directory / n).exists() for n in names[:4])
    assert svc.query("T", "o29") == [off(29)] and svc.query("T", "k") == []  # 27 went with its file
    svc.close()
