"""The commitlog writer of one shard with its gRPC server, on its own event-loop
thread, without Ray (the actor wraps it; tests and LocalStack use it directly)."""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from mqstore.services.commitlog.servicer import CommitLogServicer
from mqstore.services.commitlog.state import CommitLogPhase, CommitLogState
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import stop_server
from mqstore.services.common.peers import endpoint_of, internal_address
from mqstore.services.common.server import ServerThread, start_grpc_server
from mqstore.services.query.routing import pin_layout
from mqstore.store.config import StoreConfig
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)


class CommitLogHost:
    """One shard's commitlog and its CommitLog service. The commitlog opens
    (recovers) in the background, then awaits the consume-queue builder's queue ends
    (AttachQueueEnds; see commitlog/state.py for the protocol). It never calls
    another component."""

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None = None,
        *,
        auth: InternalAuth,
        shard: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        retention: RetentionConfig | None = None,
        layout: tuple[Path, int] | None = None,
    ) -> None:
        """``layout``: (root, shards) to pin (``routing.pin_layout``) on this machine
        before the store opens (a shard on a node of its own: the driver's check
        does not see this disk). ``auth``: the deployment's secret (every call must
        carry it; the calls this shard makes carry it)."""
        host = internal_address(host)
        self.thread = ServerThread(f"mqstore-shard{shard}")
        self._layout = layout
        self.state = CommitLogState(store_dir, config, shard=shard, retention=retention)
        self._servicer = CommitLogServicer(self.state, auth)
        self._closing = threading.Event()
        self.server = self.thread.run(
            start_grpc_server(host, port, [self._servicer.registration()], serving=False, auth=auth)
        )
        self.endpoint = endpoint_of(host, self.server.port)
        self._ready = threading.Event()
        self._opener = threading.Thread(target=self._open, name=f"mqstore-shard{shard}-open", daemon=True)
        self._opener.start()
        log.info("shard_listening", shard=shard, endpoint=self.endpoint, store=str(store_dir))

    def _open(self) -> None:
        try:
            if self._layout is not None:
                try:
                    pin_layout(*self._layout)
                except Exception as e:
                    self.state.phase, self.state.error = CommitLogPhase.FAILED, f"{type(e).__name__}: {e}"
                    raise
            self.state.open(give_up=self._closing.is_set)
            self.thread.run(self.server.set_serving(True))
            self._ready.set()  # health follows the background loops from now on, until close
            self.state.watch_loops(lambda ok: self.thread.run(self.server.set_serving(ok)), self._closing)
        except Exception as e:  # noqa: BLE001 - reported through state/error (status(), health NOT_SERVING)
            log.error("shard_not_serving", shard=self.state.shard, error=str(e))
        finally:
            self._ready.set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """True once the store is open (False: still recovering or it failed)."""
        self._ready.wait(timeout)
        return self.state.phase is CommitLogPhase.SERVING

    def status(self) -> dict:
        s = self.state
        out = {
            "shard": s.shard,
            "endpoint": self.endpoint,
            "state": s.phase.value,
            "error": s.error,
            "incarnation": s.incarnation,
            "recovery": s.progress.as_dict(),
        }
        log_store = s.log_store
        if log_store is not None:
            cl = log_store.commitlog
            out.update(
                min_offset=cl.min_offset,
                wrote=cl.wrote_offset,
                flushed=cl.flushed_offset,
                dispatched=log_store.dispatched_offset,
            )
        return out

    def close(self) -> None:
        """Stop serving, then close the store cleanly (flushed, abort file removed)."""
        self._closing.set()
        try:
            self.thread.run(stop_server(self.server, self._servicer.streams), timeout=30)
        finally:
            self._opener.join()
            self.state.close()
            self.thread.stop()


__all__ = ["CommitLogHost"]
