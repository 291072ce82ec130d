"""``epochFileCheckpoint``: a replica's epochs (RocketMQ EpochFileCache through
common/.../utils/CheckpointFile.java), and ``brokerIdentity`` (ha/autoswitch/BrokerMetadata.java).

epochFileCheckpoint is UTF-8 text, every line ended by ``\\n`` (Java's
System.lineSeparator() on Linux)::

    line   content            meaning
    1      <count>            number of entries (decimal)
    2      <crc>              UtilAll.crc32 of the entry lines' bytes, each with its
                              ``\\n`` (zlib CRC32 masked to 31 bits: & 0x7FFFFFFF)
    3..    <epoch>-<start>    one entry per line: epoch (int32) and the commitlog
                              offset its first record starts at (int64), ascending

Example (CheckpointFile's own)::

    2
    773307083
    7-7000
    8-8000

Quirks kept: a crc of 0 is not checked (NOT_CHECK_CRC_MAGIC_CODE); lines that are not
``a-b`` are skipped (but still count toward the CRC); the count must equal the
entries parsed; reading splits lines the way Java's BufferedReader.readLine does
(``\\n``, ``\\r\\n`` or ``\\r``) and re-joins them with ``\\n`` for the CRC. An entry's
end offset is not stored: it is the next entry's start (the last one's is open).

brokerIdentity is one line without a newline, ``<cluster>#<brokerName>#<brokerId>``
(BrokerMetadata.encodeToStr); ``brokerIdentity-temp`` adds ``#<registerCheckCode>``
(TempBrokerMetadata), written while a broker registers with the controller.
"""

from __future__ import annotations

import re
import zlib
from typing import NamedTuple

from mqstore.errors import DecodeError

EPOCH_FILE = "epochFileCheckpoint"
BROKER_IDENTITY_FILE = "brokerIdentity"
BROKER_IDENTITY_TEMP_FILE = "brokerIdentity-temp"
NO_END = (1 << 63) - 1  # Long.MAX_VALUE: EpochEntry's end offset while it is the last
_NOT_CHECKED_CRC = 0
_LINES = re.compile(r"\r\n|\r|\n")
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")  # what Integer/Long.parseLong take (Python's int() takes more)


class EpochEntry(NamedTuple):
    """One epoch: its records are the commitlog bytes [start_offset, end_offset)."""

    epoch: int
    start_offset: int
    end_offset: int = NO_END


def java_crc32(data: bytes) -> int:
    """RocketMQ UtilAll.crc32: CRC32 of the bytes, masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF


def _entry_lines(entries: list[EpochEntry]) -> bytes:
    return "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode()


def encode_epoch_file(entries: list[EpochEntry]) -> bytes:
    """The file's bytes for ``entries`` (CheckpointFile.write; it writes nothing for
    an empty list, and so do callers: an empty cache leaves the old file)."""
    body = _entry_lines(entries)
    return f"{len(entries)}\n{java_crc32(body)}\n".encode() + body


def _parse_entry(line: str) -> EpochEntry | None:
    """EpochEntrySerializer.fromLine: ``a-b`` or nothing (Java's split drops trailing empties)."""
    parts = line.split("-")
    while parts and parts[-1] == "":
        parts.pop()
    if len(parts) != 2:
        return None
    if not all(_JAVA_LONG.fullmatch(p) for p in parts):
        raise DecodeError(f"epoch entry {line!r}: not two decimal numbers")
    epoch, start = int(parts[0]), int(parts[1])
    if not -(1 << 31) <= epoch < 1 << 31 or not -(1 << 63) <= start < 1 << 63:
        raise DecodeError(f"epoch entry {line!r} out of range")
    return EpochEntry(epoch, start)


def decode_epoch_file(raw: bytes) -> list[EpochEntry]:
    """The entries (end offsets set from the next start), or DecodeError if the
    file is torn, its count or CRC disagrees, or its epochs do not ascend."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"epoch file is not UTF-8: {e}") from e
    lines = _LINES.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if len(lines) < 2:
        raise DecodeError(f"epoch file holds {len(lines)} lines, needs the count and the CRC")
    if not (_JAVA_LONG.fullmatch(lines[0]) and _JAVA_LONG.fullmatch(lines[1])):
        raise DecodeError(f"epoch file head {lines[:2]!r}: not two decimal numbers")
    count, crc = int(lines[0]), int(lines[1])
    entries = [e for e in map(_parse_entry, lines[2:]) if e is not None]
    if len(entries) != count:
        raise DecodeError(f"epoch file says {count} entries, holds {len(entries)}")
    truth = java_crc32("".join(line + "\n" for line in lines[2:]).encode())
    if crc != _NOT_CHECKED_CRC and crc != truth:
        raise DecodeError(f"epoch file CRC {crc} does not match its entries ({truth})")
    for a, b in zip(entries, entries[1:]):
        if b.epoch <= a.epoch:
            raise DecodeError(f"epoch file entries out of order: {a.epoch} then {b.epoch}")
    return with_end_offsets(entries)


def with_end_offsets(entries: list[EpochEntry], last_end: int = NO_END) -> list[EpochEntry]:
    """Entries with each end offset set to the next entry's start (initEntries), the
    last one's to ``last_end`` (setLastEpochEntryEndOffset; open by default)."""
    out = [e._replace(end_offset=n.start_offset) for e, n in zip(entries, entries[1:])]
    if entries:
        out.append(entries[-1]._replace(end_offset=last_end))
    return out


class BrokerIdentity(NamedTuple):
    """brokerIdentity: which broker (replica) of which group a store directory
    belongs to. ``register_check_code`` only in brokerIdentity-temp."""

    cluster: str
    broker_name: str
    broker_id: int
    register_check_code: str | None = None

    def encode(self) -> bytes:
        parts = [self.cluster, self.broker_name, str(self.broker_id)]
        if self.register_check_code is not None:
            parts.append(self.register_check_code)
        if any("#" in p or not p for p in parts):
            raise ValueError(f"brokerIdentity fields must be non-empty and hold no '#': {parts!r}")
        return "#".join(parts).encode()

    @classmethod
    def decode(cls, raw: bytes, *, temp: bool = False) -> BrokerIdentity:
        """BrokerMetadata.decodeFromStr (``temp``: TempBrokerMetadata's four fields)."""
        try:
            parts = raw.decode("utf-8").split("#")
            while parts and parts[-1] == "":
                parts.pop()
            want = 4 if temp else 3
            if len(parts) < want or not all(parts[:want]):
                raise ValueError(f"{len(parts)} fields, needs {want}")
            return cls(parts[0], parts[1], int(parts[2]), parts[3] if temp else None)
        except ValueError as e:
            raise DecodeError(f"brokerIdentity {raw[:200]!r}: {e}") from e


__all__ = [
    "BROKER_IDENTITY_FILE",
    "BROKER_IDENTITY_TEMP_FILE",
    "EPOCH_FILE",
    "NO_END",
    "BrokerIdentity",
    "EpochEntry",
    "decode_epoch_file",
    "encode_epoch_file",
    "java_crc32",
    "with_end_offsets",
]
