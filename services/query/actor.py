"""``front``: the public API as a Ray actor."""

from __future__ import annotations

import ray

from mqstore.services.common.actor import (
    CONCURRENCY,
    MAX_RESTARTS,
    Hosted,
    actor_resolver,
    configure_actor_logging,
    dispatcher_name,
    shard_locator,
    shard_resolvers,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import RESOLVE_S
from mqstore.services.common.server import TlsFiles
from mqstore.services.query.host import FrontHost
from mqstore.services.rocketmq.settings import MAX_SESSIONS, MAX_SESSIONS_PER_USER


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class FrontActor(Hosted):
    def __init__(
        self,
        shards: int,
        namespace: str,
        host: str,
        port: int,
        default_queue_nums: int,
        auth: InternalAuth,
        metrics_port: int = 0,
        tls: TlsFiles | None = None,
        index_enabled: bool = True,
        acl: str | None = None,
        rocketmq_port: int | None = None,
        max_delivery_attempts: int = 17,
        max_body: int = 4 << 20,
        max_sessions: int = MAX_SESSIONS,
        max_sessions_per_user: int = MAX_SESSIONS_PER_USER,
    ) -> None:
        # Every actor of the deployment exists before the front: one that does not, or is
        # dead for good, fails its calls at once; a resolution gives up after RESOLVE_S
        # (callers wait less: see front.ShardClient.call).
        resolvers = [
            (
                shard_resolvers(i, namespace, index_enabled, timeout_s=RESOLVE_S, gone_fails=True),
                actor_resolver(dispatcher_name(i), namespace, RESOLVE_S, gone_fails=True),
            )
            for i in range(shards)
        ]
        configure_actor_logging("front")
        self.host = FrontHost(
            resolvers,
            host=host,
            port=port,
            default_queue_nums=default_queue_nums,
            metrics_port=metrics_port,
            tls=tls,
            auth=auth,
            acl=acl,
            rocketmq_port=rocketmq_port,
            max_delivery_attempts=max_delivery_attempts,
            max_body=max_body,
            max_sessions=max_sessions,
            max_sessions_per_user=max_sessions_per_user,
            locators=[shard_locator(i, namespace, index_enabled) for i in range(shards)],
        )

    def metrics_endpoint(self) -> str:
        return self.host.metrics_endpoint

    def rocketmq_endpoint(self) -> str:
        return self.host.rocketmq_endpoint


__all__ = ["FrontActor"]
