"""A RocketMQ 5 (pop) consumer group's progress per queue, from the shard's pop
state (``<shard>/pop/``, store/pop.py): what ``mqstore consumer-progress`` shows for
groups that receive and ack (SimpleConsumer, PushConsumer) instead of committing
offsets. Plain Python, read-only.

    column           meaning for a pop group
    consumer_offset  the pop cursor: the next queue offset never handed out (every
                     offset below it is acked, in flight, or filtered out)
    in_flight        messages handed out (or held) and not acked yet, all below it
    lag              broker_offset - consumer_offset: messages not handed out yet
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mqstore.store.pop import PopKeyStatus, read_keys


@dataclass(frozen=True)
class PopProgress:
    """One queue of a pop group (see the module docstring)."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    in_flight: int


def pop_progress(
    keys: Iterable[PopKeyStatus], group: str, max_offset_of: Callable[[str, int], int]
) -> list[PopProgress]:
    """``group``'s rows among ``keys`` (PopState.groups or pop.read_keys), by topic and
    queue; ``max_offset_of(topic, queue_id)``: the queue's max offset (0: none)."""
    rows = []
    for k in keys:
        if k.group != group:
            continue
        broker = max_offset_of(k.topic, k.queue_id)
        cursor = k.cursor if k.cursor is not None else 0
        rows.append(PopProgress(k.topic, k.queue_id, broker, cursor, max(0, broker - cursor), k.in_flight))
    return sorted(rows, key=lambda r: (r.topic, r.queue_id))


def read_pop_progress(
    store_dir: str | os.PathLike[str], group: str, max_offset_of: Callable[[str, int], int]
) -> list[PopProgress]:
    """``pop_progress`` of the pop state under ``store_dir``, read as its files are
    (no lock, nothing written: next to a running shard)."""
    return pop_progress(read_keys(store_dir), group, max_offset_of)


__all__ = ["PopProgress", "pop_progress", "read_pop_progress"]
