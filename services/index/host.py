"""A builder of one shard (consume queues or index) with its gRPC server, on its own
event-loop thread, without Ray (the actor wraps it). The consume-queue builder's server
also serves the shard's transactions (transactions.py), next to the queues they read."""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import stop_server
from mqstore.services.common.peers import Resolver, endpoint_of, internal_address
from mqstore.services.common.server import ServerThread, start_grpc_server
from mqstore.services.index.index_servicer import IndexServicer
from mqstore.services.index.queue_servicer import ConsumeQueueServicer
from mqstore.services.index.state import BuilderPhase, BuilderState
from mqstore.services.index.transactions import ShardTransactions, TransactionServicer
from mqstore.store.config import StoreConfig

log = structlog.get_logger(__name__)


class BuilderHost:
    """One shard's consume-queue builder (``kind`` "consumequeue": ConsumeQueue
    service) or index builder ("index": Index service), recovering against the
    commitlog at ``resolve_commitlog`` in the background (see index/state.py)."""

    def __init__(
        self,
        kind: str,
        store_dir: str | Path,
        config: StoreConfig | None = None,
        *,
        resolve_commitlog: Resolver,
        auth: InternalAuth,
        shard: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        host = internal_address(host)
        self.thread = ServerThread(f"mqstore-{kind}{shard}")
        self.state = BuilderState(kind, store_dir, config, resolve_commitlog, auth=auth, shard=shard)
        servicer = ConsumeQueueServicer(self.state) if kind == "consumequeue" else IndexServicer(self.state)
        self._popper = getattr(servicer, "popper", None)  # the consume-queue builder's pop state
        self._streams = servicer.streams  # the dispatcher's put stream: ended at close
        registrations = [servicer.registration()]
        self.transactions: ShardTransactions | None = None  # the shard's transactions, with its queues
        if kind == "consumequeue":
            self.transactions = ShardTransactions.over(self.state, resolve_commitlog, auth)
            registrations.append(TransactionServicer(self.transactions, self._streams).registration())
        self.server = self.thread.run(start_grpc_server(host, port, registrations, serving=False, auth=auth))
        self.endpoint = endpoint_of(host, self.server.port)
        self._watcher = threading.Thread(
            target=self._serving_when_open, name=f"mqstore-{kind}{shard}-health", daemon=True
        )
        self._closing = threading.Event()
        self.state.start()
        self._watcher.start()
        log.info("builder_listening", kind=kind, shard=shard, endpoint=self.endpoint, store=str(store_dir))

    def _serving_when_open(self) -> None:
        """Health: SERVING once the builder is open, NOT_SERVING while one of its
        background loops (the delay scheduler) stopped or its writes fail (stuck: a
        full disk), until close."""
        self.state.opened.wait()
        serving = False
        while not self._closing.is_set():
            ok = self.state.phase is BuilderPhase.SERVING and not self.state.stopped_loops() and not self.state.stuck
            if ok != serving:
                serving = ok
                if not ok and self.state.phase is BuilderPhase.SERVING:
                    log.error(
                        "builder_not_serving",
                        kind=self.state.kind,
                        shard=self.state.shard,
                        loops=self.state.stopped_loops(),
                        stuck=self.state.stuck and self.state.stuck[0],
                        health="NOT_SERVING",
                    )
                self.thread.run(self.server.set_serving(ok))
            self._closing.wait(0.5)

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self.state.wait_open(timeout)

    def status(self) -> dict:
        out = {**self.state.status(), "endpoint": self.endpoint}
        if self.transactions is not None:
            out["transactions"] = self.transactions.status()
        return out

    def close(self) -> None:
        """Stop serving, then close the builder (flushed, durable offset reported).
        Closing twice is allowed."""
        if self._closing.is_set():
            return
        self._closing.set()
        self.state.opened.set()  # release the health watcher
        self._watcher.join(10)
        try:
            self.thread.run(stop_server(self.server, self._streams), timeout=30)
            if self.transactions is not None:
                self.thread.run(self.transactions.stop(), timeout=30)
        finally:
            if self._popper is not None:
                self._popper.close()
            self.state.close()
            self.thread.stop()


__all__ = ["BuilderHost"]
