"""``commitlog-<i>``: the commitlog writer of shard i as a Ray actor (see
startup/deployment.py for placement and restarts)."""

from __future__ import annotations

from pathlib import Path

import ray

from mqstore.services.commitlog.host import CommitLogHost
from mqstore.services.common.actor import (
    CONCURRENCY,
    MAX_RESTARTS,
    Hosted,
    configure_actor_logging,
    node_address,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.store.config import StoreConfig
from mqstore.store.retention import RetentionConfig


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class CommitLogActor(Hosted):
    def __init__(
        self,
        store_dir: str,
        config: StoreConfig,
        shard: int,
        auth: InternalAuth,
        host: str | None = None,
        retention: RetentionConfig | None = None,
        layout: tuple[str, int] | None = None,
    ) -> None:
        configure_actor_logging("commitlog", shard)
        self.host = CommitLogHost(
            store_dir,
            config,
            shard=shard,
            host=node_address(host),
            retention=retention,
            auth=auth,
            layout=None if layout is None else (Path(layout[0]), layout[1]),
        )

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        return self.host.wait_ready(timeout_s)

    def status(self) -> dict:
        return self.host.status()


__all__ = ["CommitLogActor"]
