"""The key and value layouts of consume queues in RocksDB (formats/rocks_queue.py):
RocketMQ's RocksDBConsumeQueueTable / OffsetTable bytes, and round trips."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.rocks_queue import (
    CHECKPOINT_KEY,
    MAX,
    MIN,
    decode_values,
    encode_unit_keys,
    encode_value,
    encode_values,
    offset_key,
    queue_prefix,
    split_offset_key,
    split_unit_key,
    unit_key,
    unit_keys,
)
from tests.tiers import examples

topics = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=40)
qids = st.integers(0, 65535)
offsets = st.integers(0, (1 << 63) - 1)


def test_golden_bytes_as_rocketmq_lays_them_out() -> None:
    # topic length (4, big-endian), CTRL_1, topic, CTRL_1, queue id (4), CTRL_1, queue offset (8)
    assert unit_key(queue_prefix("TopicA", 2), 7).hex() == "0000000601" + b"TopicA".hex() + "010000000201" + (
        "0000000000000007"
    )
    # commitlog offset (8), size (4), tags code (8), store time (8)
    assert encode_value(1024, 210, -5, 1_700_000_000_000).hex() == (
        "0000000000000400000000d2fffffffffffffffb0000018bcfe56800"
    )
    assert offset_key("TopicA", 2, MIN).hex() == "0000000601" + b"TopicA".hex() + "01" + b"min".hex() + "0100000002"
    assert split_offset_key(CHECKPOINT_KEY) == ("CHECKPOINT_TOPIC", 0, MAX)


@settings(max_examples=examples(200))
@given(topic=topics, qid=qids, qo=offsets)
def test_unit_key_round_trip(topic: str, qid: int, qo: int) -> None:
    assert split_unit_key(unit_key(queue_prefix(topic, qid), qo)) == (topic, qid, qo)


@settings(max_examples=examples(200))
@given(topic=topics, qid=qids, which=st.sampled_from([MAX, MIN]))
def test_offset_key_round_trip(topic: str, qid: int, which: bytes) -> None:
    assert split_offset_key(offset_key(topic, qid, which)) == (topic, qid, which)


@settings(max_examples=examples(100))
@given(topic=topics, qid=qids, a=offsets, b=offsets)
def test_keys_of_a_queue_sort_by_queue_offset(topic: str, qid: int, a: int, b: int) -> None:
    p = queue_prefix(topic, qid)
    assert (unit_key(p, a) < unit_key(p, b)) == (a < b)


@settings(max_examples=examples(100))
@given(
    queues=st.lists(st.tuples(topics, qids), min_size=1, max_size=8, unique=True),
    data=st.data(),
)
def test_keys_built_with_numpy_are_the_scalar_ones(queues: list[tuple[str, int]], data) -> None:
    prefixes = [queue_prefix(t, q) for t, q in queues]
    n = data.draw(st.integers(0, 40))
    pick = np.array(data.draw(st.lists(st.integers(0, len(queues) - 1), min_size=n, max_size=n)), np.int64)
    qo = np.array(data.draw(st.lists(offsets, min_size=n, max_size=n)), np.int64)
    assert encode_unit_keys(prefixes, pick, qo) == [
        unit_key(prefixes[i], o) for i, o in zip(pick.tolist(), qo.tolist())
    ]
    if n:
        first = int(qo.min()) if qo.min() < (1 << 62) else 0
        assert unit_keys(prefixes[0], first, 3) == [unit_key(prefixes[0], first + i) for i in range(3)]


@settings(max_examples=examples(100))
@given(
    st.lists(
        st.tuples(offsets, st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 63), (1 << 63) - 1), offsets),
        max_size=30,
    )
)
def test_values_round_trip(rows: list[tuple[int, int, int, int]]) -> None:
    cols = [np.array([r[i] for r in rows], np.int64) for i in range(4)]
    encoded = encode_values(*cols)
    assert encoded == [encode_value(*r) for r in rows]
    back = decode_values(encoded)
    for name, col in zip(("commitlog_offset", "size", "tags_code", "store_timestamp"), cols):
        assert back[name].astype(np.int64).tolist() == col.tolist()


@settings(max_examples=examples(100))
@given(
    st.lists(
        st.tuples(topics, qids, st.sampled_from([MAX, MIN]), offsets, offsets),
        min_size=1,
        max_size=30,
        unique_by=lambda e: e[:3],
    ),
    st.booleans(),
)
def test_offset_entries_parsed_in_bulk_are_the_scalar_ones(entries, in_key_order: bool) -> None:
    from mqstore.formats.rocks_queue import OFFSET_VALUE, parse_offset_entries

    keys = [offset_key(t, q, w) for t, q, w, _, _ in entries]
    values = [OFFSET_VALUE.pack(p, o) for *_, p, o in entries]
    if in_key_order:  # as a scan of the column family gives them
        keys, values = map(list, zip(*sorted(zip(keys, values)))) if keys else ([], [])
    got = parse_offset_entries(keys, values)
    for i, (k, v) in enumerate(zip(keys, values)):
        topic, qid, which = split_offset_key(k)
        assert (got.topics[got.topic_rank[i]], int(got.queue_ids[i]), bool(got.is_max[i])) == (topic, qid, which == MAX)
        assert (int(got.phys[i]), int(got.queue_offsets[i])) == OFFSET_VALUE.unpack(v)
