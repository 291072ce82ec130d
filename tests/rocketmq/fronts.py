"""Two fronts on one port (``serve --fronts 2``), for tests of what N fronts must get
right (sessions, renewals, topics, transactions' check-backs).

``two_fronts(root, namespace)`` starts a deployment on a Ray of the test's own (one
shard, small config, both public ports fixed and shared: real processes, a front can
be SIGKILLed); ``LocalStack(root, rocketmq_port=0, fronts=2)`` is the same in this
process (no Ray, quicker). The helpers take either (``dep``): ``served(dep)`` is each front's count of calls answered
(``FrontActor.served``); ``front_of(dep, client)`` is the front holding an official
client's session (its connection: one client's calls ride one connection, so they
reach one front); ``clients_on_each_front`` starts clients until each front holds one
(the kernel spreads connections over the fronts); ``kill_front``, ``wait_restarted``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator

from tests.services.helpers import free_port, local_ray, small_config

FRONTS = 2


@contextlib.contextmanager
def two_fronts(root, namespace: str, *, fronts: int = FRONTS, **kw) -> Iterator:
    """A deployment with ``fronts`` fronts sharing a fixed API port and RocketMQ port,
    on a local Ray (started and shut down here), ready; closed on the way out. Extra
    ``start_deployment`` arguments in ``kw`` (e.g. ``max_delivery_attempts``)."""
    from mqstore.services.startup.deployment import start_deployment

    with local_ray(namespace):
        port = free_port()
        dep = start_deployment(
            root,
            kw.pop("config", None) or small_config(),
            port=port,
            rocketmq_port=free_port(skip=(port,)),
            namespace=namespace,
            internal_host="127.0.0.1",
            fronts=fronts,
            **kw,
        )
        try:
            assert dep.wait_ready(120)
            yield dep
        finally:
            dep.close()


def _ask(dep, method: str) -> list:
    """``method()`` of every front of ``dep`` (Ray actors or in-process FrontHosts)."""
    calls = [getattr(f, method) for f in dep.fronts]
    if not hasattr(calls[0], "remote"):
        return [c() for c in calls]
    import ray

    return ray.get([c.remote() for c in calls], timeout=30)


def served(dep) -> list[dict[str, int]]:
    """Each front's calls answered so far ({"api": n, "rocketmq": n}), front 0 first."""
    return _ask(dep, "served")


def api_front_of(dep, client) -> int:
    """The front a ``FrontClient``'s calls reach (mqstore's API has no background
    calls: the one front whose API count moves over a GetRoute)."""
    before = [s["api"] for s in served(dep)]
    client.route(refresh=True)
    moved = [k for k, (a, s) in enumerate(zip(before, served(dep))) if s["api"] > a]
    assert len(moved) == 1, f"the call reached fronts {moved}"
    return moved[0]


def holders(dep) -> list[list[str]]:
    """Each front's RocketMQ client ids (the sessions it keeps), front 0 first."""
    return _ask(dep, "clients")


def front_of(dep, client) -> int:
    """The front holding an official ``client``'s session (its connection's front)."""
    held = [k for k, ids in enumerate(holders(dep)) if client.client_id in ids]
    assert len(held) == 1, f"client {client.client_id} is held by fronts {held}"
    return held[0]


def clients_on_each_front(dep, make: Callable[[], object], most: int = 24, which: Callable | None = None) -> dict:
    """{front k: a started client made by ``make()`` that front k holds}, for every
    front: clients are made until each front holds one (at most ``most``); the extra
    ones stay open (the caller's ``make`` keeps them for closing). ``which(dep,
    client)``: the front of a client (default ``front_of``: official clients)."""
    out: dict[int, object] = {}
    for _ in range(most):
        c = make()
        out.setdefault((which or front_of)(dep, c), c)
        if len(out) == len(dep.fronts):
            return out
    raise AssertionError(f"{most} clients reached only fronts {sorted(out)}")


def kill_front(dep, k: int) -> int:
    """SIGKILL front ``k``'s process; its old pid."""
    import ray

    pid = ray.get(dep.fronts[k].pid.remote(), timeout=30)
    os.kill(pid, signal.SIGKILL)
    return pid


def wait_restarted(dep, k: int, old_pid: int, timeout_s: float = 90.0) -> int:
    """Wait until Ray restarted front ``k`` (a new pid answers) and it serves; its pid."""
    import ray

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            pid = ray.get(dep.fronts[k].pid.remote(), timeout=10)
            if pid != old_pid and ray.get(dep.fronts[k].endpoint.remote(), timeout=10):
                return pid
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"front {k} did not come back within {timeout_s} s")


__all__ = [
    "FRONTS",
    "api_front_of",
    "clients_on_each_front",
    "front_of",
    "holders",
    "kill_front",
    "served",
    "two_fronts",
    "wait_restarted",
]
