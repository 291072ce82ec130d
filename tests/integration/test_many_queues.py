"""Thousands of queues under a small bound on open consume-queue files.

A real writer process appends to 1,500 topics x 4 queues with the dispatcher running
and at most 16 consume-queue descriptors open; it is killed with SIGKILL, then the
store is reopened (abnormal recovery), checked, and queried. The bound holds
throughout and the process never holds more descriptors than a small constant.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqstore.store import StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.reader import CommitLogReader

BOUND = 16
CFG = StoreConfig(
    segment_bytes=4 << 20,
    consume_queue_file_bytes=20 * 1000,
    index_hash_slots=4096,
    index_max_entries=50_000,
    max_open_queue_files=BOUND,
)

WRITER = r"""
import sys, os
from mqstore.logging import configure_logging
from mqstore.bench.workload import Workload
from mqstore.store import StoreConfig
from mqstore.store.message_store import MessageStore
configure_logging(level="error")
cfg = StoreConfig(segment_bytes=4 << 20, consume_queue_file_bytes=20 * 1000, index_hash_slots=4096,
                  index_max_entries=50_000, max_open_queue_files=int(sys.argv[2]))
s = MessageStore(sys.argv[1], cfg)
w = Workload(body_size=64, topics=1500, queues=4)
i = 0
while True:
    s.append(w.batch(i, 500))
    i += 500
    if i % 20000 == 0:
        print(i, s.consume_queues.pool.peak_open, len(os.listdir("/proc/self/fd")), flush=True)
"""


def open_fds(under: Path | None = None) -> int:
    """Descriptors this process holds (only those of files below ``under`` if given)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += under is None or target.startswith(str(under))
    return n


@pytest.mark.crash
def test_thousands_of_queues_within_a_small_file_bound(tmp_path: Path) -> None:
    store = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(BOUND)], stdout=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(lines) < 4:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.split())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(lines) >= 4, "the writer did not get far enough"
    for _, peak, fds in lines:
        assert int(peak) <= BOUND
        assert int(fds) < BOUND + 60  # + commitlog segments, index files and the interpreter's own
    with MessageStore(store, CFG) as s:
        assert not s.commitlog.recovery.clean_shutdown
        assert s.wait_dispatched(60)
        queues = s.consume_queues.keys()
        assert len(queues) >= 5000
        records = list(CommitLogReader(store).records(check_crc=True))
        counts: dict[tuple[str, int], int] = {}
        for r in records:
            counts[(r.topic, r.queue_id)] = counts.get((r.topic, r.queue_id), 0) + 1
        for key, n in counts.items():  # every queue holds exactly its records
            assert s.consume_queues.find(*key).max_offset == n
        # Pulls and queries of queues long idle reopen their files transparently.
        for topic, qid in list(counts)[::50]:
            got = s.pull(topic, qid, 0, max_count=5).records
            assert got and all(r.topic == topic and r.queue_id == qid for r in got)
            rec = got[0]
            assert rec.physical_offset in [h.physical_offset for h in s.query_by_key(topic, rec.keys.split()[0])]
        assert s.consume_queues.pool.peak_open <= BOUND
        assert open_fds(store / "consumequeue") <= BOUND + 1  # + the file the creator may be making
        assert s.consume_queues.wait_made(60)
        assert open_fds(store / "consumequeue") <= BOUND
