"""The bench workload is what the README says it is (the KEYS are built from digit
tables for speed: they must be the strings the plain formula gives)."""

from __future__ import annotations

from mqstore.bench.workload import Workload


def test_batches_hold_the_documented_messages() -> None:
    w = Workload(body_size=16, topics=3, queues=4)
    for start in (0, 9_970, 123_456_789, 9_999_999_000):
        b = w.batch(start, 40)
        idx = range(start, start + 40)
        assert b.keys == [f"ord{i:010d} usr{i % 9973:04d}" for i in idx]
        assert b.tags == [f"Tag{i % 16}" for i in idx]
        assert b.topics == [f"BenchTopic{i % 3}" for i in idx]
        assert b.queue_ids.tolist() == [(i // 3) % 4 for i in idx]
        assert [int.from_bytes(body[:8], "big") for body in b.bodies] == list(idx)
        assert all(len(body) == 16 for body in b.bodies)
