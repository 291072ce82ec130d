"""Consume-queue units as columns: what reconcile's queue tasks hand its chunk tasks.

The queue tasks read every unit anyway (verify's reader), so they cut their real
units by the commitlog chunk each points into and Spark shuffles each piece to its
chunk's task: a chunk task then never opens a queue file (at 400,000 queues, every
chunk task opening and searching every queue file was most of the job). One row per
unit, no Python object per unit or per queue: ``topic`` indexes ``topics`` (the names
of the rows' topics, each once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_COLUMNS = ("topic", "queue_id", "queue_offset", "phys", "size", "tags_code")


@dataclass
class UnitColumns:
    """Real units (pre-blanks left out) of some queues; rows in commitlog order when
    made by :meth:`from_parts` or :meth:`concat`."""

    topics: list[str]
    topic: np.ndarray  # int32, index into topics
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64
    phys: np.ndarray  # int64, the commitlog offset the unit points at
    size: np.ndarray  # int64
    tags_code: np.ndarray  # int64

    @classmethod
    def empty(cls) -> UnitColumns:
        z = np.zeros(0, np.int64)
        return cls([], z.astype(np.int32), z.astype(np.int32), z, z, z, z)

    @classmethod
    def from_parts(cls, topics: list[str], parts: list[tuple]) -> UnitColumns:
        """From per-queue pieces (topic index, queue id, queue offsets, commitlog
        offsets, sizes, tagsCodes), sorted by commitlog offset."""
        if not parts:
            return cls(list(topics), *UnitColumns.empty().columns())
        lens = np.array([len(p[2]) for p in parts], np.int64)
        out = cls(
            list(topics),
            np.repeat(np.array([p[0] for p in parts], np.int32), lens),
            np.repeat(np.array([p[1] for p in parts], np.int32), lens),
            *(np.concatenate([p[k] for p in parts]).astype(np.int64) for k in (2, 3, 4, 5)),
        )
        order = np.argsort(out.phys, kind="stable")
        if len({p[0] for p in parts}) < len(topics):
            return out.take(order)
        # every name is used: rows reordered without take's search for used names
        return cls(out.topics, *(c[order] for c in out.columns()))

    def columns(self) -> tuple[np.ndarray, ...]:
        return tuple(getattr(self, c) for c in _COLUMNS)

    def __len__(self) -> int:
        return len(self.phys)

    def take(self, rows) -> UnitColumns:
        """The given rows (indices, a mask or a slice); ``topics`` keeps only the
        names the rows use."""
        cols = [c[rows] for c in self.columns()]
        used, inverse = np.unique(cols[0], return_inverse=True)
        cols[0] = inverse.astype(np.int32).reshape(-1)
        return UnitColumns([self.topics[i] for i in used.tolist()], *cols)

    @classmethod
    def concat(cls, parts: list[UnitColumns]) -> UnitColumns:
        """One table of several (each with its own topic names), in commitlog order."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        names: dict[str, int] = {}
        remapped = []
        for p in parts:
            lut = np.array([names.setdefault(t, len(names)) for t in p.topics], np.int32)
            remapped.append(lut[p.topic])
        cols = [np.concatenate([c.columns()[k] for c in parts]) for k in range(1, len(_COLUMNS))]
        out = cls(list(names), np.concatenate(remapped), *cols)
        return out.take(np.argsort(out.phys, kind="stable"))

    def by_chunk(self, chunks: list[tuple[int, int, int]]) -> list[tuple[int, UnitColumns]]:
        """(chunk number, its rows) for each chunk (number, first commitlog offset,
        end) that some row points into; rows must be in commitlog order."""
        out = []
        for number, start, end in chunks:
            a, b = np.searchsorted(self.phys, [start, end], "left").tolist()
            if b > a:
                out.append((number, self.take(slice(a, b))))
        return out

    def queue_keys(self, topic_index: dict[str, int]) -> np.ndarray:
        """Each row's queue as a verify RecordTable names it (``topic index << 32 |
        queue id``, topic indices from ``topic_index``), -1 for a topic not in it."""
        lut = np.array([topic_index.get(t, -1) for t in self.topics], np.int64)
        t = lut[self.topic] if len(self.topic) else np.zeros(0, np.int64)
        return np.where(t >= 0, (t << 32) | (self.queue_id.astype(np.int64) & 0xFFFFFFFF), -1)

    def queue_of(self, row: int) -> tuple[str, int]:
        return self.topics[int(self.topic[row])], int(self.queue_id[row])


__all__ = ["UnitColumns"]
