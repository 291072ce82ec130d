"""How a client reaches an internal peer: one set of rules for both kinds of client.

``shard_clients.Connection`` (async: the fronts' calls to a shard, streams included)
and ``peers.Peer`` (blocking: core code in plain threads, a builder's view of its
commitlog and the delay scheduler) keep the same rules; only their waiting differs
(``await`` or a blocked thread). The rules, in the order a call meets them:

1. **Find** the peer through its resolver (a Ray actor by name, or a fixed address):
   at most ``resolve_cap_s`` and what is left of the caller's deadline. Not found:
   the peer is unreachable (UNAVAILABLE; nothing of the request was sent). With
   ``backoff_s``, calls then fail at once for that long (a caller polling many things
   must not wait on each); an async client shares one resolution among its waiters
   instead.
2. **Connect** within ``connect_cap_s`` (and the deadline): a peer that refuses
   connections (TRANSIENT_FAILURE) is unreachable at once, one that takes none is
   unreachable when the cap passes: a host that is gone must not hold a call until
   its deadline.
3. **Call** within the call's timeout and what is left of the caller's deadline
   (``deadline.budget``: DEADLINE_EXCEEDED once it passed).
4. **After UNAVAILABLE** (or unreachable) the channel is dropped, so the next call
   finds the peer again (a restarted actor listens on a new port). A read is tried
   once more after ``retry_pause_s``; a send never (an append whose answer was lost
   may have been stored: its caller decides), unless nothing was sent because the
   channel an earlier call left took no connection: the peer restarted on another
   port, and any call finds it once more at once (the async client).

Plain Python (no gRPC I/O): the clients ask these rules, then wait their own way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc

from mqstore.services.common import deadline

_READY = grpc.ChannelConnectivity.READY
_REFUSED = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)


@dataclass(frozen=True, kw_only=True)
class ConnectRules:
    """The caps and pauses of the module docstring's rules, in seconds."""

    resolve_cap_s: float = 10.0  # finding a peer (a read's; a send's callers pass a smaller cap)
    connect_cap_s: float = 2.5
    retry_pause_s: float = 0.2  # before the one retry of a read
    backoff_s: float = 0.0  # after a failed resolution, calls fail at once this long (0: never)
    close_grace_s: float = 5.0  # calls in flight on a dropped channel get this long to end

    def __post_init__(self) -> None:
        for name in ("resolve_cap_s", "connect_cap_s", "retry_pause_s", "backoff_s", "close_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def attempts(self, retry: bool) -> range:
        """Rule 4: a read is tried twice, a send once."""
        return range(2 if retry else 1)

    def may_retry(self, attempt: int, retry: bool, *, moved: bool = False) -> bool:
        """Rule 4 (``moved``: a channel kept from an earlier call took no connection, so
        nothing was sent: any call, a send too, finds the peer once more)."""
        return attempt == 0 and (retry or moved)

    def resolve_wait(self, cap: float | None = None) -> float:
        """Rule 1: how long to wait for the peer to be found (TimeoutError: the
        caller's deadline passed)."""
        return deadline.budget(self.resolve_cap_s if cap is None else cap)

    def connect_wait(self, cap: float | None = None) -> float:
        """Rule 2: how long to wait for a connection."""
        return deadline.budget(min(self.resolve_cap_s if cap is None else cap, self.connect_cap_s))

    @staticmethod
    def call_timeout(timeout: float) -> float:
        """Rule 3."""
        return deadline.budget(timeout)

    @staticmethod
    def connected(state: grpc.ChannelConnectivity) -> bool | None:
        """Rule 2 for a channel in ``state``: True connected, False refused (fail at
        once), None still trying (wait for a change)."""
        if state is _READY:
            return True
        if state in _REFUSED:
            return False
        return None

    @staticmethod
    def drops_channel(error: BaseException) -> bool:
        """Rule 4: after this error the peer is found again for the next call."""
        code = getattr(error, "code", None)  # a grpc error's method, or an RpcError's class attribute
        return (code() if callable(code) else code) is grpc.StatusCode.UNAVAILABLE


class Backoff:
    """Rule 1's pause after a failed resolution (``rules.backoff_s``). Thread-safe
    enough for its one use: reads and writes of a float under the client's lock."""

    def __init__(self, rules: ConnectRules, clock=time.monotonic) -> None:
        self._rules = rules
        self._clock = clock
        self._until = 0.0

    @property
    def down(self) -> bool:
        """True while calls fail at once."""
        return self._clock() < self._until

    def failed(self) -> None:
        self._until = self._clock() + self._rules.backoff_s


def not_found(who: str, what: str, wait_s: float) -> str:
    """Rule 1's message: "shard 1 can not be reached: its commitlog was not found ..."."""
    return (
        f"{who} can not be reached: {what} was not found within {wait_s:.1f} s "
        "(restarting, not placed on a node, or its node is down)"
    )


def refused(who: str, what: str) -> str:
    return f"{who} can not be reached: {what} refuses connections"


def no_connection(who: str, what: str, wait_s: float) -> str:
    return f"{who} can not be reached: {what} took no connection within {wait_s:.1f} s"


FRONT_RULES = ConnectRules()  # a front's calls to its shards (shard_clients.Connection)
PEER_RULES = ConnectRules(backoff_s=1.0)  # core code's calls in plain threads (peers.Peer)

__all__ = ["FRONT_RULES", "PEER_RULES", "Backoff", "ConnectRules", "no_connection", "not_found", "refused"]
