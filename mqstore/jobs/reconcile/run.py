"""Reconcile's run: the two Spark jobs and the driver code around them.

Job 1 checks groups of consume queues (:func:`_derived_task`); job 2 checks each
index file and walks each commitlog chunk, joined with the units and index entries
that point into it (:func:`_work_task`; the files that may hold them are sent once,
as the broadcast :class:`FileTable`). The functions the tasks run are module-level
here: Spark's workers unpickle them by this module's path. :func:`reconcile` plans
(planning.py), runs the jobs, assembles the result (assemble.py) and writes it
(write.py).
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
from mqstore.jobs.units import (
    ChunkResult,
    ChunkSpec,
    check_chunk,
    check_index_file,
    check_queues,
)
from mqstore.store.config import StoreConfig
from mqstore.store.verify import index_sample_for
from mqstore.store.verify.index import index_end_offset
from mqstore.store.verify.state import read_state

log = structlog.get_logger(__name__)


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

    def arr(v):
        return np.array(v, np.int64)

    return FileTable(qf, arr(qlo), arr(qhi), xf, arr(xlo), arr(xhi))


def _work_task(
    w: tuple,
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
    return _chunk_task(arg, chunks, files, running, index_sample, index_end, flushed_ts)


def _chunk_task(
    i: int,
    chunks: list[ChunkSpec],
    files,
    running: bool,
    index_sample: tuple[int, int],
    index_end: int,
    flushed_ts: int,
) -> ChunkResult:
    spec = chunks[i]
    queue_files, index_files_ = files.value.for_chunk(spec)
    return check_chunk(
        spec,
        queue_files,
        index_files_,
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
        queues=len(p.queues),
        index_files=len(p.index_paths),
        running=p.running,
    )
    cp = state.checkpoint
    flushed_ts = cp.physic_msg_timestamp if cp is not None and cp.confirm_phy_offset <= 0 else 0
    index_end = index_end_offset(store)
    index_end = -1 if index_end is None else index_end
    parallelism = max(2, sc.defaultParallelism)
    queue_tasks = [("queues", g) for g in queue_groups(store, p.queues, 2 * parallelism)]
    cfg, store_s, running = p.cfg, str(store), p.running
    chunks = p.chunks
    sample = index_sample_for(index_keys)
    with _Progress(sc, p.commitlog_bytes) as progress:
        progress.stage = "consume_queues"
        derived_meta: list[tuple] = []
        if queue_tasks:
            derived_meta = (
                sc.parallelize(queue_tasks, len(queue_tasks))
                .map(lambda t: _derived_task(t, store_s, cfg, running))
                .collect()
            )
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
