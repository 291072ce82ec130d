"""``mqstore serve``: a deployment on Ray until Ctrl-C or SIGTERM.

Starts a local Ray instance (or joins a running cluster with ``address="auto"``),
pins the layout (query/routing.py), creates per shard the commitlog, consume-queue builder,
index builder and dispatcher actors, and the front (startup/deployment.py), waits until every
shard has recovered, prints one JSON line ``{"front": "host:port", ..., "fronts": [...]}`` on stdout,
and serves. On SIGINT/SIGTERM it closes the front, the dispatchers, the builders and
the commitlogs in that order (every file closed cleanly: flushed, checkpoint
written, abort files removed) and stops Ray (a local instance) or leaves the cluster.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

import grpc
import structlog

from mqstore.errors import MqStoreError
from mqstore.services.common.internal_auth import InternalAuth, gcs_requires_token
from mqstore.services.common.server import TlsFiles
from mqstore.services.query.routing import pin_layout, shard_dir
from mqstore.services.rocketmq.settings import MAX_SESSIONS, MAX_SESSIONS_PER_USER
from mqstore.services.startup.ray_token import make_token_private
from mqstore.store.config import StoreConfig
from mqstore.store.lockfile import describe_holder

log = structlog.get_logger(__name__)


class ServeError(MqStoreError):
    """``serve`` can not bring the deployment up (a shard's store failed to open):
    the message names the shard and why; the command exits 1."""


def check_port_free(host: str, port: int) -> None:
    """OSError with a clear message if ``host:port`` can not be listened on."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise OSError(f"can not listen on {host}:{port}: {e.strerror or e}") from None


def check_stores_free(root: Path, shards: int) -> None:
    """ServeError naming the holder if another process has a shard's store open
    (another serve, a `send --store`, an application): at once, before Ray starts,
    where the shard's actors would otherwise retry their open for a minute."""
    for i in range(shards):
        d = shard_dir(root, i, shards)
        holder = describe_holder(d)
        if holder is not None:
            raise ServeError(f"the store {d} is open in another process: {holder}; stop it first")


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def serve(
    root: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    rocketmq_port: int | None = None,
    max_delivery_attempts: int = 17,
    max_sessions: int = MAX_SESSIONS,
    max_sessions_per_user: int = MAX_SESSIONS_PER_USER,
    shards: int = 1,
    address: str | None = None,
    config: StoreConfig | None = None,
    namespace: str = "mqstore",
    log_level: str = "info",
    log_format: str = "json",
    placement: str = "node",
    fronts: int = 1,
    front_placement: str = "node",
    metrics_port: int = 0,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    acl: Path | None = None,
    allow_anonymous: bool = False,
    insecure_ray: bool = False,
    ready_out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run a deployment until ``stop`` is set or a SIGINT/SIGTERM arrives (see the
    module docstring). ``placement``: "node" (every shard on this machine) or
    "resource" (shard i on the node offering the Ray resource mqstore_shard_i).
    ``fronts``: N front processes sharing the public ports (``front_placement``
    "node": all on this machine; "spread": over the cluster's nodes, see
    startup/deployment.py). ``metrics_port``: the front's Prometheus endpoint on
    ``host`` (0: none; front k of N: ``metrics_port`` + k).
    ``rocketmq_port``: RocketMQ 5's protocol on ``host`` (None: not served), whose
    consumers get a message ``max_delivery_attempts`` times before its DLQ, and which
    keeps at most ``max_sessions`` client sessions (``max_sessions_per_user`` per user).
    ``tls_cert``/``tls_key``: PEM files; the front (public API) then speaks TLS only,
    and internal services speak TLS with a certificate made for this deployment.
    ``acl``: the front's users and permissions (a JSON file, see query/acl.py); a
    ``host`` that is not loopback needs it, or ``allow_anonymous``. Ray runs with
    token authentication; joining a cluster without it needs ``insecure_ray``.
    ``ready_out``: where the ready line goes (default stdout)."""
    import ray

    from mqstore.services.startup.deployment import start_deployment

    root = Path(root).resolve()
    acl = None if acl is None else Path(acl).resolve()  # (Ray starts from another directory: see start_ray)
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("give both --tls-cert and --tls-key (or neither)")
    if not is_loopback(host) and acl is None and not allow_anonymous:
        raise ServeError(
            f"--host {host} is reachable from other machines: give --acl FILE (users and permissions) "
            "or --allow-anonymous to let anyone who reaches it send, read and change topics"
        )
    if acl is not None:
        from mqstore.services.query.acl import Acl

        Acl.load(acl)  # a file that does not parse fails here, in one line, not in the front's actor
    tls = None if tls_cert is None else TlsFiles.load(tls_cert, tls_key)
    if placement == "node":  # with placement "resource" each shard's node pins its own disk (a driver may have none)
        pin_layout(root, shards)
        check_stores_free(root, shards)
    from mqstore.services.startup.deployment import FRONT_PLACEMENTS
    from mqstore.services.startup.front_ports import check_fronts

    check_fronts(fronts, metrics_port)
    if front_placement not in FRONT_PLACEMENTS:
        raise ValueError(f"--front-placement must be one of {', '.join(FRONT_PLACEMENTS)}, got {front_placement!r}")
    check_port_free(host, port)
    metrics_ports = [metrics_port + k for k in range(fronts)] if metrics_port else []
    for m in metrics_ports:
        if m == port:
            raise ValueError(f"the metrics port {m} (of front {m - metrics_port}) is the front's port")
        check_port_free(host, m)
    if rocketmq_port:
        if rocketmq_port == port or rocketmq_port in metrics_ports:
            raise ValueError(f"the RocketMQ port {rocketmq_port} is also the front's or a metrics port")
        check_port_free(host, rocketmq_port)
    local = address in (None, "", "local")
    env = {"MQSTORE_LOG_LEVEL": log_level, "MQSTORE_LOG_FORMAT": log_format}
    start_ray(ray, address if not local else None, namespace, env, insecure_ray)
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    dep = None
    try:
        t0 = time.monotonic()
        dep = start_deployment(
            root,
            config,
            shards=shards,
            host=host,
            port=port,
            namespace=namespace,
            placement=placement,
            fronts=fronts,
            front_placement=front_placement,
            metrics_port=metrics_port,
            rocketmq_port=rocketmq_port,
            max_delivery_attempts=max_delivery_attempts,
            max_sessions=max_sessions,
            max_sessions_per_user=max_sessions_per_user,
            tls=tls,
            acl=acl,
            auth=InternalAuth.new(tls=tls is not None),
            internal_host="127.0.0.1" if local else None,
        )
        told = False
        while not stop.is_set():  # recovery can take minutes, a shard may never be placed: stay interruptible
            ready, failed = dep.poll_ready(1.0)
            if ready:
                break
            if failed:
                raise ServeError("; ".join(f"shard {i} can not open its store: {e}" for i, e in sorted(failed.items())))
            if not told and time.monotonic() - t0 > 15:
                told = True
                hint = (
                    " (placement resource: is a node offering mqstore_shard_<i> up?)" if placement == "resource" else ""
                )
                print(f"mqstore: waiting for the shards to open their stores{hint}", file=sys.stderr, flush=True)
        if not stop.is_set():
            ready = {
                "front": dep.front_endpoint,
                "rocketmq": dep.rocketmq_endpoint or None,
                "tls": tls is not None,
                "metrics": dep.metrics_endpoint or None,
                "shards": shards,
                "store": str(root),
                "shard_dirs": [str(shard_dir(root, i, shards)) for i in range(shards)],
                "namespace": namespace,
                "placement": placement,
                "fronts": dep.front_endpoints,  # every front: name, front, rocketmq, metrics
                "front_placement": front_placement,
                "acl": acl is not None,
                "ray": ray.get_runtime_context().gcs_address,
                "ready_seconds": round(time.monotonic() - t0, 2),
            }
            print(json.dumps(ready), file=ready_out or sys.stdout, flush=True)
            print(
                f"mqstore: serving on {dep.front_endpoint} ({shards} shard(s), {fronts} front(s), store {root});"
                " Ctrl-C stops",
                file=sys.stderr,
                flush=True,
            )
        stop.wait()
        print("mqstore: stopping (closing the stores)", file=sys.stderr, flush=True)
    finally:
        if dep is not None:
            dep.close()
        ray.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("mqstore: stopped", file=sys.stderr, flush=True)


TOKEN_HINT = (
    "the Ray cluster at {address} requires its token: set RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH to a "
    "file holding it, or copy it to ~/.ray/auth_token (`ray get-auth-token` on the head node prints it)"
)


def _token_required_but_missing(address: str) -> bool:
    """True if the cluster's GCS refuses calls without a token and this process
    has none (ray.init would retry for a minute and then fail without saying why)."""
    from ray._private.services import canonicalize_bootstrap_address
    from ray._raylet import AuthenticationTokenLoader

    if AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
        return False
    try:
        gcs = canonicalize_bootstrap_address(address)
        return gcs is not None and gcs_requires_token(gcs, timeout_s=5)
    except (ValueError, ConnectionError, grpc.RpcError):  # unknown or unreachable: ray.init says so
        return False


def start_ray(ray, address: str | None, namespace: str, env: dict, insecure_ray: bool = False) -> None:
    """Start a local Ray instance (``address`` None) or join a cluster, with token
    authentication: a local instance always requires its token, whatever the
    environment says; a cluster that runs code for anyone who reaches its ports is
    refused unless ``insecure_ray``."""
    if address is not None and _token_required_but_missing(address):
        raise ServeError(TOKEN_HINT.format(address=address))
    here = os.getcwd()
    # Ray puts the driver's working directory first on every worker's sys.path: from a
    # folder that holds a checkout named mqstore, workers would import that instead.
    neutral = Path(tempfile.gettempdir()) / f"mqstore-ray-cwd-{os.getuid()}"
    neutral.mkdir(mode=0o700, exist_ok=True)
    os.chdir(neutral)
    try:
        if address is None:  # a new local instance: Ray makes (or reuses) ~/.ray/auth_token and requires it
            from ray._private.authentication.authentication_token_setup import (
                _enable_token_auth,
            )

            _enable_token_auth()  # token mode for this process and Ray's, also over an environment that turned it off
            make_token_private()  # Ray would write a missing token file under the umask (0644)
            ray.init(
                address="local",
                num_cpus=os.cpu_count() or 2,
                include_dashboard=False,
                object_store_memory=256 << 20,
                _node_ip_address="127.0.0.1",
                namespace=namespace,
                runtime_env={"env_vars": env},
                logging_level="WARNING",
                log_to_driver=True,
            )
        else:
            ray.init(address=address, namespace=namespace, runtime_env={"env_vars": env}, logging_level="WARNING")
    except ray.exceptions.AuthenticationError:
        raise ServeError(TOKEN_HINT.format(address=address)) from None
    finally:
        os.chdir(here)
    if address is None:
        make_token_private()  # also if Ray (re)wrote it
    if insecure_ray or address is None:
        return
    gcs = ray.get_runtime_context().gcs_address
    try:
        protected = gcs_requires_token(gcs)
    except grpc.RpcError as e:
        ray.shutdown()
        raise ServeError(f"can not tell whether the Ray cluster at {gcs} requires a token: {e.code().name}") from None
    if not protected:
        ray.shutdown()
        raise ServeError(
            f"the Ray cluster at {gcs} runs without token authentication: anyone who reaches its ports "
            "can run code on it. Start it with RAY_AUTH_MODE=token (deploy/README.md), or pass "
            "--insecure-ray on a network you trust"
        )


__all__ = ["ServeError", "check_port_free", "check_stores_free", "is_loopback", "serve", "start_ray"]
