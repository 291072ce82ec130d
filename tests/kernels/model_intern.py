"""Reference model of mqstore.kernels._intern.TopicByteIds: a dict of topic bytes to
ids (given in order of first appearance, kept for the life of the object), and per call
the distinct topics numbered in order of first appearance."""

from __future__ import annotations


class ModelTopicByteIds:
    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}
        self.names: list[bytes] = []

    def __len__(self) -> int:
        return len(self.names)

    def name(self, i: int) -> bytes:
        return self.names[i]

    def codes(self, topics: list[bytes]) -> tuple[list[int], list[int]]:
        """(per record: its topic's code in this call, per code: the topic's id)."""
        local: dict[int, int] = {}
        codes, ids = [], []
        for t in topics:
            g = self.ids.get(t)
            if g is None:
                g = self.ids[t] = len(self.names)
                self.names.append(t)
            if g not in local:
                local[g] = len(ids)
                ids.append(g)
            codes.append(local[g])
        return codes, ids
