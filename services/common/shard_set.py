"""The shards a front reaches: routing, fan-out and the one topic table.

Both front-ends (mqstore's API, query/front.py, and RocketMQ's, rocketmq/messaging.py)
are adapters over one ``ShardSet``; neither holds the other. It owns:

- routing: the shard rule (shard_rule.py) at this deployment's shard count, for one
  message (``shard_of``) or a batch (``shards_of``, ``parts``), and the queue of a
  system topic kept per shard (``queue_on``: dead letters, transaction halves);
- fan-out: a call on every shard at once, either failing with the first failure
  (``fan_out``) or answering each shard's answer or failure (``fan_out_settled``:
  partial-failure answers name the shards that failed), and a call on whichever shard
  answers first for what every shard holds alike (``any_shard``: topic configs; a
  shard that did not answer is asked last for ``DOWN_FOR_S``);
- ``topics``: the one ``TopicTable`` of the front (see its docstring for its
  freshness rule).

Shards are ``shard_clients.Shard`` (typed clients); the set only needs ``.shard`` and
the clients its calls use, so tests give it fakes. One event loop (the front's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from mqstore.rpc.v1 import common_pb2
from mqstore.services.common import shard_rule
from mqstore.services.common.errors import Unavailable, status_of
from mqstore.services.common.shard_clients import SEND_RESOLVE_CAP_S
from mqstore.store.topic_configs import MESSAGE_TYPE_ATTRIBUTE, PERM_READ, PERM_WRITE, TopicConfig

TOPIC_MAX_AGE_S = 1.0  # a topic table older than this is asked again (changes by other fronts or tools)
DOWN_FOR_S = 5.0  # a shard that did not answer ``any_shard`` is asked last for this long
_SKIPPED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass(frozen=True)
class TopicRoute:
    """What a route or a send needs of a topic: its queues, perm and message type
    (the store's defaults where it has no config)."""

    read_queues: int
    write_queues: int
    perm: int
    message_type: str  # "NORMAL" where none is given

    @property
    def fifo(self) -> bool:
        return self.message_type == "FIFO"


class Topics:
    """One ListTopics answer: every topic's config as the shards hold it (each shard
    holds every config alike). Lookups by name; the store's ``TopicConfig`` of a topic
    is made when first asked (a table may hold 100,000 topics)."""

    def __init__(self, configs: Iterable[common_pb2.TopicConfig], default_queue_nums: int) -> None:
        self._by_name = {c.topic: c for c in configs}
        self._configs: dict[str, TopicConfig | None] = {}
        self.default_queue_nums = default_queue_nums

    def __contains__(self, topic: str) -> bool:
        return topic in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)

    def perm(self, topic: str) -> int | None:
        """The topic's perm (None: no config, sends and pulls allowed)."""
        c = self._by_name.get(topic)
        return None if c is None else c.perm

    def config(self, topic: str) -> TopicConfig | None:
        """The store's TopicConfig (what message_rules reads of it); None: no config."""
        try:
            return self._configs[topic]
        except KeyError:
            c = self._by_name.get(topic)
            out = self._configs[topic] = None if c is None else _topic_config(c)
            return out

    def write_queues(self, topic: str) -> int:
        c = self._by_name.get(topic)
        return self.default_queue_nums if c is None else c.write_queue_nums

    def write_queue_nums(self) -> dict[str, int]:
        """Every configured topic's write queues (GetRoute)."""
        return {t: c.write_queue_nums for t, c in self._by_name.items()}

    def route(self, topic: str) -> TopicRoute:
        c = self._by_name.get(topic)
        if c is None:
            n = self.default_queue_nums
            return TopicRoute(n, n, PERM_READ | PERM_WRITE, "NORMAL")
        return TopicRoute(c.read_queue_nums, c.write_queue_nums, c.perm, c.message_type or "NORMAL")


class TopicTable:
    """The front's one table of topic configs. Freshness rule: a table serves for
    ``max_age_s`` after it was fetched (a change made by another front or a tool shows
    within it); a change made through this front (``changed``) is fetched at the next
    use. ``fetch(prefer)`` lists the topics (``prefer``: the shard to ask first, where
    the caller's call goes anyway); ``clock``: monotonic seconds."""

    def __init__(
        self,
        fetch: Callable[[Any], Awaitable[Iterable[common_pb2.TopicConfig]]],
        *,
        default_queue_nums: int,
        max_age_s: float = TOPIC_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self.max_age_s = max_age_s
        self.default_queue_nums = default_queue_nums
        self._table: Topics | None = None
        self._at = 0.0
        self.changes = 0  # topic changes made through this front

    async def get(self, prefer=None) -> Topics:
        """A table no older than the freshness rule allows (fetched now if needed)."""
        now = self._clock()
        table = self._table
        if table is None or now - self._at > self.max_age_s:
            table = Topics(await self._fetch(prefer), self.default_queue_nums)
            self._table, self._at = table, now
        return table

    def changed(self) -> None:
        """A topic was created or changed through this front: fetch again at the next use."""
        self._table = None
        self.changes += 1


class ShardSet:
    """See the module docstring. ``shards[i]`` is shard ``i``; ``default_queue_nums``:
    write queues of topics without a config (the store's default)."""

    def __init__(
        self,
        shards: Sequence,
        *,
        default_queue_nums: int = 4,
        topic_max_age_s: float = TOPIC_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not shards:
            raise ValueError("a front needs at least one shard")
        if [s.shard for s in shards] != list(range(len(shards))):
            raise ValueError("shards must be given in order, shard i at index i")
        self.shards = list(shards)
        self.count = len(self.shards)
        self.default_queue_nums = default_queue_nums
        self._clock = clock
        self._down_until: dict[int, float] = {}  # shard -> clock time until which any_shard asks it last
        self.topics = TopicTable(
            self._list_topics, default_queue_nums=default_queue_nums, max_age_s=topic_max_age_s, clock=clock
        )

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator:
        return iter(self.shards)

    def __getitem__(self, i: int):
        return self.shards[i]

    # ------------------------------------------------------------------ routing

    def shard_of(self, topic: str, queue_id: int) -> int:
        return shard_rule.shard_of(topic, queue_id, self.count)

    def of(self, topic: str, queue_id: int):
        """The shard holding queue ``queue_id`` of ``topic``."""
        return self.shards[shard_rule.shard_of(topic, queue_id, self.count)]

    def shards_of(self, topics: Sequence[str], queue_ids) -> np.ndarray:
        """The shard of every message of a batch (``topics[i]``, ``queue_ids[i]``)."""
        return shard_rule.shards_of(topics, queue_ids, self.count)

    @staticmethod
    def parts(shard_of: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(shard, rows) of a batch split by shard, shards in order, rows in batch order."""
        shard_of = np.asarray(shard_of)
        if len(shard_of) and (shard_of == shard_of[0]).all():
            return [(int(shard_of[0]), np.arange(len(shard_of)))]
        return [(s, np.flatnonzero(shard_of == s)) for s in np.unique(shard_of).tolist()]

    def queue_on(self, topic: str, shard: int) -> int:
        """The smallest queue id of ``topic`` on ``shard`` (a system topic's queue per shard)."""
        return shard_rule.first_queue_on(topic, shard, self.count)

    def queues_by_shard(self, topic: str, queue_nums: int) -> dict[int, list[int]]:
        """The topic's queue ids below ``queue_nums``, by the shard holding them."""
        out: dict[int, list[int]] = {}
        for q in range(queue_nums):
            out.setdefault(self.shard_of(topic, q), []).append(q)
        return out

    # ------------------------------------------------------------------ fan-out

    async def fan_out(self, fn: Callable[[Any], Awaitable]) -> list:
        """``fn`` on every shard at once, answers in shard order; the first failure is raised."""
        return list(await asyncio.gather(*(fn(s) for s in self.shards)))

    async def fan_out_settled(self, fn: Callable[[Any], Awaitable], shards: Sequence | None = None) -> list:
        """``fn`` on every shard (or on ``shards``) at once: each one's answer or the
        exception it failed with, in order (partial failures are the caller's to report)."""
        return list(
            await asyncio.gather(*(fn(s) for s in (self.shards if shards is None else shards)), return_exceptions=True)
        )

    async def any_shard(self, fn: Callable[[Any], Awaitable], *, first=None):
        """``fn`` on the first shard that answers (``first`` first, then in shard
        order; those that did not answer lately last): for what every shard holds
        alike, so a shard that is down does not stop the others' calls. Only
        UNAVAILABLE and DEADLINE_EXCEEDED move on; UNAVAILABLE naming every shard if
        none answers."""
        now = self._clock()
        order = self.shards if first is None else [first, *(s for s in self.shards if s is not first)]
        failures = []
        for s in sorted(order, key=lambda s: self._down_until.get(s.shard, 0.0) > now):  # down ones last
            try:
                answer = await fn(s)
            except Exception as e:  # noqa: BLE001 - only a shard that can not be reached is skipped
                code, message = status_of(e)
                if code not in _SKIPPED:
                    raise
                self._down_until[s.shard] = self._clock() + DOWN_FOR_S
                failures.append(f"shard {s.shard}: {message}")
                continue
            self._down_until.pop(s.shard, None)
            return answer
        raise Unavailable("no shard answered: " + "; ".join(failures))

    async def _list_topics(self, prefer) -> Iterable[common_pb2.TopicConfig]:
        async def ask(s):
            return (await s.commitlog.list_topics(resolve_cap=SEND_RESOLVE_CAP_S)).configs

        return await self.any_shard(ask, first=prefer)

    # ------------------------------------------------------------------ store hosts

    async def prefixes(self, *, timeout: float = 2.0) -> list[str]:
        """Each shard's msgId prefix ("" for a shard that does not answer now)."""

        async def one(s) -> str:
            try:
                return await s.learn_prefix(timeout=timeout, retry=False)
            except Exception:  # noqa: BLE001 - a shard down is "" here; sends to it say UNAVAILABLE
                return ""

        return await self.fan_out(one)

    async def by_prefix(self, prefix: str):
        """The shard whose store host has msgId prefix ``prefix`` (None: none of ours),
        asking every shard again once if none is known to."""

        async def learn(s) -> None:
            s.msg_id_prefix = (await s.commitlog.get_offsets()).msg_id_prefix

        for refresh in (False, True):
            await asyncio.gather(*(learn(s) for s in self.shards if s.msg_id_prefix is None or refresh))
            for s in self.shards:
                if s.msg_id_prefix == prefix:
                    return s
        return None

    async def close(self) -> None:
        for s in self.shards:
            await s.close()


def _topic_config(c: common_pb2.TopicConfig) -> TopicConfig:
    """A ListTopics entry as the store's TopicConfig (what message_rules reads of it)."""
    attributes = {MESSAGE_TYPE_ATTRIBUTE: c.message_type} if c.message_type else {}
    return TopicConfig(
        topic_name=c.topic,
        read_queue_nums=c.read_queue_nums,
        write_queue_nums=c.write_queue_nums,
        perm=c.perm,
        attributes=attributes,
    )


__all__ = ["DOWN_FOR_S", "TOPIC_MAX_AGE_S", "ShardSet", "TopicRoute", "TopicTable", "Topics"]
