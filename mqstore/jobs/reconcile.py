"""``reconcile``: verify a store with Spark, the work spread over CommitLog chunks.

The checks are verify's (mqstore.store.verify), imported, not copied; this module
plans the work, runs it as two Spark jobs and puts the pieces together::

    driver     checkpoint and config files first (they may only lag the data read
               after them), the layout, segment names, the list of queues and
               index files; the chunks (a segment, or the part of one whose records
               start in [lo, hi), chunk_bytes each; the last segment with data is
               chunked up to where its data seems to end)
    job 1      per group of consume queues: files and units (verify's reader), and
               the range of commitlog offsets each queue file's units point into
    job 2      per index file: header and chains (verify's checks); per chunk:
               verify's walk of the records (CRC, layout, torn tails,
               resynchronisation), then the join with the units and index entries
               that point into the chunk, which the task reads itself (a binary
               search per file, the ranges from job 1 and the index headers, sent
               as a broadcast): size, queue, queue offset, tagsCode, and the keys
               the dispatcher would index against the entries present
    driver     what needs the whole log: queue-offset sequences across chunks,
               units and entries that point at no record (dangling, or past the end),
               records without a unit (missing, or not dispatched yet), index order
               across files, checkpoint timestamps, consumer offsets; then
               everything the checkpoint does not count as flushed is in flight

Only what the checkpoint records as flushed is reconciled: its confirm offset (5.x
layout), or without one the end of the last record stored no later than its
physic timestamp. Bytes past that point are reported once, as ``in_flight`` (info),
never as damage; findings about them (a torn last record, units or keys not
written yet) are folded into it. A checkpoint that counts bytes as flushed which
are not valid data is damage: ``commitlog_torn_tail`` or ``checkpoint_ahead``.

Usable without the CLI::

    from mqstore.jobs.spark import session
    result = reconcile(session("local[2]"), "./data/s1", output="./out")
    result.errors, result.by_kind
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Self

import numpy as np
import structlog

from mqstore.errors import ConfigError
from mqstore.jobs.units import (
    ChunkResult,
    ChunkSpec,
    TaskFindings,
    check_chunk,
    check_index_file,
    check_queues,
)
from mqstore.store.commitlog import COMMITLOG_DIR
from mqstore.store.config import StoreConfig
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR
from mqstore.store.layout import LAYOUT_FILE, layout_for_reading
from mqstore.store.lockfile import ABORT_FILE, lock_holder
from mqstore.store.reader import CommitLogReader
from mqstore.store.verify import _resume_offset
from mqstore.store.verify.index import index_end_offset, index_files
from mqstore.store.verify.records import _has_data, _Walk
from mqstore.store.verify.report import Damage
from mqstore.store.verify.state import check_checkpoint, check_configs, read_state

log = structlog.get_logger(__name__)

DEFAULT_CHUNK_BYTES = 64 << 20
LISTED_PER_KIND = 100_000  # rows of one kind written to the findings dataset; all are counted
_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
# Findings about the end of the valid data: past the flushed point they are in flight.
# Garbage (no record magic) is never an append in progress, so it stays damage.
_TAIL_KINDS = {"commitlog_torn_tail", "commitlog_tail_in_flux", "commitlog_crc"}


class NotAStoreError(FileNotFoundError):
    """The directory holds no store."""


@dataclass
class ReconcileResult:
    """What a reconcile found. ``findings`` are rows (kind, severity, location,
    detail, offset: the commitlog offset concerned or -1), at most LISTED_PER_KIND per
    kind; ``by_kind`` and ``by_severity`` count every finding."""

    store: Path
    findings: list[tuple[str, str, str, str, int]]
    by_kind: dict[str, int]
    by_severity: dict[str, int]
    kind_severity: dict[str, str]
    messages: int
    bytes: int
    seconds: float
    counts: dict[str, int]
    in_flight: dict[str, int]
    flushed_offset: int | None
    damage: Damage
    repair: dict | None = None
    output: Path | None = None

    @property
    def errors(self) -> int:
        return self.by_severity.get("error", 0)

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def of_kind(self, kind: str) -> list[tuple[str, str, str, str, int]]:
        return [f for f in self.findings if f[0] == kind]

    def summary(self) -> dict:
        """The content of ``summary.json``."""
        return {
            "store": str(self.store),
            "ok": self.ok,
            "findings": sum(self.by_kind.values()),
            "errors": self.errors,
            "warnings": self.by_severity.get("warning", 0),
            "by_kind": dict(sorted(self.by_kind.items())),
            "by_severity": dict(sorted(self.by_severity.items())),
            "messages": self.messages,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.bytes / 1e6 / self.seconds, 1) if self.seconds > 0 else 0.0,
            "flushed_offset": self.flushed_offset,
            "in_flight": self.in_flight,
            "counts": self.counts,
            "repair": self.repair,
        }


class _Collector:
    """All findings of a run: rows (capped per kind) and exact counts."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, int]] = []
        self.by_kind: dict[str, int] = {}
        self.by_severity: dict[str, int] = {}
        self.kind_severity: dict[str, str] = {}
        self._listed: dict[str, int] = {}

    def _count(self, kind: str, sev: str, n: int) -> None:
        self.by_kind[kind] = self.by_kind.get(kind, 0) + n
        self.by_severity[sev] = self.by_severity.get(sev, 0) + n
        if _SEVERITY_RANK[sev] >= _SEVERITY_RANK[self.kind_severity.get(kind, "info")]:
            self.kind_severity[kind] = sev

    def row(self, kind: str, sev: str, location: str, detail: str, offset: int = -1) -> None:
        self._count(kind, sev, 1)
        n = self._listed.get(kind, 0)
        if n < LISTED_PER_KIND:
            self._listed[kind] = n + 1
            self.rows.append((kind, sev, location, detail, int(offset)))

    def merge(self, tf: TaskFindings, keep=None) -> None:
        """Add a task's findings (``keep(row)`` may drop or rewrite rows: it returns a
        row or None)."""
        if keep is None:
            for (kind, sev), n in tf.counts.items():
                self._count(kind, sev, n)
            for r in tf.rows:
                n = self._listed.get(r[0], 0)
                if n < LISTED_PER_KIND:
                    self._listed[r[0]] = n + 1
                    self.rows.append(r)
            return
        listed: dict[tuple[str, str], int] = {}
        for r in tf.rows:
            listed[(r[0], r[1])] = listed.get((r[0], r[1]), 0) + 1
            out = keep(r)
            if out is not None:
                self.row(*out)
        for key, n in tf.counts.items():  # findings the task counted but did not list
            extra = n - listed.get(key, 0)
            if extra > 0:
                self._count(key[0], key[1], extra)

    # verify's Findings interface, for verify's driver-side checks
    def error(self, kind: str, location: str, detail: str) -> None:
        self.row(kind, "error", location, detail)

    def warning(self, kind: str, location: str, detail: str) -> None:
        self.row(kind, "warning", location, detail)

    def info(self, kind: str, location: str, detail: str) -> None:
        self.row(kind, "info", location, detail)


# ---------------------------------------------------------------- planning (driver)


@dataclass
class Plan:
    store: Path
    cfg: StoreConfig
    running: bool
    clean: bool
    segments: list[tuple[int, Path]]
    chunks: list[ChunkSpec]
    queues: list[tuple[str, int]]
    index_paths: list[Path]
    min_offset: int
    commitlog_bytes: int
    pre: TaskFindings = field(default_factory=TaskFindings)
    pre_damage: Damage = field(default_factory=Damage)


def check_store_dir(store: str | Path) -> Path:
    """The store directory, or NotAStoreError (before any Spark work)."""
    path = Path(store)
    if not (path / COMMITLOG_DIR).is_dir():
        raise NotAStoreError(f"no store at {path} (it has no {COMMITLOG_DIR}/ directory)")
    return path


def check_output_dir(output: str | Path) -> Path:
    """Create ``output`` if needed and make sure files can be written there
    (OSError / NotADirectoryError otherwise, before any Spark work)."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"output {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".mqstore-probe-{time.time_ns()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OSError(f"cannot write to output {path}: {e.strerror or e}") from e
    return path


def plan(store: Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Plan:
    """Everything the jobs need to know, from directory listings and a few headers."""
    pre, damage = TaskFindings(cap=LISTED_PER_KIND), Damage()
    holder = lock_holder(store)
    running = holder is not None
    if running:
        pre.info("store_running", "lock", f"the store is open in process {holder or '(another namespace)'}; "
                 "reconcile reads the files as they are now")  # fmt: skip
    elif (store / ABORT_FILE).exists():
        pre.info("unclean_shutdown", ABORT_FILE, "the store did not shut down cleanly; it recovers when it next opens")
    try:
        cfg = layout_for_reading(store)
    except ConfigError as e:
        pre.error("layout_unreadable", str(LAYOUT_FILE), f"{e}; the store refuses to open")
        cfg = StoreConfig()
    segs = CommitLogReader(store).segments
    walker = _Walk(store, cfg.segment_bytes, pre, damage, index_sample=(0, 0), running=running)
    walker._check_names(segs)
    segs = [(b, p) for b, p in segs if p.exists() and p.stat().st_size > 0]
    with_data = [i for i, (_, p) in enumerate(segs) if _has_data(p)]
    last_data = with_data[-1] if with_data else -1
    chunks: list[ChunkSpec] = []
    total = 0
    for i, (base, path) in enumerate(segs):
        size = path.stat().st_size
        # The last segment with data is mostly zeros after its data: chunks cover the
        # data (where it seems to end: a hint), the last one runs to the segment's end.
        used = _data_end_hint(path, size) if i == last_data else size
        total += used if i <= last_data else 0
        step = max(chunk_bytes, 64 << 10) if i <= last_data else size  # all-zero segments: one check each
        los = list(range(0, max(used, 1), step)) if i <= last_data else [0]
        for k, lo in enumerate(los):
            hi = size if k == len(los) - 1 else min(lo + step, size)
            chunks.append(ChunkSpec(len(chunks), str(path), base, lo, hi, cfg.segment_bytes,
                                    last=i >= last_data, after_data=i > last_data))  # fmt: skip
    if chunks:
        chunks[-1] = dataclasses.replace(chunks[-1], open_end=True)
    queues = _list_queues(store, pre, damage)
    idx = index_files(store) or []
    _stray_index_files(store, idx, pre, damage)
    return Plan(store, cfg, running, not (store / ABORT_FILE).exists() or running, segs, chunks, queues, idx,
                segs[0][0] if segs else 0, total, pre, damage)  # fmt: skip


def _data_end_hint(path: Path, size: int) -> int:
    """Where a segment's written bytes seem to end (recovery's page bisection); only
    splits work, a wrong hint costs time, never a finding."""
    import mmap

    from mqstore.store.recovery import _data_end_estimate

    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return _data_end_estimate(SimpleNamespace(mm=mm, size=size))


def _list_queues(store: Path, findings: TaskFindings, damage: Damage) -> list[tuple[str, int]]:
    """(topic, queue id) of every queue directory, stray names reported as verify does."""
    from mqstore.store.verify.queues import queue_dirs

    return [(topic, queue_id) for topic, queue_id, _ in queue_dirs(store, findings, damage)]


def _stray_index_files(store: Path, files: list[Path], findings: TaskFindings, damage: Damage) -> None:
    from mqstore.store.index_service import INDEX_DIR

    d = store / INDEX_DIR
    if not d.is_dir():
        return
    for p in sorted(d.iterdir()):
        if p not in files:
            tmp = p.name.endswith(".tmp")
            what = "an unfinished file; the store removes it on open" if tmp else "not an index file; the store ignores it"
            findings.warning("index_stray_file", f"{INDEX_DIR}/{p.name}", what)
            if not tmp:
                damage.stray_files.append(f"{INDEX_DIR}/{p.name}")


def _queue_groups(store: Path, queues: list[tuple[str, int]], groups: int) -> list[list[tuple[str, int]]]:
    """Queues in about ``groups`` groups of similar size on disk (file counts)."""
    if not queues:
        return []
    weights = []
    for topic, qid in queues:
        try:
            weights.append(max(1, sum(1 for _ in (store / CONSUME_QUEUE_DIR / topic / str(qid)).iterdir())))
        except OSError:
            weights.append(1)
    groups = max(1, min(groups, len(queues)))
    out: list[list[tuple[str, int]]] = [[] for _ in range(groups)]
    load = [0] * groups
    for i in sorted(range(len(queues)), key=lambda i: -weights[i]):
        g = load.index(min(load))
        out[g].append(queues[i])
        load[g] += weights[i]
    return [g for g in out if g]


# ---------------------------------------------------------------- Spark tasks (run on workers)


def _derived_task(task: tuple, store: str, cfg: StoreConfig, running: bool):
    kind, arg = task
    if kind == "queues":
        return ("queues", check_queues(store, cfg.consume_queue_file_bytes, arg))
    path, last = arg
    return ("index", check_index_file(path, cfg.index_hash_slots, cfg.index_max_entries, in_flux=running and last))


@dataclass
class FileTable:
    """Which derived files hold units / entries for which commitlog range: sent to
    every chunk task once (a broadcast)."""

    queue_files: list[tuple]  # (topic, qid, path, first queue offset, valid units)
    queue_lo: np.ndarray  # commitlog offset of each file's first real unit
    queue_hi: np.ndarray  # the largest commitlog offset a real unit of it points at
    index_files: list[tuple]  # (name, path, hash slots, entries)
    index_lo: np.ndarray
    index_hi: np.ndarray

    def for_chunk(self, spec: ChunkSpec) -> tuple[list[tuple], list[tuple]]:
        end = (1 << 62) if spec.open_end else spec.end
        q = np.flatnonzero((self.queue_hi >= spec.start) & (self.queue_lo < end))
        i = np.flatnonzero((self.index_hi >= spec.start) & (self.index_lo < end))
        return [self.queue_files[k] for k in q.tolist()], [self.index_files[k] for k in i.tolist()]


def _file_table(derived_meta: list[tuple], index_paths: list[Path], cfg: StoreConfig) -> FileTable:
    """Queue files from the queue checks; index files from their headers (the
    range of commitlog offsets they cover and their entry count), read here."""
    from mqstore.formats.index_file import (
        INDEX_HEADER_BYTES,
        IndexHeader,
        index_file_size,
    )

    qf, qlo, qhi, xf, xlo, xhi = [], [], [], [], [], []
    for kind, res in derived_meta:
        if kind == "queues":
            for (topic, qid), m in res["meta"].items():
                for path, first_qo, count, lo, hi in m["files"]:
                    qf.append((topic, qid, path, first_qo, count))
                    qlo.append(lo)
                    qhi.append(hi)
    size = index_file_size(cfg.index_hash_slots, cfg.index_max_entries)
    for path in index_paths:
        try:
            if path.stat().st_size != size:
                continue  # the store refuses it; its own check says so
            with path.open("rb") as f:
                h = IndexHeader.decode(f.read(INDEX_HEADER_BYTES))
        except (OSError, ValueError):
            continue
        entries = min(h.entries, cfg.index_max_entries - 1)
        if entries > 0:
            xf.append((path.name, str(path), cfg.index_hash_slots, entries))
            xlo.append(min(h.begin_phy_offset, h.end_phy_offset))
            xhi.append(max(h.begin_phy_offset, h.end_phy_offset))
    arr = lambda v: np.array(v, np.int64)
    return FileTable(qf, arr(qlo), arr(qhi), xf, arr(xlo), arr(xhi))


def _work_task(w: tuple, store: str, cfg: StoreConfig, chunks: list[ChunkSpec], files, running: bool,
               index_sample: tuple[int, int], index_end: int, flushed_ts: int):  # fmt: skip
    kind, arg = w
    if kind == "index":
        return _derived_task(w, store, cfg, running)
    return _chunk_task(arg, chunks, files, running, index_sample, index_end, flushed_ts)


def _chunk_task(i: int, chunks: list[ChunkSpec], files, running: bool, index_sample: tuple[int, int], index_end: int,
                flushed_ts: int) -> ChunkResult:  # fmt: skip
    spec = chunks[i]
    queue_files, index_files_ = files.value.for_chunk(spec)
    return check_chunk(spec, queue_files, index_files_, running=running, index_sample=index_sample,
                       index_end=index_end, flushed_ts=flushed_ts)  # fmt: skip


# ---------------------------------------------------------------- progress


class _Progress:
    """Logs the running stage's completed tasks every few seconds (driver thread)."""

    def __init__(self, sc, total_bytes: int, every_s: float = 3.0) -> None:
        self.sc, self.total = sc, total_bytes
        self.every = every_s
        self.stage = ""
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="reconcile-progress", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(self.every):
            try:
                done = total = 0
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
            except Exception:  # noqa: BLE001  (progress is best effort; the JVM may be closing)
                return
            if total:
                log.info("reconcile_progress", stage=self.stage, tasks_done=done, tasks=total,
                         seconds=round(time.perf_counter() - self._t0, 1))  # fmt: skip


# ---------------------------------------------------------------- the run (driver)


def reconcile(spark, store: str | Path, *, output: str | Path | None = None, repair: bool = False,
              chunk_bytes: int = DEFAULT_CHUNK_BYTES, index_keys: str = "full") -> ReconcileResult:  # fmt: skip
    """Reconcile the store at ``store`` on ``spark`` (see the module docstring); with
    ``output``, write the findings dataset and summary.json there, and with
    ``repair`` the rebuilt consume queues and index files under ``output/repair``."""
    from mqstore.store.verify import _index_sample

    t0 = time.perf_counter()
    store = check_store_dir(store)
    out_dir = check_output_dir(output) if output is not None else None
    if repair and out_dir is None:
        raise ValueError("--repair needs --output: rebuilt files are written there, never into the store")
    state = read_state(store)  # first: the checkpoint may only lag what is read after it
    p = plan(store, chunk_bytes)
    sc = spark.sparkContext
    log.info("reconcile_started", store=str(store), segments=len(p.segments), chunks=len(p.chunks),
             commitlog_mb=round(p.commitlog_bytes / 1e6, 1), queues=len(p.queues), index_files=len(p.index_paths),
             running=p.running)  # fmt: skip
    cp = state.checkpoint
    flushed_ts = cp.physic_msg_timestamp if cp is not None and cp.confirm_phy_offset <= 0 else 0
    index_end = index_end_offset(store)
    index_end = -1 if index_end is None else index_end
    parallelism = max(2, sc.defaultParallelism)
    queue_tasks = [("queues", g) for g in _queue_groups(store, p.queues, 2 * parallelism)]
    cfg, store_s, running = p.cfg, str(store), p.running
    chunks = p.chunks
    sample = _index_sample(index_keys)
    with _Progress(sc, p.commitlog_bytes) as progress:
        progress.stage = "consume_queues"
        derived_meta: list[tuple] = []
        if queue_tasks:
            derived_meta = sc.parallelize(queue_tasks, len(queue_tasks)).map(
                lambda t: _derived_task(t, store_s, cfg, running)).collect()  # fmt: skip
        t1 = time.perf_counter()
        log.info("reconcile_progress", stage="consume_queues", done=True, seconds=round(t1 - t0, 2))
        # One job: the index files' own checks first (one long task each), the
        # commitlog chunks fill the other cores meanwhile.
        progress.stage = "commitlog_and_index"
        results: list[ChunkResult] = []
        work = [("index", (str(path), i == len(p.index_paths) - 1)) for i, path in enumerate(p.index_paths)]
        work += [("chunk", i) for i in range(len(chunks))]
        if work:
            files = sc.broadcast(_file_table(derived_meta, p.index_paths, cfg))
            done = (
                sc.parallelize(work, len(work))
                .map(lambda w: _work_task(w, store_s, cfg, chunks, files, running, sample, index_end, flushed_ts))
                .collect()
            )
            files.unpersist()
            derived_meta += [d for d in done if isinstance(d, tuple)]
            results = [d for d in done if isinstance(d, ChunkResult)]
    t2 = time.perf_counter()
    walked = sum(r.bytes for r in results)
    log.info("reconcile_progress", stage="commitlog_and_index", done=True, seconds=round(t2 - t1, 2),
             mb_per_s=round(walked / 1e6 / max(t2 - t1, 1e-9), 1))  # fmt: skip
    result = _assemble(p, state, derived_meta, sorted(results, key=lambda r: r.index), index_end)
    result.seconds = time.perf_counter() - t0
    result.counts["commitlog_seconds"] = round(t2 - t1, 3)
    if repair:
        from mqstore.jobs.rebuild import rebuild

        result.repair = rebuild(spark, p, result, out_dir / "repair", state)
        result.seconds = time.perf_counter() - t0
    if out_dir is not None:
        write_output(result, out_dir)
        result.output = out_dir
    log.info("reconcile_done", store=str(store), ok=result.ok, errors=result.errors, findings=sum(result.by_kind.values()),
             messages=result.messages, mb=round(result.bytes / 1e6, 1), seconds=round(result.seconds, 2))  # fmt: skip
    return result


def _assemble(p: Plan, state, derived_meta: list[tuple], results: list[ChunkResult], index_end: int) -> ReconcileResult:
    """The driver's part: checks that need the whole log, in-flight folding, totals."""
    damage = p.pre_damage
    out = _Collector()
    out.merge(p.pre)
    cp = state.checkpoint
    # ---- the commitlog as a whole
    data_end = max((r.data_end for r in results if r.data_end >= 0), default=p.min_offset)
    log_end = data_end
    for r in results:
        if r.closed:
            spec_base = next((c.base for c in p.chunks if c.index == r.index), None)
            if spec_base is not None:
                log_end = max(log_end, spec_base + p.cfg.segment_bytes)
    if cp is not None and cp.confirm_phy_offset > 0:
        flushed: int | None = cp.confirm_phy_offset
        flushed_how = "the checkpoint's confirm offset"
    elif cp is not None and cp.physic_msg_timestamp > 0:
        flushed = max((r.flushed_end for r in results), default=-1)
        flushed = None if flushed < 0 else flushed
        flushed_how = "the last record stored by the checkpoint's physic timestamp"
    else:
        flushed, flushed_how = None, ""
    limit = flushed if flushed is not None else 1 << 62
    cuts = [r.commitlog_cut for r in results if r.commitlog_cut is not None]
    tail_upgraded = False
    in_flight = {"bytes": 0, "records": 0, "findings": 0}
    for r in results:
        if r.unrepairable:
            damage.commitlog_unrepairable.extend(r.unrepairable)
    # the first cut that is damage (not in flight) is where recovery would cut
    for r in results:
        def keep(row, r=r):
            nonlocal tail_upgraded
            kind, _sev, loc, detail, off = row
            if off >= 0 and kind in _TAIL_KINDS and off >= limit and not _valid_after(results, r, off):
                in_flight["findings"] += 1
                return None
            if kind in ("commitlog_torn_tail", "commitlog_tail_in_flux") and flushed is not None and off < limit:
                tail_upgraded = True
                why = f"{detail}; {flushed_how} ({flushed}) counts these bytes as flushed: acknowledged data is lost"
                return ("commitlog_torn_tail", "error", loc, why, off)
            return row

        out.merge(r.findings, keep)
    real_cuts = [c for c in cuts if c < limit or any(r.data_start > c for r in results)]
    damage.commitlog_cut = min(real_cuts) if real_cuts else None
    if damage.commitlog_cut is not None:
        cut_chunk = next(r for r in results if r.commitlog_cut == damage.commitlog_cut)
        damage.records_after_cut = cut_chunk.records_after_cut + sum(
            r.records for r in results if r.index > cut_chunk.index and r.data_start >= 0)  # fmt: skip
        damage.newest_store_timestamp_below_cut = max(
            [r.newest_store_timestamp for r in results if r.index < cut_chunk.index] + [cut_chunk.newest_below_cut])  # fmt: skip
    newest = max((r.newest_store_timestamp for r in results), default=0)
    damage.newest_store_timestamp = newest
    first_ts: dict[int, int] = {}
    for r in results:
        first_ts.update(r.first_store_timestamps)
    # in flight: valid records at or past the flushed point
    if flushed is not None and flushed < log_end:
        in_flight["bytes"] = log_end - flushed
    _chunk_boundaries(p, results, out)
    # ---- consume queues
    meta: dict[tuple[str, int], dict] = {}
    index_meta: list[dict] = []
    for kind, res in derived_meta:
        if kind == "queues":
            out.merge(res["findings"])
            meta.update(res["meta"])
            damage.bad_queues |= res["bad_queues"]
            damage.stray_files.extend(res["stray"])
        else:
            out.merge(res["findings"])
            index_meta.append(res)
            damage.index_bad |= bool(res.get("index_bad"))
    for r in results:
        damage.bad_queues |= r.bad_queues
        damage.index_bad |= r.index_bad
    queue_max = _sequences_and_max(results, meta, out)
    for key, m in meta.items():
        queue_max.setdefault(key, m["end"])
    fake_table = SimpleNamespace(min_offset=p.min_offset, data_end=data_end, first_store_timestamps=first_ts)
    fake_queues = {k: _QueueEnds(m) for k, m in meta.items()}
    resume = _resume_offset(p.store, fake_table, fake_queues, damage, cp, clean=p.clean)
    _dangling_units(results, data_end, limit, p.running, out, damage, in_flight)
    in_flight["records"] += _unmatched_records(results, meta, resume, limit, p.running, out, damage)
    # ---- index
    _index_order(index_meta, out, damage)
    _dangling_entries(results, data_end, limit, p.running, out, damage, in_flight)
    _missing_keys(results, limit, out, damage, in_flight)
    # ---- checkpoint and consumer offsets (verify's checks)
    cp_findings = _Collector()
    check_checkpoint(state, newest, cp_findings, damage)
    for row in cp_findings.rows:
        if row[0] == "checkpoint_ahead" and tail_upgraded:
            continue  # the torn tail counted as flushed says it already
        out.row(*row)
    if flushed is not None and cp is not None and cp.confirm_phy_offset > log_end and not tail_upgraded and not p.running:
        out.row("checkpoint_ahead", "error", "checkpoint", f"confirm_phy_offset {cp.confirm_phy_offset} is past the end "
                f"of the commitlog's valid data ({log_end}): data it counts as flushed is gone")  # fmt: skip
        damage.checkpoint_fix = True
    offsets_checked = check_configs(state, queue_max, out, damage)
    if in_flight["bytes"] > 0 or in_flight["findings"]:
        loc = _segment_location(p, flushed) if flushed is not None else "commitlog"
        out.row("in_flight", "info", loc, f"{in_flight['bytes']:,} bytes past {flushed_how} ({flushed}) are still being "
                f"written or not yet flushed: not reconciled ({in_flight['records']:,} records without units, "
                f"{in_flight['findings']:,} findings about them set aside)", flushed if flushed is not None else -1)  # fmt: skip
    messages = sum(r.records for r in results)
    data_bytes = sum(r.bytes for r in results)
    counts = {
        "segments": len(p.segments),
        "chunks": len(p.chunks),
        "records": messages,
        "corrupt_records": sum(r.corrupt for r in results),
        "queues": len(meta),
        "units": sum(m["real"] for m in meta.values()),
        "units_checked": sum(r.units_checked for r in results),
        "index_files": len(index_meta),
        "index_entries": sum(m.get("entries", 0) for m in index_meta),
        "index_keys_checked": sum(r.keys_checked for r in results),
        "consumer_offsets": offsets_checked,
        "data_end": data_end,
        "resume_offset": resume,
    }
    return ReconcileResult(p.store, out.rows, out.by_kind, out.by_severity, out.kind_severity, messages, data_bytes,
                           0.0, counts, in_flight, flushed, damage)  # fmt: skip


class _QueueEnds:
    """Stand-in for verify's QueueFiles in its _resume_offset: the last real unit ends."""

    def __init__(self, meta: dict) -> None:
        self.ends = np.array(meta["tail_ends"], np.int64)
        self.more = meta["more_before_tail"]
        self.unreadable = meta["unreadable"]

    def last_end_below(self, limit: int) -> int:
        if self.unreadable or not len(self.ends):
            return -1
        ok = np.flatnonzero(self.ends <= limit)
        return int(self.ends[ok[-1]]) if ok.size else -1


def _valid_after(results: list[ChunkResult], r: ChunkResult, off: int) -> bool:
    """Valid records lie past ``off`` (so bytes there are not a tail in flight)."""
    return any(x.data_end > off and x.data_start > off for x in results if x.index >= r.index)


def _segment_location(p: Plan, offset: int) -> str:
    base = offset - offset % p.cfg.segment_bytes
    return f"{COMMITLOG_DIR}/{base:020d}@{offset - base}"


def _chunk_boundaries(p: Plan, results: list[ChunkResult], out: _Collector) -> None:
    """Consecutive chunks of one segment must meet: where one walk ended the next
    one's first record starts (a signature found inside a record would break this)."""
    by_index = {r.index: r for r in results}
    for c in p.chunks:
        r, nxt = by_index.get(c.index), by_index.get(c.index + 1)
        if r is None or nxt is None or c.after_data or nxt.data_start < 0:
            continue
        if p.chunks[c.index + 1].base != c.base or r.closed or r.data_stopped is not None or r.data_start < 0:
            continue
        if r.walk_end != nxt.data_start:
            out.row("commitlog_chunk_boundary", "warning", _segment_location(p, nxt.data_start),
                    f"the walk of the chunk before ended at {r.walk_end}, but the next record signature is at "
                    f"{nxt.data_start}: a record holds bytes that look like a record start", nxt.data_start)  # fmt: skip


def _sequences_and_max(results: list[ChunkResult], meta: dict, out: _Collector) -> dict[tuple[str, int], int]:
    """Queue offsets of one queue's records must follow each other across chunks
    too; returns each queue's max offset as the store will have it (verify's
    check_records: one past its last unit or its last record)."""
    last: dict[tuple[str, int], tuple[int, int]] = {}
    queue_max: dict[tuple[str, int], int] = {}
    for r in results:
        for q, phys, qo, prev in r.sequence:
            out.row("queue_offset_sequence", "error", f"{CONSUME_QUEUE_DIR}/{q[0]}/{q[1]}", f"the record at commitlog "
                    f"offset {phys} has queue offset {qo}, but the one before it in this queue has {prev}", phys)  # fmt: skip
        for q, (fqo, fph, lqo, _lph, _n) in r.queues.items():
            if q in last and last[q][0] + 1 != fqo:
                out.row("queue_offset_sequence", "error", f"{CONSUME_QUEUE_DIR}/{q[0]}/{q[1]}", f"the record at commitlog "
                        f"offset {fph} has queue offset {fqo}, but the one before it in this queue has {last[q][0]}", fph)  # fmt: skip
            last[q] = (lqo, _lph)
            queue_max[q] = max(queue_max.get(q, 0), lqo + 1)
    for q, m in meta.items():
        queue_max[q] = max(queue_max.get(q, 0), m["end"])
    return queue_max


def _dangling_units(results, data_end: int, limit: int, running: bool, out: _Collector, damage: Damage,
                    in_flight: dict) -> None:  # fmt: skip
    beyond: dict[tuple[str, int], list[int]] = {}
    for r in results:
        for (topic, qid), (qoffs, phys) in r.unmatched_units.items():
            loc = f"{CONSUME_QUEUE_DIR}/{topic}/{qid}"
            past = phys >= data_end
            late = phys >= limit
            if late.any():
                in_flight["findings"] += int(late.sum())
            b = past & ~late
            if b.any():
                beyond.setdefault((topic, qid), []).extend(qoffs[b].tolist())
            for qo, ph in zip(qoffs[~past & ~late].tolist(), phys[~past & ~late].tolist()):
                out.row("cq_unit_dangling", "error", f"{loc}#{qo}", f"unit at queue offset {qo} points at commitlog "
                        f"offset {ph}, where no record starts", ph)  # fmt: skip
                damage.bad_queues.add((topic, qid))
    if running:
        return
    for (topic, qid), qoffs in beyond.items():
        first = min(qoffs)
        out.row("cq_unit_beyond_end", "warning", f"{CONSUME_QUEUE_DIR}/{topic}/{qid}#{first}", f"{len(qoffs)} units from "
                f"queue offset {first} point at or past the end of the commitlog's valid data ({data_end}); the store "
                "drops them on open")  # fmt: skip


def _unmatched_records(results, meta: dict, resume: int, limit: int, running: bool, out: _Collector,
                       damage: Damage) -> int:  # fmt: skip
    """verify's record side (queues.check_records) for the records no unit points
    at; returns how many of them are in flight."""
    per_queue: dict[tuple[str, int], list[tuple[np.ndarray, np.ndarray]]] = {}
    for r in results:
        for q, arrays in r.unmatched_records.items():
            per_queue.setdefault(q, []).append(arrays)
    flying = 0
    for q, parts in per_queue.items():
        qo = np.concatenate([a for a, _ in parts])
        ph = np.concatenate([b for _, b in parts])
        m = meta.get(q)
        if m is not None and m["unreadable"]:
            continue
        late_flight = ph >= limit
        flying += int(late_flight.sum())
        qo, ph = qo[~late_flight], ph[~late_flight]
        if not len(qo):
            continue
        loc = f"{CONSUME_QUEUE_DIR}/{q[0]}/{q[1]}"
        first, end = (m["first"], m["end"]) if m is not None else (0, 0)
        inside = (qo >= first) & (qo < end)
        pre = np.zeros(len(qo), bool)
        if m is not None:
            for a, b in m["pre_blank"]:
                pre |= (qo >= a) & (qo < b)
        hole = (qo < first) | (inside & pre)
        for i in np.flatnonzero(hole).tolist():
            out.row("cq_unit_missing", "error", f"{loc}#{int(qo[i])}", f"the record at commitlog offset {int(ph[i])} "
                    f"(queue offset {int(qo[i])}) has no unit: the queue holds none there", int(ph[i]))  # fmt: skip
        if hole.any():
            damage.bad_queues.add(q)
        after = np.flatnonzero(qo >= end)
        if not after.size:
            continue
        if running:
            out.row("cq_not_written", "info", loc, f"{after.size} records past the last unit on disk "
                    "(the running store may hold their units in memory)")  # fmt: skip
            continue
        late = ph[after] >= resume
        if late.any():
            damage.queues_not_dispatched = True
            out.row("cq_not_dispatched", "warning", loc, f"{int(late.sum())} records from commitlog offset "
                    f"{int(ph[after][late][0])} are not dispatched yet; the store dispatches them when it opens")  # fmt: skip
        if not late.all():
            early = after[~late]
            out.row("cq_unit_missing", "error", f"{loc}#{int(qo[early[0]])}", f"{early.size} records (queue offsets "
                    f"{int(qo[early[0]])}..{int(qo[early[-1]])}, from commitlog offset {int(ph[early[0]])}) have no unit, "
                    f"and the store will not dispatch them again (it resumes at {resume})", int(ph[early[0]]))  # fmt: skip
            damage.bad_queues.add(q)
    return flying


def _index_order(index_meta: list[dict], out: _Collector, damage: Damage) -> None:
    last_phy = -1
    for m in sorted(index_meta, key=lambda m: m["name"]):
        if m.get("entries"):
            if m["first"] < last_phy:
                out.row("index_order", "error", f"index/{m['name']}", f"its first entry points at {m['first']}, before "
                        f"the previous file's last ({last_phy})")  # fmt: skip
                damage.index_bad = True
            last_phy = m["last"]


def _dangling_entries(results, data_end: int, limit: int, running: bool, out: _Collector, damage: Damage,
                      in_flight: dict) -> None:  # fmt: skip
    beyond: dict[str, int] = {}
    for r in results:
        for name, numbers, phys in r.unmatched_entries:
            past = phys >= data_end
            late = phys >= limit
            in_flight["findings"] += int(late.sum())
            b = past & ~late
            if b.any():
                beyond[name] = beyond.get(name, 0) + int(b.sum())
            for num, ph in zip(numbers[~past & ~late].tolist(), phys[~past & ~late].tolist()):
                out.row("index_entry_dangling", "error", f"index/{name}#{num}", f"entry {num} points at commitlog offset "
                        f"{ph}, where no record starts", ph)  # fmt: skip
                damage.index_bad = True
    if running:
        return
    for name, n in sorted(beyond.items()):
        out.row("index_entry_beyond_end", "warning", f"index/{name}", f"{n} entries point at or past the end of the "
                f"commitlog's valid data ({data_end}); the store drops them on open")  # fmt: skip


def _missing_keys(results, limit: int, out: _Collector, damage: Damage, in_flight: dict) -> None:
    for r in results:
        if not r.missing_keys:
            continue
        phys, hashes = r.missing_keys
        late = phys >= limit
        in_flight["findings"] += int(late.sum())
        for ph, h in zip(phys[~late].tolist(), hashes[~late].tolist()):
            out.row("index_key_missing", "error", "index", f"the record at commitlog offset {ph} has a key (hash {h}) "
                    "that no index entry holds; a query by that key misses it", ph)  # fmt: skip
            damage.index_bad = True


# ---------------------------------------------------------------- output


FINDINGS_DIR = "findings"
SUMMARY_FILE = "summary.json"


def write_output(result: ReconcileResult, out_dir: Path) -> None:
    """``out_dir/findings/`` (a Parquet dataset: kind, severity, location, detail,
    file, position, commitlog_offset) and ``out_dir/summary.json``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fdir = out_dir / FINDINGS_DIR
    if fdir.exists():
        shutil.rmtree(fdir)
    fdir.mkdir(parents=True)
    rows = sorted(result.findings, key=lambda r: (-_SEVERITY_RANK[r[1]], r[0], r[2]))
    files, positions = [], []
    for r in rows:
        loc = r[2]
        cut = max(loc.rfind("@"), loc.rfind("#"))
        if cut > 0 and loc[cut + 1 :].isdigit():
            files.append(loc[:cut])
            positions.append(int(loc[cut + 1 :]))
        else:
            files.append(loc)
            positions.append(None)
    table = pa.table(
        {
            "kind": pa.array([r[0] for r in rows], pa.string()),
            "severity": pa.array([r[1] for r in rows], pa.string()),
            "location": pa.array([r[2] for r in rows], pa.string()),
            "detail": pa.array([r[3] for r in rows], pa.string()),
            "file": pa.array(files, pa.string()),
            "position": pa.array(positions, pa.int64()),
            "commitlog_offset": pa.array([r[4] if r[4] >= 0 else None for r in rows], pa.int64()),
        }
    )
    pq.write_table(table, fdir / "part-00000.parquet")
    (fdir / "_SUCCESS").write_bytes(b"")
    tmp = out_dir / (SUMMARY_FILE + ".tmp")
    tmp.write_text(json.dumps(result.summary(), indent=2) + "\n")
    tmp.replace(out_dir / SUMMARY_FILE)


def render_summary(result: ReconcileResult) -> str:
    """The summary table printed at the end of a run."""
    c = result.counts
    mb_s = result.bytes / 1e6 / result.seconds if result.seconds > 0 else 0.0
    lines = [
        f"store      {result.store}",
        f"commitlog  {c['segments']:,} segments in {c['chunks']:,} chunks, {result.messages:,} records, {result.bytes:,} bytes"
        + (f", flushed to {result.flushed_offset:,}" if result.flushed_offset is not None else ""),
        f"queues     {c['queues']:,} queues, {c['units']:,} units",
        f"index      {c['index_files']:,} files, {c['index_entries']:,} entries ({c['index_keys_checked']:,} keys checked)",
        f"config     {c['consumer_offsets']:,} consumer offsets checked",
    ]
    if result.by_kind:
        width = max(len(k) for k in result.by_kind)
        lines.append("")
        lines.append(f"  {'severity':<8}  {'kind':<{width}}  {'count':>9}")
        order = sorted(result.by_kind, key=lambda k: (-_SEVERITY_RANK[result.kind_severity[k]], k))
        for k in order:
            lines.append(f"  {result.kind_severity[k]:<8}  {k:<{width}}  {result.by_kind[k]:>9,}")
        lines.append("")
        shown: dict[str, int] = {}
        for kind, sev, loc, detail, _ in sorted(result.findings, key=lambda r: -_SEVERITY_RANK[r[1]]):
            shown[kind] = shown.get(kind, 0) + 1
            if shown[kind] <= 3:
                lines.append(f"  {sev:<8} {kind:<26} {loc or '-':<44} {detail}")
    if result.repair:
        lines.append("")
        lines.append(f"repair     {result.repair.get('summary', '')}")
    verdict = "OK" if result.ok else "NOT OK"
    lines.append(f"{verdict}: {result.errors:,} errors, {result.by_severity.get('warning', 0):,} warnings in "
                 f"{result.seconds:.2f} s ({mb_s:,.0f} MB/s)")  # fmt: skip
    return "\n".join(lines)


__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "NotAStoreError",
    "ReconcileResult",
    "check_output_dir",
    "check_store_dir",
    "plan",
    "reconcile",
    "render_summary",
    "write_output",
]
