"""mqstore.kernels._queues.QueueOffsets against its reference model (model_queues.py):
any sequence of batches assigned (committed or not, as after a failed write), raises
and lookups gives the same offsets, ends, counts and items."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.kernels._queues import QueueOffsets
from tests.kernels.model_queues import ModelQueueOffsets
from tests.tiers import examples

TOPICS = ["T0", "T1", "%RETRY%g", "a" * 200, ""]
batch = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 7) | st.just(65_535), st.booleans()), max_size=60)
op = st.one_of(
    st.tuples(st.just("assign"), batch, st.booleans(), st.booleans()),
    st.tuples(st.just("raise"), st.integers(0, 4), st.integers(0, 7), st.integers(0, 1 << 40)),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    start=st.dictionaries(st.tuples(st.sampled_from(TOPICS), st.integers(0, 7)), st.integers(0, 99)),
    ops=st.lists(op, max_size=12),
)
def test_queue_offsets_equal_the_model(start, ops) -> None:
    got, want = QueueOffsets(start), ModelQueueOffsets(start)
    for o in ops:
        if o[0] == "raise":
            _, t, q, nxt = o
            got.raise_to(TOPICS[t], q, nxt)
            want.raise_to(TOPICS[t], q, nxt)
        else:
            _, rows, commit, with_advances = o
            used = sorted({t for t, _, _ in rows}) or [0]
            topics = [TOPICS[t] for t in used]
            codes = np.array([used.index(t) for t, _, _ in rows], np.int64)
            qids = np.array([q for _, q, _ in rows], np.int64)
            adv = np.array([a for _, _, a in rows], np.uint8) if with_advances else None
            one = len(topics) == 1
            out_got, out_want = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
            assert got.assign(topics, None if one else codes, qids, adv, out_got) == want.assign(
                topics, None if one else codes, qids, adv, out_want
            )
            assert out_got.tolist() == out_want.tolist()
            if commit:
                got.commit()
                want.commit()
        assert len(got) == len(want)
        assert sorted(got.items()) == sorted(want.items())
        for t in TOPICS:
            for q in range(8):
                assert got.get(t, q) == want.get(t, q)


def test_a_bad_code_or_queue_id_is_refused_and_stages_nothing() -> None:
    q = QueueOffsets()
    out = np.empty(2, np.int64)
    with pytest.raises(ValueError, match="out of range"):
        q.assign(["T"], np.array([0, 1], np.int64), np.array([0, 0], np.int64), None, out)
    with pytest.raises(ValueError, match="out of range"):
        q.assign(["T"], None, np.array([0, -1], np.int64), None, out)
    q.commit()
    assert len(q) == 0


def test_many_queues_grow_the_table() -> None:
    q, m = QueueOffsets(), ModelQueueOffsets()
    rng = np.random.default_rng(3)
    topics = [f"Topic{i}" for i in range(10_000)]
    for _ in range(20):
        codes = rng.integers(0, len(topics), 1000)
        used, inv = np.unique(codes, return_inverse=True)
        qids = rng.integers(0, 4, 1000)
        batch_topics = [topics[i] for i in used.tolist()]
        a, b = np.empty(1000, np.int64), np.empty(1000, np.int64)
        q.assign(batch_topics, inv.astype(np.int64), qids, None, a)
        m.assign(batch_topics, inv.astype(np.int64), qids, None, b)
        assert a.tolist() == b.tolist()
        q.commit()
        m.commit()
    assert len(q) == len(m) and sorted(q.items()) == sorted(m.items())
