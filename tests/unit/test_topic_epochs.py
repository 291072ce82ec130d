"""The consume-queue builder's table of dispatchers' topic ids (PutUnits' topic_epoch):
ids named once per epoch map to this process's topic ids; an id never named, or
an epoch dropped, is refused (the dispatcher then names them again)."""

from __future__ import annotations

import numpy as np
import pytest

from mqstore.formats.message import topic_names_of
from mqstore.services.common.errors import BadRequest, Precondition
from mqstore.services.index.topic_epochs import MAX_EPOCHS, MAX_TOPIC_ID, TopicEpochs


def ids(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def test_named_ids_map_to_names_and_unknown_ones_are_refused() -> None:
    t = TopicEpochs()
    t.learn(7, ids(3, 0), ["EpochB", "EpochA"])
    t.learn(7, ids(), [])  # a chunk of known topics names nothing
    assert topic_names_of(t.ours(7, ids(0, 3, 0))) == ["EpochA", "EpochB", "EpochA"]
    with pytest.raises(Precondition, match="topic id 1 of epoch 7"):
        t.ours(7, ids(0, 1))
    with pytest.raises(Precondition, match="topic id 9"):
        t.ours(7, ids(9))
    with pytest.raises(Precondition, match="epoch 8 is not known"):
        t.ours(8, ids(0))
    t.learn(8, ids(0), ["EpochB"])  # another dispatcher numbers the same topic otherwise
    assert topic_names_of(t.ours(8, ids(0))) == ["EpochB"] and t.ours(8, ids(0))[0] == t.ours(7, ids(3))[0]


def test_only_the_newest_epochs_are_kept_and_ids_are_checked() -> None:
    t = TopicEpochs()
    for e in range(1, MAX_EPOCHS + 2):
        t.learn(e, ids(0), [f"E{e}"])
    with pytest.raises(Precondition):
        t.ours(1, ids(0))
    assert topic_names_of(t.ours(MAX_EPOCHS + 1, ids(0))) == [f"E{MAX_EPOCHS + 1}"]
    for bad in (ids(-1), ids(MAX_TOPIC_ID + 1)):
        with pytest.raises(BadRequest):
            t.learn(2, bad, ["X"])
        with pytest.raises(BadRequest):
            t.ours(2, bad)
    with pytest.raises(BadRequest, match="2 ids for 1 topics"):
        t.learn(2, ids(0, 1), ["X"])
