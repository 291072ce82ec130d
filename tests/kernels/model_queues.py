"""Reference model of mqstore.kernels._queues.QueueOffsets: the CommitLog's queue-offset
table as it was, a dict keyed by (topic, queue id), with a batch's offsets assigned by
one dict lookup per record."""

from __future__ import annotations

import numpy as np


class ModelQueueOffsets:
    def __init__(self, items=None) -> None:
        self.table: dict[tuple[str, int], int] = {}
        self.staged: dict[tuple[str, int], int] = {}
        for (topic, qid), nxt in (items or {}).items():
            self.raise_to(topic, qid, nxt)

    def __len__(self) -> int:
        return len(self.table)

    def get(self, topic: str, queue_id: int, default: int = 0) -> int:
        return self.table.get((topic, queue_id), default)

    def raise_to(self, topic: str, queue_id: int, nxt: int) -> None:
        if (topic, queue_id) not in self.table or self.table[(topic, queue_id)] < nxt:
            self.table[(topic, queue_id)] = nxt

    def items(self):
        return list(self.table.items())

    def assign(self, topics, topic_codes, queue_ids, advances, out) -> int:
        staged: dict[tuple[str, int], int] = {}
        for i, qid in enumerate(np.asarray(queue_ids).tolist()):
            if advances is not None and not advances[i]:
                out[i] = 0
                continue
            key = (topics[0 if topic_codes is None else int(topic_codes[i])], qid)
            nxt = staged.get(key, self.table.get(key, 0))
            out[i] = nxt
            staged[key] = nxt + 1
        self.staged = staged
        return len(staged)

    def commit(self) -> None:
        self.table.update(self.staged)
        self.staged = {}
