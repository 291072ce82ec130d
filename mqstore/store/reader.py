"""Read-only access to a store's commitlog, for tools that must not take the lock
(``mqstore print`` next to a running store, and later the Spark jobs).

It maps segments read-only, runs no recovery and changes nothing: the walk simply
stops at the first record that does not validate, as recovery would.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

from mqstore.errors import OffsetError
from mqstore.formats.message import MessageRecord, ScanOutcome, decode_record, scan_records
from mqstore.formats.names import file_name_to_offset
from mqstore.store.commitlog import COMMITLOG_DIR


class CommitLogReader:
    """Iterates the records of a commitlog directory without opening the store."""

    def __init__(self, store_dir: str | Path) -> None:
        directory = Path(store_dir) / COMMITLOG_DIR
        if not directory.is_dir():
            raise FileNotFoundError(f"{store_dir} has no {COMMITLOG_DIR}/ directory: is it a store?")
        self._segments: list[tuple[int, Path]] = []
        for p in directory.iterdir():
            try:
                self._segments.append((file_name_to_offset(p.name), p))
            except ValueError:
                continue
        self._segments.sort()

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
            with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
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


__all__ = ["CommitLogReader"]
