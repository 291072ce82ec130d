"""The ports each front of ``serve --fronts N`` binds (no Ray: LocalStack uses it too).

One front binds what it is given (0: a free port of its own). N > 1 fronts share the
public ports (mqstore's API and RocketMQ's) with SO_REUSEPORT (server.server_options);
a port given as 0 is picked once (``PortReservations``: held until they listen) so
every front, and a front Ray restarts, binds the same one. Metrics ports are each
front's own: the one given is front 0's, front k's that + k (0: none).
"""

from __future__ import annotations

import socket
from typing import NamedTuple

MAX_FRONTS = 64  # services/common/actor.py MAX_FRONTS (not imported: that imports Ray)


class FrontPorts(NamedTuple):
    """The ports front k binds: ``port`` and ``rocketmq_port`` shared by every front,
    ``metrics_port`` its own (0: none)."""

    port: int
    rocketmq_port: int | None
    metrics_port: int


def check_fronts(fronts: int, metrics_port: int = 0) -> None:
    """ValueError unless ``fronts`` is in 1..MAX_FRONTS and every front's metrics port
    (``metrics_port`` + k) is a port."""
    if not isinstance(fronts, int) or isinstance(fronts, bool) or not 1 <= fronts <= MAX_FRONTS:
        raise ValueError(f"fronts must be a whole number in 1..{MAX_FRONTS}, got {fronts!r}")
    if metrics_port and metrics_port + fronts - 1 > 65535:
        raise ValueError(
            f"the fronts' metrics ports {metrics_port}..{metrics_port + fronts - 1} go past 65535: "
            "give a lower --metrics-port"
        )


def front_ports(fronts: int, port: int, rocketmq_port: int | None, metrics_port: int, pick=None) -> list[FrontPorts]:
    """Each front's ports (``FrontPorts``). One front binds what it is given (0: a free
    port of its own, as ever). With several, a public port given as 0 is picked once
    here (``pick()``: a free port) so that every front, and a front that Ray restarts,
    binds the same one; the metrics port given is front 0's, front k's is that + k."""
    check_fronts(fronts, metrics_port)
    if fronts > 1 and pick is not None:
        port = port or pick()
        if rocketmq_port == 0:
            rocketmq_port = pick()
    return [FrontPorts(port, rocketmq_port, metrics_port + k if metrics_port else 0) for k in range(fronts)]


class PortReservations:
    """Free ports picked for the fronts, each held by a socket bound with SO_REUSEPORT
    (not listening: it takes no connection) until the fronts listen, so no other
    process takes the port in between; ``close()`` lets them go."""

    def __init__(self, host: str) -> None:
        self._host = host
        self._held: list[socket.socket] = []

    def pick(self) -> int:
        s = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((self._host.strip("[]"), 0))
        self._held.append(s)
        return s.getsockname()[1]

    def close(self) -> None:
        for s in self._held:
            s.close()
        self._held.clear()


__all__ = ["MAX_FRONTS", "FrontPorts", "PortReservations", "check_fronts", "front_ports"]
