"""Verify's walk of the commitlog: every segment, every record validated, read-only.

The walk reads segments through read-only maps (never the store's own classes,
which take the lock and repair as they open) and validates records in bulk with
``scan_records`` (magic, lengths, PHYSICALOFFSET, body CRC). Each chunk of valid
records is turned into the dispatcher's own columns (``build_dispatch_batch``), so
the tagsCode and index keys verify expects are computed by the code that wrote
them. What the other checks need is kept as one :class:`RecordTable`.

Where the valid data stops before the end of written bytes, the walk says why and
how bad it is (see the kinds below), then looks for valid records further on: a
record's own TOTALSIZE, or the next spot that carries a record signature (a known
magic and a PHYSICALOFFSET equal to its position). Records found that way are real
and are checked like the others, but recovery would cut the commitlog at the first
invalid record and lose them, which is what ``repair`` must know.

    kind                           severity  meaning
    commitlog_torn_tail            warning   an append cut short at the end (a crash): recovery cuts it
    commitlog_crc                  error     a whole record whose body no longer matches its CRC
    commitlog_corrupt_record       error     invalid bytes with valid records after them
    commitlog_garbage              error     non-zero bytes after the end of data that are no record
    commitlog_segment_not_closed   error     a segment ends without its BLANK record but later ones hold data
    commitlog_gap / _segment_name / _segment_size   error   the store refuses to open
    commitlog_stray_file / _empty_segment           warning the store ignores or removes it on open
    commitlog_tail_in_flux         info      a torn-looking tail of a running store (maybe being written)
"""

from __future__ import annotations

import dataclasses
import mmap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import structlog

from mqstore.errors import DecodeError
from mqstore.formats.message import (
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_BYTES,
    ScanOutcome,
    advances_queue_offset,
    decode_record,
    head_holds_data,
    record_head,
    scan_records,
)
from mqstore.formats.names import file_name_to_offset
from mqstore.store.commitlog import COMMITLOG_DIR, ScanChunk
from mqstore.store.dispatch import DispatchBatch, build_dispatch_batch
from mqstore.store.reader import CommitLogReader
from mqstore.store.recovery import record_start_after
from mqstore.store.verify.report import Damage, Findings

log = structlog.get_logger(__name__)

CHUNK_BYTES = 4 << 20  # one scan's worth: the passes over it stay in the CPU caches
_ZERO_PROBE_BYTES = 16 << 20
_PROGRESS_EVERY_S = 5.0
_BATCH_ARRAYS = (
    "physical_offsets",
    "sizes",
    "topic_codes",
    "queue_ids",
    "queue_offsets",
    "sysflags",
    "store_timestamps",
    "tags_codes",
    "keys_at",
    "keys_end",
    "uniq_at",
    "uniq_end",
)


@dataclass
class RecordTable:
    """Every valid record the walk found, as columns in commitlog order.

    Records whose body alone fails its CRC are included (``corrupt`` of them):
    their heads are intact, so what points at them is not damaged itself.
    ``queue_keys`` names a record's queue as ``topic index << 32 | queue id``
    (``topics[i]`` is topic index i). ``index_phys``/``index_hashes`` are the index
    entries the dispatcher would make for the sampled records (``index_sample`` =
    (n, k): the first k records, then every n-th; n = 0: none). ``data_end`` is the end of the last valid record."""

    phys: np.ndarray
    sizes: np.ndarray
    queue_keys: np.ndarray
    queue_offsets: np.ndarray
    advances: np.ndarray
    tags_codes: np.ndarray
    topics: list[str]
    index_phys: np.ndarray
    index_hashes: np.ndarray
    index_sample: tuple[int, int]
    min_offset: int
    data_end: int
    newest_store_timestamp: int
    segments: int
    first_store_timestamps: dict[int, int]  # segment base -> store time of its first record (if valid)
    corrupt: int  # whole records whose body fails its CRC: in the table, but not valid messages

    def queue_key(self, topic: str, queue_id: int) -> int | None:
        """The key of (topic, queue id) in ``queue_keys``; None if no record has the topic.
        (A dict over ``topics``, made on first use: ``topics.index`` per queue was
        quadratic, 100,000 topics x 400,000 queues.)"""
        made = self.__dict__.get("_topic_index")
        if made is None or made[0] != len(self.topics):
            index: dict[str, int] = {}
            for i, t in enumerate(self.topics):
                index.setdefault(t, i)  # the first, as list.index
            made = self.__dict__["_topic_index"] = (len(self.topics), index)
        i = made[1].get(topic)
        return None if i is None else (i << 32) | (queue_id & 0xFFFFFFFF)

    def queue_of(self, key: int) -> tuple[str, int]:
        qid = key & 0xFFFFFFFF
        return self.topics[key >> 32], qid - (1 << 32) if qid >= 1 << 31 else qid


class RecordColumns:
    """The walk's columns: per-chunk arrays of the records found (``add``, one
    dispatch batch at a time), concatenated once at the end (``table``). The Spark
    jobs extend it with more columns (mqstore.jobs.units)."""

    def __init__(self, index_sample: tuple[int, int]) -> None:
        names = ("phys", "sizes", "keys", "qoffs", "adv", "tags", "iphys", "ihash")
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
        self.topics: dict[str, int] = {}
        self.index_sample = index_sample
        self.count = 0
        self.bytes = 0
        self.newest = 0

    def add(self, batch: DispatchBatch) -> None:
        n = len(batch)
        tmap = np.array([self.topics.setdefault(t, len(self.topics)) for t in batch.topics], np.int64)
        p = self.parts
        p["phys"].append(batch.physical_offsets)
        p["sizes"].append(batch.sizes)
        p["keys"].append((tmap[batch.topic_codes] << 32) | (batch.queue_ids & 0xFFFFFFFF))
        p["qoffs"].append(batch.queue_offsets)
        p["adv"].append(advances_queue_offset(batch.sysflags))
        p["tags"].append(batch.tags_codes)
        every, after = self.index_sample
        if every:
            ordinal = self.count + np.arange(n)
            rows = np.flatnonzero((ordinal < after) | (ordinal % every == 0))
            if len(rows):
                sub = batch
                if len(rows) < n:
                    sub = dataclasses.replace(batch, **{k: getattr(batch, k)[rows] for k in _BATCH_ARRAYS})
                entries = sub.index_entries()
                p["iphys"].append(entries.physical_offsets)
                p["ihash"].append(entries.key_hashes)
        self.count += n
        self.bytes += int(batch.sizes.sum())
        self.newest = max(self.newest, int(batch.store_timestamps.max()))

    def table(self, min_offset: int, segments: int, first_ts: dict[int, int], corrupt: int) -> RecordTable:
        def cat(name: str, dtype) -> np.ndarray:
            return (
                np.concatenate(self.parts[name]).astype(dtype, copy=False) if self.parts[name] else np.zeros(0, dtype)
            )

        phys, sizes = cat("phys", np.int64), cat("sizes", np.int64)
        return RecordTable(
            phys=phys,
            sizes=sizes,
            queue_keys=cat("keys", np.int64),
            queue_offsets=cat("qoffs", np.int64),
            advances=cat("adv", bool),
            tags_codes=cat("tags", np.int64),
            topics=list(self.topics),
            index_phys=cat("iphys", np.int64),
            index_hashes=cat("ihash", np.int64),
            index_sample=self.index_sample,
            min_offset=min_offset,
            data_end=int(phys[-1] + sizes[-1]) if len(phys) else min_offset,
            newest_store_timestamp=self.newest,
            segments=segments,
            first_store_timestamps=first_ts,
            corrupt=corrupt,
        )


def _loc(base: int, pos: int | None = None) -> str:
    name = f"{COMMITLOG_DIR}/{base:020d}"
    return name if pos is None else f"{name}@{pos}"


def first_nonzero(mm: mmap.mmap, start: int, end: int) -> int | None:
    """The first position in [start, end) of ``mm`` holding a non-zero byte, or None
    (read in 16 MB pieces)."""
    pos = start
    while pos < end:
        n = min(_ZERO_PROBE_BYTES, end - pos)
        chunk = np.frombuffer(mm, np.uint8, n, pos)
        try:
            if chunk.any():
                return pos + int(np.flatnonzero(chunk)[0])
        finally:
            del chunk
        pos += n
    return None


def resync(mm: mmap.mmap, pos: int, size: int, base: int) -> int | None:
    """Where valid records resume after the invalid bytes at ``pos`` of the segment
    mapped as ``mm`` (``size`` bytes, commitlog offset ``base``); None: nowhere in
    this segment. After the record at ``pos`` if its head is sane, else at the next
    record signature (recovery's own search); the record there must validate."""
    candidates = []
    if pos + 8 <= size:
        total, magic = record_head(mm, pos)
        if magic in (MAGIC_V1, MAGIC_V2) and total >= MIN_RECORD_BYTES and pos + total <= size:
            candidates.append(pos + total)
    sig = record_start_after(SimpleNamespace(mm=mm, size=size, base_offset=base), pos + 1)
    if sig is not None:
        candidates.append(sig)
    for c in sorted(set(candidates)):
        if len(scan_records(mm, c, size, check_crc=True, max_records=1, base_offset=base).positions):
            return c
    return None


def _whole_record_with_bad_crc(mm: mmap.mmap, pos: int, base: int) -> bool:
    """True if the bytes at ``pos`` are a complete record in its place whose body
    alone fails its CRC: the record was written whole and changed afterwards."""
    try:
        rec = decode_record(mm, pos, check_crc=False)
    except DecodeError:
        return False
    return rec.physical_offset == base + pos


def segment_has_data(path: Path) -> bool:
    """Like recovery: the segment file at ``path`` holds data unless its first record
    head is unwritten (formats.message.head_holds_data)."""
    with path.open("rb") as f:
        head = f.read(8)
    return len(head) == 8 and head_holds_data(head)


class RecordWalk:
    """One pass over the segments; see the module docstring. :func:`walk_commitlog`
    runs it over every segment; the Spark jobs walk chunks of a segment with a
    subclass (mqstore.jobs.units) that reuses :meth:`check_segment_names`,
    :meth:`classify_stop`, :meth:`note_cut` and the columns (``cols``)."""

    def __init__(
        self,
        store_dir: Path,
        segment_bytes: int,
        findings: Findings,
        damage: Damage,
        *,
        index_sample: tuple[int, int],
        running: bool,
    ) -> None:
        self.store_dir = store_dir
        self.segment_bytes = segment_bytes
        self.f = findings
        self.damage = damage
        self.running = running
        self.cols = RecordColumns(index_sample)
        self.records_at_cut = 0
        self.corrupt = 0  # whole records with a bad CRC, kept in the table
        self.first_ts: dict[int, int] = {}
        self._t0 = self._last_log = time.perf_counter()

    def note_cut(self, offset: int) -> None:
        """Valid data ends at commitlog ``offset`` (the first such place is where
        recovery cuts: kept in ``damage``)."""
        if self.damage.commitlog_cut is None:
            self.damage.commitlog_cut = offset
            self.damage.newest_store_timestamp_below_cut = self.cols.newest
            self.records_at_cut = self.cols.count

    def check_segment_names(self, segs: list[tuple[int, Path]]) -> None:
        """Stray files in the commitlog directory; names, sizes and contiguity of
        ``segs`` ((base offset, path) in order, CommitLogReader.segments)."""
        for p in sorted((self.store_dir / COMMITLOG_DIR).iterdir()):
            try:
                file_name_to_offset(p.name)
            except ValueError:
                tmp = p.name.endswith(".tmp")
                what = (
                    "an unfinished segment; the store removes it on open"
                    if tmp
                    else "not a segment name; the store ignores it"
                )
                self.f.warning("commitlog_stray_file", f"{COMMITLOG_DIR}/{p.name}", what)
                if not p.name.endswith(".tmp"):
                    self.damage.stray_files.append(f"{COMMITLOG_DIR}/{p.name}")
        for i, (base, path) in enumerate(segs):
            size = path.stat().st_size
            if base % self.segment_bytes:
                detail = f"starts at {base}, not a multiple of the segment size {self.segment_bytes}"
                self.f.error("commitlog_segment_name", _loc(base), detail)
                self.damage.commitlog_unrepairable.append(f"segment {path.name} is misnamed")
            if i and base != segs[i - 1][0] + self.segment_bytes:
                detail = f"segments are not contiguous: the one before starts at {segs[i - 1][0]}"
                self.f.error("commitlog_gap", _loc(base), detail)
                self.damage.commitlog_unrepairable.append(f"segments are missing before {path.name}")
            if size == 0 and i == len(segs) - 1:
                self.f.warning(
                    "commitlog_empty_segment", _loc(base), "empty last segment; the store removes it on open"
                )
            elif size != self.segment_bytes:
                self.f.error("commitlog_segment_size", _loc(base), f"{size} bytes, expected {self.segment_bytes}")
                self.damage.commitlog_unrepairable.append(f"segment {path.name} has {size} bytes")

    def run(self) -> RecordTable:
        segs = CommitLogReader(self.store_dir).segments
        self.check_segment_names(segs)
        segs = [(b, p) for b, p in segs if p.exists() and p.stat().st_size > 0]
        with_data = [i for i, (_, p) in enumerate(segs) if segment_has_data(p)]
        last_data = with_data[-1] if with_data else -1
        for i, (base, path) in enumerate(segs):
            try:
                with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    self._segment(mm, base, last=i >= last_data, after_data=i > last_data)
            except FileNotFoundError:
                if not self.running:
                    raise
                log.info("segment_gone_during_verify", segment=path.name)  # retention of a running store
        if self.damage.commitlog_cut is not None:
            self.damage.records_after_cut = self.cols.count - self.records_at_cut - self.corrupt
        return self.cols.table(segs[0][0] if segs else 0, len(segs), self.first_ts, self.corrupt)

    def _segment(self, mm: mmap.mmap, base: int, *, last: bool, after_data: bool) -> None:
        size = len(mm)
        if after_data:  # past the last segment with data: it must be all zeros
            nz = first_nonzero(mm, 0, size)
            if nz is not None:
                self.f.error("commitlog_garbage", _loc(base, nz), "non-zero bytes in a segment after the end of data")
                self.note_cut(base)
            return
        # Two stages on two cores (both kernels run without the GIL): this thread scans
        # the next chunk while ``columns`` takes the last one's dispatch columns, in order.
        columns = ThreadPoolExecutor(1, thread_name_prefix="verify-columns")
        pending = None
        try:
            pos = 0
            while True:
                res = scan_records(mm, pos, size, check_crc=True, max_bytes=CHUNK_BYTES, base_offset=base, fields=True)
                if len(res.positions):
                    if pos == 0 and res.positions[0] == 0:
                        self.first_ts[base] = int(res.fields.store_timestamps[0])
                    chunk = ScanChunk(res.positions + base, res.sizes, res.fields, mm, base + res.stop)
                    if pending is not None:
                        pending.result()
                    pending = columns.submit(self._add_chunk, chunk)
                    self._progress(base)
                if res.outcome is ScanOutcome.END_OF_SEGMENT:
                    return
                if res.outcome is ScanOutcome.LIMIT and len(res.positions) and res.stop + 8 <= size:
                    pos = res.stop
                    continue
                if pending is not None:  # classify_stop counts the columns' records
                    pending.result()
                    pending = None
                nxt = self.classify_stop(mm, base, res.stop, res.reason, last=last)
                if nxt is None:
                    return
                pos = nxt
        finally:
            if pending is not None:
                pending.result()  # before the segment's map closes
            columns.shutdown()

    def _add_chunk(self, chunk: ScanChunk) -> None:
        self.cols.add(build_dispatch_batch(chunk))

    def classify_stop(self, mm: mmap.mmap, base: int, pos: int, reason: str, *, last: bool) -> int | None:
        """The valid data of a segment stops at ``pos``: classify what follows;
        returns where valid records resume in this segment, if they do."""
        size = len(mm)
        offset = base + pos
        nz = first_nonzero(mm, pos, size)
        if nz is None:  # only zeros follow: the data simply ends here
            if not last:
                self.f.error(
                    "commitlog_segment_not_closed",
                    _loc(base, pos),
                    "the segment's data ends without a BLANK record but later segments hold data; "
                    "recovery cuts the commitlog here and deletes them",
                )
                self.note_cut(offset)
            return None
        whole = _whole_record_with_bad_crc(mm, pos, base)
        if whole:
            self.note_cut(offset)
            self._add_corrupt(mm, pos, base)
        resume = resync(mm, pos, size, base)
        if resume is not None or not last:
            where = (
                f"valid records resume at {base + resume}"
                if resume is not None
                else "later segments hold valid records"
            )
            if whole:
                self.f.error(
                    "commitlog_crc",
                    _loc(base, pos),
                    f"record at commitlog offset {offset}: body CRC mismatch; "
                    f"{where}, which recovery would cut with it",
                )
            else:
                self.f.error(
                    "commitlog_corrupt_record",
                    _loc(base, pos),
                    f"no valid record at commitlog offset {offset} "
                    f"({reason or 'bad head'}); {where}, which recovery would cut with it",
                )
            self.note_cut(offset)
            return resume
        self.note_cut(offset)
        head_size, magic = record_head(mm, pos) if pos + 8 <= size else (0, 0)
        if whole:
            detail = f"the last record (commitlog offset {offset}): body CRC mismatch; recovery cuts it"
            self.f.error("commitlog_crc", _loc(base, pos), detail)
        elif magic in (MAGIC_V1, MAGIC_V2) and (head_size == 0 or head_size >= MIN_RECORD_BYTES):
            detail = (
                f"an append cut short at commitlog offset {offset} ({reason or 'incomplete record'}); recovery cuts it"
            )
            if self.running:
                self.f.info(
                    "commitlog_tail_in_flux",
                    _loc(base, pos),
                    f"{detail} (or it is being written: the store is running)",
                )
            else:
                self.f.warning("commitlog_torn_tail", _loc(base, pos), detail)
        else:
            self.f.error(
                "commitlog_garbage",
                _loc(base, pos),
                f"non-zero bytes after the last valid record (commitlog offset "
                f"{offset}): {reason or 'not a record'}; recovery cuts them",
            )
        return None

    def _add_corrupt(self, mm: mmap.mmap, pos: int, base: int) -> None:
        """Keep a whole record whose body fails its CRC in the table: its head is
        intact, so the units and index entries that point at it are not damaged
        themselves (the finding is the record's)."""
        res = scan_records(mm, pos, len(mm), check_crc=False, max_records=1, base_offset=base, fields=True)
        newest = self.cols.newest
        self.cols.add(build_dispatch_batch(ScanChunk(res.positions + base, res.sizes, res.fields, mm, base + res.stop)))
        self.cols.newest = newest  # its store time is as doubtful as its body
        self.corrupt += 1

    def _progress(self, base: int) -> None:
        now = time.perf_counter()
        if now - self._last_log >= _PROGRESS_EVERY_S:
            self._last_log = now
            mb = self.cols.bytes / 1e6
            log.info(
                "verify_progress",
                stage="commitlog",
                segment=f"{base:020d}",
                records=self.cols.count,
                mb=round(mb, 1),
                mb_per_s=round(mb / (now - self._t0), 1),
            )


def walk_commitlog(
    store_dir: Path,
    segment_bytes: int,
    findings: Findings,
    damage: Damage,
    *,
    index_sample: tuple[int, int] = (1, 0),
    running: bool = False,
) -> RecordTable:
    """Walk and validate every segment (see the module docstring); findings and
    damage are added to, the valid records are returned. ``index_sample`` = (n, k):
    keep the expected index entries of the first k records, then of every n-th
    ((1, 0): all, (0, 0): none)."""
    return RecordWalk(
        Path(store_dir), segment_bytes, findings, damage, index_sample=index_sample, running=running
    ).run()


__all__ = [
    "CHUNK_BYTES",
    "RecordColumns",
    "RecordTable",
    "RecordWalk",
    "first_nonzero",
    "resync",
    "segment_has_data",
    "walk_commitlog",
]
