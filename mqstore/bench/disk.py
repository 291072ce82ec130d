"""``mqstore bench disk``: what the disk does with raw bytes, as a yardstick.

Writes ``total_bytes`` of raw bytes in ``chunk_bytes`` writes to a fresh file in the
store directory, fdatasyncs, and deletes it; ``rounds`` times, reporting the median
(on this VM the first round after boot-fresh memory can be 5x slower than the next).
Append figures are then quoted as a fraction of this, measured in the same run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def run_disk_bench(store: Path, *, total_bytes: int = 1 << 30, chunk_bytes: int = 1 << 20, rounds: int = 3) -> dict:
    if total_bytes <= 0 or chunk_bytes <= 0 or rounds <= 0:
        raise ValueError("total_bytes, chunk_bytes and rounds must be > 0")
    runs = [_one_round(store, total_bytes, chunk_bytes) for _ in range(rounds)]
    seconds = sorted(runs)[len(runs) // 2]
    return {
        "bytes": total_bytes,
        "seconds": round(seconds, 4),
        "mb_per_s": round(total_bytes / 1e6 / seconds, 2),
        "rounds_mb_per_s": [round(total_bytes / 1e6 / s, 2) for s in runs],
        "chunk_bytes": chunk_bytes,
    }


def _one_round(store: Path, total_bytes: int, chunk_bytes: int) -> float:
    store.mkdir(parents=True, exist_ok=True)
    path = store / "bench-disk.tmp"
    chunk = os.urandom(chunk_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        written = 0
        while written < total_bytes:
            written += os.write(fd, chunk[: min(chunk_bytes, total_bytes - written)])
        os.fdatasync(fd)
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return seconds


__all__ = ["run_disk_bench"]
