"""The front (the public API) with its gRPC server and metrics endpoint, on its own
event-loop thread, without Ray (the actor wraps it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import structlog

from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.metrics import FrontMetrics
from mqstore.services.common.peers import Locator, Resolver, ShardResolvers, advertised
from mqstore.services.common.server import ServerThread, TlsFiles, start_grpc_server
from mqstore.services.query.acl import Acl
from mqstore.services.query.front import FrontServicer, ShardClient
from mqstore.services.rocketmq.messaging import DEFAULT_MAX_ATTEMPTS, MessagingServicer

log = structlog.get_logger(__name__)


class FrontHost:
    """The public API over the given shards: ``shards[i]`` = (resolvers of shard i's
    services, resolve its dispatcher or None)."""

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
    ) -> None:
        """``auth``: the deployment's secret, carried by every call to the shards.
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
        is refused as MESSAGE_BODY_TOO_LARGE, and clients are told the limit)."""
        access = None if acl is None else Acl.load(acl)
        self.thread = ServerThread("mqstore-front")
        clients = [
            ShardClient(i, r, d, auth=auth, locate=None if locators is None else locators[i])
            for i, (r, d) in enumerate(shards)
        ]
        self.metrics = FrontMetrics(self._shard_stats)
        self.servicer = FrontServicer(clients, default_queue_nums=default_queue_nums, metrics=self.metrics, acl=access)
        self.server = self.thread.run(start_grpc_server(host, port, [self.servicer.registration()], tls=tls))
        self.endpoint = f"{advertised(host)}:{self.server.port}"
        self.tls = tls is not None
        self.rocketmq_server = None
        self.rocketmq_endpoint = ""
        if rocketmq_port is not None:
            self.messaging = MessagingServicer(
                self.servicer,
                endpoint=(advertised(host), rocketmq_port),
                max_attempts=max_delivery_attempts,
                max_body=max_body,
                metrics=self.metrics,
            )
            try:
                self.rocketmq_server = self.thread.run(
                    start_grpc_server(
                        host, rocketmq_port, [self.messaging.registration()], tls=tls, strict_decode=False
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
        log.info(
            "front_listening",
            endpoint=self.endpoint,
            rocketmq=self.rocketmq_endpoint or None,
            tls=self.tls,
            metrics=self.metrics_endpoint or None,
            shards=len(clients),
        )

    def _shard_stats(self) -> list:
        return self.thread.run(self.servicer.shard_stats(), timeout=10)

    def close(self) -> None:
        try:
            self.metrics.close()
            if self.rocketmq_server is not None:
                self.thread.run(self.messaging.transactions.stop(), timeout=30)
                self.thread.run(self.messaging.renewals.stop(), timeout=30)
                self.thread.run(self.rocketmq_server.stop(1.0), timeout=30)
            self.thread.run(self.server.stop(1.0), timeout=30)
            self.thread.run(self.servicer.close(), timeout=30)
        finally:
            self.thread.stop()


__all__ = ["FrontHost"]
