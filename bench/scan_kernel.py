"""The record scan alone, one core: the compiled kernel (formats.message.scan_records)
next to its reference model (tests/kernels/model_scan.py), in ns per record and GB/s.

Writes a commitlog of BYTES (default 512 MiB) with the bench workload (1 topic, 4
queues, TAGS/KEYS/UNIQ_KEY) into DIR, then scans it in 4 MiB chunks as recovery does
(base_offset given), with and without CRC and RecordFields; warm page cache, best of 3.
Usage: .venv/bin/python bench/scan_kernel.py DIR [--body-size 128] [--bytes N]
"""

from __future__ import annotations

import argparse
import json
import mmap
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.kernels (the model)

from mqstore.bench.workload import Workload  # noqa: E402
from mqstore.formats.message import ScanOutcome, record_size, scan_records  # noqa: E402
from mqstore.logging import configure_logging  # noqa: E402
from mqstore.store.commitlog import CommitLog  # noqa: E402
from mqstore.store.config import StoreConfig  # noqa: E402
from tests.kernels.model_scan import model_scan_records  # noqa: E402

CHUNK = 4 << 20


def write(store: Path, total: int, body: int) -> Path:
    cl = CommitLog(store, StoreConfig())
    w = Workload(body_size=body, topics=1, queues=4)
    n = total // record_size(body_len=body, topic_len=11, props_len=70)
    for start in range(0, n, 1000):
        cl.append(w.batch(start, min(1000, n - start)))
    cl.close()
    return sorted((store / "commitlog").iterdir())[0]


def scan_all(scan, mm, **kw) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    pos = records = 0
    while True:
        res = scan(mm, pos, len(mm), max_bytes=CHUNK, base_offset=0, **kw)
        records += len(res.positions)
        if res.outcome is not ScanOutcome.LIMIT or not len(res.positions):
            return records, res.stop, time.perf_counter() - t0
        pos = res.stop


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--body-size", type=int, default=128)
    ap.add_argument("--bytes", type=int, default=512 << 20)
    a = ap.parse_args()
    configure_logging(level="warning")
    if (a.dir / "commitlog").exists():
        raise SystemExit(f"{a.dir} already holds a commitlog; give an empty directory")
    seg = write(a.dir, a.bytes, a.body_size)
    with seg.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        mm.madvise(mmap.MADV_WILLNEED)
        for name, scan in (("model", model_scan_records), ("kernel", scan_records)):
            for crc in (True, False):
                for fields in (False, True):
                    runs = [scan_all(scan, mm, check_crc=crc, fields=fields) for _ in range(3)]
                    records, data, secs = min(runs, key=lambda r: r[2])
                    print(
                        json.dumps(
                            {
                                "scan": name,
                                "check_crc": crc,
                                "fields": fields,
                                "body_size": a.body_size,
                                "records": records,
                                "bytes": data,
                                "ns_per_record": round(secs / records * 1e9, 1),
                                "gb_per_s": round(data / secs / 1e9, 3),
                            }
                        )
                    )


if __name__ == "__main__":
    main()
