"""``<store>/config/consumerOffset.json``: committed consume progress per (group,
topic, queue), RocketMQ's ConsumerOffsetManager; and the consumer group name rule.

The file, as this module writes it (json_files.py: pretty-printed, crash-safe, .bak):

    {<other keys kept>, "offsetTable": {"<topic>@<group>": {"<queueId>": <nextOffset>, ...}, ...}}

Queue ids are written as quoted keys, sorted; RocketMQ's fastjson writes them bare,
and both are read. An offset is the next queue offset the group will consume.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mqstore.errors import InvalidMessageError, StoreClosedError
from mqstore.formats.names import check_topic
from mqstore.store.json_files import CONFIG_DIR, check_int, persist_logged, read_config_json, split_extra
from mqstore.store.topic_configs import MAX_QUEUE_NUMS

CONSUMER_OFFSET_FILE = "consumerOffset.json"
TOPIC_GROUP_SEPARATOR = "@"  # RocketMQ ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
GROUP_MAX_CHARS = 120  # 5.x TopicValidator / Validators

_GROUP_RE = re.compile(r"[%|a-zA-Z0-9_-]+")


def check_group(group: str) -> None:
    """Raise InvalidMessageError unless ``group`` is a legal consumer group name:
    characters ``[%|a-zA-Z0-9_-]``, 1 to 120 of them (RocketMQ 5.x)."""
    if not isinstance(group, str) or not group:
        raise InvalidMessageError("consumer group name is empty")
    if len(group) > GROUP_MAX_CHARS:
        raise InvalidMessageError(
            f"consumer group name is {len(group)} characters long; the limit is {GROUP_MAX_CHARS}"
        )
    if not _GROUP_RE.fullmatch(group):
        raise InvalidMessageError(f"consumer group name {group!r} has characters outside [%|a-zA-Z0-9_-]")


def parse_offset_file(obj: Any) -> tuple[dict[str, dict[int, int]], dict[str, Any]]:
    """The decoded file as (``{"<topic>@<group>": {queue id: next offset}}``, other top-level keys)."""
    table = obj["offsetTable"]
    if not isinstance(table, dict):
        raise TypeError("offsetTable is not an object")
    offsets: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        if not isinstance(queues, dict):
            raise TypeError(f"offsetTable[{key!r}] is not an object")
        inner: dict[int, int] = {}
        for qid, off in queues.items():
            if not isinstance(off, int) or isinstance(off, bool):
                raise TypeError(f"offsetTable[{key!r}][{qid!r}] is not an integer")
            inner[int(qid)] = off
        offsets[key] = inner
    return offsets, split_extra(obj, ("offsetTable",))


class ConsumerOffsets:
    """Committed consume progress per (group, topic, queue): RocketMQ's ConsumerOffsetManager
    over ``<store>/config/consumerOffset.json``.

    An offset is the *next* queue offset the group will consume (RocketMQ's meaning).
    :meth:`commit` overwrites: an offset may go back (a consumer reset); nothing here
    enforces monotony.

    At-least-once contract: commits live in memory and reach the disk only on
    :meth:`persist`, which the owner calls periodically (RocketMQ: every 5 s) and on
    :meth:`close`. After a crash the file holds the last persisted offsets, which are
    at or behind what was committed, so consumers may receive again the messages
    after the last persisted offset; they never skip one.

    Entries of the file whose key is not ``<topic>@<group>`` (or whose names we would
    not accept) are kept and written back, never exposed.

    Thread-safe: any thread may call any method; a lock guards the table and
    another serialises writes of the file.
    """

    def __init__(self, store_dir: Path) -> None:
        self.path = Path(store_dir) / CONFIG_DIR / CONSUMER_OFFSET_FILE
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        loaded = read_config_json(self.path, parse=parse_offset_file)
        self._table, self._extra = loaded if loaded is not None else ({}, {})

    @staticmethod
    def _key(group: str, topic: str) -> str:
        check_group(group)
        check_topic(topic)
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` will next consume ``offset`` of ``(topic, queue_id)``."""
        self.commit_many(group, topic, {queue_id: offset})

    def commit_many(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """:meth:`commit` for several queues of one topic at once; all or nothing."""
        key = self._key(group, topic)
        checked = {
            check_int("queue_id", qid, low=0, high=MAX_QUEUE_NUMS - 1): check_int("offset", off, low=0)
            for qid, off in offsets.items()
        }
        with self._lock:
            if self._closed:
                raise StoreClosedError("consumer offsets are closed")
            self._table.setdefault(key, {}).update(checked)

    def fetch(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or -1 if the group never committed one for this queue."""
        key = self._key(group, topic)
        with self._lock:
            return self._table.get(key, {}).get(queue_id, -1)

    def groups(self) -> list[str]:
        """Every group with at least one committed offset, sorted."""
        with self._lock:
            keys = list(self._table)
        return sorted({k.split(TOPIC_GROUP_SEPARATOR, 1)[1] for k in keys if k.count(TOPIC_GROUP_SEPARATOR) == 1})

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next_offset}`` of one group."""
        check_group(group)
        out: dict[tuple[str, int], int] = {}
        with self._lock:
            for key, queues in self._table.items():
                topic, sep, g = key.partition(TOPIC_GROUP_SEPARATOR)
                if sep and g == group:
                    out.update({(topic, qid): off for qid, off in queues.items()})
        return out

    def persist(self) -> bool:
        """Write the table to disk (crash-safe, see :func:`write_config_json`).

        A failing disk (EIO, ENOSPC, EROFS...) is logged, not raised: the file keeps
        its previous content, the table stays in memory, and the next persist writes
        it whole again (at-least-once: a crash now only means redelivery from the
        previous persist). Returns whether the file was written."""
        with self._write_lock:
            with self._lock:
                obj = {
                    **self._extra,
                    "offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in self._table.items()},
                }
            return persist_logged(self.path, obj)

    def close(self) -> None:
        """Persist, then refuse further commits. Closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.persist()

    def __enter__(self) -> ConsumerOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "CONSUMER_OFFSET_FILE",
    "GROUP_MAX_CHARS",
    "TOPIC_GROUP_SEPARATOR",
    "ConsumerOffsets",
    "check_group",
    "parse_offset_file",
]
