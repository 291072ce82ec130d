"""Raw pulls answered on the shard's node by the consume-queue builder: its units,
and the records' bytes from read-only maps of the commitlog's segments (as the
served dispatcher reads them, store.reader.SegmentMaps), so a pull is one internal
call (front -> ConsumeQueueService.Pull) and the commitlog process is not involved.

The answer is the front's PullResponse itself, which the front forwards as the
bytes came. The front checks the caller's ACL and the topic's read perm before it
forwards; this side runs the same pull as every other (store.reads.pull) with the
perm already granted. Units exist only for records the dispatcher handed over, so
every offset read is written; a unit below the commitlog's min offset (retention
removed its segment, the builder's files not yet) is skipped, as the commitlog's
Read skips it. Maps are dropped when the builder recovers against a new open of the
commitlog (its files may have been cut back) and below the min offset retention
announces.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from mqstore.errors import OffsetError
from mqstore.formats.packed import RawRecords
from mqstore.rpc.v1 import front_pb2
from mqstore.services.common.convert import pull_answer_to_pb
from mqstore.store import reads
from mqstore.store.builders import QueueBuilder
from mqstore.store.local_ports import units_page
from mqstore.store.reader import SegmentMaps


class LocalPulls:
    """Answers raw pulls from this node (see the module docstring). Thread-safe:
    pulls run on the builder's executor threads."""

    def __init__(self, store_dir: str | Path) -> None:
        self._store_dir = Path(store_dir)
        self._lock = threading.Lock()
        self._maps: SegmentMaps | None = None
        self._opened_for: object = None  # the builder's view of the commitlog the maps belong to

    def pull(
        self, builder: QueueBuilder, view: object, commitlog_min: int, request: front_pb2.PullRequest
    ) -> front_pb2.PullResponse:
        """One raw pull of ``request`` (topic perm already checked by the front)."""
        read = reads.pull(
            request.topic,
            request.queue_id,
            request.offset,
            max_count=request.max_messages or 32,
            tags=reads.parse_tag_expression(request.tag_expression),
            raw=True,
        )
        return pull_answer_to_pb(reads.drive(read, _Ports(self, builder, view, commitlog_min)), raw=True)

    def read_raw(self, view: object, commitlog_min: int, offsets: np.ndarray, sizes: np.ndarray):
        """``(offsets found, RawRecords)``: the records at ``offsets`` (ascending, one
        queue's units) from the segment maps; offsets in no segment are skipped."""
        with self._lock:
            if self._maps is None or self._opened_for is not view:
                if self._maps is not None:
                    self._maps.reset()
                self._maps, self._opened_for = SegmentMaps(self._store_dir), view
            maps = self._maps
            maps.release(commitlog_min)
            found, parts = [], []
            i, n = 0, len(offsets)
            while i < n:
                at = int(offsets[i])
                try:
                    base, mm = maps.segment(at, at + 1)
                except OffsetError:
                    i += 1  # retention removed it: skipped, as the commitlog's Read skips it
                    continue
                j = i + int(np.searchsorted(offsets[i:], base + len(mm), side="left"))
                parts.append(RawRecords.gather(mm, offsets[i:j] - base, sizes[i:j]))
                found.append(offsets[i:j])
                i = j
        found_at = np.concatenate(found) if found else np.zeros(0, np.int64)
        return found_at, RawRecords.concat(parts)


class _Ports:
    """reads.pull's ports on the builder's node (synchronous: an executor thread)."""

    def __init__(self, pulls: LocalPulls, builder: QueueBuilder, view: object, commitlog_min: int) -> None:
        self._pulls, self._builder, self._view, self._min = pulls, builder, view, commitlog_min

    def perm(self, topic: str) -> None:
        return None  # the front checked the topic's read perm before it forwarded the pull

    def units(self, topic: str, queue_id: int, offset: int, max_units: int) -> reads.UnitsPage:
        return units_page(self._builder.consume_queues, topic, queue_id, offset, max_units)

    def read(self, offsets: np.ndarray, sizes: np.ndarray | None, raw: bool):
        if not raw or sizes is None:
            raise AssertionError("the builder answers raw pulls only")
        return self._pulls.read_raw(self._view, self._min, offsets, sizes)


__all__ = ["LocalPulls"]
