"""Receipt handles the front renews for push consumers (``auto_renew`` receives).

A PushConsumer receives with ``auto_renew`` and no invisible time, hands each message
to its listener, and acks (or nacks) with the handle it received, however long the
listener took. RocketMQ's proxy keeps such messages invisible while the client is
alive (its ReceiptHandleProcessor); so does this: each one is popped invisible for
``invisible_ms`` and, while its client has been heard from (any call, heartbeats every
10 s) within ``alive_s``, its invisible time is renewed shortly before it runs out
(ChangeInvisible on its shard: a new handle each time), for at most ``max_hold_s``.
The handle the client holds is mapped to the current one when it acks, changes the
invisible time or forwards to the DLQ. When the client says it terminates, its
messages are released (visible again at once).

The map lives in the front's memory, which is right with N fronts (``serve --fronts
N``): a client's calls ride one connection, so its acks reach the front that received
and renews its messages. When that front dies (or restarts) the client reconnects to
another; an ack with a handle renewed since fails as stale there, and the message comes
back once its last invisible time passes (at most ``invisible_ms`` after the last
renewal): delivered again, at least once, never lost (tests/rocketmq/test_two_fronts.py
test_push_messages_come_back_after_their_front_dies). Keeping the handles valid across
fronts would need the shard to accept a renewed message's original handle (its
lineage), which also means a handle outliving its own deadline: not done, the
redelivery is what "at least once" allows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import structlog

from mqstore.rpc.v1 import consume_queue_pb2 as cq

log = structlog.get_logger(__name__)

INVISIBLE_MS = 60_000  # what an auto-renewed message is popped and renewed with (the proxy's 60 s)
RENEW_AHEAD_MS = 10_000  # renewed this long before it would become visible (the proxy's 10 s)
ALIVE_S = 30.0  # a client not heard from for longer gets no renewals
MAX_HOLD_S = 3 * 3600.0  # the proxy renews for at most 3 h
TICK_S = 1.0


@dataclass
class Held:
    """One auto-renewed message: who holds it, its current handle and deadline."""

    client: Hashable  # the session holding it (settings.SessionKey: user and client id)
    group: str
    topic: str
    shard: int
    current: str
    deadline_ms: int
    since: float
    renewing: asyncio.Task | None = None  # a renewal on its way: an ack waits for its new handle


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Renewals:
    """See the module docstring. ``change(shard, request)``: ChangeInvisible on a
    shard's consume-queue builder; ``last_seen(client)``: monotonic time the client's session
    (a ``settings.SessionKey``) was last heard from (None: unknown)."""

    def __init__(self, change: Callable, last_seen: Callable[[Hashable], float | None]) -> None:
        self._change_on = change
        self._last_seen = last_seen
        self.invisible_ms = INVISIBLE_MS
        self.renew_ahead_ms = RENEW_AHEAD_MS
        self.alive_s = ALIVE_S
        self.max_hold_s = MAX_HOLD_S
        self._held: dict[str, Held] = {}  # the handle the client holds -> what it is now
        self._task: asyncio.Task | None = None

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, client: Hashable, group: str, topic: str, shard: int, handle: str) -> None:
        """Keep a just-received message invisible while ``client`` (its session) lives."""
        self._held[handle] = Held(client, group, topic, shard, handle, _now_ms() + self.invisible_ms, time.monotonic())
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def take(self, handle: str) -> str:
        """The current handle of a message the client acks, changes or forwards (the
        front stops renewing it; a renewal on its way is waited for); ``handle``
        itself when it is not renewed here."""
        held = self._held.pop(handle, None)
        if held is None:
            return handle
        if held.renewing is not None:
            await asyncio.gather(asyncio.shield(held.renewing), return_exceptions=True)
        return held.current

    async def release(self, client: Hashable) -> None:
        """A client terminates: its messages (those ``client``, one user's session,
        holds; never another user's) become visible again at once."""
        mine = [(h, held) for h, held in self._held.items() if held.client == client]
        for h, _ in mine:
            del self._held[h]
        await asyncio.gather(*(self._change(held, 0) for _, held in mine), return_exceptions=True)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while self._held:
            await asyncio.sleep(TICK_S)
            await self.renew_due()

    async def renew_due(self) -> None:
        """Renew what runs out within ``renew_ahead_ms``; drop what may no longer be held."""
        now_ms, now = _now_ms(), time.monotonic()
        due = []
        for h, held in list(self._held.items()):
            seen = self._last_seen(held.client)
            if seen is None or now - seen > self.alive_s or now - held.since > self.max_hold_s:
                del self._held[h]  # its client is gone or it was held long enough: it comes back by itself
                continue
            if held.deadline_ms - now_ms <= self.renew_ahead_ms:
                due.append((h, held))
        loop = asyncio.get_running_loop()
        tasks = []
        for h, held in due:
            held.renewing = loop.create_task(self._renew(h, held))
            tasks.append(held.renewing)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _renew(self, h: str, held: Held) -> None:
        """One renewal; the new handle is in ``held`` before anyone waiting on it wakes."""
        try:
            answer = await self._change(held, self.invisible_ms)
        except Exception as e:  # noqa: BLE001 - the shard is restarting: tried again next tick
            log.warning("renewal_failed", group=held.group, topic=held.topic, error=str(e))
        else:
            if answer.outcome == cq.POP_OK:
                held.current, held.deadline_ms = answer.receipt_handle, _now_ms() + self.invisible_ms
            else:
                self._held.pop(h, None)  # acked, moved or expired meanwhile: nothing more to renew
        held.renewing = None

    async def _change(self, held: Held, invisible_ms: int):
        return await self._change_on(
            held.shard,
            cq.ChangeInvisibleRequest(
                group=held.group, topic=held.topic, receipt_handle=held.current, invisible_ms=invisible_ms
            ),
        )


__all__ = ["Renewals"]
