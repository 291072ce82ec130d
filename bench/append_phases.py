"""Where ``bench append``'s producer spends its time: the same loop (one producer, async
flush, a CommitLog alone as with --no-dispatch, batches of 1,000 of the workload), with
the wall time of each phase in ns per message: making the batch (``workload``), the
encoder's ``prepare`` (validation and the encode kernel) and the rest of the append
(queue offsets, placement, patch and the ``pwrite`` of the batch, under the put lock).
Usage: .venv/bin/python bench/append_phases.py STORE_DIR [--body-size 1024] [--messages N]
(STORE_DIR is deleted first and after.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import time

from mqstore.bench.workload import Workload
from mqstore.logging import configure_logging
from mqstore.store.commitlog import CommitLog
from mqstore.store.config import FlushMode, StoreConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--messages", type=int, default=1_000_000)
    a = ap.parse_args()
    configure_logging(level="warning")
    shutil.rmtree(a.store, ignore_errors=True)
    w = Workload(body_size=a.body_size, topics=1, queues=4)
    cl = CommitLog(a.store, StoreConfig(segment_bytes=1 << 30, flush_mode=FlushMode.ASYNC, default_queue_nums=4))
    enc, prepared = cl._encoder, [0.0]
    real_prepare = enc.prepare

    def prepare(batch):
        t = time.perf_counter()
        try:
            return real_prepare(batch)
        finally:
            prepared[0] += time.perf_counter() - t

    enc.prepare = prepare
    making = appending = 0.0
    nbytes = 0
    t0 = time.perf_counter()
    for start in range(0, a.messages, 1000):
        t1 = time.perf_counter()
        batch = w.batch(start, min(1000, a.messages - start), in_place=True)
        t2 = time.perf_counter()
        nbytes += int(cl.append(batch).sizes.sum())
        t3 = time.perf_counter()
        making += t2 - t1
        appending += t3 - t2
    total = time.perf_counter() - t0
    cl.close()
    shutil.rmtree(a.store, ignore_errors=True)
    per = 1e9 / a.messages
    print(
        json.dumps(
            {
                "body_size": a.body_size,
                "mb_per_s": round(nbytes / total / 1e6, 1),
                "ns_per_message": round(total * per),
                "workload": round(making * per),
                "prepare": round(prepared[0] * per),
                "rest_of_append": round((appending - prepared[0]) * per),
            }
        )
    )


if __name__ == "__main__":
    main()
