"""A store opened for questions only: what the query commands' ``--store`` reads.

It takes no lock, runs no recovery and changes no file (nothing is zeroed, cut,
created or removed); queues, index files and segments are mapped read-only when a
question first needs them. So a query answers in a fraction of a second on any
store, next to a running server or on a copy, and the answers are the engine's:
the same reads (reads.py) over the same ports (local_ports.py) as ``MessageStore``.

What it sees is the files as they are. After a clean close that is what the store
holds. After a crash it is what the files held at the crash, before recovery: the
commitlog up to its last valid record, each queue up to its last unit (units past
the commitlog's end are passed over). Open the store for writing (``mqstore serve``,
``send --store``) to recover it.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from mqstore.errors import StoreClosedError
from mqstore.store.consumer_offsets import ConsumerOffsets
from mqstore.store.derived_offset import read_durable_offset
from mqstore.store.index_service import IndexService
from mqstore.store.layout import layout_for_reading
from mqstore.store.local_ports import LocalPorts, LocalReads
from mqstore.store.reader import CommitLogView
from mqstore.store.store_type import open_consume_queues
from mqstore.store.topic_configs import TopicConfigs

log = structlog.get_logger(__name__)


class ReadView(LocalReads):
    """The read API of ``MessageStore`` (pull, queries, topic status, consumer
    progress) over a store directory, read-only. ``close`` unmaps what it mapped."""

    def __init__(self, store_dir: str | Path) -> None:
        self.store_dir = Path(store_dir)
        cfg = layout_for_reading(self.store_dir)
        self.commitlog = CommitLogView(self.store_dir, end_hint=read_durable_offset(self.store_dir))
        self.consume_queues = open_consume_queues(self.store_dir, cfg, read_only_above=self.commitlog.min_offset)
        self.index: IndexService | None = None
        if cfg.message_index_enable:
            self.index = IndexService(
                self.store_dir, hash_slots=cfg.index_hash_slots, max_entries=cfg.index_max_entries
            )
            self.index.load(True, 0, read_only=True)
        self.topics = TopicConfigs(self.store_dir)
        self.consumer_offsets = ConsumerOffsets(self.store_dir)
        self._ports = LocalPorts(
            self.commitlog, self.consume_queues, self.index, self.consumer_offsets, perm_of=self.topics.perm_of
        )
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the view of {self.store_dir} is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for part in (self.index, self.consume_queues, self.commitlog):
            if part is not None:
                part.close()

    def __enter__(self) -> ReadView:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["ReadView"]
