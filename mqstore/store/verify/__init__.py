"""``verify``: check a store's files against each other, read-only, in one process.

Usable without the CLI::

    report = verify_store("./data/s1")
    report.ok, [f.detail for f in report.findings]

It never takes the store's lock and never writes a byte: segments and index files
are mapped read-only, everything else is read with plain reads. A store that is
running (its lock is held, see lockfile.lock_holder) is read as it is on disk; what
a running store has in flight (its tail, units buffered in memory) is reported as
info, not as damage.

Order matters: the checkpoint and config files first (they may only lag the data
read after them), then the commitlog walk (records.py), which every other check
compares against: consume queues (queues.py), index files (index.py), checkpoint
and consumer offsets (state.py). ``VerifyReport.damage`` carries what ``repair``
needs (mqstore.store.repair).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import structlog

from mqstore.errors import ConfigError
from mqstore.formats.checkpoint import Checkpoint
from mqstore.store.commitlog import COMMITLOG_DIR
from mqstore.store.config import StoreConfig
from mqstore.store.layout import LAYOUT_FILE, layout_for_reading
from mqstore.store.lockfile import ABORT_FILE, builder_files, lock_holder
from mqstore.store.verify.index import check_index, index_end_offset
from mqstore.store.verify.queues import check_queue_ends, check_records, read_queues
from mqstore.store.verify.records import RecordTable, walk_commitlog
from mqstore.store.verify.report import Damage, Finding, Findings, Severity, VerifyReport
from mqstore.store.verify.state import check_checkpoint, check_configs, read_state

log = structlog.get_logger(__name__)

IndexKeys = Literal["full", "sample", "off"]
SAMPLE_EVERY = 16  # index_keys="sample": the keys of every 16th record are checked...
SAMPLE_AFTER = 1_000_000  # ...after those of the first million


def verify_store(
    store_dir: str | Path, *, index_keys: IndexKeys = "sample", locked_by_caller: bool = False
) -> VerifyReport:
    """Check every file of the store at ``store_dir``; see the module docstring.

    ``index_keys``: check that the keys of every record (``full``), of the first
    million and then every 16th (``sample``, the default), or of none (``off``)
    are in the index. ``locked_by_caller``: the caller holds the store's lock
    (repair), so the store is not running. Raises FileNotFoundError if the
    directory holds no store."""
    store = Path(store_dir)
    if not (store / COMMITLOG_DIR).is_dir():
        raise FileNotFoundError(f"no store at {store} (it has no {COMMITLOG_DIR}/ directory)")
    t0 = time.perf_counter()
    findings, damage = Findings(), Damage()
    holder = None if locked_by_caller else lock_holder(store)
    running = holder is not None
    if running:
        findings.info(
            "store_running",
            "lock",
            f"the store is open in process {holder or '(another namespace)'}; verify reads the files as they are now",
        )
    elif (store / ABORT_FILE).exists():
        findings.info(
            "unclean_shutdown", ABORT_FILE, "the store did not shut down cleanly; it recovers when it next opens"
        )
    cfg = _layout(store, findings)
    state = read_state(store)
    table = walk_commitlog(
        store, cfg.segment_bytes, findings, damage, index_sample=index_sample_for(index_keys), running=running
    )
    damage.newest_store_timestamp = table.newest_store_timestamp
    # The index is checked against the record table on a thread of its own while the
    # consume queues are (both are numpy and kernels that release the GIL); its
    # findings and damage are kept apart and taken after the queues', in that order.
    index_findings, index_damage = Findings(), Damage()
    with ThreadPoolExecutor(1, thread_name_prefix="verify-index") as pool:
        log.info("verify_progress", stage="consume_queues_and_index", records=len(table.phys))
        index_job = pool.submit(
            check_index,
            store,
            cfg.index_hash_slots,
            cfg.index_max_entries,
            table,
            index_findings,
            index_damage,
            running=running,
        )
        queues = read_queues(store, cfg.consume_queue_file_bytes, table, findings, damage, running=running)
        resume = resume_offset(
            store, table, queues, damage, state.checkpoint, clean=running or not (store / ABORT_FILE).exists()
        )
        queue_max = check_records(queues, table, findings, damage, resume_offset=resume, running=running)
        check_queue_ends(
            store,
            cfg.consume_queue_file_bytes,
            queues,
            damage.commitlog_cut if damage.commitlog_cut is not None else table.data_end,
            table.min_offset,
            findings,
            damage,
            clean=not running
            and not (store / ABORT_FILE).exists()
            and not (store / builder_files("consumequeue")[1]).exists(),
        )
        index = index_job.result()
    findings.merge(index_findings)
    damage.index_bad = index_damage.index_bad
    damage.stray_files.extend(index_damage.stray_files)
    check_checkpoint(state, table.newest_store_timestamp, findings, damage)
    offsets_checked = check_configs(state, queue_max, findings, damage)
    counts = {
        "segments": table.segments,
        "records": len(table.phys) - table.corrupt,
        "queues": len(queues),
        "units": sum(len(q.units) for q in queues.values()),
        "index_files": index.files,
        "index_entries": index.entries,
        "index_keys_checked": index.keys_checked,
        "consumer_offsets": offsets_checked,
        "errors": findings.count(Severity.ERROR),
        "warnings": findings.count(Severity.WARNING),
    }
    seconds = time.perf_counter() - t0
    messages, data_bytes = len(table.phys) - table.corrupt, int(table.sizes.sum())
    report = VerifyReport(store, findings.listed(), counts, messages, data_bytes, seconds, damage)
    log.info("store_verified", store=str(store), ok=report.ok, seconds=round(seconds, 3), **counts)
    return report


def _layout(store: Path, findings: Findings) -> StoreConfig:
    """The shaping values verify reads files with (the layout file's, else the
    files' own sizes); an unreadable layout file is an error the store would stop at."""
    try:
        return layout_for_reading(store)
    except ConfigError as e:
        findings.error("layout_unreadable", str(LAYOUT_FILE), f"{e}; the store refuses to open")
        return StoreConfig()


def index_sample_for(index_keys: IndexKeys) -> tuple[int, int]:
    """The walk's ``index_sample`` for an ``index_keys`` setting: (every n-th record,
    after how many records sampling starts)."""
    return {"off": (0, 0), "full": (1, 0), "sample": (SAMPLE_EVERY, SAMPLE_AFTER)}[index_keys]


def resume_offset(
    store: Path, table: RecordTable, queues: dict, damage: Damage, checkpoint: Checkpoint | None, *, clean: bool
) -> int:
    """Where the store's dispatcher starts when it next opens (the builders' resume
    rule): the newest consume-queue unit, no later than the index's end, and after
    an unclean exit no later than the segment abnormal recovery starts from. Units
    and entries past the commitlog's valid end are cut first, as the store does.

    Of ``table`` only ``min_offset``, ``data_end`` and ``first_store_timestamps`` are
    read, of each queue only ``last_end_below(limit)`` (the Spark jobs pass stand-ins
    built from their per-chunk results)."""
    lo = table.min_offset
    end = damage.commitlog_cut if damage.commitlog_cut is not None else table.data_end
    candidates = [max(max((q.last_end_below(end) for q in queues.values()), default=-1), lo)]
    index_end = index_end_offset(store)
    if index_end is not None:
        candidates.append(max(min(index_end, end), lo))
    if not clean:
        limit = (checkpoint or Checkpoint()).min_timestamp()
        starts = [b for b, ts in sorted(table.first_store_timestamps.items()) if ts != 0 and ts <= limit]
        candidates.append(starts[-1] if starts else lo)
    return max(min(candidates), lo)


__all__ = ["Damage", "Finding", "Severity", "VerifyReport", "index_sample_for", "resume_offset", "verify_store"]
