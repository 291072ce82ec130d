"""The dispatch steps alone, one core: each compiled kernel next to its reference model
(tests/kernels/model_*.py), in ns per record.

Writes a commitlog of RECORDS (default 1,000,000) bench-workload records (TAGS, two
KEYS and a UNIQ_KEY each; --topics x 4 queues) into DIR, scans it in 8 MiB chunks as
the reput loop does, then times over all chunks (warm page cache, best of 3):
extraction with the index entries (build_dispatch_batch, one pass; the model makes
them in two), the index entries alone (DispatchBatch.index_entries of a batch made
otherwise), the index put into an in-memory file (IndexFileView.put_hashes) and the consume-queue
dispatch (ConsumeQueues.dispatch, the journal given to the queues, no file written).
Usage: .venv/bin/python bench/dispatch_kernel.py DIR [--records N] [--topics T]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.kernels (the models)

from mqstore.bench.workload import Workload  # noqa: E402
from mqstore.formats.index_file import IndexFileView, index_file_size  # noqa: E402
from mqstore.logging import configure_logging  # noqa: E402
from mqstore.store.commitlog import CommitLog  # noqa: E402
from mqstore.store.config import StoreConfig  # noqa: E402
from mqstore.store.consume_queues import ConsumeQueues  # noqa: E402
from mqstore.store.dispatch import build_dispatch_batch  # noqa: E402
from tests.kernels.model_consume_queues import ModelConsumeQueues  # noqa: E402
from tests.kernels.model_dispatch import model_build_dispatch_batch, model_index_entries  # noqa: E402
from tests.kernels.model_index import model_put_hashes  # noqa: E402

CHUNK = 8 << 20


def best(fn, runs: int = 3) -> float:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--topics", type=int, default=4)
    a = ap.parse_args()
    configure_logging(level="warning")
    if (a.dir / "commitlog").exists():
        raise SystemExit(f"{a.dir} already holds a commitlog; give an empty directory")
    cl = CommitLog(a.dir, StoreConfig())
    w = Workload(body_size=128, topics=a.topics, queues=4)
    for start in range(0, a.records, 1000):
        cl.append(w.batch(start, min(1000, a.records - start)))
    chunks, pos = [], cl.min_offset
    while pos < cl.wrote_offset:
        ch = cl.scan(pos, max_bytes=CHUNK)
        chunks.append(ch)
        pos = ch.next_offset
    n = sum(len(ch.sizes) for ch in chunks)
    batches = {"model": [model_build_dispatch_batch(ch) for ch in chunks], "kernel": []}
    batches["kernel"] = [build_dispatch_batch(ch) for ch in chunks]
    entries = [b.index_entries() for b in batches["kernel"]]
    keys = sum(len(e.key_hashes) for e in entries)
    slots, max_entries = 5_000_000, keys + 2
    rows = []

    def put(fn) -> None:
        view = IndexFileView.create(bytearray(index_file_size(slots, max_entries)), slots, max_entries)
        for e in entries:
            fn(view, *e)

    def dispatch(cls) -> None:
        root = a.dir / "cq"
        shutil.rmtree(root, ignore_errors=True)
        cqs = cls(root, file_bytes=6_000_000)
        cqs.load()
        for b in batches["kernel"]:
            cqs.dispatch(b)
        cqs._move_all_in()  # the journal given to the queues (a no-op for the model)
        cqs._queues.clear()  # nothing written: the step alone

    steps = [
        (
            "extraction_and_index_entries",  # the kernel makes both in one pass over the properties
            lambda: [model_index_entries(model_build_dispatch_batch(ch)) for ch in chunks],
            lambda: [build_dispatch_batch(ch).index_entries() for ch in chunks],
        ),
        (
            "index_entries_alone",  # a batch made otherwise (e.g. a copy of some rows)
            lambda: [model_index_entries(b) for b in batches["model"]],
            lambda: [dataclasses.replace(b).index_entries() for b in batches["kernel"]],
        ),
        ("index_put", lambda: put(model_put_hashes), lambda: put(IndexFileView.put_hashes)),
        ("consume_queue_dispatch", lambda: dispatch(ModelConsumeQueues), lambda: dispatch(ConsumeQueues)),
    ]
    for name, model, kernel in steps:
        m, k = best(model), best(kernel)
        rows.append(
            {
                "step": name,
                "topics": a.topics,
                "records": n,
                "model_ns_per_record": round(m / n * 1e9, 1),
                "kernel_ns_per_record": round(k / n * 1e9, 1),
            }
        )
        print(json.dumps(rows[-1]))
    cl.close()


if __name__ == "__main__":
    main()
