"""Which consume-queue layout a store has (RocketMQ ``storeType``), and the one
place that opens its consume queues.

Recorded in ``config/mqstore.json`` when the store is made (layout.py), so a store
whose queues were moved aside (repair) or deleted keeps its type. A store made
before that file recorded it is told by what ``consumequeue/`` holds: a RocksDB
always has the file ``CURRENT`` there ("defaultRocksDB",
rocks_queues.py); the default layout has a directory per topic there ("default",
consume_queues.py). An empty or missing ``consumequeue/`` is either: the store
takes the type it is opened with. A config without a type (``store_type=None``,
the default) opens a store with its own type, a new one as "default".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mqstore.errors import StoreTypeError
from mqstore.store.config import STORE_TYPE_DEFAULT, STORE_TYPE_ROCKSDB, STORE_TYPES, StoreConfig

CONSUME_QUEUE_DIR = "consumequeue"
_ROCKS_MARKER = "CURRENT"


def _recorded(store_dir: Path) -> str | None:
    """The type ``config/mqstore.json`` records (layout.py writes it when the store is
    made), None if it records none (a store made before it did) or cannot be read."""
    try:
        value = json.loads((store_dir / "config" / "mqstore.json").read_text()).get("store_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if value in STORE_TYPES else None


def store_type_on_disk(store_dir: str | Path) -> str | None:
    """The store type ``store_dir``'s consume queues were made with: as recorded in
    its layout file, else as ``consumequeue/`` shows; None if neither tells (a store
    without queues, made before the layout file recorded the type)."""
    recorded = _recorded(Path(store_dir))
    if recorded is not None:
        return recorded
    root = Path(store_dir) / CONSUME_QUEUE_DIR
    if (root / _ROCKS_MARKER).is_file():
        return STORE_TYPE_ROCKSDB
    try:
        with os.scandir(root) as entries:
            if any(e.is_dir() for e in entries):
                return STORE_TYPE_DEFAULT
    except (FileNotFoundError, NotADirectoryError):
        pass
    return None


def check_store_type(store_dir: str | Path, wanted: str) -> None:
    """StoreTypeError if the store's consume queues are of another type than ``wanted``."""
    found = store_type_on_disk(store_dir)
    if found is not None and found != wanted:
        raise StoreTypeError(
            f"{store_dir} keeps its consume queues as store type {found!r} "
            f"({'one RocksDB' if found == STORE_TYPE_ROCKSDB else 'a file per queue'} under {CONSUME_QUEUE_DIR}/), "
            f"not {wanted!r}: open it with --store-type {found}"
        )


def open_consume_queues(store_dir: str | Path, config: StoreConfig, *, read_only_above: int | None = None):
    """The store's consume queues, of its type (checked: StoreTypeError): a
    ``ConsumeQueues`` or a ``RocksQueues``, which offer the same interface."""
    if resolve_store_type(store_dir, config.store_type) == STORE_TYPE_ROCKSDB:
        from mqstore.store.rocks_queues import RocksQueues  # rocksdict loaded only by stores that use it

        return RocksQueues(Path(store_dir), read_only_above=read_only_above)
    from mqstore.store.consume_queues import ConsumeQueues

    return ConsumeQueues(
        Path(store_dir),
        file_bytes=config.consume_queue_file_bytes,
        max_open_files=config.max_open_queue_files,
        read_only_above=read_only_above,
    )


def resolve_store_type(store_dir: str | Path, wanted: str | None) -> str:
    """The type to open ``store_dir`` with: ``wanted`` (checked against the store's:
    StoreTypeError), or with None the store's own, "default" for a store without
    queues yet."""
    if wanted is None:
        return store_type_for_reading(store_dir)
    check_store_type(store_dir, wanted)
    return wanted


def store_type_for_reading(store_dir: str | Path) -> str:
    """The type a tool reading the store (verify, queries, reconcile) should use."""
    return store_type_on_disk(store_dir) or STORE_TYPE_DEFAULT


__all__ = [
    "check_store_type",
    "open_consume_queues",
    "resolve_store_type",
    "store_type_for_reading",
    "store_type_on_disk",
]
