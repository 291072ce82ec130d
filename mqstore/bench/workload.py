"""The deterministic workload of ``mqstore bench append``.

Message ``i`` goes to topic ``i % topics`` and queue ``(i // topics) % queues``; its
body is a fixed pseudo-random pattern with ``i`` in its first 8 bytes; it carries
TAGS ``Tag<i % 16>``, two KEYS (``ord<i>`` and ``usr<i % 9973>``, zero-padded) and a UNIQ_KEY
the store generates. Batches are made on demand, so memory stays flat for any count.

A batch's bodies are one ``Bodies`` (one buffer, ``count * body_size`` bytes), a copy
of rows each thread keeps with the pattern (only the index bytes are rewritten per
batch). ``batch(..., in_place=True)`` skips that copy: the bodies are then those rows
themselves, which hold until the same thread makes its next batch; ``bench append``
asks for that (it appends each batch before making the next), as a producer hands
the store bodies already in a buffer of its own.
"""

from __future__ import annotations

import threading

import numpy as np

from mqstore.store.messages import Bodies, MessageBatch

_TAGS = np.array([f"Tag{i}" for i in range(16)], dtype=object)


def topic_name(i: int) -> str:
    return f"BenchTopic{i}"


_FOUR_DIGITS = np.array([f"{i:04d}".encode() for i in range(10_000)], "S4")
_KEY_ROW = np.dtype(
    [("ord", "S3"), ("hi", "S2"), ("mid", "S4"), ("lo", "S4"), ("usr", "S4"), ("u", "S4"), ("nl", "S1")]
)


def _keys(idx: np.ndarray) -> list[str]:
    """KEYS ``ord<i> usr<i % 9973>`` (zero-padded) for every index: ASCII rows built
    4 digits at a time from a table, decoded once and split into str objects."""
    rows = np.empty(len(idx), _KEY_ROW)
    rows["ord"] = b"ord"
    rows["hi"] = _FOUR_DIGITS[idx // 100_000_000 % 100].view("S2").reshape(-1, 2)[:, 1]
    rows["mid"] = _FOUR_DIGITS[idx // 10_000 % 10_000]
    rows["lo"] = _FOUR_DIGITS[idx % 10_000]
    rows["usr"] = b" usr"
    rows["u"] = _FOUR_DIGITS[idx % 9973]
    rows["nl"] = b"\n"
    keys = rows.tobytes().decode("ascii").split("\n")
    keys.pop()
    return keys


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
        self._local = threading.local()

    def _rows(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` rows holding the pattern and the ``count + 1`` body offsets, kept
        per thread: each batch rewrites only the index bytes."""
        local = self._local
        rows = getattr(local, "rows", None)
        if rows is None or len(rows) < count:
            rows = local.rows = np.empty((count, max(self.body_size, 8)), np.uint8)
            rows[:] = self._pattern
        offsets = getattr(local, "offsets", None)
        if offsets is None or len(offsets) != count + 1:
            offsets = local.offsets = np.arange(count + 1, dtype=np.int64) * self.body_size
        return rows[:count], offsets

    def batch(self, start: int, count: int, *, in_place: bool = False) -> MessageBatch:
        """Messages ``start .. start + count - 1``. ``in_place``: the bodies are the
        thread's reused rows, not a copy (valid until the thread's next batch)."""
        idx = np.arange(start, start + count, dtype=np.int64)
        t = self.topics
        topics = self._names[0] if t == 1 else [self._names[k] for k in (idx % t).tolist()]
        queues = (idx // t) % self.queues
        b = self.body_size
        rows, offsets = self._rows(count)
        rows[:, :8] = idx.astype(">u8").view(np.uint8).reshape(count, 8)
        if b < 8:  # the index still goes into the 8 bytes the rows have; the body keeps b of them
            rows = rows[:, :b].copy()
        elif not in_place:
            rows = rows.copy()
        bodies = Bodies(rows, offsets)  # the rows are the bodies, back to back
        tags = _TAGS[idx % 16].tolist()
        keys = _keys(idx)
        return MessageBatch(topics=topics, bodies=bodies, queue_ids=queues, tags=tags, keys=keys)


__all__ = ["Workload", "topic_name"]
