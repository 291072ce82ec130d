"""The one shard rule (services/common/shard_rule.py): the batch form is the scalar
form, both are the rule the layout file pins, and golden vectors hold it still (a
changed rule would move queues away from their files on every existing store)."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.services.common import shard_rule
from mqstore.services.query.routing import LAYOUT_FILE, Router, pin_layout
from tests.tiers import examples

topics = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


def layout_rule(text: str, topic: str, queue_id: int, shards: int) -> int:
    """The layout file's rule text, read as written: ``(crc32(topic) + queue_id) % shards``."""
    return eval(
        text, {"crc32": lambda t: zlib.crc32(t.encode())}, {"topic": topic, "queue_id": queue_id, "shards": shards}
    )  # noqa: S307 - the text is ours


@settings(max_examples=examples(300))
@given(
    rows=st.lists(st.tuples(topics, st.integers(0, 1023)), min_size=0, max_size=40),
    shards=st.integers(1, 17),
)
def test_the_batch_rule_is_the_scalar_rule(rows, shards):
    names = [t for t, _ in rows]
    qids = np.array([q for _, q in rows], np.int64)
    got = shard_rule.shards_of(names, qids, shards)
    assert got.dtype == np.int64 and len(got) == len(rows)
    assert got.tolist() == [shard_rule.shard_of(t, q, shards) for t, q in rows]
    assert got.tolist() == [Router(shards).shard_of(t, q) for t, q in rows]


@settings(max_examples=examples(200))
@given(topic=topics, queue_id=st.integers(0, 4095), shards=st.integers(1, 17))
def test_the_rule_is_the_one_the_layout_pins(tmp_path_factory, topic, queue_id, shards):
    root = tmp_path_factory.mktemp("layout")
    text = pin_layout(root, shards)["rule"]
    assert json.loads((root / LAYOUT_FILE).read_text())["rule"] == text == shard_rule.RULE
    assert shard_rule.shard_of(topic, queue_id, shards) == layout_rule(text, topic, queue_id, shards)


@settings(max_examples=examples(200))
@given(topic=topics, shards=st.integers(1, 17), data=st.data())
def test_a_topics_first_queue_on_a_shard_is_the_smallest_the_rule_puts_there(topic, shards, data):
    shard = data.draw(st.integers(0, shards - 1))
    q = shard_rule.first_queue_on(topic, shard, shards)
    assert q == next(q for q in range(shards) if shard_rule.shard_of(topic, q, shards) == shard)
    held = shard_rule.queues_on(topic, 3 * shards, shard, shards)
    assert held == [q for q in range(3 * shards) if shard_rule.shard_of(topic, q, shards) == shard]


# (topic, queue id, shards) -> shard: computed with the rule as first written
# (query/routing.py's Router); stores laid out with it must keep their queues.
GOLDEN = [
    ("TopicTest", 0, 2, 1),
    ("TopicTest", 1, 2, 0),
    ("TopicTest", 3, 4, 0),
    ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 3, 2),
    ("%DLQ%group", 5, 7, 1),
    ("主题", 2, 5, 2),
]


@pytest.mark.parametrize(("topic", "queue_id", "shards", "shard"), GOLDEN)
def test_golden_vectors(topic, queue_id, shards, shard):
    assert shard_rule.shard_of(topic, queue_id, shards) == shard
    assert shard_rule.shards_of([topic], [queue_id], shards).tolist() == [shard]


def test_a_shard_outside_the_count_has_no_first_queue():
    with pytest.raises(ValueError):
        shard_rule.first_queue_on("T", 2, 2)
