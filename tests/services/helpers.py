"""Shared by the service tests: a small store config, waiting for dispatch, status codes."""

from __future__ import annotations

import socket
import time

import grpc

from mqstore.store.config import FlushMode, StoreConfig


def small_config(**kw) -> StoreConfig:
    """Sync flush, 1 MiB segments (the dispatcher crosses BLANKs), a small index."""
    base = dict(flush_mode=FlushMode.SYNC, segment_bytes=1 << 20, index_hash_slots=4096, index_max_entries=16384,
                max_message_bytes=64 * 1024, consume_queue_file_bytes=1000 * 20)  # fmt: skip
    base.update(kw)
    return StoreConfig(**base)


def wait_dispatched(client, timeout: float = 30.0) -> None:
    """Until every shard's dispatcher has everything flushed (consume queues and index follow)."""
    deadline = time.monotonic() + timeout
    while True:
        shards = client.store_status()
        if all(s.state == "SERVING" and s.dispatched_offset >= s.confirm_offset for s in shards):
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
