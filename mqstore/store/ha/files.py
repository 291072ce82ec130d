"""A replica's small files under ``<store>/``: ``epochFileCheckpoint`` (+ ``.bak``)
and ``brokerIdentity`` (formats in mqstore.formats.epoch_file), written crash-safe.

RocketMQ writes both through MixAll.string2File: the old content copied to ``.bak``,
then the file rewritten in place, neither fsynced. Here a write is (json_files.py's
order, as config files are written):

    step  action                                          what a reader finds after a crash here
    1     write ``<file>.tmp``, fsync it                   ``<file>`` = old
    2     rename ``<file>`` -> ``<file>.bak``, fsync dir   ``<file>`` missing, ``.bak`` = old
    3     rename ``<file>.tmp`` -> ``<file>``, fsync dir   ``<file>`` = new

Step 2 only when ``<file>`` itself decodes, so a damaged file never replaces a good
``.bak``. A read takes ``<file>``, else (missing, empty, undecodable) ``.bak``, as
CheckpointFile.read does. When ``write_*`` returns, the new content is durable.
Fault points (faults.py): ``ha.file.write`` before the fsync of the ``.tmp``,
``ha.file.tmp`` after it, ``ha.file.bak`` after step 2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import structlog

from mqstore.errors import DecodeError
from mqstore.formats.epoch_file import (
    BROKER_IDENTITY_FILE,
    EPOCH_FILE,
    BrokerIdentity,
    EpochEntry,
    decode_epoch_file,
    encode_epoch_file,
)
from mqstore.store.json_files import replace_with_bak

log = structlog.get_logger(__name__)
T = TypeVar("T")
BAK_SUFFIX = ".bak"


def _decodes(path: Path, decode: Callable[[bytes], object]) -> bool:
    try:
        decode(path.read_bytes())
    except (OSError, DecodeError):
        return False
    return True


def write_with_bak(path: Path, data: bytes, decode: Callable[[bytes], object]) -> None:
    """Replace ``path`` with ``data`` by the steps of the module docstring; OSError
    if the disk fails (the old content then stays readable)."""
    replace_with_bak(path, data, lambda p: _decodes(p, decode), points=("ha.file.write", "ha.file.tmp", "ha.file.bak"))


def read_with_bak(path: Path, decode: Callable[[bytes], T]) -> tuple[T | None, str]:
    """(value, source): from ``path`` ("file"), else from its ``.bak`` ("bak"), else
    (None, "none"). A file that is empty or decodes to an empty value sends the read
    to the ``.bak`` too, as CheckpointFile.read does with an empty result (the empty
    value is returned if the ``.bak`` has nothing better)."""
    found: tuple[T | None, str] = (None, "none")
    for source, p in (("file", path), ("bak", path.with_name(path.name + BAK_SUFFIX))):
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            continue
        if not raw.strip():
            continue
        try:
            value = decode(raw)
        except DecodeError as e:
            log.warning("ha_file_unusable", path=str(p), error=str(e))
            continue
        if value or isinstance(value, BrokerIdentity):
            if source == "bak":
                log.warning("ha_file_read_from_bak", path=str(path))
            return value, source
        if found[1] == "none":
            found = (value, source)
    return found


def epoch_file_path(store_dir: Path) -> Path:
    return Path(store_dir) / EPOCH_FILE


def has_epoch_file(store_dir: Path) -> bool:
    """Whether the store keeps epochs (it belongs to a replica set): the file or its .bak."""
    p = epoch_file_path(store_dir)
    return p.exists() or p.with_name(p.name + BAK_SUFFIX).exists()


def read_epoch_entries(store_dir: Path) -> list[EpochEntry]:
    """The stored epochs (end offsets from the next start; the last open); [] if none."""
    value, _ = read_with_bak(epoch_file_path(store_dir), decode_epoch_file)
    return value or []


def write_epoch_entries(store_dir: Path, entries: list[EpochEntry]) -> None:
    """Persist ``entries``; durable on return. An empty list is written too, and then
    into the ``.bak`` as well: RocketMQ's CheckpointFile skips writing it (the old
    entries stay) and reads an empty file's ``.bak``, either of which would bring
    back epochs a truncation removed."""
    path = epoch_file_path(store_dir)
    write_with_bak(path, encode_epoch_file(entries), decode_epoch_file)
    if not entries:
        write_with_bak(path, encode_epoch_file(entries), decode_epoch_file)  # .bak := empty too


def read_broker_identity(store_dir: Path, name: str = BROKER_IDENTITY_FILE) -> BrokerIdentity | None:
    temp = name != BROKER_IDENTITY_FILE
    value, _ = read_with_bak(Path(store_dir) / name, lambda raw: BrokerIdentity.decode(raw, temp=temp))
    return value


def write_broker_identity(store_dir: Path, identity: BrokerIdentity, name: str = BROKER_IDENTITY_FILE) -> None:
    temp = name != BROKER_IDENTITY_FILE
    write_with_bak(Path(store_dir) / name, identity.encode(), lambda raw: BrokerIdentity.decode(raw, temp=temp))


__all__ = [
    "has_epoch_file",
    "read_broker_identity",
    "read_epoch_entries",
    "read_with_bak",
    "write_broker_identity",
    "write_epoch_entries",
    "write_with_bak",
]
