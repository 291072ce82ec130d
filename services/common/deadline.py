"""The deadline of the call being served, for the calls it makes in turn.

``@rpc`` (errors.py) records each incoming call's deadline in a context variable;
the front's calls to the shards take ``budget(cap)`` as their timeout, so a request
is answered within the client's deadline (and within ``cap`` when the client set
none) whatever a peer does: a peer that died mid-call, an actor still restarting.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("mqstore_call_deadline", default=None)
MARGIN_S = 0.05  # left to answer the client after the last downstream call gives up


def start(context) -> None:
    """Record the deadline of the call ``context`` serves (none: no deadline)."""
    remaining = context.time_remaining() if context is not None else None
    _DEADLINE.set(None if remaining is None else time.monotonic() + remaining)


def budget(cap: float) -> float:
    """Seconds a downstream call may take: at most ``cap``, and what is left of the
    client's deadline less a margin. TimeoutError (DEADLINE_EXCEEDED) once it passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return cap
    left = deadline - time.monotonic() - MARGIN_S
    if left <= 0:
        raise TimeoutError("the client's deadline passed before the store answered")
    return min(cap, left)


__all__ = ["MARGIN_S", "budget", "start"]
