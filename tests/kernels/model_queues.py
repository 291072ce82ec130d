"""Reference model of mqstore.kernels._queues.QueueOffsets: the CommitLog's queue-offset
table as it was, a dict keyed by (topic, queue id), with a batch's offsets assigned by
one dict lookup per record; and the automatic queue picks as the CommitLog made them,
a round-robin counter per topic name. Topic ids are read through ``ids`` (a TopicIds)."""

from __future__ import annotations

import numpy as np

AUTO_QUEUE = -1


class ModelQueueOffsets:
    def __init__(self, items=None, ids=None) -> None:
        self.ids = ids
        self.table: dict[tuple[str, int], int] = {}
        self.staged: dict[tuple[str, int], int] = {}
        self.round_robin: dict[str, int] = {}
        self.queue_nums: dict[str, int] = {}
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

    def _topic(self, tids, tid, i: int) -> str:
        return self.ids.names[tid if tids is None else int(tids[i])]

    def set_queue_nums(self, tid: int, nums: int) -> None:
        self.queue_nums[self.ids.names[tid]] = nums

    def pick(self, tids, tid, queue_ids, default_nums: int):
        qids = np.asarray(queue_ids, np.int64)
        if not (qids == AUTO_QUEUE).any():
            return None
        out = qids.copy()
        for i in np.flatnonzero(qids == AUTO_QUEUE).tolist():
            topic = self._topic(tids, tid, i)
            nums = self.queue_nums.get(topic) or default_nums
            start = self.round_robin.get(topic, 0)
            out[i] = start % nums
            self.round_robin[topic] = start + 1
        return out

    def assign(self, tids, tid, queue_ids, advances, out) -> int:
        staged: dict[tuple[str, int], int] = {}
        for i, qid in enumerate(np.asarray(queue_ids).tolist()):
            if advances is not None and not advances[i]:
                out[i] = 0
                continue
            key = (self._topic(tids, tid, i), qid)
            nxt = staged.get(key, self.table.get(key, 0))
            out[i] = nxt
            staged[key] = nxt + 1
        self.staged = staged
        return len(staged)

    def commit(self) -> None:
        self.table.update(self.staged)
        self.staged = {}
