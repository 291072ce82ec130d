"""recovery.merge_queue_offsets (the queue-offset table a walk of records rebuilds,
RocketMQ's topicQueueTable) held to the per-queue loop it replaced: the next queue
offset of each queue is one past the largest it saw, never lowered, whatever the
table held before and in whatever order the chunks come."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.message import RecordFields
from mqstore.store.recovery import merge_queue_offsets
from tests.tiers import examples

NAMES = ["A", "B", "%RETRY%g", "T_1"]


def model(table: dict, f: RecordFields) -> None:
    """The loop merge_queue_offsets had (every record advances its queue here)."""
    for code, qid, qo in zip(f.topic_codes.tolist(), f.queue_ids.tolist(), f.queue_offsets.tolist()):
        if table.get((f.topics[code], qid), 0) <= qo:
            table[(f.topics[code], qid)] = qo + 1


record = st.tuples(st.integers(0, 3), st.sampled_from([0, 1, 7, 65535, -1]), st.integers(-2, 50))
chunk = st.tuples(st.permutations(NAMES), st.lists(record, max_size=30))


def fields(names: list[str], recs: list[tuple[int, int, int]]) -> RecordFields:
    n = len(recs)
    cols = np.array(recs, np.int64).reshape(n, 3)
    zeros = np.zeros(n, np.int64)
    return RecordFields(cols[:, 1], cols[:, 2], zeros, zeros + 5, cols[:, 0], list(names), zeros, zeros)


@settings(max_examples=examples(150), deadline=None)
@given(
    st.dictionaries(st.tuples(st.sampled_from(NAMES), st.sampled_from([0, 1, 7])), st.integers(0, 40)),
    st.lists(chunk, max_size=4),
)
def test_merge_is_the_per_queue_loop(before: dict, chunks: list) -> None:
    got, want = dict(before), dict(before)
    for names, recs in chunks:
        f = fields(names, recs)
        merge_queue_offsets(got, f)
        model(want, f)
    assert got == want
