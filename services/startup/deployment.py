"""The Ray actors : one per component, each hosting
its gRPC server (each room's host.py) on a port it picks and publishes through ``endpoint()``.

    commitlog-<i>     CommitLogActor: the commitlog writer of store directory i (CommitLog service)
    consumequeue-<i>  BuilderActor: its consume queues and consumer offsets (ConsumeQueue service)
    index-<i>         BuilderActor: its index files (Index service; none when the index is disabled)
    dispatcher-<i>    DispatcherActor: the reput loop of shard i (Dispatcher service)
    front             FrontActor: the public API (Front service) on the requested port
    front-<k>         FrontActor k of ``fronts`` N (k = 1..N-1): the same ports (see below)

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

N fronts (``fronts``, 1..MAX_FRONTS) share the public ports (SO_REUSEPORT; port 0 picked
once, so a restarted front binds the same one) and have metrics ports of their own
(base + k): startup/front_ports.py. Front placements:

    node      every front on the driver's node (the default)
    spread    one per node as far as nodes go (Ray's SPREAD strategy), each bound to
              its node's address; RocketMQ routes name every front (rocketmq/endpoints.py)

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
    NAMESPACE,
    actor_state,
    builder_name,
    dispatcher_name,
    front_name,
    shard_name,
    shard_resource,
)
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.server import TlsFiles
from mqstore.services.dispatcher.actor import DispatcherActor
from mqstore.services.index.actor import BuilderActor
from mqstore.services.query.actor import FrontActor
from mqstore.services.query.routing import shard_dir
from mqstore.services.rocketmq.settings import MAX_SESSIONS, MAX_SESSIONS_PER_USER
from mqstore.services.startup.front_ports import PortReservations, check_fronts, front_ports
from mqstore.services.startup.local import shard_config
from mqstore.store.config import StoreConfig
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)
PLACEMENTS = ("node", "resource")
FRONT_PLACEMENTS = ("node", "spread")

SHARD_RESOURCE_UNITS = 0.01  # of mqstore_shard_<i>: a marker, not a capacity (the four actors of shard i fit)


@dataclass
class Deployment:
    """Handles of a running deployment (see ``start_deployment``)."""

    namespace: str
    shards: list = field(default_factory=list)  # the commitlog actors
    queue_builders: list = field(default_factory=list)
    index_builders: list = field(default_factory=list)
    dispatchers: list = field(default_factory=list)
    front: object = None  # front 0 ("front"): fronts[0]
    front_endpoint: str = ""
    metrics_endpoint: str = ""
    rocketmq_endpoint: str = ""  # RocketMQ 5 protocol on the front ("" when not served)
    fronts: list = field(default_factory=list)  # every front actor, k = 0..N-1
    front_endpoints: list = field(default_factory=list)  # per front: name, front, rocketmq, metrics

    _asks: dict = field(default_factory=dict, repr=False)  # poll_ready's wait_ready calls in flight

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        """True once every commitlog serves and every builder is open (the ready line
        of `mqstore serve` then means every query works)."""
        actors = self.shards + self.queue_builders + self.index_builders
        return all(ray.get([a.wait_ready.remote(timeout_s) for a in actors], timeout=timeout_s + 10))

    def poll_ready(self, wait_s: float = 1.0) -> tuple[bool, dict[int, str]]:
        """One look at the stores' open, in about ``wait_s`` seconds whatever the
        actors do: (every commitlog serves and every builder is open, {shard: why
        its store failed to open}). An actor not placed on a node yet, or
        restarting, is not ready; its question stays asked and is not asked again
        (no pile of calls for an actor that never comes)."""
        actors = self.shards + self.queue_builders + self.index_builders
        for k, a in enumerate(actors):
            if k not in self._asks:
                self._asks[k] = a.wait_ready.remote(wait_s)
        done, _ = ray.wait(list(self._asks.values()), num_returns=len(self._asks), timeout=wait_s + 1.0)
        done = set(done)
        ready, unopened = True, []
        for k in range(len(actors)):
            ref = self._asks[k]
            if ref not in done:
                ready = False
                continue
            del self._asks[k]
            try:
                ok = ray.get(ref)
            except Exception:  # noqa: BLE001 - died or restarting: asked again next time
                ok = False
            if not ok:
                ready = False
                if k < len(self.shards):
                    unopened.append(k)
        failed = {}
        if unopened:
            asks = {i: self.shards[i].status.remote() for i in unopened}
            answered, _ = ray.wait(list(asks.values()), num_returns=len(asks), timeout=wait_s)
            for i, ref in asks.items():
                if ref in answered:
                    try:
                        st = ray.get(ref)
                    except Exception:  # noqa: BLE001
                        continue
                    if st["state"] == "FAILED":
                        failed[i] = st["error"] or "failed"
        return ready, failed

    def failed(self, timeout_s: float = 10.0) -> dict[int, str]:
        """Shards whose store failed to open: {index: error} (a restart of the actor
        would try again; a bad layout or a locked directory will not go away)."""
        out = {}
        for i, st in enumerate(ray.get([s.status.remote() for s in self.shards], timeout=timeout_s)):
            if st["state"] == "FAILED":
                out[i] = st["error"] or "failed"
        return out

    def close(self, timeout_s: float = 120.0) -> None:
        """The front, then each shard in parallel: its dispatcher (after dispatching
        what is confirmed), its builders, its commitlog; each closes its server and
        its files cleanly; then every actor is killed for good. Only actors that
        can be reached are closed: one restarting is waited for a little (its files
        must be closed, not killed again), one not placed on any node, dead, or
        not answering is killed without waiting (it holds no store open, or one
        that nothing can close now): a shard that is down never holds up closing
        the others."""
        fronts = self.fronts or ([self.front] if self.front is not None else [])
        with ThreadPoolExecutor(max(1, len(fronts))) as pool:
            list(pool.map(lambda k: _close_actor(fronts[k], 15.0, front_name(k)), range(len(fronts))))

        def close_shard(i: int) -> None:
            builders = [(self.queue_builders[i], builder_name("consumequeue", i))]
            if self.index_builders:
                builders.append((self.index_builders[i], builder_name("index", i)))
            for group, limit in (
                ([(self.dispatchers[i], dispatcher_name(i))] if i < len(self.dispatchers) else [], 30.0),
                (builders, timeout_s),
                ([(self.shards[i], shard_name(i))], timeout_s),
            ):
                with ThreadPoolExecutor(max(1, len(group))) as pool:
                    list(pool.map(lambda an, limit=limit: _close_actor(an[0], limit, an[1]), group))

        with ThreadPoolExecutor(max(1, len(self.shards))) as pool:  # shards close their stores in parallel
            list(pool.map(close_shard, range(len(self.shards))))
        for a in fronts + self.dispatchers + self.queue_builders + self.index_builders + self.shards:
            ray.kill(a, no_restart=True)


RESTART_WAIT_S = 10.0  # closing waits this long for a restarting actor to come back
PING_S = 3.0  # an actor that says to be alive and does not answer its pid within this is not closed


def _close_actor(actor, timeout_s: float, what: str = "actor") -> None:
    deadline = time.monotonic() + timeout_s
    place = actor_state(actor, what)
    until = time.monotonic() + min(RESTART_WAIT_S, timeout_s)
    while place.state == "RESTARTING" and time.monotonic() < until:
        time.sleep(0.2)
        place = actor_state(actor, what)
    if place.state not in ("ALIVE", "UNKNOWN"):  # never placed, dead, or still restarting: nothing open to close
        log.warning("close_skipped", actor=what, why=place.describe())
        return
    try:
        ray.get(actor.pid.remote(), timeout=PING_S)
    except Exception as e:  # noqa: BLE001 - its node is gone (the cluster has not noticed yet) or it died
        log.warning("close_skipped", actor=what, why=f"no answer within {PING_S:.0f} s: {type(e).__name__}")
        return
    while True:
        try:
            ray.get(actor.close.remote(), timeout=max(1.0, deadline - time.monotonic()))
            return
        except ray.exceptions.ActorUnavailableError:  # restarting: close the new incarnation
            if time.monotonic() > deadline:
                log.error("close_failed", actor=what, error="actor still restarting")
                return
            time.sleep(0.5)
        except Exception as e:  # noqa: BLE001 - still kill it; the next open recovers
            log.error("close_failed", actor=what, error=str(e))
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
    rocketmq_port: int | None = None,
    max_delivery_attempts: int = 17,
    max_sessions: int = MAX_SESSIONS,
    max_sessions_per_user: int = MAX_SESSIONS_PER_USER,
    fronts: int = 1,
    front_placement: str = "node",
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
    (on the front's node: the driver's). ``rocketmq_port``, ``max_delivery_attempts``,
    ``max_sessions``, ``max_sessions_per_user``: RocketMQ 5's protocol on the front
    (query/host.py FrontHost). ``fronts``: N front actors ("front", "front-1", ...);
    ``front_placement``: "node" or "spread" (module docstring)."""
    auth = auth or InternalAuth.new(tls=tls is not None)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if front_placement not in FRONT_PLACEMENTS:
        raise ValueError(f"front placement must be one of {FRONT_PLACEMENTS}, got {front_placement!r}")
    check_fronts(fronts, metrics_port)
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
    reserved = PortReservations(host)
    try:
        ports = front_ports(fronts, port, rocketmq_port, metrics_port, pick=reserved.pick)
        spread = front_placement == "spread"
        for k, p in enumerate(ports):
            dep.fronts.append(
                FrontActor.options(
                    name=front_name(k), namespace=namespace, scheduling_strategy="SPREAD" if spread else pin
                ).remote(
                    shards,
                    namespace,
                    host,
                    p.port,
                    cfg.default_queue_nums,
                    auth,
                    p.metrics_port,
                    tls,
                    cfg.message_index_enable,
                    None if acl is None else str(Path(acl).resolve()),
                    p.rocketmq_port,
                    max_delivery_attempts,
                    cfg.max_message_bytes,
                    max_sessions,
                    max_sessions_per_user,
                    k,
                    fronts,
                    spread,
                )
            )
        dep.front = dep.fronts[0]
        for k, actor in enumerate(dep.fronts):
            endpoint = ray.get(actor.endpoint.remote(), timeout=120)
            dep.front_endpoints.append(
                {
                    "name": front_name(k),
                    "front": endpoint,
                    "rocketmq": ray.get(actor.rocketmq_endpoint.remote(), timeout=30) or None,
                    "metrics": ray.get(actor.metrics_endpoint.remote(), timeout=30) or None,
                }
            )
    finally:
        reserved.close()
    first = dep.front_endpoints[0]
    dep.front_endpoint, dep.rocketmq_endpoint, dep.metrics_endpoint = (
        first["front"],
        first["rocketmq"] or "",
        first["metrics"] or "",
    )
    return dep


__all__ = ["FRONT_PLACEMENTS", "PLACEMENTS", "Deployment", "start_deployment"]
