"""Packed columns between services: a numeric column travels as one protobuf bytes
field holding its values as little-endian integers, so neither side makes a Python
object per value (a ``repeated int64`` of 27,000 values costs two list conversions).

>>> unpack(pack([1, -2], INT32), INT32, "sizes").tolist()
[1, -2]
"""

from __future__ import annotations

import numpy as np

from mqstore.services.common.errors import BadRequest

INT32 = np.dtype("<i4")
INT64 = np.dtype("<i8")


def pack(values, dtype: np.dtype) -> bytes:
    """``values`` (an array or a sequence of integers) as little-endian ``dtype`` bytes."""
    return np.ascontiguousarray(values, dtype).tobytes()


def unpack(data: bytes, dtype: np.dtype, name: str) -> np.ndarray:
    """A packed column as int64 values; BadRequest if its length is not a whole
    number of values."""
    if len(data) % dtype.itemsize:
        raise BadRequest(f"{name} holds {len(data)} bytes, not a whole number of {dtype.itemsize}-byte values")
    return np.frombuffer(data, dtype).astype(np.int64)


__all__ = ["INT32", "INT64", "pack", "unpack"]
