"""``<store>/config/derivedOffset.json``: mqstore's own record of how far the derived
files (consume queues and index) are durable. RocketMQ has no such file and
re-dispatches from a whole segment after a crash.

The file (json_files.py: pretty-printed, crash-safe, .bak):

    {"durableReputOffset": <commitlog offset>}
"""

from __future__ import annotations

from pathlib import Path

from mqstore.store.json_files import CONFIG_DIR, read_config_json, write_config_json

DERIVED_OFFSET_FILE = "derivedOffset.json"


def write_durable_offset(store_dir: Path, offset: int) -> None:
    """Record that consume queues and index are durable for every record below
    ``offset`` (mqstore's own file, ``config/derivedOffset.json``; RocketMQ has no such
    record and re-dispatches from a whole segment after a crash)."""
    write_config_json(Path(store_dir) / CONFIG_DIR / DERIVED_OFFSET_FILE, {"durableReputOffset": int(offset)})


def read_durable_offset(store_dir: Path) -> int | None:
    """The offset ``write_durable_offset`` recorded; None if there is none or it is
    unreadable (then recovery falls back to RocketMQ's rule)."""
    obj = read_config_json(Path(store_dir) / CONFIG_DIR / DERIVED_OFFSET_FILE)
    value = obj.get("durableReputOffset") if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


__all__ = ["DERIVED_OFFSET_FILE", "read_durable_offset", "write_durable_offset"]
