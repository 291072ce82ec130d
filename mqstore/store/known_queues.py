"""Queues the summary of queue ends (queue_ends.py) lists and nothing has used yet,
one row each in arrays: the summary's own rows (ROW_DTYPE, 44 bytes), the last
file's st_blocks where a stat read them (8 bytes) and whether the row is still
here (1 byte). ConsumeQueues makes a ConsumeQueue from a row on first use
(``pop``); until then a queue costs 53 bytes, not a Python object (400,000 queues:
21 MB instead of ~150 MB of tuples and dict entries).

A row is found by (topic, queue id): the topic's number through one dict over the
summary's topic names (a Python string per topic, not per queue), then a binary
search over the sorted keys (topic number << 16 | queue id).

Not thread-safe: ConsumeQueues calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from mqstore.store.queue_ends import ROW_DTYPE, QueueEnds

# (first_file, files, min_offset, max_offset, max_physical_offset, last file's st_blocks or -1)
KnownRow = tuple[int, int, int, int, int, int]


class KnownQueues:
    """See the module docstring. Empty when made without a summary."""

    def __init__(self, ends: QueueEnds | None = None) -> None:
        if ends is None:
            self.topics: list[str] = []
            self.rows = np.zeros(0, ROW_DTYPE)
        else:
            self.topics, self.rows = ends.topics, ends.rows
        self._topic_index = {t: i for i, t in enumerate(self.topics)}
        self._keys = self.rows["topic"].astype(np.int64) << 16 | self.rows["queue_id"]
        self.blocks = np.full(len(self.rows), -1, np.int64)
        self.live = np.zeros(len(self.rows), bool)  # rows taken as known (``keep``), not yet popped
        # After a crash: the queue offset up to which the queue's files hold what the
        # re-dispatch writes again (queue_tails.stop_offsets; 0: nothing known)
        self.same_to = np.zeros(len(self.rows), np.int64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _find(self, topic: str, queue_id: int) -> int:
        t = self._topic_index.get(topic)
        if t is None or len(self._keys) == 0:
            return -1
        key = t << 16 | queue_id
        i = int(np.searchsorted(self._keys, key))
        return i if i < len(self._keys) and self._keys[i] == key else -1

    def find_many(self, keys: list[tuple[str, int]]) -> np.ndarray:
        """The row number of each (topic, queue id) that is known, -1 for the others:
        one dict lookup per key and one binary search over them all."""
        if not keys or not self._count:
            return np.full(len(keys), -1, np.int64)
        topics, qids = zip(*keys)
        tix = np.array([-1 if t is None else t for t in map(self._topic_index.get, topics)], np.int64)
        want = tix << 16 | np.array(qids, np.int64)
        pos = np.minimum(np.searchsorted(self._keys, want), len(self._keys) - 1)
        hit = (tix >= 0) & (self._keys[pos] == want)
        hit[hit] &= self.live[pos[hit]]
        return np.where(hit, pos, -1)

    def column(self, rows: np.ndarray, name: str) -> np.ndarray:
        """Field ``name`` of each row number of ``rows`` (``find_many``), -1 for -1."""
        out = np.full(len(rows), -1, np.int64)
        found = rows >= 0
        out[found] = self.rows[name][rows[found]]
        return out

    def topic_rows(self, topic: str) -> dict[int, int]:
        """Queue id -> row number of every row of ``topic`` (live or not)."""
        t = self._topic_index.get(topic)
        if t is None:
            return {}
        lo, hi = np.searchsorted(self._keys, [t << 16, (t + 1) << 16])
        return dict(zip(self.rows["queue_id"][lo:hi].tolist(), range(int(lo), int(hi))))

    def row(self, i: int) -> KnownRow:
        r = self.rows[i]
        return (
            int(r["first_file"]),
            int(r["files"]),
            int(r["min_offset"]),
            int(r["max_offset"]),
            int(r["max_physical_offset"]),
            int(self.blocks[i]),
        )

    def keep(self, rows: np.ndarray, blocks: np.ndarray | None = None) -> None:
        """Take these row numbers (an index array) as known, with their st_blocks."""
        if blocks is not None:
            self.blocks[rows] = blocks
        fresh = rows[~self.live[rows]]
        self.live[fresh] = True
        self._count += len(fresh)

    def keep_topics(self, names: set[str]) -> int:
        """Take every row of these topics as known; returns how many."""
        wanted = np.zeros(len(self.topics), bool)
        idx = [self._topic_index[t] for t in names if t in self._topic_index]
        wanted[idx] = True
        rows = np.flatnonzero(wanted[self.rows["topic"]]) if len(self.rows) else np.zeros(0, np.int64)
        self.keep(rows)
        return len(rows)

    def __contains__(self, key: tuple[str, int]) -> bool:
        i = self._find(*key)
        return i >= 0 and bool(self.live[i])

    def get(self, key: tuple[str, int]) -> KnownRow | None:
        i = self._find(*key)
        return self.row(i) if i >= 0 and self.live[i] else None

    def pop(self, key: tuple[str, int]) -> KnownRow | None:
        """The queue's row, no longer known (the caller makes the queue from it)."""
        i = self._find(*key)
        if i < 0 or not self.live[i]:
            return None
        self.live[i] = False
        self._count -= 1
        return self.row(i)

    def take(self, rows: np.ndarray) -> list[KnownRow]:
        """``pop`` of many row numbers (live ones, from ``find_many``) at once: their
        rows, no longer known."""
        self.live[rows] = False
        self._count -= len(rows)
        r = self.rows[rows]
        return list(
            zip(
                r["first_file"].tolist(),
                r["files"].tolist(),
                r["min_offset"].tolist(),
                r["max_offset"].tolist(),
                r["max_physical_offset"].tolist(),
                self.blocks[rows].tolist(),
            )
        )

    def _live_rows(self) -> np.ndarray:
        return np.flatnonzero(self.live)

    def live_rows(self) -> np.ndarray:
        """Row numbers of every known queue, ascending."""
        return self._live_rows()

    def drop(self, rows: np.ndarray) -> list[tuple[str, int]]:
        """No longer known (the caller opens these queues from their files); their keys."""
        rows = rows[self.live[rows]]
        self.live[rows] = False
        self._count -= len(rows)
        names = self.topics
        return [(names[t], q) for t, q in zip(self.rows["topic"][rows].tolist(), self.rows["queue_id"][rows].tolist())]

    def keys(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every known queue, sorted."""
        live = self._live_rows()
        names = self.topics
        return [(names[t], q) for t, q in zip(self.rows["topic"][live].tolist(), self.rows["queue_id"][live].tolist())]

    def max_offsets(self) -> Iterator[tuple[tuple[str, int], int]]:
        """((topic, queue id), max offset) of every known queue."""
        live = self._live_rows()
        return zip(self.keys(), self.rows["max_offset"][live].tolist())

    def max_physical_offset(self) -> int:
        live = self._live_rows()
        return int(self.rows["max_physical_offset"][live].max()) if len(live) else -1

    def past(self, offset: int) -> list[tuple[str, int]]:
        """Known queues whose last unit ends past ``offset`` (the commitlog's end)."""
        live = self._live_rows()
        sel = live[self.rows["max_physical_offset"][live] > offset]
        names = self.topics
        return [(names[t], q) for t, q in zip(self.rows["topic"][sel].tolist(), self.rows["queue_id"][sel].tolist())]

    def summary_rows(self) -> tuple[list[str], np.ndarray]:
        """The known queues as summary rows (ROW_DTYPE, sorted) with their topic names."""
        return self.topics, self.rows[self._live_rows()]

    def clear(self) -> None:
        self.live[:] = False
        self._count = 0


__all__ = ["KnownQueues", "KnownRow"]
