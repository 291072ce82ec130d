"""Byte strings packed end to end in one buffer, with their boundaries.

Item ``i`` is ``data[offsets[i]:offsets[i + 1]]``: ``offsets`` holds ``n + 1``
int64 values, none decreasing. Batches of many small byte strings travel this way
(a batch's bodies going in, a pull's raw records coming out) so that no bytes object
per item is made on the hot path. As a sequence (``len``, indexing, iteration) it
gives each item as bytes, so code written for a list of bytes takes it too.

>>> p = RawRecords.of([b"ab", b"", b"cde"])
>>> len(p), p[2], list(p[1:]), p.lengths.tolist()
(3, b'cde', [b'', b'cde'], [2, 0, 3])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from mqstore.kernels import _decode


@dataclass(frozen=True, eq=False)
class Packed(Sequence[bytes]):
    """The shared sequence behaviour; subclasses say what the items are and check
    what callers hand them (``offsets`` is taken as given here)."""

    data: object
    offsets: np.ndarray
    buffer: memoryview = field(init=False, repr=False, compare=False)  # ``data`` as one dimension of bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "buffer", memoryview(self.data))

    @classmethod
    def of(cls, items: Iterable[bytes]):
        """The items (bytes-like objects) joined into one buffer."""
        parts = [b if isinstance(b, bytes) else memoryview(b).cast("B") for b in items]
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=offsets[1:])
        return cls(b"".join(parts), offsets)

    @property
    def lengths(self) -> np.ndarray:
        """Each item's length in bytes."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        """The bytes the items hold together."""
        return int(self.offsets[-1] - self.offsets[0])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            lo, hi, step = index.indices(len(self))
            if step == 1:
                return type(self)(self.data, self.offsets[lo : max(lo, hi) + 1])
            return [self[i] for i in range(lo, hi, step)]
        i = range(len(self))[index]  # IndexError, negative indexes
        return self._item(self.buffer[self.offsets[i] : self.offsets[i + 1]].tobytes())

    def __iter__(self) -> Iterator[bytes]:
        view, offs, item = self.buffer, self.offsets.tolist(), self._item
        for lo, hi in zip(offs, offs[1:]):
            yield item(view[lo:hi].tobytes())

    def _item(self, raw: bytes):
        """An item as the sequence gives it (a subclass may decode it)."""
        return raw

    def __eq__(self, other) -> bool:
        """Equal to any sequence of the same byte strings in order."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # mutable data may sit behind it

    def __reduce__(self):
        data = self.data.tobytes() if isinstance(self.data, memoryview) else self.data
        return (type(self), (data, self.offsets))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} items, {self.nbytes} bytes)"


class RawRecords(Packed):
    """Records as stored in the commitlog (what a pull hands a consumer, RocketMQ's
    way), one after another in ``data``; made by the store, so not checked."""

    @classmethod
    def gather(cls, src, starts: np.ndarray, sizes: np.ndarray) -> RawRecords:
        """The pieces ``src[starts[i] : starts[i] + sizes[i]]`` (each cut at the end of
        ``src``) copied into one buffer by one compiled pass (``_decode.gather``)."""
        offsets = np.empty(len(starts) + 1, np.int64)
        data = _decode.gather(
            src, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(sizes, np.int64), offsets
        )
        return cls(data, offsets)

    def heads(self) -> tuple[np.ndarray, np.ndarray]:
        """``(total sizes, magics)`` as the records' first 8 bytes say (big-endian
        int32 each; a record shorter than 8 bytes reads as if zero-padded)."""
        at = self.offsets[:-1, None] + np.arange(8)
        inside = at < self.offsets[1:, None]
        padded = np.frombuffer(self.buffer, np.uint8)[np.where(inside, at, 0)] if len(self.buffer) else 0
        heads = np.where(inside, padded, 0).astype(np.uint8).view(">i4")
        return heads[:, 0], heads[:, 1]

    def to_wire(self) -> tuple[bytes, bytes]:
        """``(data, sizes)`` as the gRPC answers carry them: the records' bytes one
        after another, and each one's size as little-endian int32."""
        lo, hi = int(self.offsets[0]), int(self.offsets[-1])
        data = (
            self.data
            if isinstance(self.data, bytes) and lo == 0 and hi == len(self.data)
            else self.buffer[lo:hi].tobytes()
        )
        return data, self.lengths.astype("<i4").tobytes()

    @classmethod
    def from_wire(cls, data: bytes, sizes: bytes) -> RawRecords:
        """The records of a ``to_wire`` pair; ValueError if the sizes do not cut
        ``data`` exactly (a size negative, or their sum not its length)."""
        if len(sizes) % 4:
            raise ValueError(f"record sizes take 4 bytes each, got {len(sizes)} bytes")
        lengths = np.frombuffer(sizes, "<i4")
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if (len(lengths) and int(lengths.min()) < 0) or int(offsets[-1]) != len(data):
            raise ValueError(f"record sizes add up to {int(offsets[-1])} bytes, the records hold {len(data)}")
        return cls(data, offsets)

    @classmethod
    def concat(cls, parts: Sequence[RawRecords]) -> RawRecords:
        """The records of every part, in order, in one buffer (one part: itself)."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls(b"", np.zeros(1, np.int64))
        data = b"".join(p.buffer[p.offsets[0] : p.offsets[-1]] for p in parts)
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for p in parts:
            offsets.append(p.offsets[1:] - p.offsets[0] + base)
            base += p.nbytes
        return cls(data, np.concatenate(offsets))


__all__ = ["Packed", "RawRecords"]
