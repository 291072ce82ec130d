"""``dispatcher-<i>``: the reput loop of shard i as a Ray actor."""

from __future__ import annotations

import ray

from mqstore.services.common.actor import (
    CONCURRENCY,
    MAX_RESTARTS,
    Hosted,
    configure_actor_logging,
    node_address,
    shard_resolvers,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.dispatcher.host import DispatcherHost
from mqstore.store.config import StoreConfig


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class DispatcherActor(Hosted):
    def __init__(
        self,
        shard: int,
        namespace: str,
        config: StoreConfig,
        auth: InternalAuth,
        host: str | None = None,
        store_dir: str | None = None,
    ) -> None:
        configure_actor_logging("dispatcher", shard)
        self.host = DispatcherHost(
            shard_resolvers(shard, namespace, config.message_index_enable),
            shard=shard,
            config=config,
            host=node_address(host),
            auth=auth,
            store_dir=store_dir,  # placed on the shard's node: reads its segments' maps
        )

    def status(self) -> dict:
        return self.host.status()


__all__ = ["DispatcherActor"]
