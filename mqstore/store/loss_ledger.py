"""What retention took from consumer groups before they read it, kept for status.

Retention reports each deletion's losses once (retention.consumer_losses: a log line
per group); a pop group finds its gap when it next receives (its cursor was below
the queue's new min offset). An operator asks later (``mqstore status``), so the
consume-queue builder keeps them here, merged per (group, topic, queue): the lowest
and highest queue offsets lost, how many messages, whether any had not expired
(forced), and when the last went. At most ``max_keys`` keys: past that the key
updated longest ago goes first, counted in ``dropped_keys``; ``messages`` counts
everything ever noted.

Who calls what: any thread (the builder's cleaning, the pop service, status).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from mqstore.store.retention import ConsumerLoss

log = structlog.get_logger(__name__)

MAX_KEYS = 1_000


@dataclass(frozen=True)
class LossRecord:
    """The losses of one (group, topic, queue) merged: [from_offset, to_offset) spans
    them, ``messages`` counts them."""

    group: str
    topic: str
    queue_id: int
    from_offset: int
    to_offset: int
    messages: int
    forced: bool
    at_ms: int


class LossLedger:
    """See the module docstring."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._records: OrderedDict[tuple[str, str, int], LossRecord] = OrderedDict()
        self.messages = 0  # every message noted since the process started
        self.dropped_keys = 0

    def note(self, losses: Iterable[ConsumerLoss], now_ms: int | None = None) -> None:
        at = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        with self._lock:
            for x in losses:
                n = x.to_offset - x.from_offset
                if n <= 0:
                    continue
                key = (x.group, x.topic, x.queue_id)
                old = self._records.pop(key, None)
                if old is None:
                    rec = LossRecord(x.group, x.topic, x.queue_id, x.from_offset, x.to_offset, n, x.forced, at)
                else:
                    rec = LossRecord(
                        x.group,
                        x.topic,
                        x.queue_id,
                        min(old.from_offset, x.from_offset),
                        max(old.to_offset, x.to_offset),
                        old.messages + n,
                        old.forced or x.forced,
                        at,
                    )
                self._records[key] = rec
                self.messages += n
                while len(self._records) > self._max_keys:
                    self._records.popitem(last=False)
                    self.dropped_keys += 1

    def records(self) -> list[LossRecord]:
        """Every key kept, by group, topic and queue."""
        with self._lock:
            return sorted(self._records.values(), key=lambda r: (r.group, r.topic, r.queue_id))


def runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as [from, to) runs of consecutive ones: [3, 4, 5, 9] -> [(3, 6), (9, 10)]."""
    out: list[tuple[int, int]] = []
    for o in offsets:
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + 1)
        else:
            out.append((o, o + 1))
    return out


def pop_gap(group: str, topic: str, queue_id: int, cursor: int, queue_min: int, *, forced: bool) -> ConsumerLoss:
    """A pop group's cursor was below its queue's min offset: [cursor, queue_min) went
    unread. Logged (an error when forced, as retention's own report)."""
    (log.error if forced else log.warning)(
        "unconsumed_messages_deleted",
        group=group,
        forced=forced,
        messages=queue_min - cursor,
        ranges=[f"{topic}-{queue_id}:[{cursor},{queue_min})"],
        seen_by="pop",
    )
    return ConsumerLoss(group, topic, queue_id, cursor, queue_min, forced)


__all__ = ["MAX_KEYS", "LossLedger", "LossRecord", "pop_gap", "runs"]
