"""mqstore.kernels._intern.TopicByteIds against its reference model (model_intern.py):
any sequence of calls (topics repeated, sharing prefixes and lengths, empty, enough to
grow the table, the id arrays and the byte store) gives the same codes, ids and names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.kernels._intern import TopicByteIds
from tests.kernels.model_intern import ModelTopicByteIds
from tests.tiers import examples

topic = st.binary(max_size=40) | st.sampled_from([b"", b"a", b"T0", b"T" * 17, b"T" * 16, b"T\xc3\xa9"])


def _columns(topics: list[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    buf = b"".join(topics) + bytes(8)
    at = np.cumsum([0] + [len(t) for t in topics])[:-1].astype(np.int64)
    return buf, at, np.array([len(t) for t in topics], np.int64)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.lists(topic, max_size=1500), max_size=6))
def test_ids_and_codes_equal_the_model(calls: list[list[bytes]]) -> None:
    kernel, model = TopicByteIds(), ModelTopicByteIds()
    for topics in calls:
        buf, at, length = _columns(topics)
        codes, ids = np.full(len(topics), -7, np.int64), np.full(len(topics), -7, np.int64)
        k = kernel.codes(buf, at, length, codes, ids)
        want_codes, want_ids = model.codes(topics)
        assert codes.tolist() == want_codes
        assert k == len(want_ids) and ids[:k].tolist() == want_ids
        assert len(kernel) == len(model)
    assert [kernel.name(i) for i in range(len(kernel))] == model.names


def test_many_topics_grow_every_table() -> None:
    """Past the first sizes of the slot table (1,024), id arrays (512) and byte store
    (64 KiB): 50,000 topics of 20 bytes, met again in a second call in another order."""
    kernel, model = TopicByteIds(), ModelTopicByteIds()
    topics = [f"topic-{i:014d}".encode() for i in range(50_000)]
    for order in (topics, topics[::-3] + topics):
        buf, at, length = _columns(order)
        codes, ids = np.empty(len(order), np.int64), np.empty(len(order), np.int64)
        k = kernel.codes(buf, at, length, codes, ids)
        want_codes, want_ids = model.codes(order)
        assert codes.tolist() == want_codes and ids[:k].tolist() == want_ids
    assert len(kernel) == 50_000 and kernel.name(49_999) == topics[-1]


def test_a_topic_outside_the_buffer_is_refused() -> None:
    kernel = TopicByteIds()
    codes, ids = np.empty(1, np.int64), np.empty(1, np.int64)
    with pytest.raises(ValueError, match="outside"):
        kernel.codes(b"abc", np.array([2], np.int64), np.array([5], np.int64), codes, ids)
    with pytest.raises(IndexError):
        kernel.name(0)
