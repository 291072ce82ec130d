"""mqstore.kernels._queues.QueueOffsets against its reference model (model_queues.py):
any sequence of batches assigned (committed or not, as after a failed write), raises,
automatic picks and lookups gives the same offsets, queue ids, ends, counts and items."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.kernels._queues import QueueOffsets
from mqstore.kernels._topics import TopicIds
from tests.kernels.model_queues import ModelQueueOffsets
from tests.tiers import examples

TOPICS = ["T0", "T1", "%RETRY%g", "a" * 200, ""]
batch = st.lists(st.tuples(st.integers(0, 4), st.integers(-1, 7) | st.just(65_535), st.booleans()), max_size=60)
op = st.one_of(
    st.tuples(st.just("assign"), batch, st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("raise"), st.integers(0, 4), st.integers(0, 7), st.integers(0, 1 << 40)),
    st.tuples(st.just("nums"), st.integers(0, 4), st.integers(0, 9)),
)


def pair(start=None):
    ids = TopicIds()
    for t in TOPICS:
        ids.add(t)
    return QueueOffsets(start, ids=ids), ModelQueueOffsets(start, ids=ids)


@settings(max_examples=examples(300), deadline=None)
@given(
    start=st.dictionaries(st.tuples(st.sampled_from(TOPICS), st.integers(0, 7)), st.integers(0, 99)),
    ops=st.lists(op, max_size=12),
    default_nums=st.integers(1, 5),
)
def test_queue_offsets_equal_the_model(start, ops, default_nums) -> None:
    got, want = pair(start)
    for o in ops:
        if o[0] == "raise":
            _, t, q, nxt = o
            got.raise_to(TOPICS[t], q, nxt)
            want.raise_to(TOPICS[t], q, nxt)
        elif o[0] == "nums":
            got.set_queue_nums(o[1], o[2])
            want.set_queue_nums(o[1], o[2])
        else:
            _, rows, commit, with_advances, one_topic = o
            if one_topic and rows:
                rows = [(rows[0][0], q, a) for _, q, a in rows]
            tids = None if one_topic else np.array([t for t, _, _ in rows], np.int64)
            tid = rows[0][0] if one_topic and rows else -1
            qids = np.array([q for _, q, _ in rows], np.int64)
            picked_got = got.pick(tids, tid, qids, default_nums)
            picked_want = want.pick(tids, tid, qids, default_nums)
            assert (picked_got is None) == (picked_want is None)
            if picked_got is not None:
                assert picked_got.tolist() == picked_want.tolist()
                qids = picked_got
            adv = np.array([a for _, _, a in rows], np.uint8) if with_advances else None
            out_got, out_want = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
            assert got.assign(tids, tid, qids, adv, out_got) == want.assign(tids, tid, qids, adv, out_want)
            assert out_got.tolist() == out_want.tolist()
            if commit:
                got.commit()
                want.commit()
        assert len(got) == len(want)
        assert sorted(got.items()) == sorted(want.items())
        for t in TOPICS:
            for q in range(8):
                assert got.get(t, q) == want.get(t, q)


def test_a_bad_id_or_queue_id_is_refused_and_stages_nothing() -> None:
    q, _ = pair()
    out = np.empty(2, np.int64)
    with pytest.raises(ValueError, match="out of range"):
        q.assign(np.array([0, len(TOPICS)], np.int64), -1, np.array([0, 0], np.int64), None, out)
    with pytest.raises(ValueError, match="out of range"):
        q.assign(None, 0, np.array([0, -1], np.int64), None, out)
    with pytest.raises(ValueError, match="out of range"):
        q.pick(np.array([0, 99], np.int64), -1, np.array([-1, -1], np.int64), 4)
    q.commit()
    assert len(q) == 0 and q.get("T0", 0) == 0


def test_many_topics_and_queues_grow_the_table() -> None:
    ids = TopicIds()
    for i in range(10_000):
        ids.add(f"Topic{i}")
    q, m = QueueOffsets(ids=ids), ModelQueueOffsets(ids=ids)
    rng = np.random.default_rng(3)
    for k in range(20):
        tids = rng.integers(0, 10_000, 1000).astype(np.int64)
        qids = rng.integers(0, 4 if k < 10 else 40, 1000).astype(np.int64)  # later: runs move as they widen
        a, b = np.empty(1000, np.int64), np.empty(1000, np.int64)
        q.assign(tids, -1, qids, None, a)
        m.assign(tids, -1, qids, None, b)
        assert a.tolist() == b.tolist()
        q.commit()
        m.commit()
    assert len(q) == len(m) and sorted(q.items()) == sorted(m.items())
