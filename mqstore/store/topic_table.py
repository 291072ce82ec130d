"""The store's topics by dense id, so a batch's per-topic checks cost the same at one
topic and at 100,000 (issue 26).

Every topic name the store sees gets a dense id (kernels/_topics.pyx ``TopicIds``,
one id space with the CommitLog's queue-offset table, kernels/_queues.pyx). Per id:

    flag / column  meaning
    LEGAL          the name passed formats.names.check_topic; its topic field
                   (formats.message.topic_field) is encoded, ``ids.fields[id]``
    SENDABLE       a producer may send to it: LEGAL, not a reserved or system topic,
                   writable by its config; and the columns and flags below hold its config
    TAKES_NORMAL   its type takes NORMAL messages        } with both, a batch without
    UNLIMITED      it has no write queue count (no config) } properties needs no rule
    takes          message kinds its type takes (message_rules' bits; no config: NORMAL)
    write_limit    its write queue count (no config: no limit)

The CommitLog asks for LEGAL ids (``legal_ids``), a producer's append for SENDABLE
ones (``sendable_ids``). A batch whose names all have the flag costs one compiled pass
over the names. Otherwise (a topic's first batch, or its first since its config
changed: TopicConfigs tells ``config_changed``, which clears the flag) the Python
checks run as they always did, raising the same errors, and the flag is set only once
they passed: a refused name is never cached. Ids are never reused; a deleted topic
only loses its flags.

Thread-safety: lookups take no lock (TopicIds holds the GIL); flags, fields and the
columns are written under one lock, and a column grows before a flag says its row is set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from mqstore.errors import InvalidMessageError
from mqstore.formats.message import topic_field
from mqstore.formats.names import check_topic
from mqstore.kernels._encode import distinct
from mqstore.kernels._topics import TopicIds, legal_fields
from mqstore.store.message_rules import NORMAL, takes_of
from mqstore.store.topic_configs import PERM_WRITE, TopicConfig

LEGAL = 1
SENDABLE = 2
TAKES_NORMAL = 4
UNLIMITED = 8
PLAIN = TAKES_NORMAL | UNLIMITED
NO_LIMIT = 1 << 62


class BatchTopics(NamedTuple):
    """A batch's topics as table ids: one per message, or None when all are ``tid``;
    ``flags``: those every one of them has (PLAIN: no message rule to check for a batch
    without properties)."""

    ids: np.ndarray | None
    tid: int
    flags: int = 0

    @property
    def plain(self) -> bool:
        return self.flags & PLAIN == PLAIN


class TopicTable:
    """See the module docstring. One per store (the CommitLog's); a BatchEncoder of
    its own makes one too."""

    def __init__(self) -> None:
        self.ids = TopicIds()
        self._lock = threading.Lock()
        self._topic_of: Callable[[str], TopicConfig | None] = lambda _: None
        self._cols = np.zeros((2, 0), np.int64)  # rows: takes, write_limit (one object: grown as one)

    def attach_configs(self, configs) -> None:
        """Take the producer columns from ``configs`` (a TopicConfigs), and hear of
        every change to them."""
        with self._lock:
            self._topic_of = configs.get
            for tid in range(len(self.ids)):
                self.ids.clear_flags(tid, SENDABLE)
        configs.add_listener(self.config_changed)

    def config_changed(self, topic: str) -> None:
        """A topic's config was created, changed or deleted: its next batch checks again."""
        tid = self.ids.get(topic)
        if tid >= 0:
            with self._lock:
                self.ids.clear_flags(tid, SENDABLE)

    def intern(self, topic: str) -> int:
        """The id of ``topic`` (given one if new), no check made."""
        return self.ids.add(topic)

    @property
    def names(self) -> list[str]:
        """Names by id (the table's own list: do not change it)."""
        return self.ids.names

    # ------------------------------------------------------------------ the CommitLog's

    def legal_ids(self, topics: str | Sequence[str], n: int) -> BatchTopics:
        """The ids of a batch's topics (one name, or one per message), each name
        checked by check_topic the first time (InvalidTopicError, in order of first
        appearance, as before); InvalidMessageError if a list is not ``n`` long."""
        if isinstance(topics, str):
            tid = self.ids.find(topics, LEGAL)
            if tid < 0:
                check_topic(topics)
                tid = self._legalise(topics)
            return BatchTopics(None, tid)
        if len(topics) != n:
            raise InvalidMessageError(f"topics has {len(topics)} values for {n} messages")
        values = topics if type(topics) is list else list(topics)
        ids = np.empty(n, np.int64)
        if self.ids.lookup(values, ids, LEGAL):
            new = [t for t in distinct(values, np.empty(n, np.int64)) if self.ids.find(t, LEGAL) < 0]
            fields = legal_fields(new)
            for t, f in zip(new, fields):
                if f is None:  # not legal: check_topic says why (in order of first appearance)
                    check_topic(t)
            with self._lock:
                self.ids.add_all(new, fields, LEGAL)
            self.ids.lookup(values, ids, 0)
        return BatchTopics(ids, -1)

    def _legalise(self, topic: str) -> int:
        field = topic_field(topic)
        with self._lock:
            self.ids.add_all([topic], [field], LEGAL)
        return self.ids.get(topic)

    # ------------------------------------------------------------------ a producer's

    def sendable_ids(self, topics: str | Sequence[str], check: Callable[[set[str]], None]) -> BatchTopics:
        """The ids of a producer's topics (one name, or a list: one per message, or
        distinct ones), all SENDABLE. Where one is not (yet), ``check`` gets the
        batch's set of names and raises what a producer may not send (as
        messages.check_send_topics); once it passed, the names are admitted."""
        if isinstance(topics, str):
            tid = self.ids.find(topics, SENDABLE)
            if tid < 0:
                check({topics})
                self._admit([topics])
                tid = self.ids.get(topics)
            return BatchTopics(None, tid, self.ids.flags_of(tid))
        values = topics if type(topics) is list else list(topics)
        ids = np.empty(len(values), np.int64)
        common = np.zeros(1, np.uint8)
        if self.ids.lookup(values, ids, SENDABLE, common):
            names = set(values)
            check(names)
            self._admit(names)
            self.ids.lookup(values, ids, 0, common)
        return BatchTopics(ids, -1, int(common[0]))

    def _admit(self, names) -> None:
        """Names a producer's check passed: LEGAL, and SENDABLE with their config's
        columns (read under the lock, so a change heard meanwhile clears the flag
        after, not before, it is set)."""
        new = [t for t in names if self.ids.find(t, LEGAL) < 0]
        fields = dict(zip(new, legal_fields(new)))  # check_topic passed them: each has its field
        with self._lock:
            for t in names:
                tid = self.ids.add(t)
                if t in fields:
                    self.ids.set_field(tid, fields[t] or topic_field(t))
                    self.ids.set_flags(tid, LEGAL)
                config = self._topic_of(t)
                if tid >= self._cols.shape[1]:
                    self._grow(tid + 1)
                takes = takes_of(config)
                self._cols[0, tid] = takes
                self._cols[1, tid] = NO_LIMIT if config is None else config.write_queue_nums
                self.ids.clear_flags(tid, PLAIN)
                self.ids.set_flags(tid, (TAKES_NORMAL if takes & NORMAL else 0) | (UNLIMITED if config is None else 0))
                if config is None or config.perm & PERM_WRITE:
                    self.ids.set_flags(tid, SENDABLE)

    def _grow(self, need: int) -> None:
        old = self._cols
        cols = np.zeros((2, max(64, 2 * old.shape[1], need)), np.int64)
        cols[:, : old.shape[1]] = old
        self._cols = cols

    def columns(self, topics: BatchTopics) -> tuple[np.ndarray, np.ndarray]:
        """``takes`` and ``write_limit`` of SENDABLE ids (per message, or one value)."""
        col, tid = topics.ids, topics.tid
        cols = self._cols
        if col is None:
            return cols[0, tid], cols[1, tid]
        return cols[0][col], cols[1][col]


__all__ = ["LEGAL", "NO_LIMIT", "PLAIN", "SENDABLE", "TAKES_NORMAL", "UNLIMITED", "BatchTopics", "TopicTable"]
