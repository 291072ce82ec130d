"""The reference model of the consume-queue write-behind: ``ConsumeQueues.dispatch`` as
it was before the dispatch journal (units grouped with numpy, then given to each
queue touched right away: a dict lookup and ``append_run`` per queue per chunk), kept
here verbatim as the ``dispatch`` of a subclass. tests/kernels/test_journal.py
requires the queues built through the journal to equal this model's, unit for unit
and file for file. Not used in production.
"""

from __future__ import annotations

import numpy as np

from mqstore.formats.consume_queue import UNIT_SIZE, encode_units
from mqstore.formats.message import advances_queue_offset
from mqstore.store.consume_queues import ConsumeQueues
from mqstore.store.dispatch import DispatchBatch

_WRITE_OUT_BYTES = 64 * 1024  # a queue with this much buffered is written out by the dispatcher


class ModelConsumeQueues(ConsumeQueues):
    def dispatch(self, batch: DispatchBatch, from_offset: int = 0, to_offset: int = 0) -> None:
        """Buffer the units of NOT_TYPE and COMMIT records in their queues (a
        DispatchSink: the range is not needed here).

        Everything per unit is done for the whole batch with numpy (grouping by queue,
        the in-order checks, encoding); per queue touched there is a dict lookup and a
        bytes append (ConsumeQueue.append_run). Units are written out by the flusher
        (``flush``), when a queue has 64 KiB buffered, or before any read of it."""
        take = advances_queue_offset(batch.sysflags)
        idx = np.flatnonzero(take) if not take.all() else np.arange(len(batch))
        if not len(idx):
            return
        codes, qids = batch.topic_codes[idx], batch.queue_ids[idx]
        order = np.lexsort((qids, codes))  # stable: commitlog order within a queue
        sel = idx[order]
        qo, phys, sizes, tags = (
            batch.queue_offsets[sel],
            batch.physical_offsets[sel],
            batch.sizes[sel],
            batch.tags_codes[sel],
        )
        ends = phys + sizes
        key = codes[order].astype(np.int64) * 65536 + qids[order]
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        stops = np.append(starts[1:], len(sel))
        # Inside a run every unit must follow the one before it (queue offset + 1, later
        # in the commitlog); a run that does not goes through put_units' full rules.
        follows = np.ones(len(sel), bool)
        follows[1:] = (qo[1:] == qo[:-1] + 1) & (ends[1:] > ends[:-1])
        follows[starts] = True
        in_order = np.logical_and.reduceat(follows, starts)
        sane = (qo.min() >= 0) & (phys.min() >= 0) & (sizes.min() > 0)
        data = memoryview(encode_units(phys, sizes, tags)) if sane else None
        topics, queues, touched = batch.topics, self._queues, []
        for lo, hi, code, qid, ok, first, first_end, last_end in zip(
            starts.tolist(),
            stops.tolist(),
            codes[order][starts].tolist(),
            qids[order][starts].tolist(),
            in_order.tolist(),
            qo[starts].tolist(),
            ends[starts].tolist(),
            ends[stops - 1].tolist(),
        ):
            topic = topics[code]
            cq = queues.get((topic, qid)) or self._new_queue(topic, qid)
            buffered = (
                cq.append_run(first, hi - lo, first_end, last_end, data[lo * UNIT_SIZE : hi * UNIT_SIZE])
                if (ok and data is not None)
                else -1
            )
            if buffered < 0:
                cq.put_units(qo[lo:hi], phys[lo:hi], sizes[lo:hi], tags[lo:hi])
            else:
                if buffered >= _WRITE_OUT_BYTES:
                    cq.write_behind()
                touched.append(cq)
        with self._lock:  # the flusher swaps the set: never add to one it has taken
            self._dirty.update(touched)
        self.last_dispatched_timestamp = int(batch.store_timestamps[idx[-1]])
