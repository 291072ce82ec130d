"""The front (the public API) with its gRPC server and metrics endpoint, on its own
event-loop thread, without Ray (the actor wraps it).

``serve --fronts N`` runs N of them, each a ``FrontHost`` of its own (front ``index``)
over the same shards. Their public ports are shared (``reuse_port``: SO_REUSEPORT, the
kernel spreads connections; a client's calls ride one connection, so they stay on one
front), their metrics ports are not (each front's own: see startup/deployment.py).
What a front keeps in memory, and why that is right with N of them:

    client sessions (settings.Sessions)   the front holding the client's connection: its
                                          Telemetry stream and every other call (one
                                          HTTP/2 connection); no call reads the settings
                                          but the stream's own answers and check-backs
    push renewals (renewal.Renewals)      the front that received the message renews it
                                          and maps the client's handle; after its death
                                          the message comes back after its invisible time
    topic table (shard_set.TopicTable)    fetched from the shards, at most 1 s old
    coalescers, round-robin cursors, metrics, the ACL file
                                          per front by design (the ACL file is read by
                                          each front: change it on every node)
    transaction check-backs               transactions.py
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import structlog

from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.metrics import FrontMetrics
from mqstore.services.common.peers import Locator, Resolver, ShardResolvers, advertised
from mqstore.services.common.server import GrpcServer, ServerThread, TlsFiles, start_grpc_server
from mqstore.services.common.shard_clients import Shard
from mqstore.services.common.shard_set import ShardSet
from mqstore.services.query.acl import Acl
from mqstore.services.query.front import FrontServicer
from mqstore.services.rocketmq import settings
from mqstore.services.rocketmq.endpoints import FrontAddresses
from mqstore.services.rocketmq.messaging import DEFAULT_MAX_ATTEMPTS, MessagingServicer

log = structlog.get_logger(__name__)
READY_POLL_S = 0.2  # how often the front asks its shards whether they serve, until all do
FRONT_THREAD = "mqfront-"  # + the front's index: its event-loop thread's kernel name (bench/processes.py)


class FrontHost:
    """The public API over the given shards: ``shards[i]`` = (resolvers of shard i's
    services, resolve its dispatcher or None). Both APIs (``servicer``: mqstore's,
    ``messaging``: RocketMQ's) are adapters over one ``ShardSet`` (``shard_set``)."""

    def __init__(
        self,
        shards: Sequence[tuple[ShardResolvers, Resolver | None]],
        *,
        auth: InternalAuth,
        host: str = "127.0.0.1",
        port: int = 0,
        default_queue_nums: int = 4,
        metrics_port: int = 0,
        tls: TlsFiles | None = None,
        acl: str | Path | None = None,
        locators: Sequence[Locator] | None = None,
        rocketmq_port: int | None = None,
        max_delivery_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_body: int = 4 << 20,
        max_sessions: int = settings.MAX_SESSIONS,
        max_sessions_per_user: int = settings.MAX_SESSIONS_PER_USER,
        index: int = 0,
        reuse_port: bool = False,
        fronts: FrontAddresses | None = None,
    ) -> None:
        """``index``: which front of the deployment this is (its event-loop thread is
        named ``mqfront-<index>`` for the kernel: bench/processes.py tells fronts apart by
        it). ``reuse_port``: share ``port`` and ``rocketmq_port`` with the deployment's
        other fronts (server.server_options). ``fronts``: every front's RocketMQ
        address, when the fronts are spread over nodes (rocketmq/endpoints.py).
        ``auth``: the deployment's secret, carried by every call to the shards.
        ``metrics_port``: serve Prometheus metrics on ``host:metrics_port`` (0: none).
        ``tls``: the public API speaks TLS only (internal servers speak TLS when
        ``auth.tls``). ``acl``: the users-and-permissions file (None: anonymous).
        ``locators``: where each shard's processes are (Ray's actor table; None
        without Ray): status rows carry their node and say why a part is missing.
        ``rocketmq_port``: also serve RocketMQ 5's protocol (services/rocketmq) on
        ``host:rocketmq_port`` (0: a free port; None: not served), over the same
        shards, ACL and TLS; ``max_delivery_attempts``: its consumers' deliveries of a
        message before it goes to ``%DLQ%<group>``; ``max_body``: the largest body its
        producers may send (the shards' ``StoreConfig.max_message_bytes``: a bigger one
        is refused as MESSAGE_BODY_TOO_LARGE, and clients are told the limit);
        ``max_sessions``, ``max_sessions_per_user``: its client sessions kept in all
        and per user (a new client past a bound: TOO_MANY_REQUESTS).

        Health (``grpc.health.v1``, overall and per service, on both ports) answers
        NOT_SERVING until every shard serves (its commitlog and consume-queue
        builder), then SERVING: a readiness probe that waits for SERVING may send at
        once. After that a shard's outage shows in its calls (UNAVAILABLE) and in
        ``mqstore status``, not in the front's health (one shard down must not take
        the whole front out of a load balancer)."""
        access = None if acl is None else Acl.load(acl)
        self.index = index
        self.thread = ServerThread("mqstore-front", os_name=f"{FRONT_THREAD}{index}")
        self.shard_set = ShardSet(
            [
                Shard(i, r, d, auth=auth, locate=None if locators is None else locators[i])
                for i, (r, d) in enumerate(shards)
            ],
            default_queue_nums=default_queue_nums,
        )
        self.metrics = FrontMetrics(self._shard_stats, self._consumer_losses)
        self.servicer = FrontServicer(self.shard_set, metrics=self.metrics, acl=access)
        self.server = self.thread.run(
            start_grpc_server(host, port, [self.servicer.registration()], tls=tls, serving=False, reuse_port=reuse_port)
        )
        self._serving = threading.Event()
        self.endpoint = f"{advertised(host)}:{self.server.port}"
        self.tls = tls is not None
        self.rocketmq_server = None
        self.rocketmq_endpoint = ""
        if rocketmq_port is not None:
            self.messaging = MessagingServicer(
                self.shard_set,
                acl=access,
                endpoint=(advertised(host), rocketmq_port),
                max_attempts=max_delivery_attempts,
                max_body=max_body,
                metrics=self.metrics,
                max_sessions=max_sessions,
                max_sessions_per_user=max_sessions_per_user,
                fronts=fronts,
            )
            self.metrics.registry.register(_SessionCollector(self.messaging.sessions))
            try:
                self.rocketmq_server = self.thread.run(
                    start_grpc_server(
                        host,
                        rocketmq_port,
                        [self.messaging.registration()],
                        tls=tls,
                        strict_decode=False,
                        serving=False,
                        reuse_port=reuse_port,
                    )
                )
            except OSError:
                self.close()
                raise
            self.messaging.endpoint = (advertised(host), self.rocketmq_server.port)
            self.rocketmq_endpoint = f"{advertised(host)}:{self.rocketmq_server.port}"
            self.thread.run(self.messaging.transactions.start())  # recovery and check-backs, on this loop
        self.metrics_endpoint = ""
        if metrics_port:
            try:
                bound = self.metrics.serve(host, metrics_port)
            except OSError as e:
                self.close()
                raise OSError(f"can not serve metrics on {host}:{metrics_port}: {e.strerror or e}") from None
            self.metrics_endpoint = f"{advertised(host)}:{bound}"
        self._watch = self.thread.submit(self._serve_once_shards_serve())
        log.info(
            "front_listening",
            front=index,
            endpoint=self.endpoint,
            rocketmq=self.rocketmq_endpoint or None,
            tls=self.tls,
            metrics=self.metrics_endpoint or None,
            shards=len(self.shard_set),
        )

    async def _serve_once_shards_serve(self) -> None:
        """Health NOT_SERVING until every shard's commitlog and consume-queue builder
        serve, then SERVING (see ``__init__``)."""
        waiting: list[str] = []
        while True:
            waiting = await _not_serving(self.shard_set)
            if not waiting:
                break
            await asyncio.sleep(READY_POLL_S)
        servers: list[GrpcServer] = [self.server] + ([self.rocketmq_server] if self.rocketmq_server else [])
        for server in servers:
            await server.set_serving(True)
        self._serving.set()
        log.info("front_serving", shards=len(self.shard_set))

    def wait_serving(self, timeout: float | None = None) -> bool:
        """True once the front's health says SERVING (every shard serves)."""
        return self._serving.wait(timeout)

    def served(self) -> dict[str, int]:
        """Calls this front answered so far, by API ("api": mqstore's, "rocketmq"):
        the deployment's fronts each count their own (tests, `status`)."""
        out = {"api": 0, "rocketmq": 0}
        for what, counter in (("api", self.metrics.requests), ("rocketmq", self.metrics.rocketmq_requests)):
            for family in counter.collect():
                out[what] += int(sum(s.value for s in family.samples if s.name.endswith("_total")))
        return out

    def clients(self) -> list[str]:
        """The RocketMQ client ids this front keeps a session of ([] without the port)."""
        if self.rocketmq_server is None:
            return []
        return self.thread.run(_client_ids(self.messaging.sessions), timeout=10)

    def _shard_stats(self) -> list:
        return self.thread.run(self.servicer.shard_stats(), timeout=10)

    def _consumer_losses(self) -> list:
        return self.thread.run(self.servicer.consumer_losses(), timeout=10)

    def close(self) -> None:
        """Stop serving and close (once: a second call does nothing)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            if getattr(self, "_watch", None) is not None:
                self._watch.cancel()
            self.metrics.close()
            if self.rocketmq_server is not None:
                self.thread.run(self.messaging.transactions.stop(), timeout=30)
                self.thread.run(self.messaging.renewals.stop(), timeout=30)
                self.thread.run(self.rocketmq_server.stop(1.0), timeout=30)
            self.thread.run(self.server.stop(1.0), timeout=30)
            self.thread.run(self.servicer.close(), timeout=30)
        finally:
            self.thread.stop()


async def _not_serving(shards: Sequence[Shard]) -> list[str]:
    """The parts of ``shards`` that do not serve yet ("shard 0 commitlog: RECOVERING")."""

    async def one(s: Shard) -> list[str]:
        out = []
        try:
            st = await s.commitlog.get_stats(timeout=2.0, retry=False, resolve_cap=2.0)
            if st.state != "SERVING":
                out.append(f"shard {s.shard} commitlog: {st.state}")
        except Exception as e:  # noqa: BLE001 - not reachable yet: not serving
            out.append(f"shard {s.shard} commitlog: {type(e).__name__}")
        try:
            p = await s.queues.get_progress(timeout=2.0, retry=False, resolve_cap=2.0)
            if p.state != "SERVING":
                out.append(f"shard {s.shard} consume-queue builder: {p.state}")
        except Exception as e:  # noqa: BLE001 - as above
            out.append(f"shard {s.shard} consume-queue builder: {type(e).__name__}")
        return out

    return [w for part in await asyncio.gather(*(one(s) for s in shards)) for w in part]


async def _client_ids(sessions: settings.Sessions) -> list[str]:
    return sessions.client_ids()  # read on the front's loop, where the sessions change


class _SessionCollector:
    """The RocketMQ port's client sessions, for Prometheus (read on each scrape)."""

    def __init__(self, sessions: settings.Sessions) -> None:
        self._sessions = sessions

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        g = GaugeMetricFamily("mqstore_rocketmq_sessions", "Client sessions the RocketMQ port keeps")
        g.add_metric([], float(len(self._sessions)))
        yield g
        c = CounterMetricFamily(
            "mqstore_rocketmq_sessions_refused",
            "Clients refused by a bound: total, per_user (sessions) or settings (a Telemetry stream's)",
            labels=["bound"],
        )
        for bound, n in list(self._sessions.refused.items()):
            c.add_metric([bound], float(n))
        yield c


__all__ = ["FrontHost"]
