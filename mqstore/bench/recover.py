"""``mqstore bench recover``: time abnormal recovery of a commitlog left by kill -9.

A child process appends until the commitlog holds ``total_bytes`` and then waits
without closing; the parent kills it with SIGKILL (the abort file stays behind),
opens the store, and reports how fast recovery validated the bytes (CRC checked).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mqstore.formats.message import record_size
from mqstore.store.commitlog import CommitLog
from mqstore.store.config import StoreConfig

_CHILD = """
import sys, json
from pathlib import Path
from mqstore.logging import configure_logging
configure_logging(level="warning")
from mqstore.bench.workload import Workload
from mqstore.store.commitlog import CommitLog
from mqstore.store.config import StoreConfig
store, n, body, seg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cl = CommitLog(Path(store), StoreConfig(segment_bytes=seg))
w = Workload(body_size=body, topics=1, queues=4)
for start in range(0, n, 1000):
    cl.append(w.batch(start, min(1000, n - start)))
cl.flush()
print(json.dumps({"wrote": cl.wrote}), flush=True)
sys.stdin.read()
"""


def run_recover_bench(store: Path, *, total_bytes: int, body_size: int, segment_bytes: int = 1 << 30) -> dict:
    if (store / "commitlog").exists():
        raise ValueError(f"{store} already holds a commitlog; give an empty directory")
    per = record_size(body_len=body_size, topic_len=len("BenchTopic0"), props_len=70)
    n = max(1, total_bytes // per)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(store), str(n), str(body_size), str(segment_bytes)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    line = child.stdout.readline()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    if not line:
        raise RuntimeError("the writer process died before writing its commitlog")
    wrote = json.loads(line)["wrote"]
    # Drop the page cache's copy? Not possible unprivileged in general; the figure is
    # for a warm cache (the common case right after a process crash).
    t0 = time.perf_counter()
    cl = CommitLog(store, StoreConfig(segment_bytes=segment_bytes))
    seconds = time.perf_counter() - t0
    rep = cl.recovery
    cl.close()
    return {
        "bytes": wrote,
        "records": rep.records,
        "recovery_seconds": round(rep.seconds, 4),
        "open_seconds": round(seconds, 4),
        "gb_per_s": round(wrote / 1e9 / rep.seconds, 3) if rep.seconds else 0.0,
        "clean_shutdown": rep.clean_shutdown,
        "write_position": rep.write_position,
        "body_size": body_size,
    }


__all__ = ["run_recover_bench"]
