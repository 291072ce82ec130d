"""Components with their gRPC servers, each on its own event-loop thread, without
Ray: ``ShardHost`` (the CommitLog service over a shard's commitlog), ``BuilderHost``
(the ConsumeQueue or the Index service over its builder), ``DispatcherHost`` (the
remote dispatcher + DispatcherService), ``FrontHost`` (the public API). The Ray
actors (actors.py) are thin wrappers around them, one host per actor; tests and
embedding use them directly, and ``LocalStack`` wires a whole deployment in one
process (every hop still over gRPC on loopback).

A host is ready to be called once constructed: its server is listening (``endpoint``)
and answers health checks; a shard's or builder's services answer UNAVAILABLE
("recovering") and its health is NOT_SERVING until it is open.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import structlog

from mqstore.services.acl import Acl
from mqstore.services.builder import BuilderShard, BuilderState
from mqstore.services.commitlog import CommitLogServicer
from mqstore.services.consume_queue import ConsumeQueueServicer
from mqstore.services.dispatcher import DispatcherServicer, RemoteDispatcher
from mqstore.services.front import FrontServicer, ShardClient
from mqstore.services.index import IndexServicer
from mqstore.services.internal_auth import InternalAuth
from mqstore.services.metrics import FrontMetrics
from mqstore.services.remote import RemoteQueues
from mqstore.services.routing import STORE_PORT_BASE, pin_layout, shard_dir
from mqstore.services.server import ServerThread, TlsFiles, start_grpc_server
from mqstore.services.shard import Shard, ShardState
from mqstore.store.config import StoreConfig
from mqstore.store.config_files import parse_delay_levels
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)
Resolver = Callable[[], Awaitable[str]]
ShardResolvers = dict[str, Resolver]  # "cl", "cq", "ix" (absent: index disabled) -> resolver


WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def advertised(host: str) -> str:
    """The address others reach the front bound to ``host`` at: a wildcard bind
    (0.0.0.0, ::) is published as this machine's address, not as the wildcard
    (internal servers never bind a wildcard: see ``internal_address``)."""
    if host not in WILDCARDS:
        return host
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: it only picks the outgoing interface
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def internal_address(host: str) -> str:
    """The address an internal server binds to and publishes: one address of this
    node (what Ray knows the node as), never a wildcard, which would listen on
    every interface."""
    if host in WILDCARDS:
        raise ValueError(f"internal services bind to the node's own address, not to {host!r}")
    return host


def endpoint_of(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def fixed(endpoint: str) -> Resolver:
    """A resolver that always answers ``endpoint``."""

    async def resolve() -> str:
        return endpoint

    return resolve


class ShardHost:
    """One shard's commitlog and its CommitLog service. The commitlog opens
    (recovers) in the background, then waits for the consume-queue builder at
    ``resolve_queues`` (see shard.py for the protocol)."""

    def __init__(self, store_dir: str | Path, config: StoreConfig | None = None, *, resolve_queues: Resolver,
                 auth: InternalAuth, index: int = 0, host: str = "127.0.0.1", port: int = 0,
                 retention: RetentionConfig | None = None, layout: tuple[Path, int] | None = None) -> None:  # fmt: skip
        """``layout``: (root, shards) to pin (``routing.pin_layout``) on this machine
        before the store opens (a shard on a node of its own: the driver's check
        does not see this disk). ``auth``: the deployment's secret (every call must
        carry it; the calls this shard makes carry it)."""
        host = internal_address(host)
        self.thread = ServerThread(f"mqstore-shard{index}")
        self._layout = layout
        self.shard = Shard(store_dir, config, index=index, retention=retention)
        self.queues = RemoteQueues(resolve_queues, auth)
        self._closing = threading.Event()
        self.server = self.thread.run(start_grpc_server(host, port, [CommitLogServicer(self.shard).registration()],
                                                        serving=False, auth=auth))  # fmt: skip
        self.endpoint = endpoint_of(host, self.server.port)
        self._ready = threading.Event()
        self._opener = threading.Thread(target=self._open, name=f"mqstore-shard{index}-open", daemon=True)
        self._opener.start()
        log.info("shard_listening", shard=index, endpoint=self.endpoint, store=str(store_dir))

    def _open(self) -> None:
        try:
            if self._layout is not None:
                try:
                    pin_layout(*self._layout)
                except Exception as e:
                    self.shard.state, self.shard.error = ShardState.FAILED, f"{type(e).__name__}: {e}"
                    raise
            self.shard.open(self.queues.queue_ends, self.queues, give_up=self._closing.is_set)
            self.thread.run(self.server.set_serving(True))
            self._ready.set()  # health follows the background loops from now on, until close
            self.shard.watch_loops(lambda ok: self.thread.run(self.server.set_serving(ok)), self._closing)
        except Exception as e:  # noqa: BLE001 - reported through state/error (status(), health NOT_SERVING)
            log.error("shard_not_serving", shard=self.shard.index, error=str(e))
        finally:
            self._ready.set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """True once the store is open (False: still recovering or it failed)."""
        self._ready.wait(timeout)
        return self.shard.state is ShardState.SERVING

    def status(self) -> dict:
        s = self.shard
        out = {"shard": s.index, "endpoint": self.endpoint, "state": s.state.value, "error": s.error,
               "incarnation": s.incarnation, "recovery": s.progress.as_dict()}  # fmt: skip
        store = s.store
        if store is not None:
            cl = store.commitlog
            out.update(min_offset=cl.min_offset, wrote=cl.wrote, flushed=cl.flushed, dispatched=store.dispatched_offset)
        return out

    def close(self) -> None:
        """Stop serving, then close the store cleanly (flushed, abort file removed)."""
        self._closing.set()
        self.queues.close()  # delay deliveries stop asking the (closed) consume-queue builder
        try:
            self.thread.run(self.server.stop(1.0), timeout=30)
        finally:
            self._opener.join()
            self.shard.close()
            self.thread.stop()


class BuilderHost:
    """One shard's consume-queue builder (``kind`` "consumequeue": ConsumeQueue
    service) or index builder ("index": Index service), recovering against the
    commitlog at ``resolve_commitlog`` in the background (see builder.py)."""

    def __init__(self, kind: str, store_dir: str | Path, config: StoreConfig | None = None, *,
                 resolve_commitlog: Resolver, auth: InternalAuth, index: int = 0, host: str = "127.0.0.1",
                 port: int = 0) -> None:  # fmt: skip
        host = internal_address(host)
        self.thread = ServerThread(f"mqstore-{kind}{index}")
        self.builder = BuilderShard(kind, store_dir, config, resolve_commitlog, auth=auth, index=index)
        servicer = ConsumeQueueServicer(self.builder) if kind == "consumequeue" else IndexServicer(self.builder)
        self.server = self.thread.run(start_grpc_server(host, port, [servicer.registration()], serving=False, auth=auth))
        self.endpoint = endpoint_of(host, self.server.port)
        self._watcher = threading.Thread(target=self._serving_when_open, name=f"mqstore-{kind}{index}-health", daemon=True)
        self.builder.start()
        self._watcher.start()
        log.info("builder_listening", kind=kind, shard=index, endpoint=self.endpoint, store=str(store_dir))

    def _serving_when_open(self) -> None:
        if self.builder.opened.wait() and self.builder.state is BuilderState.SERVING:
            self.thread.run(self.server.set_serving(True))

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self.builder.wait_open(timeout)

    def status(self) -> dict:
        return {**self.builder.status(), "endpoint": self.endpoint}

    def close(self) -> None:
        """Stop serving, then close the builder (flushed, durable offset reported)."""
        try:
            self.thread.run(self.server.stop(1.0), timeout=30)
        finally:
            self.builder.opened.set()  # release the health watcher
            self.builder.close()
            self.thread.stop()


class DispatcherHost:
    """The remote dispatcher of one shard and its DispatcherService."""

    def __init__(self, resolvers: ShardResolvers, *, auth: InternalAuth, shard: int = 0, config: StoreConfig | None = None,
                 host: str = "127.0.0.1", port: int = 0, chunk_bytes: int = 8 << 20) -> None:  # fmt: skip
        cfg = config or StoreConfig()
        host = internal_address(host)
        self.thread = ServerThread(f"mqstore-dispatcher{shard}")
        self.dispatcher = RemoteDispatcher(resolvers["cl"], resolvers["cq"], resolvers.get("ix"), auth=auth, shard=shard,
                                           delays_ms=parse_delay_levels(cfg.message_delay_level), chunk_bytes=chunk_bytes)  # fmt: skip
        self.server = self.thread.run(start_grpc_server(host, port, [DispatcherServicer(self.dispatcher).registration()],
                                                        auth=auth))  # fmt: skip
        self.endpoint = endpoint_of(host, self.server.port)
        self.thread.run(_call_soon(self.dispatcher.start))

    def status(self) -> dict:
        st = self.dispatcher.status()
        return {"shard": self.dispatcher.shard, "endpoint": self.endpoint, "reput_offset": st.reput_offset,
                "lag_bytes": st.lag_bytes, "running": st.running, "last_error": st.last_error,
                "resyncs": st.resyncs, "dispatched_records": st.dispatched_records}  # fmt: skip

    def close(self, drain_s: float = 10.0) -> None:
        """Dispatch what the commitlog confirmed (up to ``drain_s``), then stop."""
        try:
            if drain_s > 0:
                self.thread.run(self.dispatcher.drain(drain_s), timeout=drain_s + 5)
            self.thread.run(self.dispatcher.stop(), timeout=30)
            self.thread.run(self.server.stop(1.0), timeout=30)
        finally:
            self.thread.stop()


class FrontHost:
    """The public API over the given shards: ``shards[i]`` = (resolvers of shard i's
    services, resolve its dispatcher or None)."""

    def __init__(self, shards: Sequence[tuple[ShardResolvers, Resolver | None]], *, auth: InternalAuth,
                 host: str = "127.0.0.1", port: int = 0, default_queue_nums: int = 4, metrics_port: int = 0,
                 tls: TlsFiles | None = None, acl: str | Path | None = None) -> None:  # fmt: skip
        """``auth``: the deployment's secret, carried by every call to the shards.
        ``metrics_port``: serve Prometheus metrics on ``host:metrics_port`` (0: none).
        ``tls``: the public API speaks TLS only (internal servers speak TLS when
        ``auth.tls``). ``acl``: the users-and-permissions file (None: anonymous)."""
        access = None if acl is None else Acl.load(acl)
        self.thread = ServerThread("mqstore-front")
        clients = [ShardClient(i, r, d, auth=auth) for i, (r, d) in enumerate(shards)]
        self.metrics = FrontMetrics(self._shard_stats)
        self.servicer = FrontServicer(clients, default_queue_nums=default_queue_nums, metrics=self.metrics, acl=access)
        self.server = self.thread.run(start_grpc_server(host, port, [self.servicer.registration()], tls=tls))
        self.endpoint = f"{advertised(host)}:{self.server.port}"
        self.tls = tls is not None
        self.metrics_endpoint = ""
        if metrics_port:
            try:
                bound = self.metrics.serve(host, metrics_port)
            except OSError as e:
                self.close()
                raise OSError(f"can not serve metrics on {host}:{metrics_port}: {e.strerror or e}") from None
            self.metrics_endpoint = f"{advertised(host)}:{bound}"
        log.info("front_listening", endpoint=self.endpoint, tls=self.tls, metrics=self.metrics_endpoint or None,
                 shards=len(clients))  # fmt: skip

    def _shard_stats(self) -> list:
        return self.thread.run(self.servicer.shard_stats(), timeout=10)

    def close(self) -> None:
        try:
            self.metrics.close()
            self.thread.run(self.server.stop(1.0), timeout=30)
            self.thread.run(self.servicer.close(), timeout=30)
        finally:
            self.thread.stop()


async def _call_soon(fn: Callable[[], None]) -> None:
    fn()


def shard_config(config: StoreConfig, index: int, shards: int) -> StoreConfig:
    """Shard ``index``'s config: with several shards each records its own store host
    port (10911 + index), so an offset msgId names the shard that holds it."""
    if shards == 1:
        return config
    from dataclasses import replace

    return replace(config, store_host=config.store_host._replace(port=STORE_PORT_BASE + index))


class LocalStack:
    """A whole deployment in this process (no Ray): per shard a commitlog, a
    consume-queue builder, an index builder and a dispatcher, and a front; every hop
    over gRPC on loopback. ``front_endpoint`` is the public API."""

    def __init__(self, root: str | Path, config: StoreConfig | None = None, *, shards: int = 1,
                 host: str = "127.0.0.1", front_port: int = 0, retention: RetentionConfig | None = None,
                 metrics_port: int = 0, tls: TlsFiles | None = None, acl: str | Path | None = None,
                 auth: InternalAuth | None = None) -> None:  # fmt: skip
        """``host``: the front's address (internal servers listen on 127.0.0.1).
        ``auth``: the deployment's secret (default: a fresh one, with internal TLS
        when the front speaks TLS): ``self.auth``. ``acl``: see ``FrontHost``."""
        cfg = config or StoreConfig()
        root = Path(root)
        self.auth = auth = auth or InternalAuth.new(tls=tls is not None)
        inner = "127.0.0.1"
        self.shards: list[ShardHost] = []
        self.queue_builders: list[BuilderHost] = []
        self.index_builders: list[BuilderHost] = []
        self.dispatchers: list[DispatcherHost] = []
        resolvers: list[ShardResolvers] = []
        for i in range(shards):
            d, c = shard_dir(root, i, shards), shard_config(cfg, i, shards)
            d.mkdir(parents=True, exist_ok=True)
            later: dict[str, str] = {}
            shard = ShardHost(d, c, index=i, host=inner, retention=retention, resolve_queues=resolver_of(later, "cq"),
                              auth=auth)  # fmt: skip
            cq = BuilderHost("consumequeue", d, c, resolve_commitlog=fixed(shard.endpoint), index=i, host=inner, auth=auth)
            later["cq"] = cq.endpoint
            r: ShardResolvers = {"cl": fixed(shard.endpoint), "cq": fixed(cq.endpoint)}
            self.shards.append(shard)
            self.queue_builders.append(cq)
            if cfg.message_index_enable:
                ix = BuilderHost("index", d, c, resolve_commitlog=fixed(shard.endpoint), index=i, host=inner, auth=auth)
                self.index_builders.append(ix)
                r["ix"] = fixed(ix.endpoint)
            resolvers.append(r)
            self.dispatchers.append(DispatcherHost(r, shard=i, config=cfg, host=inner, auth=auth))
        self.front = FrontHost([(r, fixed(d.endpoint)) for r, d in zip(resolvers, self.dispatchers)], host=host,
                               port=front_port, default_queue_nums=cfg.default_queue_nums, metrics_port=metrics_port,
                               tls=tls, acl=acl, auth=auth)  # fmt: skip
        self.front_endpoint = self.front.endpoint

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """True once every commitlog serves and every builder is open."""
        return all(h.wait_ready(timeout) for h in self.shards + self.queue_builders + self.index_builders)

    def close(self) -> None:
        """Front first (no new work), then dispatchers (after dispatching what is
        confirmed), then builders, then commitlogs (each closes cleanly)."""
        self.front.close()
        for group in (self.dispatchers, self.queue_builders + self.index_builders, self.shards):
            for h in group:
                h.close()

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def resolver_of(endpoints: dict[str, str], name: str) -> Resolver:
    """A resolver reading ``endpoints[name]`` on every call (waiting until it is
    there): endpoints filled in or replaced after the caller was created."""

    async def resolve() -> str:
        while name not in endpoints:
            await asyncio.sleep(0.01)
        return endpoints[name]

    return resolve


__all__ = ["BuilderHost", "DispatcherHost", "FrontHost", "LocalStack", "ShardHost", "ShardResolvers", "advertised",
           "endpoint_of", "fixed", "internal_address", "resolver_of", "shard_config"]  # fmt: skip
