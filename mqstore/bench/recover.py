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
from mqstore.store.message_store import MessageStore

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
print(json.dumps({"wrote": cl.wrote_offset}), flush=True)
sys.stdin.read()
"""


def _write_then_kill(script: str, *args: object) -> dict:
    """Run a writer ``script`` in a child process until it prints its JSON line (its
    data written, the store still open), then SIGKILL it; returns that line."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    line = child.stdout.readline()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    if not line:
        raise RuntimeError("the writer process died before writing its store")
    return json.loads(line)


def run_recover_bench(store: Path, *, total_bytes: int, body_size: int, segment_bytes: int = 1 << 30) -> dict:
    if (store / "commitlog").exists():
        raise ValueError(f"{store} already holds a commitlog; give an empty directory")
    per = record_size(body_len=body_size, topic_len=len("BenchTopic0"), props_len=70)
    n = max(1, total_bytes // per)
    wrote = _write_then_kill(_CHILD, store, n, body_size, segment_bytes)["wrote"]
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
        "write_position": rep.wrote_offset,
        "body_size": body_size,
    }


_STORE_CHILD = """
import sys, json
from pathlib import Path
from mqstore.logging import configure_logging
configure_logging(level="warning")
from mqstore.bench.workload import Workload
from mqstore.store.config import StoreConfig
from mqstore.store.message_store import MessageStore
store, before, after, body, seg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = MessageStore(Path(store), StoreConfig(segment_bytes=seg))
w = Workload(body_size=body, topics=4, queues=4)
i = 0
while s.commitlog.wrote_offset < before:
    s.append(w.batch(i, 1000)); i += 1000
s.wait_dispatched(600)
s.flush_derived()  # what the 60 s flush does: the checkpoint now covers everything
s.commitlog.flush()
checkpointed = s.commitlog.wrote_offset
while s.commitlog.wrote_offset < checkpointed + after:
    s.append(w.batch(i, 1000)); i += 1000
print(json.dumps({"checkpointed": checkpointed, "wrote": s.commitlog.wrote_offset}), flush=True)
sys.stdin.read()
"""


def run_reopen_after_checkpoint_bench(
    store: Path, *, before_bytes: int, after_bytes: int, body_size: int, segment_bytes: int = 1 << 30
) -> dict:
    """A MessageStore (consume queues, index) holds ``before_bytes`` covered by its
    checkpoint and ``after_bytes`` more when the writer is killed with SIGKILL; time the
    next open. It should grow with the bytes after the checkpoint only."""
    if (store / "commitlog").exists():
        raise ValueError(f"{store} already holds a commitlog; give an empty directory")
    state = _write_then_kill(_STORE_CHILD, store, before_bytes, after_bytes, body_size, segment_bytes)
    t0 = time.perf_counter()
    ms = MessageStore(store, StoreConfig(segment_bytes=segment_bytes))
    seconds = time.perf_counter() - t0
    rep = ms.commitlog.recovery
    ms.close()
    return {
        "bytes": state["wrote"],
        "bytes_before_checkpoint": state["checkpointed"],
        "bytes_after_checkpoint": state["wrote"] - state["checkpointed"],
        "bytes_validated": rep.bytes_validated,
        "recovery_seconds": round(rep.seconds, 4),
        "open_seconds": round(seconds, 4),
        "clean_shutdown": rep.clean_shutdown,
        "body_size": body_size,
    }


__all__ = ["run_recover_bench", "run_reopen_after_checkpoint_bench"]
