"""The Ray actors (the only module importing Ray): one per component, each hosting
its gRPC server (hosts.py) on a port it picks and publishes through ``endpoint()``.

    commitlog-<i>     ShardActor: the commitlog writer of store directory i (CommitLog service)
    consumequeue-<i>  BuilderActor: its consume queues and consumer offsets (ConsumeQueue service)
    index-<i>         BuilderActor: its index files (Index service; none when the index is disabled)
    dispatcher-<i>    DispatcherActor: the reput loop of shard i (Dispatcher service)
    front             FrontActor: the public API (Front service) on the requested port

Actors find each other by name in one namespace (``ray.get_actor(name, namespace)``),
never by handle, so a restarted actor is found again. A shard's four actors run on
the node that holds the shard's files (they share its directory, each owning its
part under its own lock). Two placements:

    node      every shard on the driver's node (hard node affinity: if that node
              dies, so do they: the files are there); the default, one machine
    resource  shard i (its four actors) on the node that offers the custom
              resource ``mqstore_shard_<i>`` (``ray start --resources``): the node
              whose disk holds DIR/shard-i; a restart lands there again, and while
              no such node is up the actor waits for one

They restart up to ``max_restarts`` times; a restarted commitlog actor recovers its
commitlog (abnormal recovery: the abort file is still there) and waits for the
consume-queue builder's ends, a restarted builder recovers its files against the
commitlog, a restarted dispatcher resumes at the builders' progress (see shard.py
and builder.py). Methods are not retried (max_task_retries=0): they are cheap
status reads, and a poison call must not burn every restart.
"""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import ray
import structlog
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mqstore.logging import configure_logging
from mqstore.services.internal_auth import InternalAuth
from mqstore.services.hosts import BuilderHost, DispatcherHost, FrontHost, ShardHost, ShardResolvers, shard_config
from mqstore.services.routing import shard_dir
from mqstore.services.server import TlsFiles
from mqstore.store.config import StoreConfig
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)
NAMESPACE = "mqstore"
FRONT = "front"
MAX_RESTARTS = 20
# Threaded actors: a long call (wait_ready while a commitlog waits for its builder)
# must not hold up the cheap ones (endpoint, asked by that very builder's resolver).
CONCURRENCY = 8
PLACEMENTS = ("node", "resource")
SHARD_RESOURCE_UNITS = 0.01  # of mqstore_shard_<i>: a marker, not a capacity (the four actors of shard i fit)


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
            except (ValueError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):  # not there yet, restarting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    async def resolve() -> str:
        return await asyncio.get_running_loop().run_in_executor(None, get)

    return resolve


def _configure_logging(component: str, shard: int | None = None) -> None:
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
    configure_logging(level=os.environ.get("MQSTORE_LOG_LEVEL", "info"),
                      json=os.environ.get("MQSTORE_LOG_FORMAT", "json") == "json", context=context)  # fmt: skip


def node_address(host: str | None = None) -> str:
    """Where an internal server binds and what it publishes: ``host`` when given
    (127.0.0.1 for a local instance), else this node's address as Ray knows it."""
    return host or ray.util.get_node_ip_address()


class _Hosted:
    host: ShardHost | BuilderHost | DispatcherHost | FrontHost

    def endpoint(self) -> str:
        return self.host.endpoint

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this incarnation runs on."""
        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.host.close()


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class ShardActor(_Hosted):
    def __init__(self, store_dir: str, config: StoreConfig, index: int, namespace: str, auth: InternalAuth,
                 host: str | None = None, retention: RetentionConfig | None = None,
                 layout: tuple[str, int] | None = None) -> None:  # fmt: skip
        _configure_logging("commitlog", index)
        self.host = ShardHost(store_dir, config, index=index, host=node_address(host), retention=retention, auth=auth,
                              resolve_queues=actor_resolver(builder_name("consumequeue", index), namespace),
                              layout=None if layout is None else (Path(layout[0]), layout[1]))  # fmt: skip

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        return self.host.wait_ready(timeout_s)

    def status(self) -> dict:
        return self.host.status()


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class BuilderActor(_Hosted):
    def __init__(self, kind: str, store_dir: str, config: StoreConfig, index: int, namespace: str,
                 auth: InternalAuth, host: str | None = None) -> None:  # fmt: skip
        _configure_logging(kind, index)
        self.host = BuilderHost(kind, store_dir, config, index=index, host=node_address(host), auth=auth,
                                resolve_commitlog=actor_resolver(shard_name(index), namespace))  # fmt: skip

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        return self.host.wait_ready(timeout_s)

    def status(self) -> dict:
        return self.host.status()


def shard_resolvers(i: int, namespace: str, index_enabled: bool = True) -> ShardResolvers:
    """Resolvers of shard ``i``'s services by actor name."""
    out = {"cl": actor_resolver(shard_name(i), namespace), "cq": actor_resolver(builder_name("consumequeue", i), namespace)}
    if index_enabled:
        out["ix"] = actor_resolver(builder_name("index", i), namespace)
    return out


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class DispatcherActor(_Hosted):
    def __init__(self, shard: int, namespace: str, config: StoreConfig, auth: InternalAuth,
                 host: str | None = None) -> None:  # fmt: skip
        _configure_logging("dispatcher", shard)
        self.host = DispatcherHost(shard_resolvers(shard, namespace, config.message_index_enable), shard=shard,
                                   config=config, host=node_address(host), auth=auth)  # fmt: skip

    def status(self) -> dict:
        return self.host.status()


@ray.remote(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=CONCURRENCY)
class FrontActor(_Hosted):
    def __init__(self, shards: int, namespace: str, host: str, port: int, default_queue_nums: int, auth: InternalAuth,
                 metrics_port: int = 0, tls: TlsFiles | None = None, index_enabled: bool = True,
                 acl: str | None = None) -> None:  # fmt: skip
        resolvers = [(shard_resolvers(i, namespace, index_enabled), actor_resolver(dispatcher_name(i), namespace))
                     for i in range(shards)]  # fmt: skip
        _configure_logging("front")
        self.host = FrontHost(resolvers, host=host, port=port, default_queue_nums=default_queue_nums,
                              metrics_port=metrics_port, tls=tls, auth=auth, acl=acl)  # fmt: skip

    def metrics_endpoint(self) -> str:
        return self.host.metrics_endpoint


@dataclass
class Deployment:
    """Handles of a running deployment (see ``start_deployment``)."""

    namespace: str
    shards: list = field(default_factory=list)  # the commitlog actors
    queue_builders: list = field(default_factory=list)
    index_builders: list = field(default_factory=list)
    dispatchers: list = field(default_factory=list)
    front: object = None
    front_endpoint: str = ""
    metrics_endpoint: str = ""

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        """True once every commitlog serves and every builder is open (the ready line
        of `mqstore serve` then means every query works)."""
        actors = self.shards + self.queue_builders + self.index_builders
        return all(ray.get([a.wait_ready.remote(timeout_s) for a in actors], timeout=timeout_s + 10))

    def failed(self, timeout_s: float = 10.0) -> dict[int, str]:
        """Shards whose store failed to open: {index: error} (a restart of the actor
        would try again; a bad layout or a locked directory will not go away)."""
        out = {}
        for i, st in enumerate(ray.get([s.status.remote() for s in self.shards], timeout=timeout_s)):
            if st["state"] == "FAILED":
                out[i] = st["error"] or "failed"
        return out

    def close(self, timeout_s: float = 120.0) -> None:
        """Front, then dispatchers (after dispatching what is confirmed), then the
        builders, then the commitlogs: each closes its server and its files cleanly;
        then the actors are killed for good. An actor that is restarting is waited
        for (its files must be closed, not killed again)."""
        groups = [([self.front] if self.front is not None else [], 15.0), (self.dispatchers, 30.0),
                  (self.queue_builders + self.index_builders, timeout_s), (self.shards, timeout_s)]  # fmt: skip
        for group, limit in groups:
            with ThreadPoolExecutor(max(1, len(group))) as pool:  # shards close their stores in parallel
                list(pool.map(lambda a, limit=limit: _close_actor(a, limit), group))
            for a in group:
                ray.kill(a, no_restart=True)


def _close_actor(actor, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ray.get(actor.close.remote(), timeout=max(1.0, deadline - time.monotonic()))
            return
        except ray.exceptions.ActorUnavailableError:  # restarting: close the new incarnation
            if time.monotonic() > deadline:
                log.error("close_failed", error="actor still restarting")
                return
            time.sleep(0.5)
        except Exception as e:  # noqa: BLE001 - still kill it; the next open recovers
            log.error("close_failed", error=str(e))
            return


def start_deployment(root: str | Path, config: StoreConfig | None = None, *, shards: int = 1, host: str = "127.0.0.1",
                     port: int = 8080, namespace: str = NAMESPACE, node_id: str | None = None,
                     retention: RetentionConfig | None = None, placement: str = "node",
                     metrics_port: int = 0, tls: TlsFiles | None = None, auth: InternalAuth | None = None,
                     acl: str | Path | None = None, internal_host: str | None = None) -> Deployment:  # fmt: skip
    """Create the actors of a deployment in the connected Ray cluster and return
    once the front listens (shards may still be recovering: ``wait_ready``).
    ``node_id``: the node holding the store directories and running the front
    (default: this driver's). ``placement``: see the module docstring; with
    "resource" each shard's node creates its directory and pins the layout there.
    ``metrics_port``: the front's Prometheus endpoint (0: none). ``tls``: the front
    speaks TLS only (certificate and key as bytes: read on the driver). ``auth``:
    the deployment's secret (default: a fresh one, with internal TLS when the front
    speaks TLS); the front is ``host``:``port``, every internal server binds to its
    node's address as Ray knows it (``internal_host`` instead when given: 127.0.0.1
    for a local instance, whose node Ray knows by the machine's address). ``acl``: the front's users-and-permissions file
    (on the front's node: the driver's)."""
    auth = auth or InternalAuth.new(tls=tls is not None)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    cfg = config or StoreConfig()
    root = Path(root).resolve()
    node = node_id or ray.get_runtime_context().get_node_id()
    pin = NodeAffinitySchedulingStrategy(node_id=node, soft=False)

    def where(i: int) -> dict:
        if placement == "node":
            return {"scheduling_strategy": pin}
        return {"resources": {shard_resource(i): SHARD_RESOURCE_UNITS}}

    dep = Deployment(namespace)
    for i in range(shards):
        d = shard_dir(root, i, shards)
        layout = None
        if placement == "node":
            d.mkdir(parents=True, exist_ok=True)
        else:
            layout = (str(root), shards)
        c = shard_config(cfg, i, shards)
        dep.shards.append(ShardActor.options(name=shard_name(i), namespace=namespace, **where(i))
                          .remote(str(d), c, i, namespace, auth, internal_host, retention, layout))  # fmt: skip
        dep.queue_builders.append(BuilderActor.options(name=builder_name("consumequeue", i), namespace=namespace,
                                                       **where(i)).remote("consumequeue", str(d), c, i, namespace, auth, internal_host))  # fmt: skip
        if cfg.message_index_enable:
            dep.index_builders.append(BuilderActor.options(name=builder_name("index", i), namespace=namespace,
                                                           **where(i)).remote("index", str(d), c, i, namespace, auth, internal_host))  # fmt: skip
    for i in range(shards):
        dep.dispatchers.append(DispatcherActor.options(name=dispatcher_name(i), namespace=namespace, **where(i))
                               .remote(i, namespace, cfg, auth, internal_host))  # fmt: skip
    dep.front = FrontActor.options(name=FRONT, namespace=namespace, scheduling_strategy=pin).remote(
        shards, namespace, host, port, cfg.default_queue_nums, auth, metrics_port, tls, cfg.message_index_enable,
        None if acl is None else str(Path(acl).resolve()))  # fmt: skip
    dep.front_endpoint = ray.get(dep.front.endpoint.remote(), timeout=120)
    dep.metrics_endpoint = ray.get(dep.front.metrics_endpoint.remote(), timeout=30)
    return dep


__all__ = [
    "FRONT",
    "NAMESPACE",
    "PLACEMENTS",
    "BuilderActor",
    "Deployment",
    "DispatcherActor",
    "FrontActor",
    "ShardActor",
    "actor_resolver",
    "builder_name",
    "dispatcher_name",
    "shard_name",
    "shard_resolvers",
    "shard_resource",
    "start_deployment",
]  # fmt: skip
