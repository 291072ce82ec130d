"""ConsumeQueue: unit codec, files, RocketMQ's put rules, recovery, cleaning, lookup by time."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import CorruptFileError, InvalidMessageError, InvalidTopicError, OffsetError, StoreClosedError
from mqstore.formats import offset_to_file_name, tags_code
from mqstore.formats.consume_queue import (
    DEFAULT_FILE_BYTES,
    PRE_BLANK_SIZE,
    PRE_BLANK_UNIT,
    UNIT_DTYPE,
    UNIT_SIZE,
    CqUnit,
    decode_units,
    encode_units,
    file_bytes_for,
    unit_position,
)
from mqstore.store import file_pool
from mqstore.store.consume_queue import ConsumeQueue, queue_dir
from tests.tiers import examples

FILE = 7 * UNIT_SIZE  # 140 bytes: 7 units a file
MSG = 100  # every test message is 100 bytes long; message i sits at commitlog offset i * MSG

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def open_cq(tmp: Path, queue_id: int = 0, **kw) -> ConsumeQueue:
    kw.setdefault("file_bytes", FILE)
    return ConsumeQueue(tmp, "TopicTest", queue_id, **kw)


def put_range(cq: ConsumeQueue, start: int, stop: int) -> None:
    q = np.arange(start, stop)
    res = cq.put_units(q, q * MSG, MSG, q % 5)
    assert res.written == stop - start


def cq_path(tmp: Path, base: int = 0, queue_id: int = 0) -> Path:
    return queue_dir(tmp, "TopicTest", queue_id) / offset_to_file_name(base)


def offsets(units: np.ndarray) -> list[int]:
    return units["commitlog_offset"].tolist()


# ---------------------------------------------------------------------- format


@settings(max_examples=examples(200))
@given(st.lists(st.tuples(st.integers(0, (1 << 63) - 1), st.integers(1, (1 << 31) - 1), INT64), max_size=50))
def test_encode_decode_round_trip(units: list[tuple[int, int, int]]) -> None:
    o, s, t = (list(c) for c in zip(*units, strict=True)) if units else ([], [], [])
    buf = encode_units(o, s, t)
    assert len(buf) == UNIT_SIZE * len(units)
    got = decode_units(buf)
    assert got.dtype == UNIT_DTYPE
    assert [tuple(int(x) for x in u) for u in got.tolist()] == units


def test_unit_bytes_are_big_endian_and_tags_sign_extended() -> None:
    neg = tags_code("TopicTest#order-1")  # RocketMQ golden: -1829193424
    assert neg == -1829193424
    buf = encode_units([1073741824, 5], [210, 7], [tags_code("TagA"), neg])
    assert buf[:20].hex() == "0000000040000000000000d2000000000027a807"
    assert buf[20:].hex() == "000000000000000500000007ffffffff92f8b930"
    assert PRE_BLANK_UNIT.hex() == "00000000000000007fffffff0000000000000000"
    with pytest.raises(ValueError):
        encode_units([0], [1 << 31], [0])


def test_decode_stops_at_first_invalid_unit() -> None:
    good = encode_units([0, 100], [PRE_BLANK_SIZE, 50], [0, 3])  # a pre-blank unit is valid
    assert len(decode_units(good)) == 2
    for bad in ((200, 0, 0), (200, -5, 0), (-1, 10, 0)):
        buf = good + encode_units(*([v] for v in bad)) + encode_units([300], [10], [0])
        assert offsets(decode_units(buf)) == [0, 100]
    assert len(decode_units(good + b"\x00" * 7)) == 2  # a partial trailing unit is not a unit
    assert len(decode_units(good + bytes(DEFAULT_FILE_BYTES))) == 2


def test_file_size_rounding_and_positions() -> None:
    assert DEFAULT_FILE_BYTES == 6_000_000
    assert file_bytes_for(6_000_000) == 6_000_000
    assert file_bytes_for(6_000_001) == 6_000_020
    assert file_bytes_for(1) == 20
    assert unit_position(0, FILE) == (0, 0)
    assert unit_position(6, FILE) == (0, 120)
    assert unit_position(7, FILE) == (140, 0)
    assert unit_position(300_000, DEFAULT_FILE_BYTES) == (6_000_000, 0)
    assert offset_to_file_name(unit_position(300_000, DEFAULT_FILE_BYTES)[0]) == "00000000000006000000"
    with pytest.raises(ValueError):
        file_bytes_for(0)
    with pytest.raises(ValueError):
        unit_position(-1, FILE)


# ---------------------------------------------------------------------- paths


@pytest.mark.parametrize("topic", ["", "..", ".", "a/b", "../etc", "a\x00b", "x" * 128, "tópico"])
def test_bad_topic_raises(tmp_path: Path, topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        queue_dir(tmp_path, topic, 0)
    with pytest.raises(InvalidTopicError):
        ConsumeQueue(tmp_path, topic, 0)
    assert not (tmp_path / "consumequeue").exists()


@pytest.mark.parametrize("queue_id", [-1, 65536, "1", "../1", 1.0, True, None])
def test_bad_queue_id_raises(tmp_path: Path, queue_id) -> None:
    with pytest.raises(InvalidMessageError):
        queue_dir(tmp_path, "TopicTest", queue_id)


def test_queue_dir_layout(tmp_path: Path) -> None:
    want = tmp_path / "consumequeue" / "%RETRY%g|x-1_2" / "65535"
    assert queue_dir(tmp_path, "%RETRY%g|x-1_2", np.int32(65535)) == want


# ---------------------------------------------------------------------- writing and reading


def test_rollover_read_across_files_and_reopen(tmp_path: Path) -> None:
    with open_cq(tmp_path, file_bytes=130) as cq:  # rounded up to 140
        assert cq.file_bytes == FILE
        assert (cq.min_offset, cq.max_offset, cq.max_physical_offset, cq.last_unit()) == (0, 0, -1, None)
        put_range(cq, 0, 10)
        put_range(cq, 10, 17)
        assert cq.files == [offset_to_file_name(b) for b in (0, 140, 280)]
        for name in cq.files:
            assert (cq.directory / name).stat().st_size == FILE
        got = cq.read_units(3, 10)  # units 3..12: spans the first two files
        assert offsets(got) == [q * MSG for q in range(3, 13)]
        assert got["tags_code"].tolist() == [q % 5 for q in range(3, 13)]
        assert offsets(cq.read_units(14, 100)) == [1400, 1500, 1600]
        assert len(cq.read_units(17, 5)) == 0
        assert len(cq.read_units(50, 5)) == 0
        assert cq.flush() == 17
    assert not list(cq.directory.glob("*.tmp"))
    with open_cq(tmp_path) as cq:
        assert (cq.min_offset, cq.max_offset, cq.max_physical_offset) == (0, 17, 1700)
        assert cq.last_unit() == CqUnit(16, 1600, MSG, 1)
        assert offsets(cq.read_units(0, 100)) == [q * MSG for q in range(17)]
        put_range(cq, 17, 22)  # continues in the half-full last file
        assert offsets(cq.read_units(15, 100)) == [q * MSG for q in range(15, 22)]
    with open_cq(tmp_path) as cq:
        assert cq.max_offset == 22
        assert cq.files[-1] == offset_to_file_name(420)


def test_one_pwrite_per_file_touched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch costs one pwrite per file it touches; a file it creates gets its bytes
    with the creation."""
    calls = []
    real_write, real_pwrite = file_pool.PooledFile.write, file_pool.os.pwrite

    def write(self, pos: int, data: bytes) -> None:
        calls.append(("write", self.path.name, pos, len(data)))
        real_write(self, pos, data)

    def pwrite(fd: int, data: bytes, pos: int) -> int:
        calls.append(("pwrite", pos, len(data)))
        return real_pwrite(fd, data, pos)

    monkeypatch.setattr(file_pool.PooledFile, "write", write)
    monkeypatch.setattr(file_pool.os, "pwrite", pwrite)
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 3)
        calls.clear()
        put_range(cq, 3, 17)  # 4 units in file 0, 7 in new file 1, 3 in new file 2
        name0 = offset_to_file_name(0)
        assert calls == [("pwrite", 0, 140), ("pwrite", 0, 60), ("write", name0, 60, 80), ("pwrite", 60, 80)]
        assert offsets(cq.read_units(0, 100)) == [q * MSG for q in range(17)]


def test_fill_pre_blank_when_first_unit_is_not_zero(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        res = cq.put_units([9, 10], [5000, 5100], [MSG, MSG], [1, 2])
        assert res.written == 2
        assert cq.files == [offset_to_file_name(140)]  # the file-aligned start of queue offset 9
        assert (cq.min_offset, cq.max_offset, cq.max_physical_offset) == (9, 11, 5200)
        raw = cq_path(tmp_path, 140).read_bytes()
        assert raw[:40] == PRE_BLANK_UNIT * 2  # units 7 and 8
        assert raw[40:80] == encode_units([5000, 5100], [MSG, MSG], [1, 2])
        assert raw[80:] == bytes(60)
        with pytest.raises(OffsetError):
            cq.read_units(8, 1)
        assert offsets(cq.read_units(9, 10)) == [5000, 5100]
    with open_cq(tmp_path) as cq:  # pre-blank units never count as messages
        assert (cq.min_offset, cq.max_offset, cq.max_physical_offset) == (9, 11, 5200)
        assert cq.correct_min_offset(0) == 9
        assert cq.recover().max_offset == 11


def test_pre_blank_inside_file_zero(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        cq.put_units([3], [0], [MSG], [0])
        assert cq.files == [offset_to_file_name(0)]
        assert cq_path(tmp_path).read_bytes()[:60] == PRE_BLANK_UNIT * 3
        assert (cq.min_offset, cq.max_offset) == (3, 4)


def test_repeated_and_redispatched_units_are_skipped(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 5)
        before = cq_path(tmp_path).read_bytes()
        # the same units dispatched again (reput after a restart): already built
        q = np.arange(0, 5)
        res = cq.put_units(q, q * MSG, MSG, 0)
        assert (res.written, res.already_built, res.repeated) == (0, 5, 0)
        # new commitlog positions but queue offsets already taken: repeated
        res = cq.put_units([3, 4], [900, 1000], [MSG, MSG], [0, 0])
        assert (res.written, res.already_built, res.repeated) == (0, 0, 2)
        assert cq_path(tmp_path).read_bytes() == before
        assert (cq.max_offset, cq.max_physical_offset) == (5, 500)
        # a mixed batch: overlap with what is built, then new units
        res = cq.put_units([3, 4, 5, 6], [300, 400, 500, 600], MSG, 0)
        assert (res.written, res.already_built, res.repeated) == (2, 2, 0)
        assert offsets(cq.read_units(0, 10)) == [0, 100, 200, 300, 400, 500, 600]


def test_gap_is_logged_and_written_at_the_write_position(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 3)
        res = cq.put_units([5], [300], [MSG], [0])
        assert (res.written, res.gaps) == (1, 1)
        assert cq.max_offset == 4
        assert cq.last_unit() == CqUnit(3, 300, MSG, 0)


def test_put_rejects_bad_values(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        for bad in (([-1], [0], [1], [0]), ([0], [-1], [1], [0]), ([0], [0], [0], [0]), ([0, 1], [0, 1, 2], [1], [0])):
            with pytest.raises(ValueError):
                cq.put_units(*bad)
        assert cq.put_units([], [], [], []).written == 0
        assert cq.files == []


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=6), st.integers(0, 20))
def test_batches_match_a_model(tmp_path_factory: pytest.TempPathFactory, batches: list[int], first: int) -> None:
    tmp = tmp_path_factory.mktemp("cq")
    model: list[int] = []
    with open_cq(tmp) as cq:
        q = first
        for n in batches:
            r = np.arange(q, q + n)
            cq.put_units(r, r * MSG, MSG, 0)
            model += (r * MSG).tolist()
            q += n
        assert (cq.min_offset, cq.max_offset) == (first, q)
    with open_cq(tmp) as cq:
        assert (cq.min_offset, cq.max_offset) == (first, q)
        assert offsets(cq.read_units(first, 1000)) == model
        assert cq.files[0] == offset_to_file_name(unit_position(first, FILE)[0])


# ---------------------------------------------------------------------- open, recover, truncate


def test_open_refuses_wrong_size_and_cleans_tmp(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 10)
    d = queue_dir(tmp_path, "TopicTest", 0)
    (d / (offset_to_file_name(280) + ".tmp")).write_bytes(b"x" * 10)
    (d / "README").write_text("not a queue file")
    with open_cq(tmp_path) as cq:
        assert cq.max_offset == 10
    assert not (d / (offset_to_file_name(280) + ".tmp")).exists()
    with pytest.raises(CorruptFileError, match="00000000000000000000.*140 bytes, expected 200"):
        open_cq(tmp_path, file_bytes=200)
    with open(cq_path(tmp_path, 140), "ab") as f:
        f.write(b"\0")
    with pytest.raises(CorruptFileError, match="00000000000000000140.*141 bytes"):
        open_cq(tmp_path)


def test_open_refuses_a_gap_between_files(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 20)
    cq_path(tmp_path, 140).unlink()
    with pytest.raises(CorruptFileError, match="contiguous"):
        open_cq(tmp_path)


def tear(path: Path, at: int, data: bytes = b"") -> None:
    """Zero a file from ``at`` on, then put ``data`` there (a torn or garbled write)."""
    raw = bytearray(path.read_bytes())
    raw[at:] = bytes(len(raw) - at)
    raw[at : at + len(data)] = data
    path.write_bytes(bytes(raw))


def test_recover_cuts_a_partial_unit(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 10)
    tear(cq_path(tmp_path, 140), 40 + 8)  # unit 9: commitlog offset written, size not yet
    with open_cq(tmp_path) as cq:
        rep = cq.recover()
        assert (rep.max_offset, rep.max_physical_offset, rep.deleted_files) == (9, 900, ())
        assert (cq.max_offset, cq.max_physical_offset) == (9, 900)
    assert cq_path(tmp_path, 140).read_bytes()[40:] == bytes(100)


def test_recover_cuts_garbage_and_deletes_later_files(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 20)
    garbage = encode_units([-7], [3], [0]) + os.urandom(30)
    tear(cq_path(tmp_path, 140), 60, garbage)  # unit 10 is garbage, file 280 after it
    with open_cq(tmp_path) as cq:
        rep = cq.recover()
        assert rep.max_offset == 10
        assert rep.deleted_files == (offset_to_file_name(280),)
        assert cq.files == [offset_to_file_name(0), offset_to_file_name(140)]
        assert cq.max_physical_offset == 1000
        assert offsets(cq.read_units(0, 100)) == [q * MSG for q in range(10)]
        put_range(cq, 10, 12)  # writing goes on where recovery cut
    assert not cq_path(tmp_path, 280).exists()
    assert cq_path(tmp_path, 140).read_bytes()[100:] == bytes(40)
    with open_cq(tmp_path) as cq:
        assert cq.max_offset == 12


def test_recover_after_crash_left_an_empty_next_file(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 10)
    cq_path(tmp_path, 280).write_bytes(bytes(FILE))  # created, never written
    with open_cq(tmp_path) as cq:
        assert cq.max_offset == 14  # before recovery the last file sets the position
        rep = cq.recover()
        assert rep.max_offset == 10
        assert rep.deleted_files == (offset_to_file_name(280),)
        assert cq.max_physical_offset == 1000


def test_recover_scans_from_the_third_to_last_file(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 30)  # 5 files
    tear(cq_path(tmp_path, 0), 20)  # damage in file 0 is older than the scan window
    with open_cq(tmp_path) as cq:
        assert cq.recover().max_offset == 30


def test_recover_torn_at_every_byte(tmp_path: Path) -> None:
    rng = random.Random(7)
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 12)  # file 1 holds units 7..11 (bytes 0..100)
    pristine = cq_path(tmp_path, 140).read_bytes()
    for at in rng.sample(range(0, 100), 25):
        cq_path(tmp_path, 140).write_bytes(pristine)
        tear(cq_path(tmp_path, 140), at)
        with open_cq(tmp_path) as cq:
            cq.recover()
            # a unit survives iff its size field (bytes 8..12) was written whole
            survivors = 7 + (at - 12) // UNIT_SIZE + 1 if at >= 12 else 7
            assert cq.max_offset == survivors, at
            assert offsets(cq.read_units(0, 100)) == [q * MSG for q in range(survivors)]


def test_truncate_dirty_keeps_units_below_the_offset(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 20)
        rep = cq.truncate_dirty(1250)  # units 0..12 point below it
        assert (rep.max_offset, rep.max_physical_offset, rep.dropped_units) == (13, 1300, 7)
        assert rep.deleted_files == (offset_to_file_name(280),)
        assert cq_path(tmp_path, 140).read_bytes()[120:] == bytes(20)
        put_range(cq, 13, 15)
        assert offsets(cq.read_units(10, 10)) == [1000, 1100, 1200, 1300, 1400]


def test_truncate_dirty_deletes_files_starting_after_the_offset(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 20)
        assert cq.truncate_dirty(1400).max_offset == 14  # file 280 starts with unit 14 -> deleted
        assert cq.files == [offset_to_file_name(0), offset_to_file_name(140)]
        assert cq.truncate_dirty(10**9).max_offset == 14  # nothing above: nothing changes
        rep = cq.truncate_dirty(0)  # everything goes
        assert (rep.max_offset, rep.max_physical_offset, cq.files, cq.min_offset) == (0, -1, [], 0)
        cq.put_units([15], [50_000], [MSG], [0])  # starts afresh with pre-blanks, like a new queue
        assert (cq.files, cq.min_offset, cq.max_offset) == ([offset_to_file_name(280)], 15, 16)


def test_delete_files_below_keeps_the_last_file(tmp_path: Path) -> None:
    with open_cq(tmp_path) as cq:
        put_range(cq, 0, 20)
        assert cq.delete_files_below(1000) == [offset_to_file_name(0)]  # file 0 ends at unit 6 (600)
        assert cq.min_offset == 10  # and min moved to the first unit at or after 1000
        with pytest.raises(OffsetError):
            cq.read_units(9, 1)
        assert cq.delete_files_below(10**9) == [offset_to_file_name(140)]
        assert cq.files == [offset_to_file_name(280)]
        assert (cq.min_offset, cq.max_offset) == (20, 20)  # nothing valid is left
        assert len(cq.read_units(20, 5)) == 0
    with open_cq(tmp_path) as cq:
        assert (cq.min_offset, cq.max_offset) == (14, 20)  # the min is not persisted (as in RocketMQ)
        assert cq.correct_min_offset(1750) == 18
        assert cq.correct_min_offset(0) == 18  # never moves down


# ---------------------------------------------------------------------- lookup by time


def timed_queue(tmp: Path, times: list[int], first: int = 0) -> tuple[ConsumeQueue, callable]:
    cq = open_cq(tmp)
    q = np.arange(first, first + len(times))
    cq.put_units(q, q * MSG, MSG, 0)
    table = {int(p): t for p, t in zip(q * MSG, times, strict=True)}

    def store_time_of(phys: np.ndarray) -> np.ndarray:
        return np.array([table.get(int(p), -1) for p in phys], np.int64)

    return cq, store_time_of


def lower_bound(times: list[int], ts: int, first: int = 0) -> int:
    return first + next((i for i, t in enumerate(times) if t >= ts), len(times))


TIMES = [100, 100, 110, 120, 120, 120, 120, 120, 130, 140, 150, 150, 150, 150, 160, 170, 180, 190, 200, 200]


def test_offset_at_time_cases(tmp_path: Path) -> None:
    cq, f = timed_queue(tmp_path, TIMES)  # 3 files: equal times cross the file boundary at 7
    with cq:
        assert cq.offset_at_time(120, f) == 3  # exact hit: the first of the equal ones
        assert cq.offset_at_time(150, f) == 10
        assert cq.offset_at_time(200, f) == 18
        assert cq.offset_at_time(135, f) == 9  # between: the first one later
        assert cq.offset_at_time(50, f) == 0  # before everything: min
        assert cq.offset_at_time(201, f) == 20  # after everything: max
        for ts in range(90, 210):
            assert cq.offset_at_time(ts, f) == lower_bound(TIMES, ts), ts


def test_offset_at_time_respects_min_offset(tmp_path: Path) -> None:
    cq, f = timed_queue(tmp_path, [10, 20, 30, 40], first=9)  # pre-blanks at 7 and 8
    with cq:
        assert cq.offset_at_time(0, f) == 9
        assert cq.offset_at_time(25, f) == 11
        assert cq.offset_at_time(99, f) == 13
    cq, f = timed_queue(tmp_path / "b", TIMES)
    with cq:
        cq.delete_files_below(1000)
        assert cq.offset_at_time(0, f) == 10
        assert cq.offset_at_time(150, f) == 10
        assert cq.offset_at_time(155, f) == 14
        assert cq.offset_at_time(120, f, commitlog_min_offset=1000) == 10


def test_offset_at_time_unreadable_and_empty(tmp_path: Path) -> None:
    cq, f = timed_queue(tmp_path, TIMES[:7])
    with cq:
        assert cq.offset_at_time(115, lambda p: np.where(p == 300, -1, f(p))) == 0  # RocketMQ: 0 on a failed read
    with open_cq(tmp_path / "empty") as cq:
        assert cq.offset_at_time(115, lambda p: p) == 0


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=30), st.integers(0, 9), st.integers(-5, 60))
def test_offset_at_time_is_a_lower_bound(tmp_path_factory, steps: list[int], first: int, ts: int) -> None:
    times = np.cumsum(steps).tolist()
    cq, f = timed_queue(tmp_path_factory.mktemp("t"), times, first=first)
    with cq:
        assert cq.offset_at_time(ts, f) == lower_bound(times, ts, first)


def test_offset_at_time_asks_for_store_times_in_a_few_batches(tmp_path: Path) -> None:
    """Served, every store_time_of call is an RPC to the commitlog: a lookup in 200,000
    units makes a handful of calls (a binary search asking one unit at a time made
    about twenty), and answers as before."""
    n = 200_000
    times = (np.arange(n) // 3 * 2 + 1_000).tolist()  # runs of three equal times
    cq = ConsumeQueue(tmp_path, "TopicTest", 0, file_bytes=20 * 300_000)
    q = np.arange(n)
    cq.put_units(q, q * MSG, MSG, 0)
    calls: list[int] = []

    def store_time_of(phys: np.ndarray) -> np.ndarray:
        calls.append(len(phys))
        return np.array([times[int(x) // MSG] for x in phys], np.int64)

    with cq:
        for ts in (999, 1_000, 1_001, 1_002, 77_777, 77_778, times[-1], times[-1] + 1):
            calls.clear()
            assert cq.offset_at_time(ts, store_time_of) == lower_bound(times, ts), ts
            assert len(calls) <= 6 and max(calls) <= 64, (ts, calls)


# ---------------------------------------------------------------------- lifecycle and threads


def test_closed_queue_refuses_calls(tmp_path: Path) -> None:
    cq = open_cq(tmp_path)
    put_range(cq, 0, 3)
    cq.close()
    cq.close()
    for call in (lambda: cq.read_units(0, 1), lambda: put_range(cq, 3, 4), cq.flush, cq.recover, cq.last_unit):
        with pytest.raises(StoreClosedError):
            call()


def test_readers_see_whole_units_while_the_writer_appends(tmp_path: Path) -> None:
    stop = threading.Event()
    errors: list[str] = []

    with open_cq(tmp_path, file_bytes=20 * 50) as cq:

        def reader() -> None:
            while not stop.is_set():
                got = offsets(cq.read_units(cq.min_offset, 10_000))
                if got != [q * MSG for q in range(len(got))]:
                    errors.append(f"bad read of {len(got)} units")

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for start in range(0, 2000, 37):
            put_range(cq, start, min(start + 37, 2000))
        stop.set()
        for t in threads:
            t.join()
        assert not errors
        assert cq.max_offset == 2000
