"""Worker-side units of work of the reconcile job (mqstore.jobs.reconcile).

Each function here runs inside a Spark task, reads store files read-only and
returns plain values (numpy arrays, lists, dicts): nothing Spark-specific, so each
is tested and usable without Spark too.

* :func:`check_queues` - a group of consume queues: their files (verify's reader
  and the unit checks that need no commitlog), their real units as columns
  (:class:`~mqstore.jobs.unit_columns.UnitColumns`) or, for a store of few queues,
  each queue file's range of commitlog offsets (the chunk tasks then read the
  units that point into their chunk themselves, :func:`read_units_in`);
* :func:`check_index_file` - one index file: header and chains (verify's checks);
* :func:`check_chunk` - one CommitLog chunk (a segment, or the part of one whose
  records start in ``[lo, hi)``): the records walked and validated by verify's walk,
  joined with the units that point into the chunk (given) and the index entries
  that do (read here, :func:`read_entries_in`);
* :func:`walk_table` - a chunk's records (and index entries) for ``--repair``.

Records never span segments, and a chunk after the first starts at its first record
signature (a known magic and a PHYSICALOFFSET equal to its own position, the search
recovery and verify use), so chunks are independent.
"""

from __future__ import annotations

import mmap
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE, file_bytes_for, is_pre_blank
from mqstore.formats.message import (
    MIN_RECORD_BYTES,
    ScanOutcome,
    record_signatures,
    scan_records,
)
from mqstore.jobs.unit_columns import UnitColumns
from mqstore.store.commitlog import ScanChunk
from mqstore.store.dispatch import build_dispatch_batch
from mqstore.store.schedule import SCHEDULE_TOPIC
from mqstore.store.verify.records import (
    CHUNK_BYTES,
    RecordColumns,
    RecordWalk,
    first_nonzero,
)
from mqstore.store.verify.report import Damage, Severity

_SEARCH_WINDOW = 16 << 20
_I64 = struct.Struct(">q")
# Queue reads in flight per queue task: at 400,000 queues the reads wait on the disk
# (directory listings, inodes, a block of units each), not on the CPU.
READ_THREADS = 8
LISTED_PER_TASK = 5_000  # findings of one kind a task lists in full; the rest are counted


# ---------------------------------------------------------------- findings


class TaskFindings:
    """Findings of one task, as rows, with exact counts per kind and severity.

    Same interface as verify's Findings (error / warning / info / add), so verify's
    checks write into it; keeps the first LISTED_PER_TASK of each kind. ``offset`` is
    the commitlog offset a finding concerns, when it concerns one (the driver uses it
    to tell data still in flight from damage)."""

    def __init__(self, cap: int = LISTED_PER_TASK) -> None:
        self.rows: list[tuple[str, str, str, str, int]] = []
        self.counts: dict[tuple[str, str], int] = {}
        self.cap = cap
        self._per_kind: dict[str, int] = {}
        self.offset: int = -1  # set by callers before a check that concerns one offset

    def add(self, kind: str, severity: Severity | str, location: str, detail: str, offset: int | None = None) -> None:
        sev = severity.value if isinstance(severity, Severity) else str(severity)
        key = (kind, sev)
        self.counts[key] = self.counts.get(key, 0) + 1
        n = self._per_kind.get(kind, 0) + 1
        self._per_kind[kind] = n
        if n <= self.cap:
            self.rows.append((kind, sev, location, detail, self.offset if offset is None else offset))

    def error(self, kind: str, location: str, detail: str, offset: int | None = None) -> None:
        self.add(kind, Severity.ERROR, location, detail, offset)

    def warning(self, kind: str, location: str, detail: str, offset: int | None = None) -> None:
        self.add(kind, Severity.WARNING, location, detail, offset)

    def info(self, kind: str, location: str, detail: str, offset: int | None = None) -> None:
        self.add(kind, Severity.INFO, location, detail, offset)

    def add_uncounted(self, kind: str, severity: Severity | str, n: int) -> None:
        """Count ``n`` more findings of a kind without listing them (massive damage)."""
        if n > 0:
            sev = severity.value if isinstance(severity, Severity) else str(severity)
            self.counts[(kind, sev)] = self.counts.get((kind, sev), 0) + n
            self._per_kind[kind] = self._per_kind.get(kind, 0) + n

    def merge(self, other: TaskFindings) -> None:
        """Another task's (or thread's) findings added to these."""
        listed: dict[tuple[str, str], int] = {}
        for kind, sev, location, detail, offset in other.rows:
            self.add(kind, sev, location, detail, offset)
            listed[(kind, sev)] = listed.get((kind, sev), 0) + 1
        for (kind, sev), n in other.counts.items():
            self.add_uncounted(kind, sev, n - listed.get((kind, sev), 0))

    def count(self, severity: Severity) -> int:
        return sum(n for (_, s), n in self.counts.items() if s == severity.value)


# ---------------------------------------------------------------- chunks of the commitlog


@dataclass(frozen=True)
class ChunkSpec:
    """A unit of commitlog work: the records of segment ``base`` that start in
    ``[lo, hi)``. ``last``: the segment is the last that holds data; ``after_data``:
    it comes after that one (it must be all zeros). ``number``: its position in the
    plan (chunks are numbered in commitlog order)."""

    number: int
    path: str
    base: int
    lo: int
    hi: int
    segment_bytes: int
    last: bool
    after_data: bool
    open_end: bool = False  # the last chunk: units and entries past every segment are its to check

    @property
    def start(self) -> int:
        return self.base + self.lo

    @property
    def end(self) -> int:
        return self.base + self.hi


def record_start_in(mm, base: int, lo: int, hi: int) -> int | None:
    """The first record start in ``[lo, hi)`` of a mapped segment: a known magic,
    a PHYSICALOFFSET equal to the position, and a record there that validates."""
    size = len(mm)
    hi = min(hi, size - MIN_RECORD_BYTES)
    at = lo
    while at < hi:
        n = min(_SEARCH_WINDOW, hi - at)
        for c in record_signatures(mm, at, at + n, base).tolist():
            if len(scan_records(mm, c, size, check_crc=False, max_records=1, base_offset=base).positions):
                return c
        at += n
    return None


class _TsColumns(RecordColumns):
    """verify's columns plus each record's store time (to find the checkpoint's
    flushed point when it has no confirm offset)."""

    def __init__(self, index_sample: tuple[int, int]) -> None:
        super().__init__(index_sample)
        self.parts["ts"] = []

    def add(self, batch) -> None:
        super().add(batch)
        self.parts["ts"].append(batch.store_timestamps)


class _ChunkWalk(RecordWalk):
    """verify's walk (records.py) over one chunk instead of whole segments: the same
    scans, classification of where valid data stops, resynchronisation and columns."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cols = _TsColumns(self.cols.index_sample)
        self.closed = False
        self.data_stopped: int | None = None

    def chunk(self, mm, spec: ChunkSpec) -> int:
        """Walk the records starting in the chunk; returns where the walk ended (the
        first byte after the last record walked, or where the valid data stopped)."""
        size = len(mm)
        hi = min(spec.hi, size)
        if spec.after_data:
            nz = first_nonzero(mm, spec.lo, hi)
            if nz is not None:
                self.f.error(
                    "commitlog_garbage",
                    f"commitlog/{spec.base:020d}@{nz}",
                    "non-zero bytes in a segment after the end of data",
                    offset=spec.base + nz,
                )
                self.note_cut(spec.base + nz)
            return spec.lo
        pos = spec.lo
        if pos > 0:
            start = record_start_in(mm, spec.base, pos, hi)
            if start is None:
                return hi
            pos = start
        while pos < hi:
            res = scan_records(
                mm,
                pos,
                size,
                check_crc=True,
                max_bytes=min(CHUNK_BYTES, max(hi - pos, 1)),
                base_offset=spec.base,
                fields=True,
            )
            if len(res.positions):
                if pos == 0 and res.positions[0] == 0:
                    self.first_ts[spec.base] = int(res.fields.store_timestamps[0])
                self.cols.add(
                    build_dispatch_batch(
                        ScanChunk(res.positions + spec.base, res.sizes, res.fields, mm, spec.base + res.stop)
                    )
                )
            if res.outcome is ScanOutcome.END_OF_SEGMENT:
                self.closed = True
                return res.stop
            if res.outcome is ScanOutcome.LIMIT and len(res.positions) and res.stop + 8 <= size:
                pos = res.stop
                continue
            self.f.offset = spec.base + res.stop
            nxt = self.classify_stop(mm, spec.base, res.stop, res.reason, last=spec.last)
            self.f.offset = -1
            if nxt is None:
                self.data_stopped = spec.base + res.stop
                return res.stop
            pos = nxt
        return pos


class _EntryColumns(_TsColumns):
    """Columns plus the index entries of every record (hash, offset, store time)."""

    def __init__(self) -> None:
        super().__init__((0, 0))
        self.entries: list = []

    def add(self, batch) -> None:
        super().add(batch)
        self.entries.append(batch.index_entries())


def walk_table(spec: ChunkSpec, *, with_entries: bool = False):
    """verify's record table of one chunk (valid records and whole ones with a bad
    body CRC), and with ``with_entries`` the index entries the dispatcher makes for
    them, as (hashes, offsets, store times); findings are not kept."""
    findings, damage = TaskFindings(cap=0), Damage()
    walk = _ChunkWalk(
        Path(spec.path).parent.parent, spec.segment_bytes, findings, damage, index_sample=(0, 0), running=True
    )
    if with_entries:
        walk.cols = _EntryColumns()
    try:
        with open(spec.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            walk.chunk(mm, spec)
            table = walk.cols.table(spec.start, 1, walk.first_ts, walk.corrupt)
    except FileNotFoundError:
        return None, None
    if not with_entries:
        return table, None
    es = walk.cols.entries
    cat = (lambda i: np.concatenate([e[i] for e in es]).astype(np.int64)) if es else (lambda i: np.zeros(0, np.int64))
    return table, (cat(0), cat(1), cat(2))


def _queue_summaries(table) -> dict[str, Any]:
    """Per queue of the chunk's records that take a queue offset: first / last queue
    offset and commitlog offset, count; and the chunk's sequence findings (at most
    LISTED_PER_TASK a queue). Column-wise: a chunk touches up to every queue."""
    takes = np.flatnonzero(table.advances)
    out: dict[tuple[str, int], tuple[int, int, int, int, int]] = {}
    bad: list[tuple[tuple[str, int], int, int, int]] = []
    if not takes.size:
        return {"queues": out, "sequence": bad}
    keys = table.queue_keys[takes]
    order = np.argsort(keys, kind="stable")
    rec = takes[order]
    sk, qo, ph = keys[order], table.queue_offsets[rec], table.phys[rec]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    lasts = np.r_[starts[1:], len(rec)] - 1
    names = [table.queue_of(k) for k in sk[starts].tolist()]
    for q, a, b, c, d, n in zip(
        names,
        qo[starts].tolist(),
        ph[starts].tolist(),
        qo[lasts].tolist(),
        ph[lasts].tolist(),
        (lasts - starts + 1).tolist(),
    ):
        out[q] = (a, b, c, d, n)
    breaks = np.flatnonzero((np.diff(qo) != 1) & (sk[1:] == sk[:-1]))
    if breaks.size:
        group = np.searchsorted(starts, breaks, "right") - 1
        rank = np.arange(len(breaks)) - np.searchsorted(group, group, "left")
        breaks, group = breaks[rank < LISTED_PER_TASK], group[rank < LISTED_PER_TASK]
        for g, i in zip(group.tolist(), breaks.tolist()):
            bad.append((names[g], int(ph[i + 1]), int(qo[i + 1]), int(qo[i])))
    return {"queues": out, "sequence": bad}


@dataclass
class ChunkResult:
    """What a chunk task sends back to the driver (all small unless damage is big)."""

    number: int
    findings: TaskFindings
    records: int = 0
    corrupt: int = 0
    bytes: int = 0
    data_start: int = -1  # commitlog offset of the first record walked (-1: none)
    walk_end: int = -1  # commitlog offset where the walk ended
    data_end: int = -1  # end of the last valid record (-1: none)
    data_stopped: int | None = None  # where valid data stopped inside the chunk (not at a BLANK)
    closed: bool = False  # the chunk reached its segment's BLANK record
    newest_store_timestamp: int = 0
    first_store_timestamps: dict[int, int] = field(default_factory=dict)
    flushed_end: int = -1  # end of the last record stored at or before the checkpoint's physic time
    commitlog_cut: int | None = None
    newest_below_cut: int = 0
    records_after_cut: int = 0  # valid records walked after the cut in this chunk
    unrepairable: list[str] = field(default_factory=list)
    queues: dict = field(default_factory=dict)  # (topic, qid) -> (first qo, first phys, last qo, last phys, n)
    sequence: list = field(default_factory=list)
    unmatched_records: dict = field(default_factory=dict)  # (topic, qid) -> (qoffs, phys) without a unit
    unmatched_units: dict = field(default_factory=dict)  # (topic, qid) -> (qoffs, phys) pointing at no record start
    unmatched_entries: list = field(default_factory=list)  # (index file, entry numbers, phys) at no record start
    missing_keys: tuple = ()  # (phys, hashes) of expected index entries not found
    keys_checked: int = 0
    bad_queues: set = field(default_factory=set)
    index_bad: bool = False
    units_checked: int = 0
    entries_checked: int = 0
    timings: dict = field(default_factory=dict)  # seconds per step of the task


def check_chunk(
    spec: ChunkSpec,
    units: UnitColumns,
    index_files: list[tuple],
    *,
    running: bool,
    index_sample: tuple[int, int],
    index_end: int,
    flushed_ts: int,
) -> ChunkResult:
    """Walk one chunk and join it with the units and index entries that point into
    it: ``units`` are the real units whose commitlog offset lies in the chunk (the
    queue tasks read them), the index entries are read here from ``index_files``
    (name, path, hash slots, entries) of the files whose entries may point into it."""
    t0 = time.perf_counter()
    findings = TaskFindings()
    damage = Damage()
    walk = _ChunkWalk(
        Path(spec.path).parent.parent, spec.segment_bytes, findings, damage, index_sample=index_sample, running=running
    )
    result = ChunkResult(spec.number, findings)
    try:
        with open(spec.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            walk_end = walk.chunk(mm, spec)
            table = walk.cols.table(spec.start, 1, walk.first_ts, walk.corrupt)
    except FileNotFoundError:
        if not running:
            raise
        return result  # retention of a running store removed it
    n = len(table.phys)
    result.records = n - table.corrupt
    result.corrupt = table.corrupt
    result.bytes = int(table.sizes.sum())
    result.data_start = int(table.phys[0]) if n else -1
    result.walk_end = spec.base + walk_end
    result.data_end = table.data_end if n else -1
    result.data_stopped = walk.data_stopped
    result.closed = walk.closed
    result.newest_store_timestamp = table.newest_store_timestamp
    result.first_store_timestamps = dict(walk.first_ts)
    result.commitlog_cut = damage.commitlog_cut
    result.newest_below_cut = damage.newest_store_timestamp_below_cut
    if damage.commitlog_cut is not None:
        result.records_after_cut = walk.cols.count - walk.records_at_cut - walk.corrupt
    result.unrepairable = list(damage.commitlog_unrepairable)
    if n and flushed_ts > 0:
        ts_ok = _store_timestamps(walk, table) <= flushed_ts
        at = np.flatnonzero(ts_ok)
        result.flushed_end = int(table.phys[at[-1]] + table.sizes[at[-1]]) if at.size else -1
    summaries = _queue_summaries(table)
    result.queues, result.sequence = summaries["queues"], summaries["sequence"]
    end = spec.end if not spec.open_end else 1 << 62
    t1 = time.perf_counter()
    _join_units(table, units, result)
    t2 = time.perf_counter()
    _join_index(table, read_entries_in(index_files, spec.start, end), result, index_end=index_end)
    result.timings = {"walk": t1 - t0, "units": t2 - t1, "index": time.perf_counter() - t2}
    return result


def _bisect_phy(mm, at: int, count: int, target: int) -> int:
    """The first entry (0-based, of ``count`` from byte ``at``) whose commitlog offset
    is >= ``target``, assuming entries are in commitlog order (verify's index_order
    check says when they are not)."""
    from mqstore.formats.index_file import INDEX_ENTRY_DTYPE

    phy_at = at + INDEX_ENTRY_DTYPE.fields["phy_offset"][1]
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if _I64.unpack_from(mm, phy_at + mid * INDEX_ENTRY_DTYPE.itemsize)[0] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def read_entries_in(index_files: list[tuple], lo: int, hi: int) -> list[tuple]:
    """(file name, entry numbers, commitlog offsets, key hashes) of the index
    entries whose commitlog offset lies in [lo, hi): a binary search in each file
    (entries are in commitlog order), then one read of that range."""
    from mqstore.formats.index_file import INDEX_ENTRY_DTYPE, INDEX_HEADER_BYTES

    out = []
    for name, path, hash_slots, count in index_files:
        if not count:
            continue
        try:
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                at = INDEX_HEADER_BYTES + 4 * hash_slots + INDEX_ENTRY_DTYPE.itemsize  # entry 0 is never used
                count = min(count, (len(mm) - at) // INDEX_ENTRY_DTYPE.itemsize)
                a, b = _bisect_phy(mm, at, count, lo), _bisect_phy(mm, at, count, hi)
                part = np.frombuffer(
                    mm, INDEX_ENTRY_DTYPE, count=b - a, offset=at + a * INDEX_ENTRY_DTYPE.itemsize
                ).copy()
        except FileNotFoundError:
            continue
        if len(part):
            out.append(
                (
                    name,
                    np.arange(a + 1, b + 1, dtype=np.int64),
                    part["phy_offset"].astype(np.int64),
                    part["key_hash"].astype(np.int64),
                )
            )
    return out


def _store_timestamps(walk: _ChunkWalk, table) -> np.ndarray:
    parts = walk.cols.parts.get("ts")
    return np.concatenate(parts) if parts else np.zeros(len(table.phys), np.int64)


def _join_units(table, units: UnitColumns, result: ChunkResult) -> None:
    """verify's per-unit checks (queues._check_units) against the chunk's records:
    size, queue, queue offset, tagsCode; units at no record start and records no
    unit points at go back to the driver, which knows the whole log. Column-wise
    over all the chunk's units at once (a chunk touches up to every queue)."""
    f = result.findings
    nrec = len(table.phys)
    matched = np.zeros(nrec, bool)
    n = len(units)
    result.units_checked += n
    phys, qoffs, sizes, tags = units.phys, units.queue_offset, units.size, units.tags_code
    idx = np.minimum(np.searchsorted(table.phys, phys), max(nrec - 1, 0))
    found = (table.phys[idx] == phys) if nrec else np.zeros(n, bool)
    miss = np.flatnonzero(~found)
    for rows in _by_queue(units, miss):
        result.unmatched_units[units.queue_of(rows[0])] = (qoffs[rows], phys[rows])
    at, ri = np.flatnonzero(found), idx[found]
    matched[ri] = True
    key = units.queue_keys({t: i for i, t in enumerate(table.topics)})[at]
    bad = np.zeros(n, bool)

    def loc(i: int) -> str:
        topic, qid = units.queue_of(i)
        return f"consumequeue/{topic}/{qid}#{int(qoffs[i])}"

    size_bad = table.sizes[ri] != sizes[at]
    bad[at[size_bad]] = True
    for i, r in zip(*_hits(size_bad, at, ri, f, "cq_size_mismatch")):
        f.error(
            "cq_size_mismatch",
            loc(i),
            f"unit at queue offset {int(qoffs[i])} says "
            f"{int(sizes[i])} bytes; the record at commitlog offset {int(phys[i])} has {int(table.sizes[r])}",
            offset=int(phys[i]),
        )
    wrong = (table.queue_keys[ri] != key) | (table.queue_offsets[ri] != qoffs[at]) | ~table.advances[ri]
    bad[at[wrong]] = True
    for i, r in zip(*_hits(wrong, at, ri, f, "cq_wrong_record")):
        otopic, oqid = table.queue_of(int(table.queue_keys[r]))
        what = (
            "takes no queue offset (a transaction half or rollback)"
            if not table.advances[r]
            else (f"belongs to {otopic}:{oqid} queue offset {int(table.queue_offsets[r])}")
        )
        f.error(
            "cq_wrong_record",
            loc(i),
            f"unit at queue offset {int(qoffs[i])} points at the "
            f"record at commitlog offset {int(phys[i])}, which {what}",
            offset=int(phys[i]),
        )
    schedule = [k for k, t in enumerate(units.topics) if t == SCHEDULE_TOPIC]
    tags_bad = (table.tags_codes[ri] != tags[at]) & ~np.isin(units.topic[at], schedule)
    bad[at[tags_bad]] = True
    for i, r in zip(*_hits(tags_bad, at, ri, f, "cq_tags_mismatch")):
        f.error(
            "cq_tags_mismatch",
            loc(i),
            f"unit at queue offset {int(qoffs[i])} has "
            f"tagsCode {int(tags[i])}; its record's TAGS hash to {int(table.tags_codes[r])}",
            offset=int(phys[i]),
        )
    for rows in _by_queue(units, np.flatnonzero(bad)):
        result.bad_queues.add(units.queue_of(rows[0]))
    # Records that take a queue offset and that no unit points at.
    lonely = np.flatnonzero(table.advances & ~matched)
    if lonely.size:
        keys = table.queue_keys[lonely]
        order = np.argsort(keys, kind="stable")
        for sel in np.split(lonely[order], np.flatnonzero(np.diff(keys[order])) + 1):
            result.unmatched_records[table.queue_of(int(table.queue_keys[sel[0]]))] = (
                table.queue_offsets[sel],
                table.phys[sel],
            )


def _by_queue(units: UnitColumns, rows: np.ndarray) -> list[np.ndarray]:
    """``rows`` (in commitlog order) grouped by queue, each group in commitlog order."""
    if not rows.size:
        return []
    k = (units.topic[rows].astype(np.int64) << 32) | (units.queue_id[rows].astype(np.int64) & 0xFFFFFFFF)
    order = np.argsort(k, kind="stable")
    cut = np.flatnonzero(np.diff(k[order])) + 1
    return np.split(rows[order], cut)


def _hits(mask: np.ndarray, at: np.ndarray, ri: np.ndarray, f: TaskFindings, kind: str) -> tuple[list[int], list[int]]:
    """The first LISTED_PER_TASK hits of ``mask`` (to report one by one); the rest
    are only counted, as errors of ``kind``."""
    h = np.flatnonzero(mask)
    f.add_uncounted(kind, Severity.ERROR, len(h) - LISTED_PER_TASK)
    h = h[:LISTED_PER_TASK]
    return at[h].tolist(), ri[h].tolist()


def _join_index(table, files: list[tuple], result: ChunkResult, *, index_end: int) -> None:
    """Entries at no record start go back to the driver; the keys the dispatcher
    would index for the chunk's records (up to the index's end offset) must all be
    among the entries that point into the chunk (verify's index._check_keys)."""
    nrec = len(table.phys)
    have_phys, have_hash = [], []
    for name, numbers, phys, hashes in files:
        result.entries_checked += len(phys)
        idx = np.minimum(np.searchsorted(table.phys, phys), max(nrec - 1, 0))
        found = (table.phys[idx] == phys) if nrec else np.zeros(len(phys), bool)
        if not found.all():
            result.unmatched_entries.append((name, numbers[~found], phys[~found]))
        have_phys.append(idx[found])
        have_hash.append(hashes[found])
    covered = table.index_phys <= index_end
    want_phys, want_hash = table.index_phys[covered], table.index_hashes[covered]
    result.keys_checked = len(want_phys)
    if not len(want_phys):
        return
    at = np.concatenate(have_phys) if have_phys else np.zeros(0, np.int64)
    hh = np.concatenate(have_hash) if have_hash else np.zeros(0, np.int64)
    if len(at) == len(want_phys) and (hh == want_hash).all() and (table.phys[at] == want_phys).all():
        return  # the usual case: the entries are exactly the expected ones, in put order
    have = np.sort((at.astype(np.int64) << 32) | (hh & 0xFFFFFFFF))
    want = (np.searchsorted(table.phys, want_phys).astype(np.int64) << 32) | (want_hash & 0xFFFFFFFF)
    if len(have):
        present = have[np.minimum(np.searchsorted(have, want), len(have) - 1)] == want
    else:
        present = np.zeros(len(want), bool)
    missing = np.flatnonzero(~present)
    if missing.size:
        result.missing_keys = (want_phys[missing], want_hash[missing])


# ---------------------------------------------------------------- consume queues


def check_queues(store_dir: str, file_bytes: int, queues: list[tuple[str, int]], *, with_units: bool = True) -> dict:
    """Read a group of queues (verify's reader: file names, sizes, gaps, torn tails)
    and check what needs no commitlog (pre-blank units after real ones, commitlog
    offsets increasing). Returns findings, per-queue metadata and, ``with_units``,
    the real units as columns in commitlog order (``units``: the chunk tasks' share
    of them is cut from these, so no chunk task opens a queue file); without,
    ``files``: each queue file's range of commitlog offsets (_QueueChecks.file_ranges'
    rows, for chunk tasks that read their units themselves, :func:`read_units_in`)."""
    from mqstore.store.verify.queues import read_queue

    fb = file_bytes_for(file_bytes)
    root = Path(store_dir) / "consumequeue"
    check = _QueueChecks()

    def read(part: list[tuple[str, int]]):
        findings, damage = TaskFindings(), Damage()
        return [read_queue(root / t / str(q), t, q, fb, findings, damage) for t, q in part], findings, damage

    step = -(-len(queues) // READ_THREADS) or 1
    with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="queue-read") as pool:
        for read_, findings, damage in pool.map(read, [queues[i : i + step] for i in range(0, len(queues), step)]):
            check.findings.merge(findings)
            check.damage.bad_queues |= damage.bad_queues
            check.damage.stray_files.extend(damage.stray_files)
            for q in read_:
                check.add(q)
    return check.result() if with_units else check.result(with_units=False, files_root=root, file_bytes=fb)


def read_units_in(queue_files: list[tuple], lo: int, hi: int) -> UnitColumns:
    """The real units whose commitlog offset lies in [lo, hi), read from the queue
    files given as check_queues lists them (``files``: topic, queue id, path, queue
    offset of the file's first unit, the first and the end unit to read in it, the
    commitlog offsets of its first and largest real unit), in commitlog order. A
    binary search per file: a queue's units are in commitlog order (cq_order says
    when not)."""
    topics: dict[str, int] = {}
    parts = []
    for topic, qid, path, file_qo, start, stop, _lo, _hi in queue_files:
        try:
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                stop = min(stop, len(mm) // UNIT_SIZE)
                a, b = _bisect_units(mm, start, stop, lo), _bisect_units(mm, start, stop, hi)
                part = np.frombuffer(mm[a * UNIT_SIZE : b * UNIT_SIZE], UNIT_DTYPE)
        except FileNotFoundError:
            continue
        qoffs = np.arange(file_qo + a, file_qo + b, dtype=np.int64)
        pre = is_pre_blank(part)
        if pre.any():  # only a queue's first units can be pre-blanks
            part, qoffs = part[~pre], qoffs[~pre]
        if len(part):
            t = topics.setdefault(topic, len(topics))
            parts.append((t, qid, qoffs, part["commitlog_offset"], part["size"], part["tags_code"]))
    return UnitColumns.from_parts(list(topics), parts)


def _bisect_units(mm, start: int, stop: int, target: int) -> int:
    """The first of a queue file's units ``start`` to ``stop`` whose commitlog offset
    (a unit's first 8 bytes) is >= ``target``: a search reading a unit per step
    (numpy's searchsorted on the mapped big-endian column converted the whole file
    per call)."""
    lo, hi = start, stop
    while lo < hi:
        mid = (lo + hi) // 2
        if _I64.unpack_from(mm, mid * UNIT_SIZE)[0] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def check_rocks_queues(store_dir: str) -> dict:
    """check_queues for a store of type defaultRocksDB: every queue from its one
    RocksDB (opened read-only, as its last flush left it; no files to check)."""
    from mqstore.store.rocks_queues import queue_units
    from mqstore.store.verify.queues import QueueFiles

    check = _QueueChecks()
    for topic, qid, first, values in queue_units(store_dir):
        units = np.empty(len(values), UNIT_DTYPE)
        for name in UNIT_DTYPE.names:
            units[name] = values[name]
        check.add(QueueFiles(topic, qid, first, units))
    return check.result()


class _QueueChecks:
    """The checks of queues as read (verify's QueueFiles) that need no commitlog,
    their metadata for the driver and their real units for the chunk tasks.
    Column-wise over all the queues added (most of a many-queue store's queues hold
    a few units: numpy calls per queue cost more than reading it)."""

    TAIL = 256  # the last real units' ends kept per queue (verify's resume_offset looks at them)

    def __init__(self) -> None:
        self.findings = TaskFindings()
        self.damage = Damage()
        self.queues: list = []

    def add(self, q) -> None:
        self.queues.append(q)

    def result(self, *, with_units: bool = True, files_root: Path | None = None, file_bytes: int = 0) -> dict:
        """Findings and per-queue metadata, and with ``with_units`` the real units;
        with ``files_root`` (the consume-queue directory) each queue file's range
        (``files``, :meth:`_file_ranges`)."""
        qs, self.queues = self.queues, []
        findings, damage = self.findings, self.damage
        counts = np.array([len(q.units) for q in qs], np.int64)
        # (joined as bytes: np.concatenate of many small big-endian structured arrays
        # promotes their fields one array at a time, 50 us each)
        units = np.frombuffer(b"".join([np.asarray(q.units, UNIT_DTYPE).tobytes() for q in qs]), UNIT_DTYPE)
        of = np.repeat(np.arange(len(qs)), counts)  # each unit's queue
        starts = np.cumsum(counts) - counts
        firsts = np.array([q.first_offset for q in qs], np.int64)
        pos = np.arange(len(units), dtype=np.int64) - starts[of]
        qoffs = firsts[of] + pos
        phys = units["commitlog_offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        pre = is_pre_blank(units) if len(units) else np.zeros(0, bool)
        real = np.flatnonzero(~pre)
        rq = of[real]
        nreal = np.bincount(rq, minlength=len(qs))
        first_real = np.full(len(qs), np.iinfo(np.int64).max)
        np.minimum.at(first_real, rq, pos[real])
        # pre-blank units after a real one of their queue
        late = np.flatnonzero(pre & (pos > first_real[of]))
        if late.size:  # each queue's first LISTED_PER_TASK of them
            lq = of[late]
            late = late[np.arange(len(late)) - np.searchsorted(lq, lq) < LISTED_PER_TASK]
        for i in late.tolist():
            q = qs[of[i]]
            qo = int(qoffs[i])
            findings.error(
                "cq_wrong_record", f"{q.location}#{qo}", f"a pre-blank unit at queue offset {qo}, after real units"
            )
        damage.bad_queues.update((qs[k].topic, qs[k].queue_id) for k in np.unique(of[late]).tolist())
        # commitlog offsets not increasing: the first such unit of each queue
        if len(real) > 1:
            back = np.flatnonzero((np.diff(phys[real]) <= 0) & (rq[1:] == rq[:-1])) + 1
            seen: set[int] = set()
            for j in back.tolist():
                k = int(rq[j])
                if k in seen:
                    continue
                seen.add(k)
                q, i = qs[k], int(real[j])
                findings.error(
                    "cq_order",
                    f"{q.location}#{int(qoffs[i])}",
                    f"unit at queue offset {int(qoffs[i])} points at "
                    f"commitlog offset {int(phys[i])}, not after the unit before it",
                )
                damage.bad_queues.add((q.topic, q.queue_id))
        # the driver's metadata: the last TAIL real units' ends, runs of pre-blanks
        rank = np.arange(len(real)) - (np.cumsum(nreal) - nreal)[rq]  # position among the queue's real units
        tail = real[rank >= nreal[rq] - self.TAIL]
        ends = (phys[tail] + sizes[tail]).tolist()
        cut = np.searchsorted(of[tail], np.arange(len(qs) + 1)).tolist()
        pre_at = np.flatnonzero(pre)
        pre_cut = np.searchsorted(of[pre_at], np.arange(len(qs) + 1)).tolist()
        meta: dict[tuple[str, int], dict] = {}
        topic_ids: dict[str, int] = {}
        topic_of = np.zeros(len(qs), np.int32)
        for k, q in enumerate(qs):
            topic_of[k] = topic_ids.setdefault(q.topic, len(topic_ids))
            n = int(nreal[k])
            meta[(q.topic, q.queue_id)] = {
                "first": q.first_offset,
                "end": q.end_offset,
                "unreadable": q.unreadable,
                "pre_blank": _runs(qoffs[pre_at[pre_cut[k] : pre_cut[k + 1]]]) if pre_cut[k] < pre_cut[k + 1] else [],
                "tail_ends": ends[cut[k] : cut[k + 1]],
                "more_before_tail": n > self.TAIL,
                "real": n,
            }
        out = {
            "findings": findings,
            "meta": meta,
            "bad_queues": set(damage.bad_queues),
            "stray": list(damage.stray_files),
        }
        if files_root is not None:
            out["files"] = self._file_ranges(files_root, file_bytes, qs, real, of, qoffs, phys)
        if not with_units:
            return out
        qids = np.array([q.queue_id for q in qs], np.int32)
        cols = UnitColumns(
            list(topic_ids),
            topic_of[rq],
            qids[rq],
            qoffs[real],
            phys[real],
            sizes[real],
            units["tags_code"][real].astype(np.int64),
        )
        return {**out, "units": cols.take(np.argsort(cols.phys, kind="stable"))}

    @staticmethod
    def _file_ranges(root: Path, file_bytes: int, qs: list, real, of, qoffs, phys) -> list[tuple]:
        """Per queue file holding real units (of queues the store can open): topic,
        queue id, path, queue offset of the file's first unit, the first and the end
        unit of the queue's valid ones in the file, the commitlog offsets of its first
        and largest real unit (what a chunk task reads its units by)."""
        per_file = file_bytes // UNIT_SIZE
        readable = np.array([not q.unreadable for q in qs], bool)
        r = real[readable[of[real]]] if len(real) else real
        if not len(r):
            return []
        fq, fno = of[r], qoffs[r] // per_file
        starts = np.flatnonzero(np.r_[True, (fq[1:] != fq[:-1]) | (fno[1:] != fno[:-1])])
        lo, hi = phys[r[starts]], np.maximum.reduceat(phys[r], starts)
        out = []
        for k, f, a, b in zip(fq[starts].tolist(), fno[starts].tolist(), lo.tolist(), hi.tolist()):
            q, file_qo = qs[k], f * per_file
            start = max(file_qo, q.first_offset) - file_qo  # units below the queue's min offset are not read
            stop = min(file_qo + per_file, q.end_offset) - file_qo
            path = str(root / q.topic / str(q.queue_id) / f"{file_qo * UNIT_SIZE:020d}")
            out.append((q.topic, q.queue_id, path, file_qo, start, stop, a, b))
        return out


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """Sorted ints as [start, stop) runs."""
    if not len(values):
        return []
    cut = np.flatnonzero(np.diff(values) != 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in np.split(values, cut)]


# ---------------------------------------------------------------- index files


def check_index_file(path: str, hash_slots: int, max_entries: int, *, in_flux: bool) -> dict:
    """One index file: size, header and chains (verify's check_header_and_chains); the range of
    commitlog offsets its entries point at, so chunk tasks read only their part."""
    from mqstore.formats.index_file import index_file_size
    from mqstore.store.verify.index import check_header_and_chains

    findings = TaskFindings()
    damage = Damage()
    p = Path(path)
    loc = f"index/{p.name}"
    size = index_file_size(hash_slots, max_entries)
    out: dict[str, Any] = {
        "findings": findings,
        "name": p.name,
        "path": str(p),
        "first": -1,
        "last": -1,
        "entries": 0,
        "min": -1,
        "max": -1,
        "index_bad": False,
    }
    actual = p.stat().st_size
    if actual != size:
        findings.error(
            "index_file_size",
            loc,
            f"{actual} bytes, expected {size} ({hash_slots} slots x {max_entries} "
            "entries); the store refuses to open the index",
        )
        out["index_bad"] = True
        return out
    with p.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        entries = check_header_and_chains(mm, loc, hash_slots, max_entries, findings, damage, in_flux=in_flux)
        if entries is not None and len(entries):
            phy = entries["phy_offset"].astype(np.int64)
            out.update(entries=len(phy), first=int(phy[0]), last=int(phy[-1]), min=int(phy.min()), max=int(phy.max()))
        del entries
    out["index_bad"] = damage.index_bad
    return out


__all__ = [
    "ChunkResult",
    "ChunkSpec",
    "TaskFindings",
    "check_chunk",
    "check_index_file",
    "check_queues",
    "check_rocks_queues",
    "read_entries_in",
    "read_units_in",
    "record_start_in",
    "walk_table",
]
