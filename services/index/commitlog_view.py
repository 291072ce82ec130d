"""``RemoteCommitLog``: a builder's ``CommitLogView`` (store/builders.py) of the
commitlog in another process: GetRecovery facts, ``units_match`` over CheckUnits,
store times over Read. ``client`` is its typed blocking client (the delay scheduler's
Read, ReadRange and DeliverDelayed go through it too)."""

from __future__ import annotations

import numpy as np

from mqstore.rpc.v1 import commitlog_pb2
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import Resolver
from mqstore.services.common.shard_clients import SyncCommitLogClient
from mqstore.store.builders import Recovered

CHECK_CHUNK = 100_000  # units per CheckUnits call (the server takes at most 200,000)


class RemoteCommitLog:
    """The commitlog a builder recovers against (see the module docstring). The
    recovery facts are those of one commitlog open (``incarnation``); ``wrote`` and
    ``min_offset`` are asked again on each read."""

    def __init__(self, resolve: Resolver, auth: InternalAuth) -> None:
        self.client = SyncCommitLogClient(resolve, auth)
        try:
            r = self.client.get_recovery()
        except BaseException:
            self.client.close(for_good=True)
            raise
        self.incarnation = r.incarnation
        self.clean_shutdown = r.clean_shutdown
        self.start_offset = r.start_offset
        self.redispatch_from = r.redispatch_from
        self.index_msg_timestamp = r.index_msg_timestamp
        self.recovery = Recovered({(q.topic, q.queue_id): q.max_offset for q in r.queues})
        self._min, self._wrote = r.min_offset, r.wrote_offset

    def offsets(self) -> commitlog_pb2.GetOffsetsResponse:
        """The commitlog's watermarks now (and its incarnation: a new one means it
        reopened and this view is stale)."""
        r = self.client.get_offsets(timeout=10)
        if r.incarnation == self.incarnation:
            self._min, self._wrote = r.min_offset, r.wrote_offset
        return r

    @property
    def min_offset(self) -> int:
        return self._min

    @property
    def wrote_offset(self) -> int:
        return self._wrote

    def units_match(
        self,
        phys: np.ndarray,
        sizes: np.ndarray,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        *,
        topics: list[str] | None = None,
        topic_index: np.ndarray | None = None,
        tags_codes: np.ndarray | None = None,
        check_tags: np.ndarray | None = None,
        check_from: int = 0,
        deep_from: int = 0,
    ) -> np.ndarray:
        """CommitLog.units_match, answered by the commitlog's process."""
        n = len(phys)
        topics = topics or [""]
        topic_index = np.zeros(n, np.int64) if topic_index is None else topic_index
        tags = np.zeros(n, np.int64) if tags_codes is None else tags_codes
        check = np.full(n, tags_codes is not None) if check_tags is None else check_tags
        out = np.zeros(n, bool)
        for lo in range(0, n, CHECK_CHUNK):
            sl = slice(lo, min(n, lo + CHECK_CHUNK))
            req = commitlog_pb2.CheckUnitsRequest(
                physical_offsets=phys[sl].tolist(),
                sizes=sizes[sl].tolist(),
                queue_ids=queue_ids[sl].tolist(),
                queue_offsets=queue_offsets[sl].tolist(),
                topics=topics,
                topic_codes=topic_index[sl].tolist(),
                tags_codes=tags[sl].tolist(),
                check_tags=check[sl].tolist(),
                check_from=check_from,
                deep_from=deep_from,
            )
            out[sl] = np.asarray(self.client.check_units(req, timeout=120).ok, bool)
        return out

    def store_times(self, offsets: np.ndarray) -> np.ndarray:
        """Store time of the record at each offset (-1 where none is stored)."""
        out = np.full(len(offsets), -1, np.int64)
        if not len(offsets):
            return out
        r = self.client.read(commitlog_pb2.ReadRequest(offsets=[int(o) for o in offsets], skip_missing=True))
        found = {o: rec.store_timestamp for o, rec in zip(r.offsets, r.records)}
        for i, off in enumerate(offsets.tolist()):
            out[i] = found.get(off, -1)
        return out

    def record_size(self, offset: int) -> int | None:
        """Size of the record starting at ``offset`` (None where none does): where the
        index builder resumes after the last record it indexed."""
        r = self.client.read(commitlog_pb2.ReadRequest(offsets=[offset], skip_missing=True))
        return r.records[0].size if r.records else None

    def note_derived(self, kind: str, durable_offset: int, timestamp: int) -> None:
        self.client.note_derived(
            commitlog_pb2.NoteDerivedRequest(kind=kind, durable_offset=durable_offset, timestamp=timestamp)
        )

    def attach_queue_ends(self, progress: int, ends: list) -> None:
        """Hand the consume queues' ends (QueueRange messages) to the commitlog this
        view recovered against (AttachQueueEnds); ABORTED if it reopened since."""
        self.client.attach_queue_ends(
            commitlog_pb2.AttachQueueEndsRequest(incarnation=self.incarnation, progress_offset=progress, queues=ends),
            timeout=30,
        )

    def close(self) -> None:
        self.client.close()


__all__ = ["RemoteCommitLog"]
