"""Which endpoints a route (QueryRoute, QueryAssignment) names, with one front or N.

    fronts                               a route's broker endpoints
    one, or N on one machine, one port   the access point the client used (NAT, containers
                                         and load balancers keep working, as RocketMQ's
                                         proxy does it); this front's own address when the
                                         client named none
    N spread over nodes                  every front's address (``serve --front-placement
                                         spread``): the client picks one (gRPC's pick-first
                                         over the list) and moves to another when it fails

Fronts on one machine share their port (SO_REUSEPORT, the kernel spreads connections),
so the access point already names all of them. Spread fronts each bind their own node's
address; ``FrontAddresses`` keeps the list (asked of Ray by the actor, at most
``MAX_AGE_S`` old, the last good list kept while an ask fails: a route never names no
front).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Awaitable, Callable, Sequence

import structlog

from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2

log = structlog.get_logger(__name__)
MAX_AGE_S = 5.0  # a restarted front may come back on another node: its address is asked again this often


def scheme(host: str) -> int:
    try:
        return v2.IPv6 if ipaddress.ip_address(host.strip("[]")).version == 6 else v2.IPv4
    except ValueError:
        return v2.DOMAIN_NAME


def route_endpoints(asked: v2.Endpoints, own: tuple[str, int], fronts: Sequence[tuple[str, int]] = ()) -> v2.Endpoints:
    """The endpoints a route names (module docstring): ``fronts`` (every front's
    (host, port); empty unless the fronts are spread), else the client's access point
    ``asked``, else ``own``. Endpoints of one scheme: fronts named by a mix of IPv4,
    IPv6 and DNS names keep those of ``own``'s scheme (the client dials one scheme)."""
    if fronts:
        want = scheme(own[0])
        picked = [(h, p) for h, p in fronts if scheme(h) == want] or [own]
        return v2.Endpoints(scheme=want, addresses=[v2.Address(host=h, port=p) for h, p in picked])
    if asked.addresses and asked.scheme != v2.ADDRESS_SCHEME_UNSPECIFIED:
        return asked
    host, port = own
    return v2.Endpoints(scheme=scheme(host), addresses=[v2.Address(host=host, port=port)])


class FrontAddresses:
    """The RocketMQ addresses of every front, for routes of spread fronts. ``ask()``
    lists them ((host, port) of each front that answered); ``clock``: monotonic
    seconds. One event loop (the front's)."""

    def __init__(
        self,
        ask: Callable[[], Awaitable[list[tuple[str, int]]]],
        *,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ask = ask
        self._max_age_s = max_age_s
        self._clock = clock
        self._known: list[tuple[str, int]] = []
        self._at: float | None = None

    async def get(self) -> list[tuple[str, int]]:
        """Every front's address, at most ``max_age_s`` old; the last list (or []) while
        an ask fails or finds none."""
        now = self._clock()
        if self._at is not None and now - self._at < self._max_age_s:
            return self._known
        self._at = now  # one ask per period, also when it fails
        try:
            found = sorted(set(await self._ask()))
        except Exception as e:  # noqa: BLE001 - Ray busy or a front restarting: the last list serves
            log.warning("front_addresses_unknown", error=f"{type(e).__name__}: {e}")
            return self._known
        if found:
            self._known = found
        return self._known


__all__ = ["MAX_AGE_S", "FrontAddresses", "route_endpoints", "scheme"]
