"""The commitlog's segment files as one logical byte stream (RocketMQ MappedFileQueue).

Segments are equally sized and named by their 20-digit start offset; segment ``i``
of the list starts at ``first_base + i * segment_bytes``, so an offset finds its
segment by one division. Called by the CommitLog only (under its put lock for
changes); readers may call ``find`` concurrently with appends.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from mqstore.errors import ConfigError, CorruptFileError
from mqstore.formats.names import file_name_to_offset, offset_to_file_name
from mqstore.store.mapped_file import Segment, fsync_dir

log = structlog.get_logger(__name__)


class SegmentQueue:
    """An ordered, gap-free list of equally sized segments."""

    def __init__(self, directory: Path, segment_bytes: int, *, preallocate: bool = True) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._preallocate = preallocate
        self.segments: list[Segment] = []

    def load(self) -> None:
        """Map every existing segment; refuse gaps, stray names and wrong sizes."""
        self.directory.mkdir(parents=True, exist_ok=True)
        bases = []
        for p in self.directory.iterdir():
            if p.name.endswith(".tmp"):  # a segment whose creation a crash cut short
                log.warning("unfinished_segment_removed", path=str(p))
                p.unlink()
                continue
            try:
                bases.append(file_name_to_offset(p.name))
            except ValueError:
                log.warning("stray_file_ignored", path=str(p))
        bases.sort()
        while bases and (last := self.directory / offset_to_file_name(bases[-1])).stat().st_size == 0:
            log.warning("empty_segment_removed", path=str(last))  # as RocketMQ's load does
            last.unlink()
            bases.pop()
        for i, base in enumerate(bases):
            path = self.directory / offset_to_file_name(base)
            if base % self.segment_bytes:
                raise CorruptFileError(f"{path}: start offset is not a multiple of segment_bytes {self.segment_bytes}")
            if i and base != bases[i - 1] + self.segment_bytes:
                raise CorruptFileError(f"{self.directory}: segments are not contiguous at {path.name}")
            size = path.stat().st_size
            if size != self.segment_bytes:
                raise ConfigError(
                    f"{path}: segment has {size} bytes but segment_bytes is {self.segment_bytes}; "
                    "open the store with the segment size it was created with"
                )
            self.segments.append(Segment.open(path, base, self.segment_bytes))

    @property
    def min_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    def find(self, offset: int) -> Segment | None:
        """The segment holding ``offset``, or None: O(1)."""
        segs = self.segments
        if not segs:
            return None
        i = (offset - segs[0].base_offset) // self.segment_bytes
        return segs[i] if 0 <= i < len(segs) else None

    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def create_next(self, base_offset: int) -> Segment:
        """Append a new segment starting at ``base_offset`` (its predecessor's end)."""
        last = self.last()
        if last is not None and base_offset != last.end_offset:
            raise AssertionError(f"new segment at {base_offset} would leave a gap after {last.end_offset}")
        seg = Segment.create(
            self.directory / offset_to_file_name(base_offset),
            base_offset,
            self.segment_bytes,
            preallocate=self._preallocate,
        )
        self.segments.append(seg)
        return seg

    def truncate_after(self, offset: int) -> list[str]:
        """Delete segments that start after ``offset``; zero the tail of the one
        holding it. Returns the names of deleted segments."""
        deleted = []
        while self.segments and self.segments[-1].base_offset > offset:
            seg = self.segments.pop()
            deleted.append(seg.path.name)
            seg.delete()
        if deleted:
            fsync_dir(self.directory)
        seg = self.find(offset)
        if seg is not None:
            seg.zero_from(offset - seg.base_offset)
            seg.sync()
        return deleted

    def sync_range(self, start: int, end: int) -> None:
        """Make commitlog bytes [start, end) durable, segment by segment."""
        segs = self.segments  # one snapshot: retention may replace the list meanwhile
        if end <= start or not segs:
            return
        first = segs[0].base_offset
        lo = max(0, (start - first) // self.segment_bytes)
        hi = min(len(segs) - 1, (end - 1 - first) // self.segment_bytes)
        for seg in segs[lo : hi + 1]:
            seg.sync(max(start, seg.base_offset) - seg.base_offset, min(end, seg.end_offset) - seg.base_offset)

    def detach_first(self, count: int) -> list[Segment]:
        """Take the ``count`` oldest segments out of the queue (retention); the caller
        holds the writer's lock and passes them to ``release_detached`` afterwards.

        The list is replaced, never changed in place, so a reader's snapshot
        (``find``, ``sync_range``) stays consistent. The last segment is never taken:
        it holds the write position, and an empty queue would report min offset 0."""
        segs = self.segments
        if not 0 <= count < len(segs):
            raise ValueError(f"cannot detach {count} of {len(segs)} segments: the last one must stay")
        self.segments = segs[count:]
        return segs[:count]

    def release_detached(self, detached: list[Segment]) -> None:
        """Unlink detached segments, oldest first (a crash midway leaves a contiguous
        queue), close their file descriptors and fsync the directory once.

        Their maps are left open on purpose: a reader that found such a segment before
        it was detached keeps reading valid bytes (the inode lives while it is mapped),
        and CPython frees the map, and with it the disk space, when the last reference
        to the segment or its map goes. This plays the part of RocketMQ's
        ReferenceResource hold/release without a count, and no reader ever sees a
        closed map. (Segment has no method that closes the fd alone, hence ``_fd``.)"""
        for seg in detached:
            seg.path.unlink(missing_ok=True)
            if seg._fd >= 0:  # noqa: SLF001
                os.close(seg._fd)  # noqa: SLF001
                seg._fd = -1  # noqa: SLF001  # closed: close() will not touch the map
        if detached:
            fsync_dir(self.directory)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []


__all__ = ["SegmentQueue"]
