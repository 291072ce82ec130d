"""A dispatcher's topic ids, as the consume-queue builder learns them (PutUnits'
``topic_epoch``, ``topic_ids`` and ``named_ids``: proto/mqstore/v1/consume_queue.proto).

At 10,000 topics round-robin every dispatch chunk names thousands of topics; sent as
names, the builder made a str of each and looked it up by name, chunk after chunk.
A dispatcher numbers topics once for its life instead (its process-wide ids,
formats.message: an *epoch*, random, new at each start) and names an id only the
first time after each of its resyncs. The builder keeps, per epoch, each id's
process-wide topic id in this process (``topic_ids_of_names``), so a chunk's topic
names are one gather of the same str objects chunk after chunk (their hashes kept:
the consume queues' lookups by name hash nothing).

An id the builder was never told in the epoch (the builder restarted since, or an
epoch it dropped) refuses the batch (FAILED_PRECONDITION) before anything is
written: the dispatcher resyncs and names every topic again. The newest MAX_EPOCHS
epochs are kept (a dispatcher that restarts starts a new one). One caller at a time
(the builder's event loop).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from mqstore.formats.message import topic_ids_of_names
from mqstore.services.common.errors import BadRequest, Precondition

MAX_EPOCHS = 4
MAX_TOPIC_ID = (1 << 24) - 1  # a dispatcher's ids are dense: far more topics than a shard holds


class TopicEpochs:
    """See the module docstring."""

    def __init__(self) -> None:
        self._epochs: OrderedDict[int, np.ndarray] = OrderedDict()  # epoch -> its id -> ours (-1: not told)

    def learn(self, epoch: int, named_ids: np.ndarray, names: list[str]) -> None:
        """Take the names the dispatcher gave these ids in ``epoch`` (names already
        checked by the caller)."""
        if len(named_ids) != len(names):
            raise BadRequest(f"named_ids holds {len(named_ids)} ids for {len(names)} topics")
        table = self._epochs.get(epoch)
        if table is None:
            table = self._epochs[epoch] = np.full(0, -1, np.int64)
            while len(self._epochs) > MAX_EPOCHS:
                self._epochs.popitem(last=False)
        else:
            self._epochs.move_to_end(epoch)
        if not len(named_ids):
            return
        _check_ids(named_ids, "named_ids")
        top = int(named_ids.max()) + 1
        if top > len(table):
            table = self._epochs[epoch] = np.concatenate([table, np.full(max(top, 2 * len(table)) - len(table), -1)])
        table[named_ids] = topic_ids_of_names(names)

    def ours(self, epoch: int, ids: np.ndarray) -> np.ndarray:
        """Our process-wide ids of the dispatcher's ``ids`` in ``epoch``; Precondition
        if one was not told (nothing is written: the dispatcher names them again)."""
        table = self._epochs.get(epoch)
        if len(ids):
            _check_ids(ids, "topic_ids")
        if table is None:
            if not len(ids):
                return ids
            raise Precondition(f"topic epoch {epoch} is not known here (a restart?): name the topics again")
        if not len(ids):
            return ids
        if int(ids.max()) >= len(table):
            out = np.full(len(ids), -1, np.int64)
            inside = ids < len(table)
            out[inside] = table[ids[inside]]
        else:
            out = table[ids]
        if (out < 0).any():
            missing = int(ids[np.flatnonzero(out < 0)[0]])
            raise Precondition(f"topic id {missing} of epoch {epoch} was never named here: name the topics again")
        return out


def _check_ids(ids: np.ndarray, what: str) -> None:
    if int(ids.min()) < 0 or int(ids.max()) > MAX_TOPIC_ID:
        raise BadRequest(f"{what} must be in 0..{MAX_TOPIC_ID}")


__all__ = ["MAX_EPOCHS", "MAX_TOPIC_ID", "TopicEpochs"]
