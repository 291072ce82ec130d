"""``mqstore bench consume`` and ``mqstore bench query``: reading a store back.

consume: pull every queue of every topic from its min offset to its end, in batches
of ``batch`` messages, as encoded records (what a broker sends to clients).
query: ``lookups`` random key lookups of keys the store holds (sampled from random
queue offsets); the timed part is the index lookup (key -> commitlog offsets, up to
64, newest first); ``found`` counts lookups whose answer holds the sampled message.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import structlog

from mqstore.store.message_store import MessageStore

log = structlog.get_logger(__name__)


def run_consume_bench(store: Path, *, batch: int = 1000) -> dict:
    with MessageStore(store, background_dispatch=False) as s:
        queues = s.consume_queues.keys()
        messages = nbytes = 0
        t0 = time.perf_counter()
        for topic, qid in queues:
            offset = s.consume_queues.find(topic, qid).min_offset
            while True:
                res = s.pull_raw(topic, qid, offset, max_count=batch)
                if res.next_offset == offset:
                    break
                messages += len(res.messages)
                nbytes += res.messages.nbytes
                offset = res.next_offset
        seconds = time.perf_counter() - t0
    return {
        "messages": messages,
        "bytes": nbytes,
        "queues": len(queues),
        "seconds": round(seconds, 4),
        "msgs_per_s": round(messages / seconds, 1) if seconds else 0.0,
        "mb_per_s": round(nbytes / 1e6 / seconds, 2) if seconds else 0.0,
    }


def run_query_bench(store: Path, *, lookups: int = 10_000, seed: int = 7) -> dict:
    rng = random.Random(seed)
    with MessageStore(store, background_dispatch=False) as s:
        queues = [(t, q) for t, q in s.consume_queues.keys() if s.consume_queues.find(t, q).max_offset > 0]
        if not queues:
            raise ValueError(f"{store} holds no messages to look up")
        probes = []
        for _ in range(lookups):  # keys the store holds: from random messages
            topic, qid = rng.choice(queues)
            cq = s.consume_queues.find(topic, qid)
            rec = s.read_queue_offset(topic, qid, rng.randrange(cq.min_offset, cq.max_offset))
            keys = (rec.keys or "").split()
            probes.append((topic, keys[0] if keys else rec.unique_key, rec.physical_offset))  # the first KEYS entry
        found = 0
        lat = np.empty(len(probes))
        query = s.index.query
        for i, (topic, key, offset) in enumerate(probes):
            t0 = time.perf_counter()
            hits = query(topic, key, max_num=64)  # the timed part: the index lookup
            lat[i] = time.perf_counter() - t0
            found += offset in hits
        entries = s.index.stats().entries if s.index is not None else 0
    us = lat * 1e6
    return {
        "lookups": len(probes),
        "found": found,
        "indexed_keys": entries,
        "p50_us": round(float(np.percentile(us, 50)), 2),
        "p99_us": round(float(np.percentile(us, 99)), 2),
        "mean_us": round(float(us.mean()), 2),
    }


__all__ = ["run_consume_bench", "run_query_bench"]
