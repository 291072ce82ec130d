"""The Ray actors : one per component, each hosting
its gRPC server (each room's host.py) on a port it picks and publishes through ``endpoint()``.

    commitlog-<i>     CommitLogActor: the commitlog writer of store directory i (CommitLog service)
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
commitlog, a restarted dispatcher resumes at the builders' progress (see commitlog/state.py
and builder.py). Methods are not retried (max_task_retries=0): they are cheap
status reads, and a poison call must not burn every restart.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import ray
import structlog
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mqstore.services.commitlog.actor import CommitLogActor
from mqstore.services.common.actor import (
    FRONT,
    NAMESPACE,
    builder_name,
    dispatcher_name,
    shard_name,
    shard_resource,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.server import TlsFiles
from mqstore.services.dispatcher.actor import DispatcherActor
from mqstore.services.index.actor import BuilderActor
from mqstore.services.query.actor import FrontActor
from mqstore.services.query.routing import shard_dir
from mqstore.services.startup.local import shard_config
from mqstore.store.config import StoreConfig
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)
PLACEMENTS = ("node", "resource")

SHARD_RESOURCE_UNITS = 0.01  # of mqstore_shard_<i>: a marker, not a capacity (the four actors of shard i fit)


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
        groups = [
            ([self.front] if self.front is not None else [], 15.0),
            (self.dispatchers, 30.0),
            (self.queue_builders + self.index_builders, timeout_s),
            (self.shards, timeout_s),
        ]
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


def start_deployment(
    root: str | Path,
    config: StoreConfig | None = None,
    *,
    shards: int = 1,
    host: str = "127.0.0.1",
    port: int = 8080,
    namespace: str = NAMESPACE,
    node_id: str | None = None,
    retention: RetentionConfig | None = None,
    placement: str = "node",
    metrics_port: int = 0,
    tls: TlsFiles | None = None,
    auth: InternalAuth | None = None,
    acl: str | Path | None = None,
    internal_host: str | None = None,
) -> Deployment:
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
        dep.shards.append(
            CommitLogActor.options(name=shard_name(i), namespace=namespace, **where(i)).remote(
                str(d), c, i, auth, internal_host, retention, layout
            )
        )
        dep.queue_builders.append(
            BuilderActor.options(name=builder_name("consumequeue", i), namespace=namespace, **where(i)).remote(
                "consumequeue", str(d), c, i, namespace, auth, internal_host
            )
        )
        if cfg.message_index_enable:
            dep.index_builders.append(
                BuilderActor.options(name=builder_name("index", i), namespace=namespace, **where(i)).remote(
                    "index", str(d), c, i, namespace, auth, internal_host
                )
            )
    for i in range(shards):
        dep.dispatchers.append(
            DispatcherActor.options(name=dispatcher_name(i), namespace=namespace, **where(i)).remote(
                i, namespace, cfg, auth, internal_host, str(shard_dir(root, i, shards))
            )
        )
    dep.front = FrontActor.options(name=FRONT, namespace=namespace, scheduling_strategy=pin).remote(
        shards,
        namespace,
        host,
        port,
        cfg.default_queue_nums,
        auth,
        metrics_port,
        tls,
        cfg.message_index_enable,
        None if acl is None else str(Path(acl).resolve()),
    )
    dep.front_endpoint = ray.get(dep.front.endpoint.remote(), timeout=120)
    dep.metrics_endpoint = ray.get(dep.front.metrics_endpoint.remote(), timeout=30)
    return dep


__all__ = ["PLACEMENTS", "Deployment", "start_deployment"]
