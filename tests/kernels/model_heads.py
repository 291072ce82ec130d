"""Plain-Python model of ``_scan.check_heads``: the head fields of client-encoded
records the store checks before it takes them (encoded_batch.py)."""

from __future__ import annotations

import struct

OK, STORE_HOST, PORT, BODY, SIZE, BORN = 0, 1, 2, 3, 4, 5


def model_check_heads(  # noqa: PLR0913
    buf: bytes, positions, sizes, sysflags, store_v6: bool, max_body: int, max_size: int, min_born: int, max_born: int
):
    for i, (at, size, flag) in enumerate(zip(positions, sizes, sysflags)):
        born = 20 if flag & 0x10 else 8
        store = 20 if flag & 0x20 else 8
        if (store == 20) != store_v6:
            return i, STORE_HOST, 0
        (port,) = struct.unpack_from(">i", buf, at + 48 + born - 4)
        if not 0 <= port <= 65535:
            return i, PORT, port
        (born_ms,) = struct.unpack_from(">q", buf, at + 40)
        if not min_born <= born_ms <= max_born:
            return i, BORN, born_ms
        (body,) = struct.unpack_from(">i", buf, at + 68 + born + store)
        if body > max_body:
            return i, BODY, body
        if size > max_size:
            return i, SIZE, size
    return -1, OK, 0
