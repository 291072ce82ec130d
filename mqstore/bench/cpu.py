"""CPU time each process of a running deployment spends over a benchmark's timed
window (``bench append --server ... --serve-pid PID``): per process, microseconds of
CPU (user + system) per message, so a figure like "15 us per message" says where
it goes. Processes are found and labelled as ``bench soak`` finds them
(processes.deployment_processes: commitlog-0, dispatcher-0, consumequeue-0, index-0,
front, raylet, ...); this benchmark's own process is reported as "client".
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mqstore.bench.processes import deployment_processes

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def cpu_by_process(root_pid: int, shard_dirs: list[Path]) -> dict[str, float]:
    """CPU seconds so far of every process of the deployment under ``root_pid``, by label."""
    out = {}
    for p in deployment_processes(root_pid, shard_dirs):
        try:
            out[p.label] = _cpu_seconds(p.pid)
        except OSError:  # exited meanwhile
            continue
    return out


class CpuWindow:
    """CPU per process between ``__init__`` and ``per_message(n)``."""

    def __init__(self, root_pid: int, shard_dirs: list[Path]) -> None:
        self._root, self._dirs = root_pid, shard_dirs
        self._before = cpu_by_process(root_pid, shard_dirs)
        self._client = time.process_time()

    def per_message(self, messages: int) -> dict[str, float]:
        """Microseconds of CPU per message of each process that used at least 1 ms,
        the client's included, and their ``total``."""
        after = cpu_by_process(self._root, self._dirs)
        used = {k: v - self._before.get(k, 0.0) for k, v in after.items()}
        used["client"] = time.process_time() - self._client
        n = max(messages, 1)
        out = {k: round(v * 1e6 / n, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v >= 0.001}
        out["total"] = round(sum(used.values()) * 1e6 / n, 2)
        return out


__all__ = ["CpuWindow", "cpu_by_process"]
