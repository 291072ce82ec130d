"""The deterministic workload of ``mqstore bench append``.

Message ``i`` goes to topic ``i % topics`` and queue ``(i // topics) % queues``; its
body is a fixed pseudo-random pattern with ``i`` in its first 8 bytes; it carries
TAGS ``Tag<i % 16>``, two KEYS (``ord<i>`` and ``usr<i % 9973>``) and a UNIQ_KEY
the store generates. Batches are made on demand, so memory stays flat for any count.
"""

from __future__ import annotations

import numpy as np

from mqstore.store.messages import MessageBatch

_TAGS = np.array([f"Tag{i}" for i in range(16)], dtype=object)


def topic_name(i: int) -> str:
    return f"BenchTopic{i}"


class Workload:
    """Makes batch ``[start, start + count)`` of the workload."""

    def __init__(self, *, body_size: int, topics: int, queues: int, seed: int = 7) -> None:
        if body_size < 0 or topics < 1 or queues < 1:
            raise ValueError("body_size must be >= 0, topics and queues >= 1")
        self.body_size = body_size
        self.topics = topics
        self.queues = queues
        self._names = [topic_name(t) for t in range(topics)]
        self._pattern = np.random.default_rng(seed).integers(0, 256, max(body_size, 8), np.uint8)

    def batch(self, start: int, count: int) -> MessageBatch:
        idx = np.arange(start, start + count, dtype=np.int64)
        t = self.topics
        topics = self._names[0] if t == 1 else [self._names[k] for k in (idx % t).tolist()]
        queues = (idx // t) % self.queues
        b = self.body_size
        rows = np.empty((count, max(b, 8)), np.uint8)
        rows[:] = self._pattern
        rows[:, :8] = idx.astype(">u8").view(np.uint8).reshape(count, 8)
        bodies = rows[:, :b].copy().view(f"V{b}").ravel().tolist() if b else [b""] * count
        tags = _TAGS[idx % 16].tolist()
        # "ord<i> usr<i % 9973>" for every message: one join and one split, not n f-strings.
        pieces: list[str] = [""] * (5 * count)
        pieces[0::5] = ["ord"] * count
        pieces[1::5] = map(str, range(start, start + count))
        pieces[2::5] = [" usr"] * count
        pieces[3::5] = map(str, (idx % 9973).tolist())
        pieces[4::5] = ["\x00"] * count
        keys = "".join(pieces).split("\x00")
        keys.pop()
        return MessageBatch(topics=topics, bodies=bodies, queue_ids=queues, tags=tags, keys=keys)


__all__ = ["Workload", "topic_name"]
