"""Shared by the service tests: a small store config, waiting for dispatch, status codes,
producer threads under load."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import grpc

from mqstore.rpc.v1 import common_pb2
from mqstore.services.query.client import FrontClient
from mqstore.store.config import FlushMode, StoreConfig


def small_config(**kw) -> StoreConfig:
    """Sync flush, 1 MiB segments (the dispatcher crosses BLANKs), a small index."""
    base = dict(
        flush_mode=FlushMode.SYNC,
        segment_bytes=1 << 20,
        index_hash_slots=4096,
        index_max_entries=16384,
        max_message_bytes=64 * 1024,
        consume_queue_file_bytes=1000 * 20,
    )
    base.update(kw)
    return StoreConfig(**base)


def wait_dispatched(client, timeout: float = 30.0) -> None:
    """Until every shard's dispatcher has everything flushed, in the consume queues and
    in the index (which may be fed behind them, e.g. while it still recovers)."""
    deadline = time.monotonic() + timeout
    while True:
        shards = client.store_status()
        if all(
            s.state == "SERVING"
            and s.dispatched_offset >= s.confirm_offset
            and (not s.index_builder.state or s.index_builder.progress_offset >= s.confirm_offset)
            for s in shards
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not dispatched after {timeout}s: {shards}")
        time.sleep(0.02)


def code_of(call) -> grpc.StatusCode | None:
    """The status code ``call()`` fails with (None if it succeeds)."""
    try:
        call()
    except grpc.RpcError as e:
        return e.code()
    return None


def free_port(skip: tuple[int, ...] = ()) -> int:
    """A free loopback port outside Ray's worker range (10002-19999), not one of ``skip``."""
    for port in range(28100, 28300):
        if port in skip:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


class Load:
    """Producer threads sending batches through the front; ``acked`` holds what
    the front acknowledged (PUT_OK under sync flush: durable)."""

    def __init__(self, endpoint: str, topic: str, threads: int = 2, batch: int = 50, deadline_s: float = 20) -> None:
        self.deadline_s = deadline_s
        self.calls: list[tuple[float, float, str]] = []  # (start, end, status code) of every send
        self.acked: list[bytes] = []
        self.failures = 0
        self.sent_batches = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(endpoint, topic, t, batch), daemon=True) for t in range(threads)
        ]
        for t in self._threads:
            t.start()

    def _run(self, endpoint: str, topic: str, tid: int, batch: int) -> None:
        seq = 0
        with FrontClient(endpoint, timeout=self.deadline_s) as c:
            while not self._stop.is_set():
                bodies = [f"{topic}-{tid}-{seq + i:07d}".encode() for i in range(batch)]
                seq += batch
                t0 = time.monotonic()
                try:
                    r = c.send(topic, bodies, keys=[b.decode() for b in bodies])
                except grpc.RpcError as e:
                    with self._lock:
                        self.calls.append((t0, time.monotonic(), e.code().name))
                        self.failures += 1
                    time.sleep(0.05)
                    continue
                with self._lock:
                    self.calls.append((t0, time.monotonic(), "OK"))
                    self.sent_batches += 1
                    self.acked.extend(b for b, s in zip(bodies, r.statuses) if s == common_pb2.PUT_OK)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


@contextlib.contextmanager
def local_ray(namespace: str | None = None, **init) -> Iterator:
    """A Ray instance of the test's own on loopback, sized for this 2-core machine
    (no dashboard, a small object store, workers' output kept off the driver); extra
    ``ray.init`` arguments (resources, runtime_env, object_store_memory) win. Shut down
    on the way out."""
    import ray

    ray.init(
        **{
            "address": "local",
            "num_cpus": 2,
            "include_dashboard": False,
            "object_store_memory": 256 << 20,
            "_node_ip_address": "127.0.0.1",
            "namespace": namespace,
            "log_to_driver": False,
            **init,
        }
    )
    try:
        yield ray
    finally:
        ray.shutdown()
