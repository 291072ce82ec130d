"""The multi-shard sender's automatic queue picks (services/query/encoded_send.py):
one vectorised pass held to the per-topic loop it replaced."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.services.query.encoded_send import pick_round_robin
from mqstore.store.messages import AUTO_QUEUE
from tests.tiers import examples


def _model(qids, codes, starts, write_queues):
    """One topic at a time: its automatic messages in batch order take start, start+1, ..."""
    qids = qids.copy()
    counts = np.zeros(len(starts), np.int64)
    for c in range(len(starts)):
        auto = (codes == c) & (qids == AUTO_QUEUE)
        n = int(auto.sum())
        qids[auto] = (starts[c] + np.arange(n)) % write_queues[c]
        counts[c] = n
    return qids, counts


@settings(max_examples=examples(200))
@given(
    st.integers(1, 6).flatmap(
        lambda topics: st.tuples(
            st.lists(st.tuples(st.integers(0, topics - 1), st.sampled_from([AUTO_QUEUE, 0, 1, 2])), max_size=60),
            st.lists(st.integers(0, 1 << 40), min_size=topics, max_size=topics),
            st.lists(st.integers(1, 16), min_size=topics, max_size=topics),
        )
    )
)
def test_picks_match_the_per_topic_loop(case):
    rows, starts, write_queues = case
    codes = np.array([c for c, _ in rows], np.int64)
    qids = np.array([q for _, q in rows], np.int64)
    starts, write_queues = np.array(starts, np.int64), np.array(write_queues, np.int64)
    want_qids, want_counts = _model(qids, codes, starts, write_queues)
    counts = pick_round_robin(qids, codes, starts, write_queues)
    assert qids.tolist() == want_qids.tolist()
    assert counts.tolist() == want_counts.tolist()


def test_a_topics_messages_walk_its_queues_in_batch_order():
    codes = np.array([0, 1, 0, 0, 1, 0], np.int64)
    qids = np.array([AUTO_QUEUE, AUTO_QUEUE, 7, AUTO_QUEUE, AUTO_QUEUE, AUTO_QUEUE], np.int64)
    counts = pick_round_robin(qids, codes, np.array([3, 0], np.int64), np.array([4, 8], np.int64))
    assert qids.tolist() == [3, 0, 7, 0, 1, 1]  # topic 0: 3, (given 7), 0, 1; topic 1: 0, 1
    assert counts.tolist() == [3, 2]
