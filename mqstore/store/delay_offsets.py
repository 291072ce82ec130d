"""``<store>/config/delayOffset.json``: how far the delay-level delivery went per level
(RocketMQ ScheduleMessageService); and the messageDelayLevel setting it runs by.

The file, as this module writes it (json_files.py: pretty-printed, crash-safe, .bak):

    {<other keys kept>, "offsetTable": {"<level>": <queue offset>, ...}}

Levels are quoted keys, sorted (fastjson's bare ones are read too). Among the other
keys is mqstore's ``commitlogOffset`` (RocketMQ readers ignore it).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from mqstore.store.json_files import CONFIG_DIR, check_int, persist_logged, read_config_json, split_extra

DELAY_OFFSET_FILE = "delayOffset.json"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def parse_delay_file(obj: Any) -> tuple[dict[int, int], dict[str, Any]]:
    """The decoded file as (``{level: offset}``, other top-level keys)."""
    table = obj["offsetTable"]
    if not isinstance(table, dict):
        raise TypeError("offsetTable is not an object")
    out: dict[int, int] = {}
    for level, off in table.items():
        if not isinstance(off, int) or isinstance(off, bool):
            raise TypeError(f"offsetTable[{level!r}] is not an integer")
        out[int(level)] = off
    return out, split_extra(obj, ("offsetTable",))


class DelayOffsets:
    """Progress of the delay-level delivery per level: the queue offset of
    ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` up to which messages were delivered
    (RocketMQ ScheduleMessageService over ``<store>/config/delayOffset.json``).

    Like consumer offsets, :meth:`set` stays in memory until :meth:`persist`; after a
    crash delivery restarts from the last persisted offset (redelivery, never loss).

    Thread-safe: any thread may call any method.
    """

    def __init__(self, store_dir: Path) -> None:
        self.path = Path(store_dir) / CONFIG_DIR / DELAY_OFFSET_FILE
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        loaded = read_config_json(self.path, parse=parse_delay_file)
        self._table, self._extra = loaded if loaded is not None else ({}, {})

    def get(self, level: int) -> int:
        """The stored offset of ``level``; 0 if none was set."""
        check_int("delay level", level, low=1)
        with self._lock:
            return self._table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        check_int("delay level", level, low=1)
        check_int("offset", offset, low=0)
        with self._lock:
            self._table[level] = offset

    def all(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)

    @property
    def commitlog_offset(self) -> int:
        """The commitlog write position when the offsets were last set (an mqstore
        field; RocketMQ readers ignore it): deliveries made after the last persist lie
        past it, so a restart can find them instead of repeating them."""
        with self._lock:
            return int(self._extra.get("commitlogOffset", 0))

    def set_commitlog_offset(self, offset: int) -> None:
        with self._lock:
            self._extra["commitlogOffset"] = int(offset)

    def persist(self) -> bool:
        """Write the table; like ConsumerOffsets.persist, a failing disk is logged and
        False returned (deliveries since the previous persist may then repeat)."""
        with self._write_lock:
            with self._lock:
                obj = {**self._extra, "offsetTable": {str(k): v for k, v in sorted(self._table.items())}}
            return persist_logged(self.path, obj)

    def close(self) -> None:
        self.persist()


# ---------------------------------------------------------------------------
# messageDelayLevel

_DELAY_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_TOKEN_RE = re.compile(r"([0-9]+)([smhd])")


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> list[int]:
    """Milliseconds of each delay level; item ``i`` is level ``i + 1``.

    RocketMQ's messageDelayLevel: blank-separated ``<n><unit>``, units s, m, h, d
    (lowercase only, as in RocketMQ's unit table). A level must be > 0.

    >>> parse_delay_levels("1s 2m 1h 1d")
    [1000, 120000, 3600000, 86400000]
    """
    if not isinstance(spec, str):
        raise ValueError(f"delay levels must be a string, got {spec!r}")
    tokens = spec.split()
    if not tokens:
        raise ValueError("delay levels are empty; expected e.g. '1s 5s 10s 1m'")
    levels = []
    for i, token in enumerate(tokens, start=1):
        m = _DELAY_TOKEN_RE.fullmatch(token)
        if m is None:
            raise ValueError(f"delay level {i} is {token!r}; expected <digits><unit> with unit s, m, h or d")
        ms = int(m[1]) * _DELAY_UNIT_MS[m[2]]
        if ms <= 0:
            raise ValueError(f"delay level {i} is {token!r}; a delay must be > 0")
        levels.append(ms)
    return levels


__all__ = ["DEFAULT_DELAY_LEVELS", "DELAY_OFFSET_FILE", "DelayOffsets", "parse_delay_file", "parse_delay_levels"]
