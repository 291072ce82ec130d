"""Read-only access to a store's commitlog, for tools that must not take the lock
(``mqstore print`` next to a running store, the query commands' ``--store``).

It maps segments read-only, runs no recovery and changes nothing: the walk simply
stops at the first record that does not validate, as recovery would.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from mqstore.errors import OffsetError
from mqstore.formats.message import (
    MessageRecord,
    ScanOutcome,
    decode_record,
    locate_records,
    located_records,
    scan_records,
)
from mqstore.formats.names import file_name_to_offset
from mqstore.formats.packed import RawRecords
from mqstore.store.commitlog import COMMITLOG_DIR


def _segment_files(directory: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of every file in ``directory`` named like a segment, oldest first."""
    out = []
    for p in directory.iterdir():
        try:
            out.append((file_name_to_offset(p.name), p))
        except ValueError:
            continue
    return sorted(out)


def _map_read_only(path: Path) -> mmap.mmap:
    """The whole file, mapped read-only and shared (later writes show through)."""
    with path.open("rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class CommitLogReader:
    """Iterates the records of a commitlog directory without opening the store."""

    def __init__(self, store_dir: str | Path) -> None:
        directory = Path(store_dir) / COMMITLOG_DIR
        if not directory.is_dir():
            raise FileNotFoundError(f"{store_dir} has no {COMMITLOG_DIR}/ directory: is it a store?")
        self._segments = _segment_files(directory)

    @property
    def min_offset(self) -> int:
        return self._segments[0][0] if self._segments else 0

    @property
    def segments(self) -> list[tuple[int, Path]]:
        """(base offset, path) of every file named like a segment, oldest first."""
        return list(self._segments)

    def records(self, offset: int | None = None, *, check_crc: bool = True) -> Iterator[MessageRecord]:
        """Records from ``offset`` (default: the first) to the end of valid data."""
        start = self.min_offset if offset is None else offset
        segs = [(b, p) for b, p in self._segments if b + p.stat().st_size > start]
        if offset is not None and (not segs or segs[0][0] > offset):
            raise OffsetError(f"commitlog offset {offset} is in no segment")
        first = True
        for base, path in segs:
            with _map_read_only(path) as mm:
                pos = max(0, start - base)
                while True:
                    res = scan_records(mm, pos, len(mm), check_crc=check_crc, max_records=1024, base_offset=base)
                    if first and offset is not None and not len(res.positions) and res.outcome is ScanOutcome.INVALID:
                        raise OffsetError(f"no record starts at commitlog offset {offset}: {res.reason}")
                    first = False
                    for p in res.positions.tolist():
                        yield decode_record(mm, p, check_crc=False)
                    if res.outcome is not ScanOutcome.LIMIT or not len(res.positions):
                        break
                    pos = res.stop
            if res.outcome is not ScanOutcome.END_OF_SEGMENT:
                return


class CommitLogView(CommitLogReader):
    """Records by offset, read-only, for questions (store/read_view.py): ``read`` and
    ``read_raw`` as CommitLog has them, ``min_offset`` and ``wrote``. ``wrote`` is the
    end of valid records, found by walking from ``end_hint`` (a record boundary at or
    before the end: the offset the derived files were durable to), or from the last
    segment's start without one; nothing is scanned until it is first asked."""

    def __init__(self, store_dir: str | Path, *, end_hint: int | None = None) -> None:
        super().__init__(store_dir)
        self._bases = [b for b, _ in self._segments]
        self._sizes = [p.stat().st_size for _, p in self._segments]  # fixed once written: asked once, not per read
        self._maps: dict[int, mmap.mmap] = {}
        self._hint = end_hint
        self._wrote: int | None = None

    def _map(self, i: int) -> mmap.mmap:
        mm = self._maps.get(i)
        if mm is None:
            mm = self._maps[i] = _map_read_only(self._segments[i][1])
        return mm

    def _segment_at(self, offset: int) -> tuple[int, mmap.mmap]:
        i = int(np.searchsorted(self._bases, offset, side="right")) - 1
        if i < 0 or offset >= self._bases[i] + self._sizes[i]:
            raise OffsetError(f"commitlog offset {offset} is in no segment")
        return self._bases[i], self._map(i)

    @property
    def wrote_offset(self) -> int:
        if self._wrote is None:
            self._wrote = self._find_end()
        return self._wrote

    def _find_end(self) -> int:
        at = self._hint if self._hint is not None and self._hint >= self.min_offset else self._newest_start()
        while True:
            try:
                base, mm = self._segment_at(at)
            except OffsetError:
                return at  # past the last segment
            res = scan_records(mm, at - base, len(mm), check_crc=True, base_offset=base)
            if res.outcome is not ScanOutcome.END_OF_SEGMENT:
                return base + res.stop
            at = base + len(mm)  # a BLANK record fills the rest: go on in the next segment

    def _newest_start(self) -> int:
        """The base of the newest segment that starts with a record (files made ahead are empty)."""
        for i in range(len(self._segments) - 1, 0, -1):
            if self._sizes[i] >= 8 and self._map(i)[:8] != bytes(8):
                return self._segments[i][0]
        return self.min_offset

    def read(self, offset: int) -> MessageRecord:
        """The record that starts at ``offset``; OffsetError if none does."""
        base, mm = self._segment_at(offset)
        try:
            return decode_record(mm, offset - base, check_crc=False)
        except ValueError as e:
            raise OffsetError(f"no record starts at commitlog offset {offset}: {e}") from e

    def _runs(self, offsets: np.ndarray):
        """``(base, map, i, j)`` for each run ``offsets[i:j]`` that lies in one segment;
        the first offset of a run in no segment raises OffsetError."""
        i, n = 0, len(offsets)
        while i < n:
            base, mm = self._segment_at(int(offsets[i]))
            run = offsets[i:]
            outside = np.flatnonzero((run < base) | (run >= base + len(mm)))
            j = i + (int(outside[0]) if len(outside) else len(run))
            yield base, mm, i, j
            i = j

    def read_many(self, offsets: np.ndarray) -> list[MessageRecord]:
        """``[self.read(o) for o in offsets]``, one compiled decode per segment run."""
        offsets = np.asarray(offsets, np.int64)
        out: list[MessageRecord] = []
        for base, mm, i, j in self._runs(offsets):
            cols, k = locate_records(mm, offsets[i:j] - base, check_crc=False)
            out.extend(located_records(mm, cols, k))
            if k < j - i:
                self.read(int(offsets[i + k]))  # raises what is wrong there
                raise AssertionError(f"the decode kernel refused the record at {int(offsets[i + k])}; read did not")
        return out

    def read_raw(self, offsets: np.ndarray, sizes: np.ndarray) -> RawRecords:
        """The stored bytes of these records in one buffer, as ``CommitLog.read_raw``."""
        offsets, sizes = np.asarray(offsets, np.int64), np.asarray(sizes, np.int64)
        parts = [RawRecords.gather(mm, offsets[i:j] - base, sizes[i:j]) for base, mm, i, j in self._runs(offsets)]
        return RawRecords.concat(parts)

    def close(self) -> None:
        for mm in self._maps.values():
            mm.close()
        self._maps.clear()


class SegmentMaps:
    """Read-only maps of a running store's commitlog segments, for a reader on the
    store's node that is told by the commitlog which bytes are written (the served
    dispatcher: the commitlog answers ReadRange with bounds only). A segment is
    mapped on first use, whole (shared maps see the writer's later bytes); ``release``
    unmaps those retention removed, ``reset`` all of them (the commitlog reopened:
    recovery may have replaced files)."""

    def __init__(self, store_dir: str | Path) -> None:
        self.directory = Path(store_dir) / COMMITLOG_DIR
        if not self.directory.is_dir():
            raise FileNotFoundError(f"{store_dir} has no {COMMITLOG_DIR}/ directory: is it a store on this node?")
        self._maps: dict[int, mmap.mmap] = {}  # by base offset

    def segment(self, offset: int, end: int) -> tuple[int, mmap.mmap]:
        """``(base offset, map)`` of the segment holding ``[offset, end)`` (a
        ReadRange's records never span two); OffsetError if no segment file does."""
        for base, mm in self._maps.items():
            if base <= offset < base + len(mm):
                break
        else:
            base, mm = self._map_at(offset)
        if end - base > len(mm):
            raise OffsetError(f"commitlog range [{offset}, {end}) is past segment {base}'s {len(mm)} bytes")
        return base, mm

    def _map_at(self, offset: int) -> tuple[int, mmap.mmap]:
        holding = [(b, p) for b, p in _segment_files(self.directory) if b <= offset]
        if not holding:
            raise OffsetError(f"commitlog offset {offset} is in no segment of {self.directory}")
        base, path = holding[-1]
        try:
            mm = _map_read_only(path)
        except (FileNotFoundError, ValueError) as e:  # retention removed it meanwhile; or an empty file
            raise OffsetError(f"commitlog segment {base} cannot be mapped: {e}") from e
        self._maps[base] = mm
        return base, mm

    def release(self, below: int) -> None:
        """Unmap the segments that end at or below ``below`` (retention removed them)."""
        for base in [b for b, mm in self._maps.items() if b + len(mm) <= below]:
            self._close(base)

    def reset(self) -> None:
        for base in list(self._maps):
            self._close(base)

    def _close(self, base: int) -> None:
        try:
            self._maps.pop(base).close()
        except BufferError:  # a kernel still holds a view of it: the map goes with that view
            pass


__all__ = ["CommitLogReader", "CommitLogView", "SegmentMaps"]
