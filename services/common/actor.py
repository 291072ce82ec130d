"""What every Ray actor of a deployment shares: names, how one actor finds another
(by name, never by handle, so a restarted actor is found again), logging, the
address an actor's server binds, and ``Hosted`` (an actor is a thin wrapper around
one host, which runs its gRPC server). Only ``actor.py`` modules import Ray (and
startup/deployment.py, which starts them)."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor

import ray

from mqstore.logging import configure_logging
from mqstore.services.common.peers import Locator, Placement, ShardResolvers

NAMESPACE = "mqstore"
FRONT = "front"  # front 0's name: tools and docs find "the front" by it
MAX_FRONTS = 64
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


def front_name(k: int) -> str:
    """Front ``k`` of ``serve --fronts N``: "front" for k = 0 (the one front of a
    single-front deployment keeps its name), "front-<k>" for the others."""
    return FRONT if k == 0 else f"{FRONT}-{k}"


def shard_resource(i: int) -> str:
    """The custom resource a node offers to hold shard ``i`` (placement "resource")."""
    return f"mqstore_shard_{i}"


ASK_S = 3.0  # one ask of an actor's endpoint: a call sent just before it died may never be answered
# Lookups block on Ray: their own threads, so a shard that never answers can not use up
# the event loop's default executor (which other work of the process shares).
_LOOKUPS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="mqstore-ray-lookup")


class ActorGone(ConnectionError):
    """The named actor is dead for good (killed without restart, out of restarts) or
    does not exist: asking again will not bring it back (a ConnectionError: the
    calls that needed it are UNAVAILABLE)."""


def actor_resolver(name: str, namespace: str, timeout_s: float = 120.0, *, gone_fails: bool = False):
    """An async resolver of the named actor's gRPC endpoint (asked on every call:
    after a restart the actor listens on a new port). Blocks while it restarts, up
    to ``timeout_s``; each ask is bounded (``ASK_S``) and made on a fresh handle.
    ``gone_fails``: an actor that no longer exists or is dead for good fails at once
    (``ActorGone``) instead of being waited for (the front: every actor of the
    deployment was created before it, so a missing name is not one yet to come)."""

    def gone(why: str) -> ActorGone:
        return ActorGone(f"{name} {why}")

    def get() -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            handle = None
            try:
                handle = ray.get_actor(name, namespace=namespace)
                return ray.get(handle.endpoint.remote(), timeout=min(ASK_S, max(0.1, deadline - time.monotonic())))
            except ValueError as e:  # no actor by that name
                if gone_fails:
                    raise gone("does not exist (killed for good, out of restarts, or never created)") from e
                if time.monotonic() > deadline:
                    raise
            except ray.exceptions.RayActorError:  # restarting, or dead for good
                if gone_fails and _placement(name, handle).state in ("DEAD", "GONE"):
                    raise gone("is dead for good") from None
                if time.monotonic() > deadline:
                    raise
            except ray.exceptions.GetTimeoutError:  # not placed yet, starting, or its node is gone
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    async def resolve() -> str:
        return await asyncio.get_running_loop().run_in_executor(_LOOKUPS, get)

    return resolve


def shard_resolvers(
    i: int, namespace: str, index_enabled: bool = True, *, timeout_s: float = 120.0, gone_fails: bool = False
) -> ShardResolvers:
    """Resolvers of shard ``i``'s services by actor name (see ``actor_resolver``)."""

    def resolver(name: str):
        return actor_resolver(name, namespace, timeout_s, gone_fails=gone_fails)

    out = {"cl": resolver(shard_name(i)), "cq": resolver(builder_name("consumequeue", i))}
    if index_enabled:
        out["ix"] = resolver(builder_name("index", i))
    return out


def _placement(name: str, handle=None, namespace: str | None = None) -> Placement:
    """Where the named actor is, from the GCS's actor table (no call to the actor:
    it answers for an actor that is not placed, restarting or dead)."""
    try:
        if handle is None:
            try:
                handle = ray.get_actor(name, namespace=namespace)
            except ValueError:
                return Placement(name, "GONE")
        import ray._private.state as ray_state  # the actor table, without the dashboard's state API

        info = ray_state.actors(handle._actor_id.hex())
    except Exception as e:  # noqa: BLE001 - a status report says what it could not learn
        return Placement(name, "UNKNOWN", detail=f"{type(e).__name__}: {e}")
    if not info:
        return Placement(name, "GONE")
    state = info.get("State", "UNKNOWN")
    node = (info.get("Address") or {}).get("NodeID", "") if state == "ALIVE" else ""
    detail = ""
    if state == "DEAD":
        detail = _death_cause(info.get("DeathCause"))
    elif state == "RESTARTING":
        detail = f"restart {info.get('NumRestarts', '?')}"
    return Placement(name, state, node, detail)


def _death_cause(cause) -> str:
    """The first line of an ActorDeathCause's message ("" if it has none)."""
    try:
        which = cause.WhichOneof("context")
        text = getattr(getattr(cause, which), "error_message", "") if which else ""
    except Exception:  # noqa: BLE001
        text = ""
    return (text or "").strip().splitlines()[0][:200] if text and text.strip() else ""


def shard_locator(i: int, namespace: str, index_enabled: bool = True) -> Locator:
    """Where shard ``i``'s processes are ("cl", "cq", "ix", "dp" -> ``Placement``),
    asked of the GCS in one background thread (a few milliseconds)."""
    names = {"cl": shard_name(i), "cq": builder_name("consumequeue", i), "dp": dispatcher_name(i)}
    if index_enabled:
        names["ix"] = builder_name("index", i)

    def look() -> dict[str, Placement]:
        return {role: _placement(name, namespace=namespace) for role, name in names.items()}

    async def locate() -> dict[str, Placement]:
        return await asyncio.get_running_loop().run_in_executor(_LOOKUPS, look)

    return locate


def actor_state(handle, name: str = "actor") -> Placement:
    """Where the actor of ``handle`` is (see ``Placement``), without calling it."""
    return _placement(name, handle)


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
    "MAX_FRONTS",
    "MAX_RESTARTS",
    "NAMESPACE",
    "ActorGone",
    "Hosted",
    "actor_resolver",
    "actor_state",
    "builder_name",
    "configure_actor_logging",
    "dispatcher_name",
    "front_name",
    "node_address",
    "shard_name",
    "shard_locator",
    "shard_resolvers",
    "shard_resource",
]
