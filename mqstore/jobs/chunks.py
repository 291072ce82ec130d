"""Which parts of which CommitLog segments the Spark jobs read, one task each.

A chunk is the part of a segment whose records start in ``[lo, hi)``: a task finds
its first record by signature (jobs.units.record_start_in) and reads on past ``hi``
to finish the record that crosses it. Segments with data are cut every
``chunk_bytes``; the last segment with data is mostly zeros after its data (segments
are pre-allocated), so its chunks cover the data, where it seems to end (a page
bisection: only a hint, a wrong one costs time, never records), and its last chunk
runs to the segment's end. A segment after it (all zeros when listed) is one chunk,
in case a running store writes into it meanwhile.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from mqstore.store.recovery import data_end_estimate
from mqstore.store.verify.records import segment_has_data

DEFAULT_CHUNK_BYTES = 64 << 20
MIN_CHUNK_BYTES = 64 << 10


@dataclass(frozen=True)
class SegmentChunk:
    """Records starting in ``[lo, hi)`` of the segment at ``path`` (commitlog offset
    ``base``, ``size`` bytes); ``last``: in or after the last segment with data;
    ``after_data``: in a segment after it."""

    path: Path
    base: int
    size: int
    lo: int
    hi: int
    last: bool
    after_data: bool


def data_end_hint(path: Path, size: int) -> int:
    """Where a segment file's written bytes seem to end (recovery's page bisection)."""
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return data_end_estimate(SimpleNamespace(mm=mm, size=size))


def segment_chunks(
    segments: list[tuple[int, Path]], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> tuple[list[SegmentChunk], int]:
    """The chunks of ``segments`` ((base, path) in commitlog order; files that are gone
    or empty are left out), and the bytes of data they cover (whole segments up to
    the last with data, that one up to where its data seems to end)."""
    sized = []
    for base, path in segments:
        try:
            size = path.stat().st_size
        except FileNotFoundError:  # retention of a running store
            continue
        if size > 0:
            sized.append((base, path, size))
    with_data = [i for i, (_, path, _) in enumerate(sized) if segment_has_data(path)]
    last_data = with_data[-1] if with_data else -1
    step = max(chunk_bytes, MIN_CHUNK_BYTES)
    chunks = []
    total = 0
    for i, (base, path, size) in enumerate(sized):
        if i > last_data:
            chunks.append(SegmentChunk(path, base, size, 0, size, True, True))
            continue
        used = data_end_hint(path, size) if i == last_data else size
        total += used
        los = range(0, max(used, 1), step)
        for k, lo in enumerate(los):
            hi = size if k == len(los) - 1 else min(lo + step, size)
            chunks.append(SegmentChunk(path, base, size, lo, hi, i == last_data, False))
    return chunks, total


__all__ = ["DEFAULT_CHUNK_BYTES", "SegmentChunk", "data_end_hint", "segment_chunks"]
