"""What every Ray actor of a deployment shares: names, how one actor finds another
(by name, never by handle, so a restarted actor is found again), logging, the
address an actor's server binds, and ``Hosted`` (an actor is a thin wrapper around
one host, which runs its gRPC server). Only ``actor.py`` modules import Ray (and
startup/deployment.py, which starts them)."""

from __future__ import annotations

import asyncio
import os
import time

import ray

from mqstore.logging import configure_logging
from mqstore.services.common.peers import ShardResolvers

NAMESPACE = "mqstore"
FRONT = "front"
MAX_RESTARTS = 20
# Threaded actors: a long call (wait_ready while a commitlog waits for its builder)
# must not hold up the cheap ones (endpoint, asked by that very builder's resolver).
CONCURRENCY = 8


def shard_name(i: int) -> str:
    """The commitlog actor of shard ``i`` (it holds the shard's store lock)."""
    return f"commitlog-{i}"


def builder_name(kind: str, i: int) -> str:
    """The "consumequeue" or "index" builder actor of shard ``i``."""
    return f"{kind}-{i}"


def dispatcher_name(i: int) -> str:
    return f"dispatcher-{i}"


def shard_resource(i: int) -> str:
    """The custom resource a node offers to hold shard ``i`` (placement "resource")."""
    return f"mqstore_shard_{i}"


ASK_S = 3.0  # one ask of an actor's endpoint: a call sent just before it died may never be answered


def actor_resolver(name: str, namespace: str, timeout_s: float = 120.0):
    """An async resolver of the named actor's gRPC endpoint (asked on every call:
    after a restart the actor listens on a new port). Blocks while it restarts, up
    to ``timeout_s``; each ask is bounded (``ASK_S``) and made on a fresh handle."""

    def get() -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                handle = ray.get_actor(name, namespace=namespace)
                return ray.get(handle.endpoint.remote(), timeout=min(ASK_S, max(0.1, deadline - time.monotonic())))
            except (
                ValueError,
                ray.exceptions.RayActorError,
                ray.exceptions.GetTimeoutError,
            ):  # not there yet, restarting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    async def resolve() -> str:
        return await asyncio.get_running_loop().run_in_executor(None, get)

    return resolve


def shard_resolvers(i: int, namespace: str, index_enabled: bool = True) -> ShardResolvers:
    """Resolvers of shard ``i``'s services by actor name."""
    out = {
        "cl": actor_resolver(shard_name(i), namespace),
        "cq": actor_resolver(builder_name("consumequeue", i), namespace),
    }
    if index_enabled:
        out["ix"] = actor_resolver(builder_name("index", i), namespace)
    return out


def configure_actor_logging(component: str, shard: int | None = None) -> None:
    """Actors log like the CLI: JSON lines on stderr (Ray's worker log files, and the
    driver's stderr), level from MQSTORE_LOG_LEVEL (``serve`` passes its
    --actor-log-level through the runtime environment); every event carries the
    actor's component, its shard and its Ray node id."""
    context: dict = {"component": component}
    if shard is not None:
        context["shard"] = shard
    try:
        context["node_id"] = ray.get_runtime_context().get_node_id()  # as `ray list nodes` shows it
    except Exception:  # noqa: BLE001 - a log field is not worth failing an actor
        pass
    configure_logging(
        level=os.environ.get("MQSTORE_LOG_LEVEL", "info"),
        json=os.environ.get("MQSTORE_LOG_FORMAT", "json") == "json",
        context=context,
    )


def node_address(host: str | None = None) -> str:
    """Where an internal server binds and what it publishes: ``host`` when given
    (127.0.0.1 for a local instance), else this node's address as Ray knows it."""
    return host or ray.util.get_node_ip_address()


class Hosted:
    """The methods every actor has, over its host."""

    host: object  # a CommitLogHost, BuilderHost, DispatcherHost or FrontHost

    def endpoint(self) -> str:
        return self.host.endpoint

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this incarnation runs on."""
        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.host.close()


__all__ = [
    "CONCURRENCY",
    "FRONT",
    "MAX_RESTARTS",
    "NAMESPACE",
    "Hosted",
    "actor_resolver",
    "builder_name",
    "configure_actor_logging",
    "dispatcher_name",
    "node_address",
    "shard_name",
    "shard_resolvers",
    "shard_resource",
]
