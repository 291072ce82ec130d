"""The bench workload is what the README says it is (the KEYS are built from digit
tables for speed: they must be the strings the plain formula gives)."""

from __future__ import annotations

import numpy as np

from mqstore.bench.workload import Workload
from mqstore.store.messages import Bodies


def test_batches_hold_the_documented_messages() -> None:
    w = Workload(body_size=16, topics=3, queues=4)
    for start in (0, 9_970, 123_456_789, 9_999_999_000, 0, 9_970):  # twice: the kept topic lists
        b = w.batch(start, 40)
        idx = range(start, start + 40)
        assert b.keys == [f"ord{i:010d} usr{i % 9973:04d}" for i in idx]
        assert b.tags == [f"Tag{i % 16}" for i in idx]
        assert b.topics == [f"BenchTopic{i % 3}" for i in idx]
        assert b.queue_ids.tolist() == [(i // 3) % 4 for i in idx]
        assert [int.from_bytes(body[:8], "big") for body in b.bodies] == list(idx)
        assert all(len(body) == 16 for body in b.bodies)


def test_bodies_come_in_one_buffer_with_the_pattern_after_the_index() -> None:
    """Bodies are one ``Bodies`` per batch; each body is the seed's pattern with the
    index over its first 8 bytes (the first ``body_size`` of them when the body is
    shorter). A batch's own buffer stays as it was; an ``in_place`` batch's is the
    rows the thread rewrites for its next batch."""
    pattern = np.random.default_rng(7).integers(0, 256, 1024, np.uint8).tobytes()
    w = Workload(body_size=1024, topics=1, queues=4)
    b = w.batch(1_000, 3)
    assert isinstance(b.bodies, Bodies) and b.bodies.offsets.tolist() == [0, 1024, 2048, 3072]
    want = [i.to_bytes(8, "big") + pattern[8:] for i in (1_000, 1_001, 1_002)]
    assert list(b.bodies) == want
    fast = w.batch(1_000, 3, in_place=True)
    assert list(fast.bodies) == want
    w.batch(2_000, 3, in_place=True)
    assert list(b.bodies) == want  # a copy
    assert int.from_bytes(fast.bodies[0][:8], "big") == 2_000  # the rows, rewritten
    assert b.keys[0] == "ord0000001000 usr1000" and fast.keys[0] == "ord0000002000 usr2000"  # KEYS too
    for size in (0, 3, 8):
        short = Workload(body_size=size, topics=1, queues=4).batch(258, 2).bodies
        assert list(short) == [i.to_bytes(8, "big")[:size] for i in (258, 259)]


def test_per_topic_shape_sends_each_batch_to_one_topic() -> None:
    """``per-topic``: run k of ``run`` messages goes to topic k % topics, message i to
    queue i % queues; a batch that is one run names its topic once (a str)."""
    w = Workload(body_size=16, topics=3, queues=4, shape="per-topic", run=10)
    for k in range(7):
        b = w.batch(k * 10, 10)
        assert b.topics == f"BenchTopic{k % 3}"
        assert b.queue_ids.tolist() == [i % 4 for i in range(k * 10, k * 10 + 10)]
    across = w.batch(25, 10)  # half of run 2, half of run 3
    assert across.topics == ["BenchTopic2"] * 5 + ["BenchTopic0"] * 5
    one = Workload(body_size=16, topics=1, queues=4, shape="per-topic", run=10).batch(5, 20)
    same = Workload(body_size=16, topics=1, queues=4).batch(5, 20)
    assert one.topics == same.topics and one.queue_ids.tolist() == same.queue_ids.tolist()


def test_queues_touched_counts_the_distinct_queues() -> None:
    for shape in ("round-robin", "per-topic"):
        for topics, queues, run, count in [
            (3, 4, 10, 100),
            (50, 4, 10, 120),
            (7, 3, 2, 5),
            (1, 4, 1000, 3),
            (5, 4, 3, 0),
        ]:
            w = Workload(body_size=8, topics=topics, queues=queues, shape=shape, run=run)
            b = w.batch(0, count) if count else None
            pairs = set()
            if b is not None:
                names = [b.topics] * count if isinstance(b.topics, str) else b.topics
                pairs = set(zip(names, b.queue_ids.tolist()))
            assert w.queues_touched(0, count) == len(pairs), (shape, topics, queues, run, count)
