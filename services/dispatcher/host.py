"""The remote dispatcher of one shard with its gRPC server, on its own event-loop
thread, without Ray (the actor wraps it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog

from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import ShardResolvers, endpoint_of, internal_address
from mqstore.services.common.server import ServerThread, start_grpc_server
from mqstore.services.dispatcher.reput import DispatcherServicer, RemoteDispatcher
from mqstore.store.config import StoreConfig
from mqstore.store.delay_offsets import parse_delay_levels

log = structlog.get_logger(__name__)


class DispatcherHost:
    """The remote dispatcher of one shard and its DispatcherService."""

    def __init__(
        self,
        resolvers: ShardResolvers,
        *,
        auth: InternalAuth,
        shard: int = 0,
        config: StoreConfig | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        chunk_bytes: int = 8 << 20,
        store_dir: str | Path | None = None,
    ) -> None:
        """``store_dir``: the shard's store directory when this process is on its node
        (records are then read from the segments' maps, see RemoteDispatcher)."""
        cfg = config or StoreConfig()
        host = internal_address(host)
        self.thread = ServerThread(f"mqstore-dispatcher{shard}")
        self.dispatcher = RemoteDispatcher(
            resolvers["cl"],
            resolvers["cq"],
            resolvers.get("ix"),
            auth=auth,
            shard=shard,
            delays_ms=parse_delay_levels(cfg.message_delay_level),
            chunk_bytes=chunk_bytes,
            store_dir=store_dir,
        )
        self.server = self.thread.run(
            start_grpc_server(host, port, [DispatcherServicer(self.dispatcher).registration()], auth=auth)
        )
        self.endpoint = endpoint_of(host, self.server.port)
        self.thread.run(_call_soon(self.dispatcher.start))

    def status(self) -> dict:
        st = self.dispatcher.status()
        return {
            "shard": self.dispatcher.shard,
            "endpoint": self.endpoint,
            "dispatched_offset": st.dispatched_offset,
            "lag_bytes": st.lag_bytes,
            "running": st.running,
            "last_error": st.last_error,
            "resyncs": st.resyncs,
            "dispatched_records": st.dispatched_records,
            "batches": st.batches,
            "streams_opened": self.dispatcher.streams_opened,
            "reads": "local" if self.dispatcher.reads_locally else "remote",
        }

    def close(self, drain_s: float = 10.0) -> None:
        """Dispatch what the commitlog confirmed (up to ``drain_s``), then stop."""
        try:
            if drain_s > 0:
                self.thread.run(self.dispatcher.drain(drain_s), timeout=drain_s + 5)
            self.thread.run(self.dispatcher.stop(), timeout=30)
            self.thread.run(self.server.stop(1.0), timeout=30)
        finally:
            self.thread.stop()


async def _call_soon(fn: Callable[[], None]) -> None:
    fn()


__all__ = ["DispatcherHost"]
