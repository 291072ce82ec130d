"""A MessageStore workload run in a child process that dies by SIGKILL, and the
checks its parent makes on the store afterwards (shared by the crash tests).

The child (``python -c WORKLOAD``) opens a small store under sync flush with the
dispatcher, scheduler and retention objects running, then loops: append a batch of
messages to two topics (two queues each), print one ``ack`` line per acknowledged
batch on stdout; every ``consume_every`` batches pull each queue from its committed
offset, print a ``seen`` line, commit and persist the offsets; now and then update
a topic (topics.json) and run retention once (it deletes the oldest segment). It
ends only by being killed (a fault point in ``MQSTORE_FAULTS``, or its parent);
if nothing kills it within ``max_seconds`` (or ``batches``) it exits with status 3
(0 with ``close``, after closing the store).

Other options (a JSON object in argv[2]): ``consumer_threads`` (threads that pull,
commit and persist as fast as they can), ``slow_sync_ms`` (every commitlog flush
waits that long first), ``unsafe_dispatch`` (the dispatcher follows the write
position instead of the flushed one: the bug test_confirm_offset must catch),
``round`` (message ids start with ``r<round>-``), ``batches`` (stop after that many),
``batch``, ``body_bytes``, ``retention_every``, ``thorough_flush_s`` (the builders'
thorough flush that often instead of every 60 s), ``store_type`` (``defaultRocksDB``: the
consume queues in one RocksDB; the parent's ``open_store`` then opens the store's own type).

Stdout is a pipe, so every line printed before the kill reaches the parent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mqstore.store.config import FlushMode, StoreConfig
from mqstore.store.faults import POWER_IMAGE_ENV, POWER_STORE_ENV
from mqstore.store.message_store import MessageStore
from mqstore.store.retention import RetentionConfig
from mqstore.store.verify import verify_store
from mqstore.store.verify.report import Severity

SEGMENT_BYTES = 256 * 1024
TOPICS = ("T0", "T1")
QUEUES = 2
GROUP = "g1"


def store_config(store_type: str | None = None) -> StoreConfig:
    """Small files everywhere: a rollover every ~60 batches, many queue and index files.
    ``store_type`` None opens a store with its own type (a new one: queue files)."""
    return StoreConfig(
        store_type=store_type,
        segment_bytes=SEGMENT_BYTES,
        flush_mode=FlushMode.SYNC,
        consume_queue_file_bytes=20 * 100,
        index_hash_slots=64,
        index_max_entries=300,
        flush_consume_queue_interval_ms=100,
        checkpoint_interval_ms=100,
    )


def retention_config() -> RetentionConfig:
    """Everything not held by the dispatcher may go, one segment per run (the child
    runs it by hand; the background loop would wait an hour)."""
    every_hour = ";".join(f"{h:02d}" for h in range(24))
    return RetentionConfig(
        file_reserved_hours=0, delete_when=every_hour, max_deletes_per_run=1, check_interval_ms=3_600_000
    )


WORKLOAD = r"""
import json, sys, threading, time
from pathlib import Path
from mqstore.logging import configure_logging
from mqstore.store.messages import MessageBatch, PutStatus
from mqstore.store.message_store import MessageStore
from tests.integration.crash_workload import GROUP, QUEUES, TOPICS, retention_config, store_config

configure_logging(level="error")
store_dir, opts = Path(sys.argv[1]), json.loads(sys.argv[2])
batch, body_bytes = opts.get("batch", 8), opts.get("body_bytes", 400)
retention_every, consume_every = opts.get("retention_every", 100), opts.get("consume_every", 5)
deadline = time.monotonic() + opts.get("max_seconds", 25)
if opts.get("thorough_flush_s"):  # the builders' thorough flush (60 s) within the run
    import mqstore.store.builders as builders
    builders.THOROUGH_FLUSH_S = opts["thorough_flush_s"]
store = MessageStore(store_dir, store_config(opts.get("store_type")), retention=retention_config())
round_ = opts.get("round", 0)
out, out_lock = sys.stdout, threading.Lock()
committed = {}
if opts.get("slow_sync_ms"):  # a slow disk: every flush takes this long, so records wait unflushed
    flusher, delay = store.commitlog._flusher, opts["slow_sync_ms"] / 1000
    real_sync = flusher._sync
    flusher._sync = lambda a, b: (time.sleep(delay), real_sync(a, b))
if opts.get("unsafe_dispatch"):  # the bug the confirm offset prevents: dispatch what is not flushed yet
    store.dispatcher._limit = lambda: store.commitlog.wrote_offset
for t in TOPICS:
    store.update_topic(t, read_queue_nums=QUEUES, write_queue_nums=QUEUES)


def emit(rec):
    with out_lock:
        out.write(json.dumps(rec) + "\n")
        out.flush()


def consume(queues):  # a consumer as fast as it can: pull, report, commit, persist
    while True:
        for t, q in queues:
            got = store.pull(t, q, committed.get((t, q), 0), max_count=64)
            if got.records:
                emit({"seen": [[t, q, r.queue_offset, r.body.split(b"|")[0].decode()] for r in got.records]})
            store.commit_offset(GROUP, t, q, got.next_offset)
            committed[(t, q)] = got.next_offset
        store.consumer_offsets.persist()


all_queues = [(t, q) for t in TOPICS for q in range(QUEUES)]
for k in range(opts.get("consumer_threads", 0)):
    threading.Thread(target=consume, args=(all_queues[k::opts["consumer_threads"]],), daemon=True).start()
i = 0
while time.monotonic() < deadline and i < opts.get("batches", 1 << 62):
    ids = [f"r{round_}-b{i}-{j}" for j in range(batch)]
    res = store.append(MessageBatch(
        topics=[TOPICS[j % 2] for j in range(batch)], queue_ids=[(j // 2) % QUEUES for j in range(batch)],
        bodies=[(m + "|").encode().ljust(body_bytes, b"x") for m in ids], tags=[f"Tag{j % 3}" for j in range(batch)],
        keys=[f"k-{m}" for m in ids],
    ))
    if res.status is PutStatus.PUT_OK:
        emit({"ack": [[TOPICS[j % 2], (j // 2) % QUEUES, int(res.queue_offsets[j]), int(res.physical_offsets[j]), ids[j]]
                      for j in range(batch)]})
    i += 1
    if consume_every and i % consume_every == 0:
        for t in TOPICS:
            for q in range(QUEUES):
                got = store.pull(t, q, committed.get((t, q), 0), max_count=64)
                if got.records:
                    emit({"seen": [[t, q, r.queue_offset, r.body.split(b"|")[0].decode()] for r in got.records]})
                store.commit_offset(GROUP, t, q, got.next_offset)
                committed[(t, q)] = got.next_offset
        store.consumer_offsets.persist()
    if i % 25 == 0:
        store.update_topic(TOPICS[i % 2], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    if retention_every and i % retention_every == 0:
        store.wait_dispatched()
        store.retention.run_once(int(time.time() * 1000))
if opts.get("close"):
    store.close()
    sys.exit(0)
sys.exit(3)
"""


@dataclass
class ChildRun:
    returncode: int
    acks: list[list] = field(default_factory=list)  # [topic, queue, queue offset, commitlog offset, id]
    seen: list[list] = field(default_factory=list)  # [topic, queue, queue offset, id]
    stderr: str = ""


def run_child(
    store: Path,
    *,
    faults: str | None = None,
    kill_after_acks: int | None = None,
    kill_delay_s: float = 0.0,
    power_image: Path | None = None,
    timeout_s: float = 60,
    **opts,
) -> ChildRun:
    """Run WORKLOAD on ``store`` with the fault plan ``faults`` (MQSTORE_FAULTS), or
    SIGKILL it from here ``kill_delay_s`` after it acknowledged ``kill_after_acks``
    messages. With ``power_image`` the child runs in the power-loss test mode
    (faults.power_cut(store, power_image) afterwards leaves only what syncs covered)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MQSTORE_FAULTS", POWER_STORE_ENV, POWER_IMAGE_ENV)}
    if faults:
        env["MQSTORE_FAULTS"] = faults
    if power_image is not None:
        env[POWER_STORE_ENV], env[POWER_IMAGE_ENV] = str(store), str(power_image)
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(store), json.dumps(opts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
    )
    run = ChildRun(0)
    lines: list[str] = []
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        if kill_after_acks is not None:
            acked = 0
            for line in proc.stdout:
                lines.append(line)
                if not line.startswith('{"ack"'):
                    continue
                acked += line.count('"r')  # one per message id
                if acked >= kill_after_acks:
                    time.sleep(kill_delay_s)
                    proc.send_signal(signal.SIGKILL)
                    break
        out, err = proc.communicate()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run.returncode, run.stderr = proc.returncode, err
    for line in lines + out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by the kill
        run.acks += rec.get("ack", [])
        run.seen += rec.get("seen", [])
    return run


def open_store(store: Path) -> MessageStore:
    return MessageStore(store, store_config(), retention=retention_config())


def queue_contents(s: MessageStore) -> dict[tuple[str, int], dict[int, str]]:
    """Every message each queue serves: {(topic, queue): {queue offset: id}} (pulled)."""
    out: dict[tuple[str, int], dict[int, str]] = {}
    for topic, qid in s.consume_queues.keys():
        got: dict[int, str] = {}
        cq = s.consume_queues.find(topic, qid)
        offset = cq.min_offset
        while offset < cq.max_offset:
            res = s.pull(topic, qid, offset, max_count=256)
            for r in res.records:
                assert (r.topic, r.queue_id) == (topic, qid), (
                    f"{topic}:{qid}@{r.queue_offset} serves {r.topic}:{r.queue_id}"
                )
                got[r.queue_offset] = r.body.split(b"|")[0].decode()
            assert res.next_offset > offset, f"{topic}:{qid} is stuck at {offset} below its max {cq.max_offset}"
            offset = res.next_offset
        out[(topic, qid)] = got
    return out


def check_messages(s: MessageStore, expected: list[list], *, what: str = "acknowledged") -> int:
    """Every expected message ([topic, queue, queue offset, (commitlog offset,) id])
    that retention has not deleted is served at its queue offset. Returns how many
    were checked."""
    contents = queue_contents(s)
    checked = 0
    for m in expected:
        topic, qid, qo, mid = m[0], m[1], m[2], m[-1]
        cq = s.consume_queues.find(topic, qid)
        if len(m) == 5 and m[3] < s.commitlog.min_offset:
            continue  # its segment was deleted by retention
        if cq is not None and qo < cq.min_offset:
            continue
        assert contents.get((topic, qid), {}).get(qo) == mid, (
            f"{what} message {mid} ({topic}:{qid} queue offset {qo}) is not served; the queue holds "
            f"{contents.get((topic, qid), {}).get(qo)!r} there (queue offsets "
            f"{cq.min_offset if cq else None}..{cq.max_offset if cq else None})"
        )
        checked += 1
    return checked


def verify_errors(store: Path) -> list[str]:
    report = verify_store(store, index_keys="full")
    return [f"{f.kind} {f.location}: {f.detail}" for f in report.findings if f.severity is Severity.ERROR]


__all__ = ["ChildRun", "check_messages", "open_store", "queue_contents", "run_child", "store_config", "verify_errors"]
