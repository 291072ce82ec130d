"""``front`` (and ``front-<k>`` of ``serve --fronts N``): the public API as a Ray actor.

Front ``k`` of N: with N > 1 the fronts share their public ports (SO_REUSEPORT). Spread
fronts (``spread``: one per node, Ray's SPREAD strategy) bind their own node's address
(or the wildcard ``host`` when given one) and their routes name every front, asked of
Ray by name (rocketmq/endpoints.py)."""

from __future__ import annotations

import asyncio

import ray

from mqstore.services.common.actor import (
    ASK_S,
    CONCURRENCY,
    MAX_RESTARTS,
    Hosted,
    actor_resolver,
    configure_actor_logging,
    dispatcher_name,
    front_name,
    node_address,
    shard_locator,
    shard_resolvers,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import RESOLVE_S, WILDCARDS
from mqstore.services.common.server import TlsFiles
from mqstore.services.query.host import FrontHost
from mqstore.services.rocketmq.endpoints import FrontAddresses
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
        index: int = 0,
        fronts: int = 1,
        spread: bool = False,
    ) -> None:
        """``index``: this front's k of ``fronts`` (N); ``spread``: the fronts run one per
        node (module docstring)."""
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
        configure_actor_logging("front" if index == 0 else front_name(index))
        addresses = None
        if spread:
            host = host if host in WILDCARDS else node_address()
            addresses = FrontAddresses(_ask_fronts(namespace, fronts))
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
            index=index,
            reuse_port=fronts > 1,
            fronts=addresses,
        )

    def metrics_endpoint(self) -> str:
        return self.host.metrics_endpoint

    def rocketmq_endpoint(self) -> str:
        return self.host.rocketmq_endpoint

    def served(self) -> dict[str, int]:
        """Calls this front answered (FrontHost.served)."""
        return self.host.served()

    def clients(self) -> list[str]:
        """The RocketMQ clients whose sessions this front keeps (FrontHost.clients)."""
        return self.host.clients()


def _ask_fronts(namespace: str, fronts: int):
    """An async ask of every front's RocketMQ (host, port), by name; those that do not
    answer within ``ASK_S`` (restarting, their node gone) are left out."""

    def ask() -> list[tuple[str, int]]:
        refs = []
        for k in range(fronts):
            try:
                refs.append(ray.get_actor(front_name(k), namespace=namespace).rocketmq_endpoint.remote())
            except ValueError:  # not created yet, or gone for good
                continue
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=ASK_S)
        out = []
        for ref in ready:
            try:
                endpoint = ray.get(ref)
            except ray.exceptions.RayError:
                continue
            if endpoint:
                host, _, port = endpoint.rpartition(":")
                out.append((host.strip("[]"), int(port)))
        return out

    async def run() -> list[tuple[str, int]]:
        return await asyncio.get_running_loop().run_in_executor(None, ask)

    return run


__all__ = ["FrontActor"]
