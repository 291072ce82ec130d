"""The values that shape a store's files, kept next to them in ``config/mqstore.json``.

Segment size, consume-queue file size and index geometry cannot be changed once
files exist (RocketMQ reads them from its broker config; a wrong value corrupts
reads). mqstore writes them when a store is created and, on every later open, takes
them from this file, so tools can open a store without knowing how it was made.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import structlog

from mqstore.errors import ConfigError
from mqstore.store import faults
from mqstore.store.config import StoreConfig
from mqstore.store.mapped_file import fsync_dir, note_sync_failure
from mqstore.store.store_type import resolve_store_type, store_type_for_reading

log = structlog.get_logger(__name__)

LAYOUT_FILE = Path("config") / "mqstore.json"
SHAPING_FIELDS = ("segment_bytes", "consume_queue_file_bytes", "index_hash_slots", "index_max_entries")


def saved_layout(store_dir: Path) -> dict[str, int] | None:
    """The shaping values recorded in the store (None if it has no layout file);
    ConfigError if the file is unreadable. Reads only."""
    path = store_dir / LAYOUT_FILE
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
        return {k: int(saved[k]) for k in SHAPING_FIELDS}
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path} is unreadable ({e}); restore it or remove it to use the given config") from e


def layout_for_reading(store_dir: Path) -> StoreConfig:
    """The default config with the store's shaping values: recorded ones, else the
    sizes of its files; and its store type. Unlike :func:`resolve_layout` it writes nothing, for tools
    that must not change a store (verify)."""
    values = saved_layout(store_dir)
    if values is None:
        values = _sizes_on_disk(store_dir)
    return dataclasses.replace(StoreConfig(), **values, store_type=store_type_for_reading(store_dir))


def resolve_layout(store_dir: Path, config: StoreConfig) -> StoreConfig:
    """``config`` with its file-shaping values taken from the store if it has them
    (and recorded there if it does not yet), and its store type: the store's own
    if ``config`` names none; one it names that is not the store's raises
    StoreTypeError (store_type.py)."""
    config = dataclasses.replace(config, store_type=resolve_store_type(store_dir, config.store_type))
    path = store_dir / LAYOUT_FILE
    values = saved_layout(store_dir)
    if values is not None:
        changed = {k: v for k, v in values.items() if getattr(config, k) != v}
        if changed:
            log.info("layout_from_store", store=str(store_dir), **changed)
        return dataclasses.replace(config, **values)
    config = dataclasses.replace(config, **_sizes_on_disk(store_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    recorded = {k: getattr(config, k) for k in SHAPING_FIELDS} | {"store_type": config.store_type}
    tmp.write_text(json.dumps(recorded, indent=2) + "\n")
    faults.created(tmp)
    with open(tmp, "rb+") as f:
        try:
            faults.hit("config.write", tmp)
            os.fsync(f.fileno())
        except OSError as e:
            note_sync_failure("config.write", tmp, e)
            raise
    faults.synced(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return config


def _sizes_on_disk(store_dir: Path) -> dict[str, int]:
    """Segment and consume-queue file sizes of a store made without a layout file
    (by RocketMQ, or an older mqstore): every file of a kind has the same size."""
    found = {}
    segments = sorted((store_dir / "commitlog").glob("[0-9]" * 20))
    if segments:
        found["segment_bytes"] = segments[0].stat().st_size
    cq_files = sorted((store_dir / "consumequeue").glob("*/*/" + "[0-9]" * 20))
    if cq_files:
        found["consume_queue_file_bytes"] = cq_files[0].stat().st_size
    return {k: v for k, v in found.items() if v > 0}


__all__ = ["LAYOUT_FILE", "SHAPING_FIELDS", "layout_for_reading", "resolve_layout", "saved_layout"]
