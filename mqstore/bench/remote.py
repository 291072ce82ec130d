"""``mqstore bench append --server`` and ``bench consume --server``: the same
workloads as the in-process benches, through a running ``mqstore serve`` (every
batch one SendBatch / Pull call to the front, which calls the shards over gRPC).

append: ``producers`` threads, each with its own channel, send batches of the
deterministic workload (workload.py); latency is per SendBatch call.
consume: every queue of BenchTopic0..N-1 (TopicStatus), pulled from its min offset
to its max with raw records (as consumers get them), ``batch`` per call; first it
waits (up to ``wait_dispatch`` seconds) until every shard has dispatched what it
wrote (StoreStatus), so the queues' ends cover everything sent just before.
Both report ``client_cpu_s``: this process's CPU seconds over the timed part (client
and server share the machine's cores); append reports ``dispatch_lag_bytes_at_end``,
what the shards had written and not yet dispatched when the last send was answered.
A front serving TLS: MQSTORE_TLS_CA names the PEM certificates to trust.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from mqstore.bench.cpu import CpuWindow
from mqstore.bench.workload import Workload, topic_name
from mqstore.rpc.v1 import common_pb2, front_pb2
from mqstore.services.query.client import FrontClient, remote_errors

WIRES = ("encoded", "columns")


def _tls_ca() -> str | None:
    return os.environ.get("MQSTORE_TLS_CA") or None


def _columns(batch) -> common_pb2.MessageColumns:
    topics = [batch.topics] if isinstance(batch.topics, str) else list(batch.topics)
    q = batch.queue_ids
    return common_pb2.MessageColumns(
        topics=topics,
        bodies=list(batch.bodies),  # bytes per message (the workload gives one buffer)
        queue_ids=[int(q)] if isinstance(q, int) else np.asarray(q).tolist(),
        tags=batch.tags,
        keys=batch.keys,
    )


def run_remote_append(
    server: str,
    *,
    messages: int,
    body_size: int = 128,
    topics: int = 1,
    queues: int = 4,
    producers: int = 1,
    batch: int = 1000,
    wire: str = "encoded",
    cpu_of: tuple[int, list[Path]] | None = None,
    probe_lag: bool = False,
    shape: str = "round-robin",
    passes: int = 1,
) -> dict:
    """``probe_lag``: measure the dispatch lag meanwhile (``LagProbe``).
    ``wire``: "encoded" (the client encodes each batch: SendEncoded) or "columns"
    (SendBatch, the front and the commitlog read protobuf columns). ``cpu_of``:
    (pid of ``mqstore serve``, its shard directories): the result's ``cpu_us_per_msg``
    gives each process's CPU per message over the sends and the dispatch that follows
    them (bench/cpu.py). ``shape``: workload.py's. ``passes``: as the in-process bench's
    (append.py): the same messages again, each pass after the server dispatched the
    one before; the top level is pass 1's, ``passes`` lists each pass's."""
    if wire not in WIRES:
        raise ValueError(f"wire must be one of {', '.join(WIRES)}, got {wire!r}")
    if passes < 1:
        raise ValueError("passes must be >= 1")
    workload = Workload(body_size=body_size, topics=topics, queues=queues, shape=shape, run=batch)
    results = []
    for k in range(passes):
        if k:  # the next pass starts with the previous one dispatched
            with remote_errors(), FrontClient(server, timeout=120, tls_ca=_tls_ca()) as c:
                wait_dispatched(c, 600)
        results.append(
            {"pass": k + 1} | _send_pass(server, workload, messages, producers, batch, wire, cpu_of, probe_lag)
        )
    first = {k: v for k, v in results[0].items() if k != "pass"}
    return (
        first
        | {"server": server, "batch": batch, "producers": producers, "wire": wire, "topics": topics, "shape": shape}
        | ({"passes": results} if passes > 1 else {})
    )


def _send_pass(
    server: str,
    workload: Workload,
    messages: int,
    producers: int,
    batch: int,
    wire: str,
    cpu_of: tuple[int, list[Path]] | None,
    probe_lag: bool,
) -> dict:
    """Send messages 0 .. messages - 1 once: the pass's figures."""
    lock = threading.Lock()
    next_start = [0]
    latencies: list[float] = []
    totals = {"bytes": 0, "acked": 0, "timeouts": 0}
    errors: list[BaseException] = []

    def producer() -> None:
        mine: list[float] = []
        nbytes = acked = timeouts = 0
        try:
            with remote_errors(), FrontClient(server, timeout=120, tls_ca=_tls_ca()) as c:
                while True:
                    with lock:
                        start = next_start[0]
                        if start >= messages:
                            break
                        count = min(batch, messages - start)
                        next_start[0] = start + count
                    messages_batch = workload.batch(start, count)
                    if wire == "encoded":
                        t0 = time.perf_counter()
                        sent = c.send_encoded(messages_batch)
                        mine.append(time.perf_counter() - t0)
                        statuses, sizes = sent.statuses, sent.sizes
                    else:
                        cols = _columns(messages_batch)
                        t0 = time.perf_counter()
                        res = c.send_columns(cols).result
                        mine.append(time.perf_counter() - t0)
                        statuses, sizes = np.asarray(res.statuses), np.asarray(res.sizes)
                    nbytes += int(sizes.sum())
                    acked += int((statuses == common_pb2.PUT_OK).sum())
                    timeouts += int((statuses == common_pb2.FLUSH_DISK_TIMEOUT).sum())
        except BaseException as e:  # reported below, after the other producers finish
            errors.append(e)
        with lock:
            latencies.extend(mine)
            totals["bytes"] += nbytes
            totals["acked"] += acked
            totals["timeouts"] += timeouts

    window = CpuWindow(*cpu_of) if cpu_of else None
    probe = LagProbe(server) if probe_lag else None
    seconds, cpu = _run_timed(
        [threading.Thread(target=producer, name=f"remote-producer-{i}") for i in range(producers)]
    )
    extra = probe.stop() if probe is not None else {}
    if errors:
        raise errors[0]
    with remote_errors(), FrontClient(server, timeout=120, tls_ca=_tls_ca()) as c:
        # what the shards had written and not yet dispatched when the last send was answered
        extra["dispatch_lag_bytes_at_end"] = sum(max(0, s.wrote_offset - s.dispatched_offset) for s in c.store_status())
        if window is not None:
            extra["dispatch_caught_up"], extra["dispatch_wait_s"] = wait_dispatched(c, 120)
    if window is not None:
        extra["cpu_us_per_msg"] = window.per_message(messages)
    lat = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return extra | {
        "messages": messages,
        "acked": totals["acked"],
        "flush_timeouts": totals["timeouts"],
        "bytes": totals["bytes"],
        "seconds": round(seconds, 4),
        "msgs_per_s": round(messages / seconds, 1) if seconds else 0.0,
        "mb_per_s": round(totals["bytes"] / 1e6 / seconds, 2) if seconds else 0.0,
        "p50_ms": round(float(np.percentile(lat, 50)), 3),
        "p99_ms": round(float(np.percentile(lat, 99)), 3),
        "client_cpu_s": round(cpu, 3),
    }


LAG_TOPIC = "BenchLagProbe"


class LagProbe:
    """Dispatch lag under load, seen from outside: every ``every_s`` a thread sends
    one message to LAG_TOPIC (queue 0) and pulls that queue every millisecond until
    the message is there; the lag is the time from the send's answer to the pull
    that finds it (append acknowledged -> consume queue built -> readable), one pull
    round trip included. ``stop`` ends it and gives p50/p99/max in ms."""

    def __init__(self, server: str, every_s: float = 0.05) -> None:
        self._server, self._every = server, every_s
        self._done = threading.Event()
        self._lags: list[float] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lag-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with FrontClient(self._server, timeout=60, tls_ca=_tls_ca()) as c:
                while not self._done.wait(self._every):
                    offset = int(c.send(LAG_TOPIC, [b"probe"], queue_ids=0).queue_offsets[0])
                    t0 = time.perf_counter()
                    while c.pull(LAG_TOPIC, 0, offset, max_messages=1, raw=True).status != front_pb2.FOUND:
                        if time.perf_counter() - t0 > 30:
                            raise TimeoutError(f"probe message at offset {offset} not readable after 30 s")
                        time.sleep(0.001)
                    self._lags.append(time.perf_counter() - t0)
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self._error = e

    def stop(self) -> dict:
        self._done.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        lags = np.array(self._lags or [0.0]) * 1000
        return {
            "dispatch_lag_probes": len(self._lags),
            "dispatch_lag_p50_ms": round(float(np.percentile(lags, 50)), 2),
            "dispatch_lag_p99_ms": round(float(np.percentile(lags, 99)), 2),
            "dispatch_lag_max_ms": round(float(lags.max()), 2),
        }


def _run_timed(threads: list[threading.Thread]) -> tuple[float, float]:
    """Start the threads, wait for all: (wall seconds, this process's CPU seconds)."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, time.process_time() - cpu0


def wait_dispatched(c: FrontClient, timeout: float) -> tuple[bool, float]:
    """Wait until every shard serves and has dispatched up to its write position:
    (caught up, seconds waited)."""
    t0 = time.perf_counter()
    while True:
        shards = c.store_status()
        if all(s.state == "SERVING" and s.dispatched_offset >= s.wrote_offset for s in shards):
            return True, time.perf_counter() - t0
        if time.perf_counter() - t0 >= timeout:
            return False, time.perf_counter() - t0
        time.sleep(0.05)


def run_remote_consume(
    server: str,
    *,
    topics: int = 1,
    batch: int = 1000,
    wait_dispatch: float = 60.0,
    consumers: int = 1,
    cpu_of: tuple[int, list[Path]] | None = None,
) -> dict:
    """``consumers`` threads (each with its own channel) share the queues, as a
    consumer group's members do; one pulls every queue in turn. ``cpu_of``: as for
    ``run_remote_append`` (the pulls only)."""
    totals = {"messages": 0, "bytes": 0, "calls": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def consume(queues: list[tuple[str, int, int, int]]) -> None:
        m = nb = calls = 0
        try:
            with FrontClient(server, timeout=120, tls_ca=_tls_ca()) as c:
                for topic, qid, lo, hi in queues:
                    offset = lo
                    while offset < hi:
                        res = c.pull(topic, qid, offset, max_messages=batch, raw=True)
                        calls += 1
                        if res.next_offset <= offset:
                            break
                        m += len(res.raw_sizes) // 4
                        nb += len(res.raw_data)
                        offset = res.next_offset
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            errors.append(e)
        with lock:
            totals["messages"] += m
            totals["bytes"] += nb
            totals["calls"] += calls

    with remote_errors():
        with FrontClient(server, timeout=120, tls_ca=_tls_ca()) as c:
            caught_up, waited = wait_dispatched(c, wait_dispatch)
            queues = [
                (q.topic, q.queue_id, q.min_offset, q.max_offset)
                for t in range(topics)
                for q in c.topic_status(topic_name(t))
            ]
        window = CpuWindow(*cpu_of) if cpu_of else None
        seconds, cpu = _run_timed(
            [
                threading.Thread(target=consume, args=(queues[i::consumers],), name=f"remote-consumer-{i}")
                for i in range(consumers)
            ]
        )
        if errors:
            raise errors[0]
    messages, nbytes = totals["messages"], totals["bytes"]
    extra = {"cpu_us_per_msg": window.per_message(messages)} if window is not None else {}
    return extra | {
        "server": server,
        "messages": messages,
        "bytes": nbytes,
        "queues": len(queues),
        "pulls": totals["calls"],
        "seconds": round(seconds, 4),
        "msgs_per_s": round(messages / seconds, 1) if seconds else 0.0,
        "mb_per_s": round(nbytes / 1e6 / seconds, 2) if seconds else 0.0,
        "client_cpu_s": round(cpu, 3),
        "dispatch_wait_s": round(waited, 3),
        "dispatch_caught_up": caught_up,
        "consumers": consumers,
    }


__all__ = ["run_remote_append", "run_remote_consume", "wait_dispatched"]
