"""Hosts, offset message ids and client unique keys (UNIQ_KEY).

A host on disk is its address bytes (4 for IPv4, 16 for IPv6) followed by the port as
a big-endian signed int32 (RocketMQ MessageExt.socketAddress2ByteBuffer).

Offset msgId (MessageDecoder.createMessageId), rendered as upper-case hex:

    store host address (4|16) + store port int32 + physical offset int64
    -> 32 hex characters for IPv4, 56 for IPv6; a parser picks IPv4 iff length is 32.

UNIQ_KEY (MessageClientIDSetter), also upper-case hex:

    client address (4|16) + pid int16 + class-loader hash int32
    + (ms since the start of the current month) int32 + counter int16

The broker treats UNIQ_KEY as an opaque string; mqstore generates one for messages
that arrive without it. Month boundaries are taken in UTC.
"""

from __future__ import annotations

import datetime as _dt
import functools
import ipaddress
import os
import random
import struct
import threading
from typing import NamedTuple

from mqstore.errors import DecodeError

_PORT_OFFSET = struct.Struct(">iq")


class Host(NamedTuple):
    """An IPv4 or IPv6 address and a port, as records store them."""

    address: str
    port: int

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.address

    def __str__(self) -> str:
        return f"[{self.address}]:{self.port}" if self.is_ipv6 else f"{self.address}:{self.port}"


@functools.lru_cache(maxsize=4096)
def encode_host(host: Host) -> bytes:
    """Address bytes + int32 port (8 bytes for IPv4, 20 for IPv6)."""
    try:
        packed = ipaddress.ip_address(host.address).packed
    except ValueError as e:
        raise ValueError(f"not an IP address: {host.address!r}") from e
    if not -(1 << 31) <= host.port < (1 << 31):
        raise ValueError(f"port {host.port} does not fit a signed 32-bit int")
    return packed + host.port.to_bytes(4, "big", signed=True)


def decode_host(raw: bytes | memoryview) -> Host:
    """Inverse of :func:`encode_host`; the length (8 or 20) tells the family."""
    if len(raw) not in (8, 20):
        raise DecodeError(f"a host is 8 or 20 bytes, got {len(raw)}")
    address = str(ipaddress.ip_address(bytes(raw[:-4])))
    return Host(address, int.from_bytes(raw[-4:], "big", signed=True))


def offset_msg_id_prefix(store_host: Host) -> str:
    """The constant hex head of every offset msgId of one store host."""
    return encode_host(store_host).hex().upper()


def build_offset_msg_id(store_host: Host, physical_offset: int) -> str:
    """Offset msgId of the record at ``physical_offset`` written by ``store_host``.

    >>> build_offset_msg_id(Host("10.0.0.5", 10911), 1234)
    '0A00000500002A9F00000000000004D2'
    """
    return f"{offset_msg_id_prefix(store_host)}{physical_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def parse_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """``(store host, physical offset)`` of an offset msgId; DecodeError if malformed."""
    if len(msg_id) not in (32, 56):
        raise DecodeError(f"an offset msgId has 32 or 56 hex characters, got {len(msg_id)}: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as e:
        raise DecodeError(f"offset msgId is not hex: {msg_id!r}") from e
    host = decode_host(raw[:-8])
    offset = struct.unpack(">q", raw[-8:])[0]
    return host, offset


def _month_start_ms(now_ms: int) -> int:
    t = _dt.datetime.fromtimestamp(now_ms / 1000, _dt.timezone.utc)
    return int(t.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


_HEX4 = [f"{i:04X}" for i in range(1 << 16)]


class UniqKeyGenerator:
    """Makes UNIQ_KEY strings in RocketMQ's layout. Thread-safe: concurrent appends
    (prepared outside the store's put lock) never get the same keys.

    >>> g = UniqKeyGenerator(Host("127.0.0.1", 0), pid=1, loader_hash=2)
    >>> g.batch(2, now_ms=1700000000000)
    ['7F00000100010000000247B760000000', '7F00000100010000000247B760000001']
    """

    def __init__(self, client: Host, *, pid: int | None = None, loader_hash: int | None = None) -> None:
        pid = os.getpid() if pid is None else pid
        loader_hash = random.getrandbits(32) if loader_hash is None else loader_hash
        head = (
            encode_host(client)[:-4] + (pid & 0xFFFF).to_bytes(2, "big") + (loader_hash & 0xFFFFFFFF).to_bytes(4, "big")
        )
        self._prefix = head.hex().upper()
        self._counter = 0
        self._month_start = 0
        self._month_end = -1
        self._lock = threading.Lock()

    def batch(self, n: int, *, now_ms: int) -> list[str]:
        """``n`` fresh keys for messages sent at ``now_ms``."""
        head, tails = self.reserve(n, now_ms=now_ms)
        return [head + t for t in tails]

    def reserve(self, n: int, *, now_ms: int) -> tuple[str, list[str]]:
        """``n`` fresh keys as one shared head and ``n`` 4-digit tails, for callers
        that splice the parts into bigger strings without building each key."""
        head, _, tails = self.reserve_counted(n, now_ms=now_ms)
        return head, tails

    def reserve_counted(self, n: int, *, now_ms: int) -> tuple[str, int, list[str]]:
        """:meth:`reserve` and the counter value of the first tail (tail ``i`` is the
        4 hex digits of ``(first + i) % 65536``), for the compiled encoder."""
        with self._lock:
            if not self._month_start <= now_ms < self._month_end:
                self._month_start = _month_start_ms(now_ms)
                self._month_end = self._month_start + 28 * 86_400_000  # re-check at least monthly
            head = f"{self._prefix}{(now_ms - self._month_start) & 0xFFFFFFFF:08X}"
            first = start = self._counter & 0xFFFF
            self._counter += n
            tails: list[str] = []
            while len(tails) < n:  # the 16-bit counter wraps
                take = min(n - len(tails), 0x10000 - start)
                tails += _HEX4[start : start + take]
                start = 0
            return head, first, tails


__all__ = [
    "Host",
    "UniqKeyGenerator",
    "build_offset_msg_id",
    "decode_host",
    "encode_host",
    "offset_msg_id_prefix",
    "parse_offset_msg_id",
]
