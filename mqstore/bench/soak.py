"""``mqstore bench soak``: a long mixed load on a running ``mqstore serve``, with one
actor killed at a time, that must lose nothing acknowledged.

For ``minutes``, through the front (``FrontClient``, one channel per thread):

* ``producers`` threads send batches of the deterministic workload (workload.py) at
  ``rate`` messages per second between them (0: as fast as they go). Every message a
  send acknowledges (PUT_OK) goes to the ack log (acklog.py), one JSON line: topic,
  queue id, queue offset, UNIQ_KEY and msgId. A call that fails, and the messages of
  an answer that are not PUT_OK, are sent again (a retried message may be stored
  twice: at least once) until acknowledged, for at most ``RETRY_GRACE_S`` past the end.
* ``consumers`` threads share the workload's queues and pull each from offset 0 to
  its end, over and over (raw records, decoded and CRC-checked by the compiled
  decoder, as a RocketMQ client does), keeping each pulled record's queue offset and
  UNIQ_KEY; they commit their offsets (group ``soak``) about once a second.
* one thread asks ``query_by_key`` for messages acknowledged at least 2 s before
  (their ``ord<i>`` key), ``query_rate`` per second.
* with ``serve_pid``: every ``kill_every`` minutes (the first half an interval in),
  the next actor of ``kill_order`` (of shard ``kill_shard``) gets SIGKILL; Ray
  restarts it (a front comes back on the port serve was given: not 0), and the kill's ``back_s`` is how long until a new process holds that
  actor's files and every shard answers SERVING again. The resident memory of every
  process under ``serve_pid`` (processes.py) and of this one is sampled every
  ``rss_every`` seconds.

Then the producers stop, the dispatchers catch up, the consumers pull every queue to
the end it has now, and every line of the ack log must be found among the pulls at its
queue offset with its UNIQ_KEY (``lost`` counts those that are not). With
``serve_pid`` the deployment is stopped (SIGTERM, every store closed) and each shard's
store is verified (``mqstore verify``'s checks: commitlog, queues, index, checkpoint);
without, the running store is verified as it is. The result: a table per minute
(acknowledged, send calls and failures, send p50/p99/max per call, pulled, key
queries, the deployment's RSS, kills) and a JSON summary.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from mqstore.bench.acklog import AckLog
from mqstore.bench.processes import ROLES, actor_pid, deployment_processes
from mqstore.bench.remote import wait_dispatched
from mqstore.bench.workload import Workload, topic_name
from mqstore.rpc.v1 import common_pb2, front_pb2
from mqstore.services.query.client import FrontClient, decode_pulled
from mqstore.store.messages import MessageBatch

RETRY_GRACE_S = 60.0  # a batch not yet acknowledged at the end is retried this much longer
QUERY_AFTER_S = 2.0  # key queries ask for messages acknowledged at least this long ago
FINAL_KEY_CHECKS = 200  # after the load: keys of acknowledged messages that must all be found
GROUP = "soak"


@dataclass(frozen=True, kw_only=True)
class Soak:
    server: str
    store: Path  # the deployment's root (serve --store): shard i under root/shard-i with several
    serve_pid: int | None = None
    minutes: float = 20.0
    kill_every: float = 4.0  # minutes; 0: no kills
    kill_order: tuple[str, ...] = ROLES
    kill_shard: int = 0
    producers: int = 4
    consumers: int = 4
    rate: int = 10_000  # messages per second over all producers; 0: unpaced
    batch: int = 100
    body_size: int = 128
    topics: int = 1
    queues: int = 4
    query_rate: float = 20.0
    rss_every: float = 30.0
    ack_log: Path | None = None
    stop_timeout: float = 180.0
    wire: str = "encoded"  # "encoded" (send_encoded) or "columns" (send)

    def __post_init__(self) -> None:
        if self.wire not in ("encoded", "columns"):
            raise ValueError(f"wire must be encoded or columns, got {self.wire!r}")
        if self.minutes <= 0 or self.producers < 1 or self.consumers < 1 or self.batch < 1:
            raise ValueError("minutes must be > 0; producers, consumers and batch >= 1")
        if self.kill_every < 0 or self.rate < 0 or self.query_rate < 0 or self.rss_every <= 0:
            raise ValueError("kill_every, rate and query_rate must be >= 0, rss_every > 0")
        bad = [r for r in self.kill_order if r not in ROLES]
        if bad or not self.kill_order:
            raise ValueError(f"kill_order: one or more of {', '.join(ROLES)} (got {', '.join(bad) or 'none'})")

    def kill_times(self) -> list[float]:
        """Seconds from the start: half an interval in, then every interval, before the end."""
        if self.kill_every <= 0 or self.serve_pid is None:
            return []
        step, end = self.kill_every * 60, self.minutes * 60
        return [t for t in np.arange(step / 2, end, step).tolist() if t < end]


def key_hash(unique_key: str) -> int:
    """64 bits of a UNIQ_KEY: what the consumers keep per pulled record."""
    return int.from_bytes(hashlib.blake2b(unique_key.encode(), digest_size=8).digest(), "little")


def shard_dirs(root: Path) -> list[Path]:
    """The deployment's shard directories, from its pinned layout (one shard without it)."""
    from mqstore.services.query.routing import LAYOUT_FILE, shard_dir

    layout = Path(root) / LAYOUT_FILE
    shards = json.loads(layout.read_text())["shards"] if layout.exists() else 1
    return [shard_dir(Path(root), i, shards) for i in range(shards)]


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


@dataclass
class _Queue:
    topic: str
    queue_id: int
    next: int = 0
    offsets: list[np.ndarray] = field(default_factory=list)
    hashes: list[np.ndarray] = field(default_factory=list)
    last_commit: float = 0.0


class _Run:
    """The state the threads share; every list and counter changes under ``lock``."""

    def __init__(self, s: Soak) -> None:
        self.s = s
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.stop = threading.Event()  # the load's end: producers take no new batch, queries stop
        self.give_up_at = float("inf")
        self.workload = Workload(body_size=s.body_size, topics=s.topics, queues=s.queues)
        self.next_index = 0
        self.calls: list[tuple[float, float, int]] = []  # (start s, seconds, messages acknowledged); -1: failed
        self.failures: Counter[str] = Counter()  # failed send calls by status code
        self.not_put_ok = 0  # messages of answered sends that were not PUT_OK (sent again)
        self.unacked = 0
        self.recent: deque[tuple[float, str, int]] = deque(maxlen=2000)  # (acked at, topic, index)
        self.pulled: Counter[int] = Counter()  # per minute
        self.pull_errors: Counter[str] = Counter()
        self.gaps = 0
        self.queries: list[tuple[float, float, bool]] = []  # (start s, seconds, found)
        self.query_errors: Counter[str] = Counter()
        self.kills: list[dict] = []
        self.rss: list[tuple[float, dict[str, tuple[float, float]]]] = []  # (t, {process: (RSS MB, anon MB)})
        self.errors: list[BaseException] = []
        self.drain: dict[tuple[str, int], int] | None = None  # queue -> end to pull to, once set
        self.drain_until = float("inf")  # consumers give up draining then

    def now(self) -> float:
        return time.monotonic() - self.t0

    def client(self, timeout: float = 30.0) -> FrontClient:
        return FrontClient(self.s.server, timeout=timeout, tls_ca=os.environ.get("MQSTORE_TLS_CA") or None)


def _produce(run: _Run, ack: AckLog) -> None:
    s = run.s
    interval = s.batch * s.producers / s.rate if s.rate else 0.0
    due = time.monotonic()
    with run.client() as c:
        while not run.stop.is_set():
            if interval:
                due += interval
                wait = due - time.monotonic()
                if wait > 0 and run.stop.wait(wait):
                    break
                if wait < -1.0:  # more than a second behind (a kill): no burst to catch up
                    due = time.monotonic()
            with run.lock:
                start = run.next_index
                run.next_index += s.batch
            b = run.workload.batch(start, s.batch)
            topics = [b.topics] * s.batch if isinstance(b.topics, str) else list(b.topics)
            msgs = list(
                zip(range(start, start + s.batch), topics, list(b.bodies), b.queue_ids.tolist(), b.tags, b.keys)
            )
            while msgs and time.monotonic() < run.give_up_at:
                msgs = _send(run, c, ack, msgs)
            with run.lock:
                run.unacked += len(msgs)


def _send(run: _Run, c: FrontClient, ack: AckLog, msgs: list[tuple]) -> list[tuple]:
    """Send ``msgs`` once: the messages not acknowledged come back."""
    idx, topics, bodies, qids, tags, keys = zip(*msgs)
    t0 = run.now()
    try:
        if run.s.wire == "encoded":
            batch = MessageBatch(list(topics), list(bodies), queue_ids=list(qids), tags=list(tags), keys=list(keys))
            r = c.send_encoded(batch)
        else:
            r = c.send(list(topics), list(bodies), queue_ids=list(qids), tags=list(tags), keys=list(keys))
    except grpc.RpcError as e:
        with run.lock:
            run.calls.append((t0, run.now() - t0, -1))
            run.failures[e.code().name if e.code() else "UNKNOWN"] += 1
        time.sleep(0.2)
        return msgs
    ok = [i for i, st in enumerate(r.statuses) if st == common_pb2.PUT_OK]
    ack.write_lines(
        [
            f'{{"topic":"{topics[i]}","queue_id":{r.queue_ids[i]},"queue_offset":{r.queue_offsets[i]},'
            f'"unique_key":"{r.unique_keys[i]}","msg_id":"{r.msg_ids[i]}"}}\n'
            for i in ok
        ]
    )
    acked_at = time.monotonic()
    with run.lock:
        run.calls.append((t0, run.now() - t0, len(ok)))
        if len(ok) < len(msgs):
            run.not_put_ok += len(msgs) - len(ok)
        if ok:
            run.recent.append((acked_at, topics[ok[-1]], idx[ok[-1]]))
    done = set(ok)
    return [m for i, m in enumerate(msgs) if i not in done]


def _consume(run: _Run, queues: list[_Queue]) -> None:
    with run.client() as c:
        while True:
            moved = False
            for q in queues:
                moved |= _pull(run, c, q)
            drain = run.drain
            if drain is not None and (
                all(q.next >= drain.get((q.topic, q.queue_id), 0) for q in queues) or time.monotonic() > run.drain_until
            ):
                return
            if not moved:
                time.sleep(0.05)


def _pull(run: _Run, c: FrontClient, q: _Queue) -> bool:
    try:
        res = c.pull(q.topic, q.queue_id, q.next, max_messages=1000, raw=True)
        if res.status == front_pb2.FOUND:
            records = decode_pulled(res)
        if time.monotonic() - q.last_commit > 1.0:
            c.commit_offset(GROUP, q.topic, q.queue_id, q.next)
            q.last_commit = time.monotonic()
    except grpc.RpcError as e:
        with run.lock:
            run.pull_errors[e.code().name if e.code() else "UNKNOWN"] += 1
        time.sleep(0.2)
        return False
    if res.status != front_pb2.FOUND:
        if res.next_offset > q.next:  # a queue moving past offsets it does not hold: a hole
            with run.lock:
                run.gaps += res.next_offset - q.next
            q.next = res.next_offset
        return False
    offsets = np.fromiter((r.queue_offset for r in records), np.int64, len(records))
    if offsets[0] != q.next:
        with run.lock:
            run.gaps += 1
    q.offsets.append(offsets)
    q.hashes.append(np.fromiter((key_hash(r.unique_key or "") for r in records), np.uint64, len(records)))
    q.next = res.next_offset
    with run.lock:
        run.pulled[int(run.now() // 60)] += len(records)
    return True


def _query(run: _Run) -> None:
    rng = random.Random(7)
    with run.client() as c:
        while not run.stop.wait(1 / run.s.query_rate):
            with run.lock:
                old = [m for m in run.recent if m[0] < time.monotonic() - QUERY_AFTER_S]
            if not old:
                continue
            _, topic, i = rng.choice(old)
            found, t0 = _find_key(run, c, topic, i)
            if found is not None:
                with run.lock:
                    run.queries.append((t0, run.now() - t0, found))


def _find_key(run: _Run, c: FrontClient, topic: str, i: int) -> tuple[bool | None, float]:
    """Whether ``query_by_key`` finds message ``i`` by its ``ord<i>`` key (None: the call failed)."""
    t0 = run.now()
    try:
        records = c.query_by_key(topic, f"ord{i:010d}")
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:  # the front's answer when no message has the key
            return False, t0
        with run.lock:
            run.query_errors[e.code().name if e.code() else "UNKNOWN"] += 1
        return None, t0
    return any(r.body[:8] == i.to_bytes(8, "big") for r in records), t0


def _kill(run: _Run, dirs: list[Path]) -> None:
    s = run.s
    for k, at in enumerate(s.kill_times()):
        if run.stop.wait(max(0.0, at - run.now())):
            return
        role = s.kill_order[k % len(s.kill_order)]
        name = "front" if role == "front" else f"{role}-{s.kill_shard}"
        entry = {"at_s": round(run.now(), 1), "minute": int(run.now() // 60) + 1, "actor": name}
        pid = actor_pid(s.serve_pid, dirs, role, s.kill_shard)
        if pid is None:
            entry["error"] = "no process holds it"
        else:
            os.kill(pid, signal.SIGKILL)
            entry["pid"] = pid
            entry.update(_wait_back(run, dirs, role, pid))
        with run.lock:
            run.kills.append(entry)
        print(f"soak: killed {name} at {entry['at_s']} s: {entry}", file=sys.stderr, flush=True)


def _wait_back(run: _Run, dirs: list[Path], role: str, old: int, timeout: float = 180.0) -> dict:
    """Until a new process holds the actor and every shard serves, writable."""
    t0 = time.monotonic()
    with run.client(timeout=5) as c:
        while time.monotonic() - t0 < timeout:
            pid = actor_pid(run.s.serve_pid, dirs, role, run.s.kill_shard)
            if pid is not None and pid != old:
                try:
                    if all(sh.state == "SERVING" and sh.writable for sh in c.store_status()):
                        return {"new_pid": pid, "back_s": round(time.monotonic() - t0, 2)}
                except grpc.RpcError:
                    pass
            time.sleep(0.25)
    return {"back_s": None, "error": f"not back after {timeout:.0f} s"}


CLIENT = "client (soak)"


def _mb(n: int) -> float:
    return round(n / 2**20, 1)


def _sample_rss(run: _Run, dirs: list[Path]) -> None:
    mb: dict[str, tuple[float, float]] = {}
    if run.s.serve_pid is not None:
        try:
            mb = {p.label: (_mb(p.rss), _mb(p.anon)) for p in deployment_processes(run.s.serve_pid, dirs)}
        except ProcessLookupError:
            pass
    with open("/proc/self/statm") as f:
        resident, shared = (int(x) * os.sysconf("SC_PAGE_SIZE") for x in f.read().split()[1:3])
    mb[CLIENT] = (_mb(resident), _mb(resident - shared))
    with run.lock:
        run.rss.append((round(run.now(), 1), mb))


def _deployment_mb(sample: dict[str, tuple[float, float]], which: int = 0) -> float:
    """The deployment's total (the client left out): RSS (``which`` 0) or anonymous (1)."""
    return round(sum(v[which] for k, v in sample.items() if k != CLIENT), 1)


def _minute_row(run: _Run, m: int) -> dict:
    """Figures of minute ``m`` (0-based) from what the threads recorded."""
    with run.lock:
        calls = [c for c in run.calls if int(c[0] // 60) == m]
        queries = [q for q in run.queries if int(q[0] // 60) == m]
        rss = [mb for t, mb in run.rss if t < (m + 1) * 60]
        kills = [k["actor"] for k in run.kills if k["minute"] == m + 1]
        pulled = run.pulled[m]
    ok_ms = [c[1] * 1000 for c in calls if c[2] >= 0]
    return {
        "minute": m + 1,
        "acked": sum(c[2] for c in calls if c[2] > 0),
        "calls": len(calls),
        "failed": sum(1 for c in calls if c[2] < 0),
        "p50_ms": _p(ok_ms, 50),
        "p99_ms": _p(ok_ms, 99),
        "max_ms": round(max(ok_ms), 1) if ok_ms else None,
        "pulled": pulled,
        "queries": len(queries),
        "found": sum(1 for q in queries if q[2]),
        "query_p99_ms": _p([q[1] * 1000 for q in queries], 99),
        "rss_mb": _deployment_mb(rss[-1]) if rss else None,
        "anon_mb": _deployment_mb(rss[-1], 1) if rss else None,
        "kills": kills,
    }


ROW_HEAD = (
    f"{'min':>4} {'acked':>9} {'calls':>6} {'failed':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
    f"{'pulled':>9} {'queries':>8} {'found':>6} {'q p99 ms':>9} {'RSS MB':>8} {'anon MB':>8}  kills"
)


def format_row(r: dict) -> str:
    def f(v, w):
        return f"{'-' if v is None else v:>{w}}"

    return (
        f"{r['minute']:>4} {r['acked']:>9} {r['calls']:>6} {r['failed']:>6} {f(r['p50_ms'], 8)} {f(r['p99_ms'], 8)} "
        f"{f(r['max_ms'], 8)} {r['pulled']:>9} {r['queries']:>8} {r['found']:>6} {f(r['query_p99_ms'], 9)} "
        f"{f(r['rss_mb'], 8)} {f(r['anon_mb'], 8)}  {', '.join(r['kills'])}"
    )


def check_acks(path: Path, queues: list[_Queue], chunk: int = 500_000) -> tuple[int, int, list[dict]]:
    """Every line of the ack log against the pulls: (lines, lost, the first lost ones).
    A line is found when its queue's pulls hold its queue offset with its UNIQ_KEY."""
    pulled = {}
    for q in queues:
        offs = np.concatenate(q.offsets) if q.offsets else np.zeros(0, np.int64)
        hs = np.concatenate(q.hashes) if q.hashes else np.zeros(0, np.uint64)
        order = np.argsort(offs, kind="stable")
        pulled[(q.topic, q.queue_id)] = (offs[order], hs[order])
    lines = lost = 0
    examples: list[dict] = []

    def check(batch: list[dict]) -> None:
        nonlocal lost
        groups: dict[tuple[str, int], list[dict]] = {}
        for a in batch:
            groups.setdefault((a["topic"], a["queue_id"]), []).append(a)
        for key, acks in groups.items():
            offs, hs = pulled.get(key, (np.zeros(0, np.int64), np.zeros(0, np.uint64)))
            want = np.array([a["queue_offset"] for a in acks], np.int64)
            want_h = np.array([key_hash(a["unique_key"]) for a in acks], np.uint64)
            at = np.minimum(np.searchsorted(offs, want), max(len(offs) - 1, 0))
            found = (offs[at] == want) & (hs[at] == want_h) if len(offs) else np.zeros(len(want), bool)
            lost += int((~found).sum())
            examples.extend(a for a, ok in zip(acks, found.tolist()) if not ok and len(examples) < 10)

    batch: list[dict] = []
    with open(path) as f:
        for line in f:
            batch.append(json.loads(line))
            lines += 1
            if len(batch) >= chunk:
                check(batch)
                batch = []
    check(batch)
    return lines, lost, examples[:10]


def _stop_serve(pid: int, timeout: float) -> bool:
    """SIGTERM to ``mqstore serve`` (it closes every store); True once it has exited."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # exited; its parent has not reaped it yet
                    return True
        except OSError:
            return True
        time.sleep(0.2)
    return False


def _verify(dirs: list[Path]) -> dict:
    from mqstore.store.verify import verify_store

    shards = []
    for d in dirs:
        report = verify_store(d)
        c = report.counts
        shards.append(
            {
                "store": str(d),
                "ok": report.ok,
                "errors": c.get("errors", 0),
                "warnings": c.get("warnings", 0),
                "records": report.messages,
                "seconds": round(report.seconds, 2),
                "findings": [f.to_json() for f in report.findings if f.severity.value != "info"][:10],
            }
        )
    return {"ok": all(s["ok"] for s in shards), "shards": shards}


def run_soak(s: Soak, *, progress=None) -> tuple[list[dict], dict]:
    """Run the soak (module docstring): (rows per minute, summary). ``progress``:
    called with each minute's row as it ends (and the kills as they happen go to stderr)."""
    dirs = [d.resolve() for d in shard_dirs(s.store)]
    tmp = None
    if s.ack_log is None:
        fd, tmp = tempfile.mkstemp(prefix="mqstore-soak-", suffix=".acks")
        os.close(fd)
    ack_path = Path(s.ack_log or tmp)
    ack = AckLog(ack_path)
    run = _Run(s)
    load_before = os.getloadavg()
    with run.client() as c:
        for t in range(s.topics):
            c.update_topic(topic_name(t), read_queue_nums=s.queues, write_queue_nums=s.queues)
    queues = [_Queue(topic_name(t), q) for t in range(s.topics) for q in range(s.queues)]

    def guarded(target, *args):
        def body():
            try:
                target(*args)
            except BaseException as e:  # noqa: BLE001 - raised in the caller after the threads end
                with run.lock:
                    run.errors.append(e)

        return body

    producers = [
        threading.Thread(target=guarded(_produce, run, ack), name=f"soak-producer-{i}") for i in range(s.producers)
    ]
    consumers = [
        threading.Thread(target=guarded(_consume, run, queues[i :: s.consumers]), name=f"soak-consumer-{i}")
        for i in range(s.consumers)
    ]
    others = [threading.Thread(target=guarded(_kill, run, dirs), name="soak-killer")]
    if s.query_rate:
        others.append(threading.Thread(target=guarded(_query, run), name="soak-queries"))
    run.t0 = time.monotonic()
    _sample_rss(run, dirs)
    for t in producers + consumers + others:
        t.daemon = True
        t.start()
    end = s.minutes * 60
    next_rss, minute = s.rss_every, 0
    rows: list[dict] = []
    while True:
        now = run.now()
        if now >= end or run.errors:
            break
        wake = min(next_rss, (minute + 1) * 60, end)
        time.sleep(max(0.0, wake - now))
        if run.now() >= next_rss:
            _sample_rss(run, dirs)
            next_rss += s.rss_every
        if run.now() >= (minute + 1) * 60 or run.now() >= end:
            rows.append(_minute_row(run, minute))
            if progress is not None:
                progress(rows[-1])
            minute += 1
    run.give_up_at = time.monotonic() + RETRY_GRACE_S
    run.stop.set()
    for t in producers + others:
        t.join()
    ack.close()
    rows = [
        _minute_row(run, m) for m in range(len(rows))
    ]  # again, with the calls that were in flight at a minute's end
    caught_up, waited, final_found, error = False, 0.0, 0, None
    with run.client() as c:
        try:
            caught_up, waited = wait_dispatched(c, 300)
            run.drain = {
                (q.topic, q.queue_id): q.max_offset for t in range(s.topics) for q in c.topic_status(topic_name(t))
            }
        except grpc.RpcError as e:  # the deployment did not come back: what was pulled is checked as it is
            error = f"after the load: {e.code().name if e.code() else 'UNKNOWN'}: {e.details()}"
            run.drain = {}
        run.drain_until = time.monotonic() + 300
        for t in consumers:
            t.join()
        with run.lock:
            sample = random.Random(11).sample(list(run.recent), min(FINAL_KEY_CHECKS, len(run.recent)))
        for _, topic, i in sample if error is None else []:
            final_found += bool(_find_key(run, c, topic, i)[0])
    _sample_rss(run, dirs)
    if run.errors:
        raise run.errors[0]
    lines, lost, lost_examples = check_acks(ack_path, queues)
    stopped = _stop_serve(s.serve_pid, s.stop_timeout) if s.serve_pid is not None else None
    clean = None
    if stopped:
        clean = not any((d / f).exists() for d in dirs for f in ("abort", "abort.consumequeue", "abort.index"))
    verify = _verify(dirs)
    with run.lock:
        calls = list(run.calls)
    ok_ms = [c[1] * 1000 for c in calls if c[2] >= 0]
    labels = sorted({k for _, mb in run.rss for k in mb})
    summary = {
        "minutes": s.minutes,
        "server": s.server,
        "producers": s.producers,
        "consumers": s.consumers,
        "rate": s.rate,
        "batch": s.batch,
        "body_size": s.body_size,
        "queues": len(queues),
        "sent": run.next_index,
        "acked": lines,
        "unacked": run.unacked,
        "lost": lost,
        "lost_examples": lost_examples,
        "pulled": sum(run.pulled.values()),
        "gaps": run.gaps,
        "send_calls": len(calls),
        "send_failures": dict(run.failures),
        "not_put_ok": run.not_put_ok,
        "pull_errors": dict(run.pull_errors),
        "send_p99_ms": _p(ok_ms, 99),
        "p99_ms_per_minute": [r["p99_ms"] for r in rows],
        "acked_per_minute": [r["acked"] for r in rows],
        "key_queries": {
            "asked": len(run.queries),
            "found": sum(1 for q in run.queries if q[2]),
            "errors": dict(run.query_errors),
            "p99_ms": _p([q[1] * 1000 for q in run.queries], 99),
            "final_checked": len(sample),
            "final_found": final_found,
        },
        "kills": run.kills,
        "rss_mb": {
            "every_s": s.rss_every,
            "t_s": [t for t, _ in run.rss],
            "processes": {k: [mb[k][0] if k in mb else None for _, mb in run.rss] for k in labels},
            "deployment_total": [_deployment_mb(mb) for _, mb in run.rss],
        },
        "anon_mb": {
            "processes": {k: [mb[k][1] if k in mb else None for _, mb in run.rss] for k in labels},
            "deployment_total": [_deployment_mb(mb, 1) for _, mb in run.rss],
        },
        "error": error,
        "dispatch_caught_up": caught_up,
        "dispatch_wait_s": round(waited, 2),
        "serve_stopped": stopped,
        "clean_close": clean,
        "verify": verify,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "ack_log": None if tmp is not None and lost == 0 else str(ack_path),
    }
    kills_back = all(k.get("back_s") is not None for k in run.kills)
    summary["ok"] = (
        lost == 0
        and verify["ok"]
        and kills_back
        and caught_up
        and final_found == len(sample)
        and stopped is not False
        and clean is not False
    )
    if tmp is not None and lost == 0:
        os.unlink(tmp)
    return rows, summary


def rss_table(summary: dict) -> str:
    """Per process: its first, largest and last sample, resident and anonymous (MB),
    and the minutes its actor was killed in (a restart starts its memory afresh)."""
    rss, anon = summary["rss_mb"], summary["anon_mb"]
    killed: dict[str, list[str]] = {}
    for k in summary["kills"]:
        killed.setdefault(k["actor"], []).append(str(k["minute"]))

    def cells(values: list) -> str:
        v = [x for x in values if x is not None]
        return f"{v[0]:>8} {max(v):>8} {v[-1]:>8}" if v else f"{'-':>8} {'-':>8} {'-':>8}"

    out = [
        f"{'process':<22} {'RSS MB: first':>14} {'max':>8} {'last':>8} {'anon: first':>12} {'max':>8} {'last':>8}"
        "  killed in minute",
    ]
    for name, values in rss["processes"].items():
        out.append(
            f"{name:<22} {cells(values):>32} {cells(anon['processes'][name]):>30}  {', '.join(killed.get(name, []))}"
        )
    out.append(f"{'deployment total':<22} {cells(rss['deployment_total']):>32} {cells(anon['deployment_total']):>30}")
    return "\n".join(out)


__all__ = ["ROW_HEAD", "Soak", "check_acks", "format_row", "key_hash", "rss_table", "run_soak", "shard_dirs"]
