"""The open after a crash of a store of more than 4,096 queues (issue 26 item 4),
where the summary of queue ends' rows are kept unread and the re-dispatch writes
over what the write-behind left past them (mqstore/store/queue_tails.py): a writer
under ``ulimit -n 1024`` appends, makes the queues durable (the summary), appends
on with the units written out behind, and is SIGKILLed mid-append. Then either

* ``kill``: reopened as is (the same boot: no queue is probed), or
* ``machine-crash``: the commitlog loses its tail as a power cut loses unflushed
  pages (zeroed from an acknowledged message on, after the write-behind put units
  of the lost records in the queue files) and the markers say another boot, so the
  open probes every queue;

and every acknowledged message the commitlog still holds is served at its queue
offset, and no unit in any queue file, read as RocketMQ reads them, points at or past
the commitlog's recovered end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.formats.consume_queue import decode_units

TOPICS, QUEUES = 1_100, 4  # 4,400 queues: past the 4,096 from which the open keeps the rows unread
FILE_UNITS = 8  # small queue files: rows end anywhere in a file, and queues go on into the next

_COMMON = r"""
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from mqstore.logging import configure_logging
from mqstore.bench.workload import Workload
from mqstore.store import StoreConfig
from mqstore.store.message_store import MessageStore
configure_logging(level="error")
CFG = StoreConfig(segment_bytes=4 << 20, consume_queue_file_bytes=20 * %d, index_hash_slots=1 << 14,
                  index_max_entries=1 << 18)
W = Workload(body_size=32, topics=%d, queues=%d)
""" % (FILE_UNITS, TOPICS, QUEUES)

WRITER = (
    _COMMON
    + r"""
s = MessageStore(sys.argv[1], CFG)
B = 1100
for i in range(0, 11 * B, B):
    s.append(W.batch(i, B))
assert s.wait_dispatched(timeout_s=120)
s.flush_derived()  # the queues durable, then the summary
i = 11 * B
while True:
    b = W.batch(i, B)
    res = s.append(b)
    print(json.dumps({"ack": [[t, int(q), int(o), int(p)] for t, q, o, p in
                              zip(b.topics, b.queue_ids, res.queue_offsets, res.physical_offsets)]}), flush=True)
    i += B
    if i // B % 4 == 0:  # units past the summary's rows reach the queue files
        assert s.wait_dispatched(timeout_s=60)
        s.consume_queues.write_behind(everything=True)
        print(json.dumps({"written_to": i}), flush=True)
"""
)

READER = (
    _COMMON
    + r"""
s = MessageStore(sys.argv[1], CFG)
assert s.wait_dispatched(timeout_s=120)
cqs = s.consume_queues
acks = json.load(open(sys.argv[2]))
missing = []
by_queue = {}
for t, q, o, p in acks:
    by_queue.setdefault((t, q), []).append((o, p))
for (t, q), want in by_queue.items():
    cq = cqs.find(t, q)
    units = cq.read_units(0, cq.max_offset) if cq is not None else []
    for o, p in want:
        if o >= len(units) or int(units[o]["commitlog_offset"]) != p:
            missing.append([t, q, o, p])
pulled = s.pull(acks[-1][0], acks[-1][1], acks[-1][2], max_count=1).records
out = {"clean": s.commitlog.recovery.clean_shutdown, "wrote": s.commitlog.wrote_offset,
       "from_summary": cqs.summary_queues, "probed_dirty": cqs.probed_dirty, "queues": len(cqs.ends()),
       "missing": missing[:5], "missing_count": len(missing), "checked": len(acks),
       "pulled": [r.queue_offset for r in pulled]}
s.close()
print(json.dumps(out), flush=True)
"""
)


def run_writer_until_killed(store: Path, written_rounds: int) -> tuple[list[list], list[int]]:
    """The writer's acks and the message counts its write-behinds covered, once it
    wrote out ``written_rounds`` times after the summary; then SIGKILL mid-append."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    acks, written = [], []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(written) < written_rounds:
            line = proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            acks.extend(msg.get("ack", []))
            if "written_to" in msg:
                written.append(len(acks))
        time.sleep(0.3)  # it appends on
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    for line in out.splitlines(keepends=True):
        if line.startswith('{"ack"') and line.endswith("\n"):  # (a line cut by the kill was never seen)
            acks.extend(json.loads(line)["ack"])
    assert len(written) == written_rounds, err[-3000:]
    return acks, written


def lose_commitlog_tail(store: Path, cut: int) -> None:
    """What a power cut does to pages the commitlog had not flushed: zero from ``cut``."""
    for seg in sorted((store / "commitlog").iterdir()):
        base, size = int(seg.name), seg.stat().st_size
        if base + size > cut:
            with open(seg, "r+b") as f:
                f.seek(max(cut - base, 0))
                f.write(bytes(size - max(cut - base, 0)))


def units_past(store: Path, end: int) -> list[tuple[str, str, int]]:
    """Units in the queue files (RocketMQ's reading: a file's units up to its first
    invalid one, the next file only after a full one) pointing at or past ``end``."""
    bad = []
    for topic_dir in (store / "consumequeue").iterdir():
        for qdir in topic_dir.iterdir():
            for f in sorted(qdir.iterdir()):
                units = decode_units(f.read_bytes())
                past = (units["commitlog_offset"].astype(np.int64) + units["size"]) > end
                if past.any():
                    bad.append((topic_dir.name, qdir.name, int(f.name) // 20 + int(np.argmax(past))))
                if len(units) < FILE_UNITS:
                    break
    return bad


@pytest.mark.crash
@pytest.mark.parametrize("crash", ["kill", "machine-crash"])
def test_crash_open_of_many_queues_serves_every_acknowledged_message(tmp_path: Path, crash: str) -> None:
    store = tmp_path / "s"
    acks, written = run_writer_until_killed(store, written_rounds=3)
    if crash == "machine-crash":
        cut_at = written[0] + (written[1] - written[0]) // 2  # an ack whose units and later ones reached the files
        cut = acks[cut_at][3]
        lose_commitlog_tail(store, cut)
        acks = [a for a in acks if a[3] < cut]
        for name in ("abort", "abort.consumequeue", "abort.index"):
            (store / name).write_text("a boot before a machine crash")
    (tmp_path / "acks.json").write_text(json.dumps(acks))
    proc = subprocess.run(
        [sys.executable, "-c", READER, str(store), str(tmp_path / "acks.json")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not got["clean"] and got["queues"] == TOPICS * QUEUES
    assert got["from_summary"] == TOPICS * QUEUES  # every row kept, none read at the open
    assert got["missing_count"] == 0, got["missing"]
    assert got["checked"] == len(acks) and got["pulled"] == [acks[-1][2]]
    if crash == "machine-crash":
        assert got["wrote"] == cut
        assert got["probed_dirty"] > 0  # queues with units of the lost records were read and cut
    else:
        assert got["probed_dirty"] == 0
    assert units_past(store, got["wrote"]) == []
