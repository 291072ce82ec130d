"""5,000 topics (20,000 queues) inside the default descriptor limit (issue 26 item 4):
a writer process under ``ulimit -n 1024`` makes the store, then it is reopened in
another such process, after a clean close and after a real SIGKILL of the writer.
Each reopen checks a sample of queues unit by unit against the commitlog (every
unit's record carries its topic, queue id, queue offset, position and size), every
queue's length against the workload, a pull and a key query, and that descriptors
and maps stayed under the limits. The 100,000-topic figures are in BENCHMARKS.md
(``mqstore bench reopen``); this is the size that fits a test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TOPICS = 5_000  # past the 4,096 queues from which an open after a clean close stats no queue
QUEUES = 4
MESSAGES = 40_000  # 2 a queue: the test is about the number of queues, not of messages

_COMMON = r"""
import json, os, resource, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from mqstore.logging import configure_logging
from mqstore.bench.workload import Workload
from mqstore.store import StoreConfig
from mqstore.store.message_store import MessageStore
configure_logging(level="error")
CFG = StoreConfig(segment_bytes=16 << 20, index_hash_slots=1 << 16, index_max_entries=1 << 20)
TOPICS, QUEUES = %d, %d
def resources():
    return {"fds": len(os.listdir("/proc/self/fd")), "maps": sum(1 for _ in open("/proc/self/maps"))}
""" % (TOPICS, QUEUES)

WRITER = (
    _COMMON
    + r"""
store_dir, messages, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
w = Workload(body_size=32, topics=TOPICS, queues=QUEUES)
s = MessageStore(store_dir, CFG)
for i in range(0, messages, 1000):
    s.append(w.batch(i, 1000))
if mode == "close":
    s.close()
    print(json.dumps(resources()), flush=True)
    sys.exit(0)
assert s.wait_dispatched(timeout_s=120)
s.flush_derived()  # a thorough flush: the summary of queue ends, then more that only a re-dispatch restores
i = messages
print(json.dumps(resources()), flush=True)
while True:
    s.append(w.batch(i, 1000))
    i += 1000
    if i == messages + 20_000:
        print("more", flush=True)
"""
)

READER = (
    _COMMON
    + r"""
import random
store_dir = sys.argv[1]
t0 = time.perf_counter()
s = MessageStore(store_dir, CFG)
opened = time.perf_counter() - t0
assert s.wait_dispatched(timeout_s=120)
cqs = s.consume_queues
ends = cqs.ends()
out = {"open_seconds": round(opened, 3), "clean": s.commitlog.recovery.clean_shutdown,
       "queues": len(ends), "units": sum(ends.values()), "from_summary": cqs.summary_queues}
rng = random.Random(5)
sample = rng.sample(sorted(ends), 300)
bad, checked = [], 0
for topic, qid in sample:
    cq = cqs.find(topic, qid)
    units = cq.read_units(cq.min_offset, cq.max_offset - cq.min_offset)
    for k, u in enumerate(units.tolist()):
        qo = cq.min_offset + k
        rec = s.read_queue_offset(topic, qid, qo)
        checked += 1
        got = (rec.topic, rec.queue_id, rec.queue_offset, rec.physical_offset, rec.total_size)
        if got != (topic, qid, qo, u[0], u[1]):
            bad.append([topic, qid, qo, list(got), list(u)])
out["checked_units"], out["mismatches"] = checked, bad[:5]
out["sample_ends"] = {f"{t}/{q}": ends[(t, q)] for t, q in sample}
pulled = s.pull("BenchTopic3345", 1, 0, max_count=32)
out["pull"] = [(r.topic, r.queue_id, r.queue_offset, r.keys) for r in pulled.records]
out["by_key"] = [(r.topic, r.queue_id, r.queue_offset) for r in s.query_by_key("BenchTopic3345", "ord0000008345")]
out.update(resources())
s.close()
print(json.dumps(out), flush=True)
"""
)


def expected_units(messages: int, topic: int, queue: int) -> int:
    """How many of messages 0..messages-1 the round-robin workload sends to (topic, queue)."""
    rounds = messages // TOPICS + (1 if topic < messages % TOPICS else 0)  # message topic + TOPICS * r
    return sum(1 for r in range(rounds) if r % QUEUES == queue)


def run(script: str, *args: str, timeout: float = 240) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_reopen(store: Path, messages_at_least: int) -> dict:
    got = run(READER, str(store))
    assert got["mismatches"] == [], got["mismatches"]
    assert got["checked_units"] >= 300
    assert got["queues"] == TOPICS * QUEUES and got["units"] >= messages_at_least
    assert got["fds"] < 1024 and got["maps"] < 65_530
    # pull and key query: message 8,345 went to BenchTopic3345, queue (8,345 // 5,000) % 4 = 1, offset 0
    assert got["pull"][0][:3] == ["BenchTopic3345", 1, 0] and "ord0000008345" in got["pull"][0][3]
    assert got["by_key"] == [["BenchTopic3345", 1, 0]]
    return got


@pytest.mark.slow
def test_many_topics_reopen_after_a_clean_close(tmp_path: Path) -> None:
    store = tmp_path / "s"
    wrote = run(WRITER, str(store), str(MESSAGES), "close")
    assert wrote["fds"] < 1024 and wrote["maps"] < 65_530
    got = check_reopen(store, MESSAGES)
    assert got["clean"] and got["units"] == MESSAGES
    assert got["from_summary"] == TOPICS * QUEUES  # not one queue read by the open
    for key, n in got["sample_ends"].items():
        topic, qid = key.split("/")
        assert n == expected_units(MESSAGES, int(topic.removeprefix("BenchTopic")), int(qid)), key


@pytest.mark.crash
def test_many_topics_reopen_after_sigkill_of_the_writer(tmp_path: Path) -> None:
    store = tmp_path / "s"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), str(MESSAGES), "kill"], stdout=subprocess.PIPE, text=True
    )
    try:
        lines = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "more" not in lines:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "more" in lines, "the writer did not get past its thorough flush"
    assert json.loads(lines[0])["fds"] < 1024
    got = check_reopen(store, MESSAGES + 20_000)
    assert not got["clean"]
    assert got["from_summary"] > 0  # the summary written by the thorough flush was used
