"""Reconcile's run: the two Spark jobs and the driver code around them.

Job 1 checks groups of consume queues; job 2 checks each index file and walks each
commitlog chunk, joined with the units and the index entries that point into it
(the index files that may hold them are sent once, in the broadcast
:class:`FileTable`). How a chunk task gets its units depends on the number of
queues (one rule, ``Plan.chunks_read_queues``: up to
planning.QUEUES_READ_BY_CHUNKS queues, and never for a RocksDB store):

* few queues: job 1 (:func:`_queue_files_task`) sends the driver each queue file's
  range of commitlog offsets, the broadcast carries them, and each chunk task reads
  the units that point into its chunk from the few files that hold some
  (units.read_units_in);
* many queues: job 1 (:func:`_queue_task`) shuffles each chunk the units that point
  into it, and job 2 runs on that shuffle's output, so no chunk task opens a queue
  file.

The functions the tasks run are module-level here: Spark's workers unpickle them by
this module's path. :func:`reconcile` plans (planning.py), runs the jobs, assembles
the result (assemble.py) and writes it (write.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np
import structlog

from mqstore.jobs.reconcile.assemble import assemble
from mqstore.jobs.reconcile.planning import (
    DEFAULT_CHUNK_BYTES,
    check_output_dir,
    check_store_dir,
    plan,
    queue_groups,
)
from mqstore.jobs.reconcile.result import ReconcileResult
from mqstore.jobs.reconcile.write import write_output
from mqstore.jobs.unit_columns import UnitColumns
from mqstore.jobs.units import (
    ChunkResult,
    ChunkSpec,
    check_chunk,
    check_index_file,
    check_queues,
    check_rocks_queues,
    read_units_in,
)
from mqstore.store.config import StoreConfig
from mqstore.store.verify import index_sample_for
from mqstore.store.verify.index import index_end_offset
from mqstore.store.verify.state import read_state

log = structlog.get_logger(__name__)


# ---------------------------------------------------------------- Spark tasks (run on workers)


def _derived_task(task: tuple, store: str, cfg: StoreConfig, running: bool):
    _kind, (path, last) = task
    return ("index", check_index_file(path, cfg.index_hash_slots, cfg.index_max_entries, in_flux=running and last))


ROCKS = "rocksdb"  # the queue task of a defaultRocksDB store: every queue, from its one database


def _queue_task(
    group: list | str, store: str, cfg: StoreConfig, chunk_bounds: list[tuple[int, int, int]], meta_key: int
):
    """A group of queues checked (check_queues; ROCKS: check_rocks_queues), as
    shuffle records: (``meta_key``, the findings and per-queue metadata) for the
    driver, and (a chunk's work position, the units that point into that chunk)
    for each chunk task."""
    res = check_rocks_queues(store) if group == ROCKS else check_queues(store, cfg.consume_queue_file_bytes, group)
    units = res.pop("units")
    return [(meta_key, ("queues", res)), *units.by_chunk(chunk_bounds)]


def _queue_files_task(group: list, store: str, cfg: StoreConfig) -> tuple:
    """A group of queues checked, with each queue file's range of commitlog offsets
    instead of the units (few queues: the chunk tasks read the units themselves)."""
    return ("queues", check_queues(store, cfg.consume_queue_file_bytes, group, with_units=False))


def _overlapping(rows: list[tuple], lo: np.ndarray, hi: np.ndarray, spec: ChunkSpec) -> list[tuple]:
    end = (1 << 62) if spec.open_end else spec.end
    return [rows[k] for k in np.flatnonzero((hi >= spec.start) & (lo < end)).tolist()]


@dataclass
class FileTable:
    """Which index files (and, when chunk tasks read their units themselves, which
    queue files) hold entries for which commitlog range: sent to every chunk task
    once (a broadcast)."""

    files: list[tuple]  # index files: (name, path, hash slots, entries)
    lo: np.ndarray
    hi: np.ndarray
    queue_files: list[tuple]  # check_queues' "files" rows; none when units are shuffled
    queue_lo: np.ndarray
    queue_hi: np.ndarray

    def for_chunk(self, spec: ChunkSpec) -> list[tuple]:
        return _overlapping(self.files, self.lo, self.hi, spec)

    def queues_for_chunk(self, spec: ChunkSpec) -> list[tuple]:
        return _overlapping(self.queue_files, self.queue_lo, self.queue_hi, spec)


def _file_table(index_paths: list[Path], cfg: StoreConfig, queue_files: list[tuple]) -> FileTable:
    """Index files from their headers (the range of commitlog offsets they cover
    and their entry count), read here; queue files as job 1 listed them."""
    from mqstore.formats.index_file import (
        INDEX_HEADER_BYTES,
        IndexHeader,
        index_file_size,
    )

    xf, xlo, xhi = [], [], []
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
    return FileTable(
        xf,
        np.array(xlo, np.int64),
        np.array(xhi, np.int64),
        queue_files,
        np.array([f[6] for f in queue_files], np.int64),
        np.array([f[7] for f in queue_files], np.int64),
    )


def _work_task(
    w: tuple,
    units: list[UnitColumns] | None,
    store: str,
    cfg: StoreConfig,
    chunks: list[ChunkSpec],
    files,
    running: bool,
    index_sample: tuple[int, int],
    index_end: int,
    flushed_ts: int,
):
    kind, arg = w
    if kind == "index":
        return _derived_task(w, store, cfg, running)
    spec = chunks[arg]
    if units is None:  # few queues: read from their files here
        end = (1 << 62) if spec.open_end else spec.end
        mine = read_units_in(files.value.queues_for_chunk(spec), spec.start, end)
    else:
        mine = UnitColumns.concat(units)
    return check_chunk(
        spec,
        mine,
        files.value.for_chunk(spec),
        running=running,
        index_sample=index_sample,
        index_end=index_end,
        flushed_ts=flushed_ts,
    )


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
                log.info(
                    "reconcile_progress",
                    stage=self.stage,
                    tasks_done=done,
                    tasks=total,
                    seconds=round(time.perf_counter() - self._t0, 1),
                )


# ---------------------------------------------------------------- the run (driver)


def reconcile(
    spark,
    store: str | Path,
    *,
    output: str | Path | None = None,
    repair: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    index_keys: str = "full",
) -> ReconcileResult:
    """Reconcile the store at ``store`` on ``spark`` (see the module docstring); with
    ``output``, write the findings dataset and summary.json there, and with
    ``repair`` the rebuilt consume queues and index files under ``output/repair``."""
    t0 = time.perf_counter()
    store = check_store_dir(store)
    out_dir = check_output_dir(output) if output is not None else None
    if repair and out_dir is None:
        raise ValueError("--repair needs --output: rebuilt files are written there, never into the store")
    state = read_state(store)  # first: the checkpoint may only lag what is read after it
    p = plan(store, chunk_bytes)
    sc = spark.sparkContext
    log.info(
        "reconcile_started",
        store=str(store),
        segments=len(p.segments),
        chunks=len(p.chunks),
        commitlog_mb=round(p.commitlog_bytes / 1e6, 1),
        queues=None if p.rocks else len(p.queues),
        store_type=p.store_type,
        index_files=len(p.index_paths),
        running=p.running,
    )
    cp = state.checkpoint
    flushed_ts = cp.physic_msg_timestamp if cp is not None and cp.confirm_phy_offset <= 0 else 0
    index_end = index_end_offset(store)
    index_end = -1 if index_end is None else index_end
    parallelism = max(2, sc.defaultParallelism)
    queue_tasks = [ROCKS] if p.rocks else queue_groups(store, p.queues, 2 * parallelism)
    cfg, store_s, running = p.cfg, str(store), p.running
    chunks = p.chunks
    sample = index_sample_for(index_keys)
    # Work items, one partition each: the index files' own checks first (one long
    # task each; the commitlog chunks fill the other cores meanwhile), then the
    # chunks; the last partition carries the queue tasks' findings and metadata.
    work = [("index", (str(path), i == len(p.index_paths) - 1)) for i, path in enumerate(p.index_paths)]
    first_chunk = len(work)
    work += [("chunk", i) for i in range(len(chunks))]
    meta_key = len(work)
    bounds = [(first_chunk + c.number, c.start, (1 << 62) if c.open_end else c.end) for c in chunks]
    shuffled, queue_files = None, []
    with _Progress(sc, p.commitlog_bytes) as progress:
        progress.stage = "consume_queues"
        if p.chunks_read_queues:
            # Job 1 reads every queue and lists its files' commitlog ranges.
            derived_meta: list[tuple] = (
                sc.parallelize(queue_tasks, len(queue_tasks))
                .map(lambda g: _queue_files_task(g, store_s, cfg))
                .collect()
                if queue_tasks
                else []
            )
            queue_files = [f for _, res in derived_meta for f in res.pop("files")]
        else:
            # Job 1 reads every queue and shuffles each chunk its units (so no chunk
            # task opens a queue file); job 2 reuses that shuffle's output.
            shuffled = (
                sc.parallelize(queue_tasks, max(1, len(queue_tasks)))
                .flatMap(lambda g: _queue_task(g, store_s, cfg, bounds, meta_key))
                .partitionBy(meta_key + 1, lambda k: k)
            )
            derived_meta = sc.runJob(shuffled, lambda it: [v for _, v in it], [meta_key])
        t1 = time.perf_counter()
        log.info("reconcile_progress", stage="consume_queues", done=True, seconds=round(t1 - t0, 2))
        progress.stage = "commitlog_and_index"
        results: list[ChunkResult] = []
        if work:
            files = sc.broadcast(_file_table(p.index_paths, cfg, queue_files))
            if shuffled is None:
                done = (
                    sc.parallelize(work, len(work))
                    .map(
                        lambda w: _work_task(
                            w, None, store_s, cfg, chunks, files, running, sample, index_end, flushed_ts
                        )
                    )
                    .collect()
                )
            else:
                done = sc.runJob(
                    shuffled.mapPartitionsWithIndex(
                        lambda i, it: [
                            _work_task(
                                work[i],
                                [u for _, u in it],
                                store_s,
                                cfg,
                                chunks,
                                files,
                                running,
                                sample,
                                index_end,
                                flushed_ts,
                            )
                        ]
                    ),
                    lambda it: list(it),
                    list(range(len(work))),
                )
            files.unpersist()
            derived_meta += [d for d in done if isinstance(d, tuple)]
            results = [d for d in done if isinstance(d, ChunkResult)]
    t2 = time.perf_counter()
    walked = sum(r.bytes for r in results)
    log.info(
        "reconcile_progress",
        stage="commitlog_and_index",
        done=True,
        seconds=round(t2 - t1, 2),
        mb_per_s=round(walked / 1e6 / max(t2 - t1, 1e-9), 1),
    )
    result = assemble(p, state, derived_meta, sorted(results, key=lambda r: r.number), index_end)
    result.seconds = time.perf_counter() - t0
    result.counts["commitlog_seconds"] = round(t2 - t1, 3)
    if repair:
        from mqstore.jobs.rebuild import rebuild

        result.repair = rebuild(spark, p, result, out_dir / "repair", state)
        result.seconds = time.perf_counter() - t0
    if out_dir is not None:
        write_output(result, out_dir)
        result.output = out_dir
    log.info(
        "reconcile_done",
        store=str(store),
        ok=result.ok,
        errors=result.errors,
        findings=sum(result.by_kind.values()),
        messages=result.messages,
        mb=round(result.bytes / 1e6, 1),
        seconds=round(result.seconds, 2),
    )
    return result


__all__ = ["FileTable", "reconcile"]
