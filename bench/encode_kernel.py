"""The append encoder alone, one core: the compiled kernel (store.record_batch.BatchEncoder,
mqstore/kernels/_encode.pyx) next to its reference model (tests/kernels/model_encode.py),
in ns per record, for batches of the bench workload (1 topic, 4 queues, TAGS, KEYS, a
generated UNIQ_KEY). Times ``prepare`` (validation, properties, head fields, body CRC)
plus what the put lock adds (queue offsets are not included: the same for both): the
model's render into bytes, the kernel's patch of the buffer. The workload's batches
are made before the clock starts, their bodies in one ``Bodies`` buffer each (as the
workload makes them) or, with ``--bodies list``, one bytes object per message. Best of 3.
Usage: .venv/bin/python bench/encode_kernel.py [--body-size 128] [--messages N] [--batch 1000] [--bodies list]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.kernels (the model)

from mqstore.bench.workload import Workload  # noqa: E402
from mqstore.store.clock import SystemClock  # noqa: E402
from mqstore.store.config import StoreConfig  # noqa: E402
from mqstore.store.record_batch import BatchEncoder  # noqa: E402
from tests.kernels.model_encode import BatchEncoder as ModelBatchEncoder  # noqa: E402
from tests.kernels.model_encode import model_records  # noqa: E402


def run_kernel(enc: BatchEncoder, batches) -> None:
    for b in batches:
        prep = enc.prepare(b)
        n = prep.n
        phys = np.cumsum(prep.sizes)
        prep.records.patch(0, n, prep.queue_ids, phys, phys, 1)
        enc.recycle(prep)


def run_model(enc: ModelBatchEncoder, batches) -> None:
    for b in batches:
        prep = enc.prepare(b)
        phys = np.cumsum(prep.sizes)
        model_records(prep, phys, prep.queue_ids, phys, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--body-size", type=int, default=128)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--bodies", choices=["buffer", "list"], default="buffer")
    a = ap.parse_args()
    w = Workload(body_size=a.body_size, topics=1, queues=4)
    batches = [w.batch(s, min(a.batch, a.messages - s)) for s in range(0, a.messages, a.batch)]
    if a.bodies == "list":
        batches = [dataclasses.replace(b, bodies=list(b.bodies)) for b in batches]
    config = StoreConfig()
    for name, enc, run in (
        ("model", ModelBatchEncoder(config, SystemClock()), run_model),
        ("kernel", BatchEncoder(config, SystemClock()), run_kernel),
    ):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            run(enc, batches)
            best = min(best, time.perf_counter() - t0)
        print(
            json.dumps(
                {
                    "encoder": name,
                    "body_size": a.body_size,
                    "bodies": a.bodies,
                    "batch": a.batch,
                    "ns_per_record": round(best / a.messages * 1e9, 1),
                    "msgs_per_s": round(a.messages / best),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
