"""``consumequeue-<i>`` and ``index-<i>``: the builders of shard i as Ray actors."""

from __future__ import annotations

import ray

from mqstore.services.common.actor import (
    CONCURRENCY,
    MAX_RESTARTS,
    Hosted,
    actor_resolver,
    configure_actor_logging,
    node_address,
    shard_name,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.index.host import BuilderHost
from mqstore.store.config import StoreConfig


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class BuilderActor(Hosted):
    def __init__(
        self,
        kind: str,
        store_dir: str,
        config: StoreConfig,
        shard: int,
        namespace: str,
        auth: InternalAuth,
        host: str | None = None,
    ) -> None:
        configure_actor_logging(kind, shard)
        self.host = BuilderHost(
            kind,
            store_dir,
            config,
            shard=shard,
            host=node_address(host),
            auth=auth,
            resolve_commitlog=actor_resolver(shard_name(shard), namespace),
        )

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        return self.host.wait_ready(timeout_s)

    def status(self) -> dict:
        return self.host.status()


__all__ = ["BuilderActor"]
