"""Concurrent calls of the RocketMQ port merged into one call to a shard.

RocketMQ clients send one message per SendMessage and ack one message per
AckMessage; passed on one by one, each costs the front an outgoing gRPC call and
the shard an incoming one, which is most of their CPU per message. A ``Coalescer``
does for calls what group commit does for fsyncs: the first request goes out at
once; requests that arrive while a call is in flight wait for it and then go out
together, as one call; each gets its own part of the answer. A lone client sees no
added latency; many concurrent ones share calls.

A merged call that fails is tried again part by part, so one request the shard
refuses (nothing written) does not fail the others; only refusals are retried this
way (REFUSED_CODES: nothing was written), never a call whose outcome is unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import grpc

from mqstore.services.common import deadline
from mqstore.services.common.errors import REFUSED_CODES, status_of

Item = TypeVar("Item")
MAX_MERGED = 1024  # items per merged call


class Coalescer(Generic[Item]):
    """Merges concurrent ``submit(key, items)`` with the same key into one
    ``send(key, all_items) -> answers`` (one answer per item, in order)."""

    def __init__(self, send: Callable[[Hashable, list[Item]], Awaitable[Sequence[Any]]]) -> None:
        self._send = send
        self._busy: set[Hashable] = set()
        self._waiting: dict[Hashable, list[tuple[list[Item], asyncio.Future]]] = {}

    async def submit(self, key: Hashable, items: list[Item]) -> list[Any]:
        """The answers for ``items`` (in order), from a call shared with whatever else
        was submitted under ``key`` meanwhile."""
        if key not in self._busy:
            self._busy.add(key)
            try:
                return list(await self._send(key, items))
            finally:
                self._next(key)
        future = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((items, future))
        return await future

    def _next(self, key: Hashable) -> None:
        """The call for ``key`` returned: send what waited, as one call."""
        queue = self._waiting.pop(key, [])
        if not queue:
            self._busy.discard(key)
            return
        take, rest = [], 0
        for i, (items, _) in enumerate(queue):
            if take and rest + len(items) > MAX_MERGED:
                self._waiting[key] = queue[i:]
                break
            take.append(queue[i])
            rest += len(items)
        asyncio.get_running_loop().create_task(self._merged(key, take))

    async def _merged(self, key: Hashable, batch: list[tuple[list[Item], asyncio.Future]]) -> None:
        deadline.start(None)  # a task of its own: not bound by the deadline of the call that started it
        try:
            try:
                answers = list(await self._send(key, [x for items, _ in batch for x in items]))
            except Exception as e:  # noqa: BLE001 - handed to the submitters below
                await self._one_by_one(key, batch, e)
                return
            at = 0
            for items, future in batch:
                if not future.done():
                    future.set_result(answers[at : at + len(items)])
                at += len(items)
        finally:
            self._next(key)

    async def _one_by_one(self, key: Hashable, batch: list, error: Exception) -> None:
        code, _ = status_of(error)
        for items, future in batch:
            if future.done():
                continue
            if len(batch) == 1 or code not in REFUSED_CODES or code is grpc.StatusCode.UNAUTHENTICATED:
                future.set_exception(error)  # nothing to tell apart, or the outcome is unknown
                continue
            try:
                future.set_result(list(await self._send(key, items)))
            except Exception as e:  # noqa: BLE001 - this part's own failure
                future.set_exception(e)


__all__ = ["Coalescer"]
