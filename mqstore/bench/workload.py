"""The deterministic workload of ``mqstore bench append``.

Two shapes say where message ``i`` goes:
    round-robin  topic ``i % topics``, queue ``(i // topics) % queues`` (every batch
                 touches up to ``batch`` topics);
    per-topic    topic ``(i // run) % topics``, queue ``i % queues``: each run of ``run``
                 messages (the bench's batch) goes to one topic, as many producers
                 each sending to their own topic do.
At one topic both shapes give the same messages. Its
body is a fixed pseudo-random pattern with ``i`` in its first 8 bytes; it carries
TAGS ``Tag<i % 16>``, two KEYS (``ord<i>`` and ``usr<i % 9973>``, zero-padded) and a UNIQ_KEY
the store generates. Batches are made on demand, so memory stays flat for any count.

A batch's bodies are one ``Bodies`` (one buffer, ``count * body_size`` bytes), a copy
of rows each thread keeps with the pattern (only the index bytes are rewritten per
batch). ``batch(..., in_place=True)`` skips that copy: the bodies are then those rows
themselves, which hold until the same thread makes its next batch; ``bench append``
asks for that (it appends each batch before making the next), as a producer hands
the store bodies already in a buffer of its own. The KEYS come as one ``Texts``
the same way; topics and tags as lists of shared str objects.
"""

from __future__ import annotations

import threading

import numpy as np

from mqstore.store.messages import Bodies, MessageBatch, Texts

_TAGS = np.array([f"Tag{i}" for i in range(16)], dtype=object)


def topic_name(i: int) -> str:
    return f"BenchTopic{i}"


_FOUR_DIGITS = np.array([f"{i:04d}".encode() for i in range(10_000)], "S4")
_KEY_ROW = np.dtype([("ord", "S3"), ("hi", "S2"), ("mid", "S4"), ("lo", "S4"), ("usr", "S4"), ("u", "S4")])


def _write_keys(rows: np.ndarray, idx: np.ndarray) -> None:
    """KEYS ``ord<i> usr<i % 9973>`` (zero-padded) for every index into fixed-width
    ASCII rows (their constant parts already written), 4 digits at a time from a table."""
    rows["hi"] = _FOUR_DIGITS[idx // 100_000_000 % 100].view("S2").reshape(-1, 2)[:, 1]
    rows["mid"] = _FOUR_DIGITS[idx // 10_000 % 10_000]
    rows["lo"] = _FOUR_DIGITS[idx % 10_000]
    rows["u"] = _FOUR_DIGITS[idx % 9973]


class _Rows:
    """One thread's reused rows for batches of ``count``: the bodies (the pattern,
    only the index bytes rewritten per batch) and the KEYS, and the ``Bodies`` and
    ``Texts`` over them, made (and checked) once."""

    def __init__(self, count: int, body_size: int, pattern: np.ndarray) -> None:
        self.count = count
        self.bodies = np.empty((count, max(body_size, 8)), np.uint8)
        self.bodies[:] = pattern
        self.body_offsets = np.arange(count + 1, dtype=np.int64) * body_size
        self.keys = np.empty(count, _KEY_ROW)
        self.keys["ord"], self.keys["usr"] = b"ord", b" usr"
        self.key_offsets = np.arange(count + 1, dtype=np.int64) * _KEY_ROW.itemsize
        self.bodies_in_place = Bodies(self.bodies, self.body_offsets) if body_size >= 8 else None
        self.keys_in_place = Texts(self.keys.view(np.uint8), self.key_offsets)


SHAPES = ("round-robin", "per-topic")
_TOPIC_LISTS_KEPT = 1024  # round-robin batches' topic lists kept (a few MB at 1,000 names each)


class Workload:
    """Makes batch ``[start, start + count)`` of the workload."""

    def __init__(
        self,
        *,
        body_size: int,
        topics: int,
        queues: int,
        seed: int = 7,
        shape: str = "round-robin",
        run: int = 1000,
    ) -> None:
        if body_size < 0 or topics < 1 or queues < 1 or run < 1:
            raise ValueError("body_size must be >= 0, topics, queues and run >= 1")
        if shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
        self.body_size = body_size
        self.topics = topics
        self.queues = queues
        self.shape = shape
        self.run = run
        self._names = np.array([topic_name(t) for t in range(topics)], dtype=object)
        self._pattern = np.random.default_rng(seed).integers(0, 256, max(body_size, 8), np.uint8)
        self._local = threading.local()
        self._topic_lists: dict[tuple[int, int], list[str]] = {}

    def _round_robin_topics(self, first: int, count: int) -> list[str]:
        """Topics ``first, first + 1, ...`` (mod T) as a list, kept per (first, count):
        with batches of a fixed size there are only T / gcd(T, count) of them, and a
        producer has its topics at hand rather than making a list of names per batch
        (at 10,000 topics that was 8% of the producer's samples, none of them the store's)."""
        key = (first, count)
        topics = self._topic_lists.get(key)
        if topics is None:
            topics = self._names[(first + np.arange(count)) % self.topics].tolist()
            if len(self._topic_lists) < _TOPIC_LISTS_KEPT:
                self._topic_lists[key] = topics
        return topics

    def _rows(self, count: int) -> _Rows:
        rows = getattr(self._local, "rows", None)
        if rows is None or rows.count != count:
            rows = self._local.rows = _Rows(count, self.body_size, self._pattern)
        return rows

    def batch(self, start: int, count: int, *, in_place: bool = False) -> MessageBatch:
        """Messages ``start .. start + count - 1``. ``in_place``: the bodies and KEYS are
        the thread's reused rows, not a copy (valid until the thread's next batch)."""
        idx = np.arange(start, start + count, dtype=np.int64)
        t = self.topics
        if t == 1:
            topics, queues = self._names[0], idx % self.queues
        elif self.shape == "per-topic":
            first, last = start // self.run, (start + count - 1) // self.run
            topics = self._names[first % t] if first == last else self._names[idx // self.run % t].tolist()
            queues = idx % self.queues
        else:
            topics, queues = self._round_robin_topics(start % t, count), (idx // t) % self.queues
        b = self.body_size
        rows = self._rows(count)
        rows.bodies[:, :8] = idx.astype(">u8").view(np.uint8).reshape(count, 8)
        _write_keys(rows.keys, idx)
        if b < 8:  # the index still goes into the 8 bytes the rows have; the body keeps b of them
            bodies = Bodies(rows.bodies[:, :b].copy(), rows.body_offsets)
        elif in_place:
            bodies = rows.bodies_in_place
        else:
            bodies = Bodies(rows.bodies.copy(), rows.body_offsets)
        keys = rows.keys_in_place if in_place else Texts(rows.keys.view(np.uint8).copy(), rows.key_offsets)
        tags = _TAGS[idx % 16].tolist()
        return MessageBatch(topics=topics, bodies=bodies, queue_ids=queues, tags=tags, keys=keys)

    def queues_touched(self, start: int, count: int) -> int:
        """How many distinct (topic, queue) messages ``start .. start + count - 1`` go to."""
        t, q = self.topics, self.queues
        if count <= 0:
            return 0
        if t == 1 or self.shape == "round-robin":  # i -> (i % t, i // t % q) is one-to-one over t * q messages
            return min(count, t * q)
        runs = (start + count - 1) // self.run - start // self.run + 1
        if runs >= t:
            return t * min(q, self.run)
        return sum(  # at most t runs: cheap
            min(q, min(start + count, (r + 1) * self.run) - max(start, r * self.run))
            for r in range(start // self.run, start // self.run + runs)
        )


__all__ = ["SHAPES", "Workload", "topic_name"]
