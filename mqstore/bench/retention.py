"""``mqstore bench retention``: append latency while retention deletes old segments,
against the same appends with retention idle.

The store is filled with ``fill_segments`` segments, then two equal rounds of appends
are timed per batch: one with retention idle, one while a retention pass deletes
every segment but the last few (time-expired: file_reserved_hours=0), with the consume
queues and index cleaned behind it, as the background cleaner would. Prints one JSON
line: p50/p99 per batch in both rounds and their ratio (the goal: p99 during deletes
within 1.5x of idle).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mqstore.bench.workload import Workload
from mqstore.store.config import StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.retention import RetentionConfig

_EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


@dataclass(frozen=True, kw_only=True)
class RetentionBench:
    store: Path
    segment_bytes: int = 64 << 20
    fill_segments: int = 12
    round_messages: int = 300_000
    body_size: int = 128
    topics: int = 4
    batch: int = 200


def run_retention_bench(b: RetentionBench) -> dict:
    if (b.store / "commitlog").exists():
        raise ValueError(f"{b.store} already holds a commitlog; give an empty directory")
    w = Workload(body_size=b.body_size, topics=b.topics, queues=4)
    cfg = StoreConfig(segment_bytes=b.segment_bytes, index_hash_slots=500_000, index_max_entries=2_000_000)
    retention = RetentionConfig(file_reserved_hours=0, delete_when=_EVERY_HOUR, max_deletes_per_run=b.fill_segments)
    store = MessageStore(b.store, cfg, retention=retention)
    store.retention.stop()  # the bench runs the cleaner itself, when it says
    try:
        i = 0
        while store.commitlog.wrote_offset < b.fill_segments * b.segment_bytes:
            store.append(w.batch(i, 1000))
            i += 1000
        store.wait_dispatched(timeout_s=600)
        idle, i = _timed_round(store, w, i, b)
        report: dict = {}

        def clean() -> None:
            t = time.perf_counter()
            rep = store.retention.run_once(int(time.time() * 1000))
            report.update(deleted=len(rep.deleted), retention_seconds=round(time.perf_counter() - t, 3))

        cleaner = threading.Thread(target=clean, name="bench-retention")
        cleaner.start()
        busy, i = _timed_round(store, w, i, b, while_alive=cleaner)
        cleaner.join()
    finally:
        store.close()
    p99_idle, p99_busy = float(np.percentile(idle, 99)), float(np.percentile(busy, 99))
    return {
        "segments_deleted": report.get("deleted", 0),
        "retention_seconds": report.get("retention_seconds"),
        "batches_while_deleting": len(busy),
        "p50_idle_ms": round(float(np.percentile(idle, 50)), 3),
        "p99_idle_ms": round(p99_idle, 3),
        "p50_deleting_ms": round(float(np.percentile(busy, 50)), 3),
        "p99_deleting_ms": round(p99_busy, 3),
        "p99_ratio": round(p99_busy / p99_idle, 3) if p99_idle else None,
        "segment_bytes": b.segment_bytes,
        "batch": b.batch,
    }


def _timed_round(
    store: MessageStore, w: Workload, i: int, b: RetentionBench, while_alive: threading.Thread | None = None
) -> tuple[np.ndarray, int]:
    """Append ``round_messages`` timing each batch in ms; with ``while_alive``, append
    while that thread runs instead (only batches that overlap the deletes count)."""
    lat = []
    done = 0
    while (done < b.round_messages) if while_alive is None else (while_alive.is_alive() or not lat):
        batch = w.batch(i, b.batch)
        t = time.perf_counter()
        store.append(batch)
        lat.append((time.perf_counter() - t) * 1000)
        i += b.batch
        done += b.batch
    return np.array(lat), i


__all__ = ["RetentionBench", "run_retention_bench"]
