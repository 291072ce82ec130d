"""``mqstore bench append``: P producer threads append a deterministic workload.

Prints one JSON line. ``seconds`` runs from the first append to the last
acknowledgement (the final close, which flushes the async tail, is reported apart as
``close_seconds``); latencies are per append call (a batch is acknowledged at once).
``bytes`` counts encoded records; MB is 10^6 bytes.

``passes``: the workload is sent that many times to the same open store, each pass
the same messages again (a fresh UNIQ_KEY each), after the dispatcher caught up with
the one before. The first pass is cold (its queues are made as their first message
comes), later ones warm (every queue they touch is there). The top-level figures are
the first pass's; ``passes`` lists every pass's (``pass_fields``). After each pass
(dispatcher in-process) the store settles before the next: the queue creator makes
every new queue's files and a thorough flush writes every unit out and syncs, timed
as ``settle_seconds`` (work the pass left to the background: at many new queues,
their directories and files).

Memory (from /proc/self/status, MB): ``rss_mb_before`` with the store open before the
first append, ``rss_mb_after`` once a pass is dispatched; ``rss_anon_mb_*`` the
anonymous part (Python and numpy state: what the queues cost; the rest is mapped file
pages, page cache); ``queues_touched`` and ``rss_anon_kb_per_queue`` = (anon after -
anon before) / queues touched. That growth includes what does not depend on the queues
(index, buffers: tens of MB), so at a few queues the figure is that, not a queue's
cost: compare runs at many and at one topic.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from mqstore.bench.acklog import AckLog
from mqstore.bench.workload import SHAPES, Workload
from mqstore.store.commitlog import CommitLog
from mqstore.store.config import FlushMode, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.messages import PutStatus

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class AppendBench:
    store: Path
    messages: int
    body_size: int = 128
    topics: int = 1
    queues: int = 4
    flush: FlushMode = FlushMode.ASYNC
    producers: int = 1
    batch: int = 1000
    segment_bytes: int = 1 << 30
    ack_log: Path | None = None
    dispatch: bool = True  # run the reput dispatcher in-process (consume queues, index)
    index_hash_slots: int = 5_000_000
    index_max_entries: int = 20_000_000
    shape: str = "round-robin"  # or "per-topic" (workload.py)
    passes: int = 1  # the same workload again on the same store: pass 1 cold, the next ones warm
    store_type: str | None = None  # StoreConfig.store_type: None, the store's own (a new one: "default")

    def __post_init__(self) -> None:
        if self.messages < 0 or self.producers < 1 or self.batch < 1 or self.passes < 1:
            raise ValueError("messages must be >= 0, producers, batch and passes >= 1")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {self.shape!r}")


# What each entry of the result's "passes" holds (the top level repeats pass 1's).
pass_fields = (
    "pass",
    "seconds",
    "msgs_per_s",
    "mb_per_s",
    "p50_ms",
    "p99_ms",
    "acked",
    "flush_timeouts",
    "dispatch_lag_bytes_at_end",
    "dispatch_catch_up_seconds",
    "settle_seconds",
    "queues_touched",
    "rss_mb_before",
    "rss_mb_after",
    "rss_anon_mb_before",
    "rss_anon_mb_after",
    "rss_anon_kb_per_queue",
)


def run_append_bench(b: AppendBench) -> dict:
    workload = Workload(body_size=b.body_size, topics=b.topics, queues=b.queues, shape=b.shape, run=b.batch)
    config = StoreConfig(
        segment_bytes=b.segment_bytes,
        flush_mode=b.flush,
        default_queue_nums=b.queues,
        index_hash_slots=b.index_hash_slots,
        index_max_entries=b.index_max_entries,
        store_type=b.store_type,
    )
    ack = AckLog(b.ack_log) if b.ack_log else None
    cl = MessageStore(b.store, config) if b.dispatch else CommitLog(b.store, config)
    mem0 = memory_mb()
    passes = []
    try:
        for k in range(b.passes):
            passes.append(_run_pass(b, workload, cl, ack) | {"pass": k + 1})
            mem = memory_mb()
            touched = workload.queues_touched(0, b.messages)
            passes[-1] |= {
                "queues_touched": touched,
                "rss_mb_before": mem0["rss"],
                "rss_mb_after": mem["rss"],
                "rss_anon_mb_before": mem0["anon"],
                "rss_anon_mb_after": mem["anon"],
                "rss_anon_kb_per_queue": round((mem["anon"] - mem0["anon"]) * 1024 / max(touched, 1), 3),
            }
    finally:  # closed on an error too (the error then goes on up)
        t1 = time.perf_counter()
        cl.close()
        close_seconds = time.perf_counter() - t1
        if ack is not None:
            ack.close()
    first = passes[0]
    resources = first.pop("resources")
    return (
        {k: first[k] for k in pass_fields if k != "pass"}
        | {
            "messages": b.messages,
            "bytes": first["bytes"],
            "close_seconds": round(close_seconds, 4),
            "dispatch": b.dispatch,
            "flush": b.flush.value,
            "producers": b.producers,
            "batch": b.batch,
            "body_size": b.body_size,
            "topics": b.topics,
            "queues": b.queues,
            "shape": b.shape,
            "segment_bytes": b.segment_bytes,
            **resources,
        }
        | ({"passes": [{k: p[k] for k in pass_fields} for p in passes]} if b.passes > 1 else {})
    )


def _run_pass(b: AppendBench, workload: Workload, cl, ack: AckLog | None) -> dict:
    """Append messages 0 .. b.messages - 1 once and wait for the dispatcher: the pass's figures."""
    lock = threading.Lock()
    next_start = [0]
    latencies: list[float] = []
    totals = {"bytes": 0, "timeouts": 0, "acked": 0}
    errors: list[BaseException] = []
    progress_every = max(b.messages // 10, 1)

    def producer() -> None:
        my_lat: list[float] = []
        nbytes = timeouts = acked = 0
        try:
            while True:
                with lock:
                    start = next_start[0]
                    if start >= b.messages:
                        break
                    count = min(b.batch, b.messages - start)
                    next_start[0] = start + count
                batch = workload.batch(start, count, in_place=True)  # appended before the next is made
                t0 = time.perf_counter()
                res = cl.append(batch)
                my_lat.append(time.perf_counter() - t0)
                nbytes += int(res.sizes.sum())
                if res.status is PutStatus.PUT_OK:
                    acked += count
                    if ack is not None:
                        topics = [batch.topics] * count if isinstance(batch.topics, str) else batch.topics
                        ack.write_lines(
                            [
                                f'{{"msg_id":"{m}","physical_offset":{p},"topic":"{t}","queue_id":{q},"queue_offset":{o}}}\n'
                                for m, p, t, q, o in zip(
                                    res.msg_ids,
                                    res.physical_offsets.tolist(),
                                    topics,
                                    res.queue_ids.tolist(),
                                    res.queue_offsets.tolist(),
                                )
                            ]
                        )
                else:
                    timeouts += count
                if (start // progress_every) != ((start + count) // progress_every):
                    log.info("bench_progress", appended=start + count, of=b.messages)
        except BaseException as e:  # surfaced to the caller after the threads join
            errors.append(e)
        with lock:
            latencies.extend(my_lat)
            totals["bytes"] += nbytes
            totals["timeouts"] += timeouts
            totals["acked"] += acked

    threads = [threading.Thread(target=producer, name=f"producer-{i}") for i in range(b.producers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    lag = cl.dispatcher.lag if b.dispatch else 0
    resources = process_resources()
    if b.dispatch:  # the bound on consume-queue descriptors, and how close the run came to it
        resources.update(
            max_open_queue_files=cl.config.max_open_queue_files, peak_queue_files_open=cl.consume_queues.pool.peak_open
        )
    t1 = time.perf_counter()
    if b.dispatch:
        cl.wait_dispatched(timeout_s=600)
    dispatch_seconds = time.perf_counter() - t1
    if b.dispatch:  # what the pass left behind: queue files still to make, units still to write
        cl.consume_queues.wait_made()
        cl.flush_derived()
    settle_seconds = time.perf_counter() - t1 - dispatch_seconds
    if errors:
        raise errors[0]
    lat_ms = np.array(latencies) * 1000 if latencies else np.zeros(1)
    n = b.messages
    return {
        "bytes": totals["bytes"],
        "seconds": round(seconds, 4),
        "msgs_per_s": round(n / seconds, 1) if seconds else 0.0,
        "mb_per_s": round(totals["bytes"] / 1e6 / seconds, 2) if seconds else 0.0,
        "p50_ms": round(float(np.percentile(lat_ms, 50)), 3),
        "p99_ms": round(float(np.percentile(lat_ms, 99)), 3),
        "acked": totals["acked"],
        "flush_timeouts": totals["timeouts"],
        "dispatch_lag_bytes_at_end": lag,
        "dispatch_catch_up_seconds": round(dispatch_seconds, 4),
        "settle_seconds": round(settle_seconds, 4),
        "resources": resources,
    }


def memory_mb() -> dict[str, float]:
    """This process's resident memory now, MB: all of it, and its anonymous part (Linux;
    -1 where /proc is not there)."""
    out = {"rss": -1.0, "anon": -1.0}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "RssAnon:")):
                    out["rss" if line.startswith("VmRSS") else "anon"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def process_resources() -> dict:
    """Peak RSS, open descriptors and memory maps of this process right now (Linux)."""
    import resource

    try:
        fds = len(os.listdir("/proc/self/fd"))
        with open("/proc/self/maps") as f:
            maps = sum(1 for _ in f)
    except OSError:
        fds = maps = -1
    return {
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "open_files": fds,
        "maps": maps,
    }


__all__ = ["AppendBench", "memory_mb", "pass_fields", "process_resources", "run_append_bench"]
