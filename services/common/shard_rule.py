"""The one rule that says which shard holds a topic queue.

A topic's queue ``q`` lives on shard ``(crc32(topic) + q) % shards`` (``RULE``; crc32 of
the topic's UTF-8 bytes, unsigned) with the same queue id there, as RocketMQ spreads a
topic's queues over broker groups, each queue wholly on one. ``serve`` pins the shard
count and this text in ``<root>/mqstore-layout.json`` (query/routing.py): the rule must
never change under a store, so it is written once, here, and every user (the fronts,
the encoded sender, the commitlog's check of a routed batch) calls these functions.

``shards_of`` is the rule over a batch (one crc32 per distinct topic, numpy for the
rest); ``shard_of`` is the same rule for one message (the scalar path costs no numpy).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

RULE = "(crc32(topic) + queue_id) % shards"


def topic_crc(topic: str) -> int:
    """crc32 of the topic's UTF-8 bytes, unsigned (Python's zlib.crc32)."""
    return zlib.crc32(topic.encode())


def shard_of(topic: str, queue_id: int, shards: int) -> int:
    """The shard of queue ``queue_id`` of ``topic`` among ``shards``."""
    if shards == 1:
        return 0
    return (zlib.crc32(topic.encode()) + queue_id) % shards


def topic_crcs(names: Sequence[str]) -> np.ndarray:
    """crc32 of each name (int64: crc + queue id never overflows)."""
    return np.fromiter((zlib.crc32(t.encode()) for t in names), np.int64, len(names))


def shards_by_code(names: Sequence[str], codes: np.ndarray, queue_ids: np.ndarray, shards: int) -> np.ndarray:
    """The shard of every message of a batch whose topics are ``names[codes[i]]``."""
    qids = np.asarray(queue_ids, np.int64)
    if shards == 1:
        return np.zeros(len(qids), np.int64)
    return (topic_crcs(names)[np.asarray(codes, np.int64)] + qids) % shards


def shards_of(topics: Sequence[str], queue_ids: np.ndarray | Sequence[int], shards: int) -> np.ndarray:
    """The shard of every message of a batch (``topics[i]``, ``queue_ids[i]``): one
    crc32 per distinct topic."""
    qids = np.asarray(queue_ids, np.int64)
    if shards == 1:
        return np.zeros(len(qids), np.int64)
    codes: dict[str, int] = {}
    index = np.fromiter((codes.setdefault(t, len(codes)) for t in topics), np.int64, len(topics))
    return shards_by_code(list(codes), index, qids, shards)


def queues_on(topic: str, queue_nums: int, shard: int, shards: int) -> list[int]:
    """The queue ids below ``queue_nums`` of ``topic`` that live on ``shard``."""
    crc = zlib.crc32(topic.encode())
    return [q for q in range(queue_nums) if shards == 1 or (crc + q) % shards == shard] if shard < shards else []


def first_queue_on(topic: str, shard: int, shards: int) -> int:
    """The smallest queue id of ``topic`` on ``shard`` (a system topic's queue per shard:
    dead letters, transaction halves; one of ``shards`` consecutive ids always is)."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not one of {shards}")
    return (shard - zlib.crc32(topic.encode())) % shards


__all__ = ["RULE", "first_queue_on", "queues_on", "shard_of", "shards_by_code", "shards_of", "topic_crc", "topic_crcs"]
