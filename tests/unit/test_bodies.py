"""``messages.Bodies``, a batch's bodies in one buffer: what it accepts and refuses,
that it behaves as the sequence of bytes it stands for, and that every consumer of
``MessageBatch.bodies`` takes it (the store with its delay rewrite, the gRPC client's
columns). The encoder's records from it are held to the list's byte for byte in
tests/kernels/test_encode_kernel.py."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.errors import InvalidMessageError
from mqstore.kernels._encode import RecordBuffer
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.messages import Bodies
from mqstore.store.schedule import SCHEDULE_TOPIC

CFG = StoreConfig(segment_bytes=256 * 1024, index_hash_slots=512, index_max_entries=2048)
BODIES = [b"hello", b"", b"world!", b"\x00\x01\x02"]


def _containers(joined: bytes):
    yield joined
    yield bytearray(joined)
    yield memoryview(joined)
    yield np.frombuffer(joined, np.uint8).copy()
    yield np.frombuffer(joined, np.int8).copy()


@pytest.mark.parametrize("kind", range(5))
def test_bodies_are_the_sequence_of_bytes_they_stand_for(kind: int) -> None:
    data = list(_containers(b"".join(BODIES)))[kind]
    b = Bodies(data, [0, 5, 5, 11, 14])
    assert len(b) == 4
    assert list(b) == BODIES
    assert [b[i] for i in range(4)] == BODIES and b[-1] == BODIES[-1]
    assert all(type(x) is bytes for x in b)
    assert list(b[1:3]) == BODIES[1:3] and isinstance(b[1:3], Bodies)
    assert b[::2] == BODIES[::2] and list(b[3:1]) == []
    assert b.lengths.tolist() == [5, 0, 6, 3]
    assert BODIES[2] in b and b.index(BODIES[2]) == 2
    assert list(pickle.loads(pickle.dumps(b))) == BODIES
    with pytest.raises(IndexError):
        b[4]


def test_of_joins_and_two_dimensional_rows_are_taken_in_order() -> None:
    b = Bodies.of([BODIES[0], bytearray(BODIES[2]), memoryview(BODIES[3])])
    assert list(b) == [BODIES[0], BODIES[2], BODIES[3]]
    assert list(Bodies.of([])) == [] and len(Bodies.of([])) == 0
    rows = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert list(Bodies(rows, np.arange(0, 13, 4))) == [bytes(r) for r in rows.tolist()]
    assert list(Bodies(np.zeros((3, 0), np.uint8), [0, 0, 0, 0])) == [b"", b"", b""]
    assert list(Bodies(b"..abc..", [2, 3, 5])) == [b"a", b"bc"]  # the first offset need not be 0


def test_offsets_are_a_read_only_copy() -> None:
    offsets = np.array([0, 2, 4])
    b = Bodies(b"abcd", offsets)
    offsets[1] = 3
    assert list(b) == [b"ab", b"cd"] and b.offsets.dtype == np.int64
    with pytest.raises(ValueError):
        b.offsets[0] = 1
    data = bytearray(b"abcd")
    b = Bodies(data, [0, 4])
    with pytest.raises(BufferError):  # held while the Bodies lives
        data.extend(b"x")


@pytest.mark.parametrize(
    ("data", "offsets", "match"),
    [
        ("abc", [0, 1], "must be a buffer of bytes"),
        (None, [0], "must be a buffer of bytes"),
        (np.zeros(3, np.int32), [0, 1], "single bytes, got items of 4 bytes"),
        (np.zeros((4, 4), np.uint8)[:, :2], [0, 1], "not contiguous"),
        (b"abc", [0, 2, 1], r"must not decrease: offset 2 \(1\) is below offset 1 \(2\)"),
        (b"abc", [0, 4], r"last offset 4 is past the data's 3 bytes"),
        (b"abc", np.array([0, 5], np.uint64), r"offset 5 is past the data's 3 bytes"),
        (b"abc", [-1, 2], r"first offset is negative \(-1\)"),
        (b"abc", [], r"n \+ 1 offsets for n values"),
        (b"abc", [0.0, 1.0], "one dimension of integers"),
        (b"abc", [[0, 1]], "one dimension of integers"),
        (b"abc", "01", "must be integers"),
        (b"abc", None, "must be integers"),
    ],
)
def test_bad_bodies_are_refused(data, offsets, match: str) -> None:
    with pytest.raises(InvalidMessageError, match=match):
        Bodies(data, offsets)


def test_of_refuses_what_is_not_bytes() -> None:
    with pytest.raises(InvalidMessageError, match="every body must be bytes"):
        Bodies.of([b"a", "b"])


def test_the_kernel_checks_offsets_itself() -> None:
    """The encoder does not take a Bodies' word for its offsets (they are checked when
    made, and again where the pointers are taken)."""
    buf = RecordBuffer()
    buf.start(2)
    with pytest.raises(ValueError, match="3 body offsets"):
        buf.body_buffer(b"abcd", np.array([0, 4], np.int64))
    with pytest.raises(ValueError, match="body 1"):
        buf.body_buffer(b"abcd", np.array([0, 3, 2], np.int64))
    with pytest.raises(ValueError, match="body 1"):
        buf.body_buffer(b"abcd", np.array([0, 3, 5], np.int64))
    buf.body_buffer(b"abcd", np.array([0, 3, 4], np.int64))


class StepClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


def test_the_store_appends_bodies_as_it_appends_a_list(tmp_path: Path) -> None:
    """Same records from a Bodies as from the list (the store's clock and UNIQ_KEYs
    aside), pulls and key queries included; a DELAY rewrite keeps the buffer."""
    with MessageStore(tmp_path / "a", CFG) as a, MessageStore(tmp_path / "b", CFG) as b:
        for store, bodies in ((a, BODIES), (b, Bodies.of(BODIES))):
            res = store.append(MessageBatch(topics="T", bodies=bodies, queue_ids=0, tags="t", keys="k1"))
            assert res.queue_offsets.tolist() == [0, 1, 2, 3]
            store.wait_dispatched()
            assert [r.body for r in store.pull("T", 0, 0).records] == BODIES
            assert [r.body for r in store.query_by_key("T", "k1")] == BODIES[::-1]
        assert a.commitlog.wrote_offset == b.commitlog.wrote_offset
    clock = StepClock(1_700_000_000_000)
    with MessageStore(tmp_path / "c", CFG, clock=clock, background_dispatch=False) as c:
        c.append(MessageBatch(topics="T", bodies=Bodies.of(BODIES), queue_ids=1, properties={"DELAY": "1"}))
        c.dispatcher.catch_up()
        cq = c.consume_queues.find(SCHEDULE_TOPIC, 0)
        assert [c.commitlog.read(int(u["commitlog_offset"])).body for u in cq.read_units(0, 10)] == BODIES
        clock.now += 1000
        assert c.scheduler.deliver_due(clock.now) == 4
        c.dispatcher.catch_up()
        assert [r.body for r in c.pull("T", 1, 0).records] == BODIES


def test_the_grpc_columns_take_bodies() -> None:
    from mqstore.services.query.client import columns

    assert columns("T", Bodies.of(BODIES)) == columns("T", BODIES)


def test_an_oversize_body_is_refused_by_index(tmp_path: Path) -> None:
    cfg = StoreConfig(segment_bytes=256 * 1024, index_hash_slots=512, index_max_entries=2048, max_message_bytes=8)
    with MessageStore(tmp_path, cfg) as s:
        with pytest.raises(InvalidMessageError, match="message 2: body of 9 bytes exceeds max_message_bytes 8"):
            s.append(MessageBatch(topics="T", bodies=Bodies.of([b"a", b"b", b"x" * 9])))
        assert s.commitlog.wrote_offset == 0
