"""Reference model of mqstore.kernels._topics.TopicIds: a dict of names to ids, and per
id a flags byte and a field, with ``lookup`` one dict lookup per name."""

from __future__ import annotations


class ModelTopicIds:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        self.fields: list[bytes | None] = []
        self.flags: list[int] = []

    def __len__(self) -> int:
        return len(self.names)

    def add(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
            self.fields.append(None)
            self.flags.append(0)
        return self.index[name]

    def get(self, name) -> int:
        return self.index.get(name, -1)

    def flags_of(self, tid: int) -> int:
        return self.flags[tid]

    def set_flags(self, tid: int, bits: int) -> None:
        self.flags[tid] |= bits

    def clear_flags(self, tid: int, bits: int) -> None:
        self.flags[tid] &= ~bits & 0xFF

    def set_field(self, tid: int, field: bytes) -> None:
        if self.fields[tid] is None:  # set once, never replaced (a batch may be encoding from it)
            self.fields[tid] = field

    def find(self, name, need: int) -> int:
        tid = self.get(name)
        return tid if tid >= 0 and self.flags[tid] & need == need else -1

    def lookup(self, values: list, out, need: int, common=None) -> int:
        every = 0xFF
        for i, v in enumerate(values):
            out[i] = self.find(v, need)
            tid = self.get(v)
            every &= self.flags[tid] if tid >= 0 else 0
        if common is not None:
            common[0] = every
        return sum(1 for i in range(len(values)) if out[i] < 0)
