"""``mqstore bench reopen``: open an existing store (after a clean close or a kill -9),
check a sample of its queues against the commitlog, optionally let retention delete
the oldest segments, and report what it cost. Made for stores with many topics: the
many-topics issue asks that restart, recovery and retention work on 20,000 topics
inside default OS limits (1,024 open files, 65,530 memory maps), which this reports.

Prints one JSON line: open_seconds (recovery, consume-queue load and catch-up
dispatch), clean_shutdown, queues, sampled_queues, checked_units, mismatches,
retention figures, close_seconds, and peak open files / maps / RSS.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from mqstore.bench.append import process_resources
from mqstore.store.message_store import MessageStore
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)

_EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


@dataclass(frozen=True, kw_only=True)
class ReopenBench:
    store: Path
    sample: int = 1000  # queues whose every unit is checked against its record
    delete_segments: int = 0  # let retention delete up to this many of the oldest segments
    seed: int = 7


def run_reopen_bench(b: ReopenBench) -> dict:
    if not (b.store / "commitlog").is_dir():
        raise FileNotFoundError(f"{b.store} has no commitlog/ directory: is it a store?")
    retention = RetentionConfig(
        file_reserved_hours=0, delete_when=_EVERY_HOUR, max_deletes_per_run=b.delete_segments or 1
    )
    t0 = time.perf_counter()
    store = MessageStore(b.store, retention=retention)
    open_seconds = time.perf_counter() - t0
    store.retention.stop()  # retention runs once, below, where the bench says: not also in the background
    try:
        store.wait_dispatched(timeout_s=600)
        keys = store.consume_queues.keys()
        rng = random.Random(b.seed)
        sample = rng.sample(keys, min(b.sample, len(keys)))
        t1 = time.perf_counter()
        checked, mismatches = _check_queues(store, sample)
        check_seconds = time.perf_counter() - t1
        log.info("reopen_checked", queues=len(sample), units=checked, mismatches=mismatches)
        retention_report = {}
        if b.delete_segments:
            t2 = time.perf_counter()
            rep = store.retention.run_once(int(time.time() * 1000))
            after_checked, after_mismatches = _check_queues(store, sample)
            retention_report = {
                "retention_seconds": round(time.perf_counter() - t2, 3),
                "segments_deleted": len(rep.deleted),
                "min_offset_after": rep.min_offset_after,
                "queue_files_deleted": sum(len(v) for v in rep.consume_queue_files_deleted.values()),
                "queue_mins_moved": len(rep.queue_min_offsets),
                "checked_units_after_retention": after_checked,
                "mismatches_after_retention": after_mismatches,
            }
        resources = process_resources()
    finally:
        t3 = time.perf_counter()
        store.close()
    return {
        "store": str(b.store),
        "open_seconds": round(open_seconds, 3),
        "clean_shutdown": store.commitlog.recovery.clean_shutdown,
        "queues": len(keys),
        "sampled_queues": len(sample),
        "checked_units": checked,
        "mismatches": mismatches,
        "check_seconds": round(check_seconds, 3),
        **retention_report,
        "close_seconds": round(time.perf_counter() - t3, 3),
        "max_open_queue_files": store.config.max_open_queue_files,
        "peak_queue_files_open": store.consume_queues.pool.peak_open,
        **resources,
    }


def _check_queues(store: MessageStore, keys: list[tuple[str, int]]) -> tuple[int, int]:
    """Pull every sampled queue from its min offset to its end; each record must carry
    the queue's topic and id and the queue offset asked for. Returns (units, mismatches)."""
    units = mismatches = 0
    for topic, qid in keys:
        cq = store.consume_queues.find(topic, qid)
        offset, end = cq.min_offset, cq.max_offset
        while offset < end:
            got = store.pull(topic, qid, offset, max_count=256)
            if got.next_offset <= offset:
                mismatches += end - offset  # the queue claims units it cannot serve
                break
            for rec in got.records:
                if rec.topic != topic or rec.queue_id != qid or not offset <= rec.queue_offset < got.next_offset:
                    mismatches += 1
            units += len(got.records)
            mismatches += (got.next_offset - offset) - len(got.records)  # units whose record is gone
            offset = got.next_offset
    return units, mismatches


__all__ = ["ReopenBench", "run_reopen_bench"]
