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
    shard_resolvers,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.server import TlsFiles
from mqstore.services.query.host import FrontHost


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
    ) -> None:
        resolvers = [
            (shard_resolvers(i, namespace, index_enabled), actor_resolver(dispatcher_name(i), namespace))
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
        )

    def metrics_endpoint(self) -> str:
        return self.host.metrics_endpoint


__all__ = ["FrontActor"]
