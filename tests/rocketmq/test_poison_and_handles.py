"""Issue 25, items 4 and 7, with the official client: a record no RocketMQ 5 consumer
can take is set aside alone (the others are received, it goes to %DLQ%<group> with its
reason, a metric counts it); a held message far ahead does not block its FIFO queue;
receipt handles only the shard can make (guessed and other-group handles ack nothing);
an expired handle is refused by ForwardMessageToDeadLetterQueue as by AckMessage.

The poison records are written with the commitlog's own append (no producer door,
so none of the doors' checks): what a store written before those checks, or by
another writer, holds."""

from __future__ import annotations

import time
import uuid

import pytest

from mqstore.services.rocketmq import convert
from mqstore.store.messages import MessageBatch
from tests import rocketmq_client
from tests.rocketmq.conftest import receive_until

pytestmark = pytest.mark.slow

rocketmq_client.load()  # before the client's modules: it fixes its log folder at import

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: E402
from rocketmq.v5.util.signature import Signature  # noqa: E402

TIMEOUT = 10
YEAR_MS = 365 * 24 * 3600 * 1000


@pytest.fixture(scope="module")
def wire(stack):
    """A raw stub of the port and the headers the official client sends."""
    rmq = rocketmq_client.load()
    meta = Signature.metadata(
        rmq.ClientConfiguration(stack.rocketmq_endpoint, rmq.Credentials("", "")), f"pop@{uuid.uuid4().hex[:8]}"
    )
    with grpc.insecure_channel(stack.rocketmq_endpoint) as ch:
        yield service_pb2_grpc.MessagingServiceStub(ch), meta


def write_raw(stack, topic: str, rows: list[tuple[bytes, dict[str, str], int]]) -> None:
    """(body, properties, born ms) records appended to queue 0 by the commitlog itself."""
    stack.shards[0].state.log_store.commitlog.append(
        MessageBatch(
            topics=topic,
            bodies=[b for b, _, _ in rows],
            queue_ids=0,
            properties=[p for _, p, _ in rows],
            born_timestamps=[t for _, _, t in rows],
        )
    )


def dead_letters(front, group: str, count: int, wait_s: float = 15) -> list:
    end, records = time.monotonic() + wait_s, []
    while len(records) < count and time.monotonic() < end:  # dispatched shortly after the DLQ write
        records = [r for q in range(4) for r in front.pull(f"%DLQ%{group}", q, 0).records]
        time.sleep(0.1)
    return records


def set_aside_count(stack, reason: str) -> float:
    v = stack.front.metrics.registry.get_sample_value("mqstore_rocketmq_set_aside_total", {"reason": reason})
    return v or 0.0


def ack(stub, meta, group: str, topic: str, handles: list[str]) -> s.AckMessageResponse:
    return stub.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            entries=[s.AckMessageEntry(message_id="x", receipt_handle=h) for h in handles],
        ),
        metadata=meta,
        timeout=TIMEOUT,
    )


# ------------------------------------------------------------------ poison records


def test_records_no_consumer_can_take_are_set_aside_alone(clients, names, front, stack):
    """Finding 4: TIMER_DELIVER_MS beyond int64 failed every receive of the topic; a born
    time outside Timestamp's range failed the whole receive, then took the innocent
    messages popped with it to the DLQ undelivered."""
    topic, group = names
    now = int(time.time() * 1000)
    before = {r: set_aside_count(stack, r) for r in ("delivery_time", "born_time")}
    write_raw(
        stack,
        topic,
        [
            (b"ok-1", {}, now),
            (b"poison-deliver", {"TIMER_DELIVER_MS": str(1 << 70)}, now),  # beyond int64
            (b"ok-2", {}, now),
            (b"poison-early", {"TIMER_DELIVER_MS": "-99999999999999999"}, now),  # before year 1
            (b"poison-born", {}, 1 << 60),  # after 9999
            (b"ok-3", {}, now),
        ],
    )
    for g in (group, group + "_other"):  # every group: its own receive, its own dead letters
        consumer = clients.simple(g, {topic: "*"})
        got = receive_until(consumer, 3, timeout_s=20)
        assert sorted(m.body for m in got) == [b"ok-1", b"ok-2", b"ok-3"]
        assert all(m.delivery_attempt == 1 for m in got)
        for m in got:
            consumer.ack(m)
        assert consumer.receive(32, 30) == []  # nothing comes back: the poisons are not in flight
        records = dead_letters(front, g, 3)
        by_body = {r.body: r for r in records}
        assert set(by_body) == {b"poison-deliver", b"poison-early", b"poison-born"}
        assert "TIMER_DELIVER_MS" in by_body[b"poison-deliver"].properties["DLQ_REASON"]
        assert "TIMER_DELIVER_MS" in by_body[b"poison-early"].properties["DLQ_REASON"]
        assert "born time" in by_body[b"poison-born"].properties["DLQ_REASON"]
        assert all(r.properties["DLQ_ORIGIN_TOPIC"] == topic for r in records)
        assert all("TIMER_DELIVER_MS" not in r.properties for r in records)  # the dead letters are receivable
    assert set_aside_count(stack, "delivery_time") - before["delivery_time"] == 4
    assert set_aside_count(stack, "born_time") - before["born_time"] == 2
    # the dead letters themselves are receivable: a consumer of the DLQ gets all three
    dlq_consumer = clients.simple(group + "_dlq", {f"%DLQ%{group}": "*"})
    got = receive_until(dlq_consumer, 3)
    assert sorted(m.body for m in got) == [b"poison-born", b"poison-deliver", b"poison-early"]
    assert all(m.properties.get("DLQ_REASON") for m in got)


def test_the_fronts_guard_sets_aside_a_message_it_can_not_convert(clients, names, front, stack, monkeypatch):
    """The shard's check is the rule; should the port still fail to convert one message
    (a converter bug), only that one is dropped from the receive and dead-lettered with
    the reason, and the others are delivered."""
    topic, group = names
    real = convert.to_message

    def failing(rec, **kw):
        if rec.body == b"bad":
            raise ValueError("a converter bug")
        return real(rec, **kw)

    monkeypatch.setattr(convert, "to_message", failing)
    before = set_aside_count(stack, "conversion")
    producer = clients.producer(topic)
    for body in (b"good-1", b"bad", b"good-2"):
        producer.send(clients.message(topic, body))
    consumer = clients.simple(group, {topic: "*"})
    got = receive_until(consumer, 2, timeout_s=20)
    assert sorted(m.body for m in got) == [b"good-1", b"good-2"]
    for m in got:
        consumer.ack(m)
    (record,) = dead_letters(front, group, 1)
    assert record.body == b"bad" and "a converter bug" in record.properties["DLQ_REASON"]
    assert set_aside_count(stack, "conversion") - before == 1
    assert consumer.receive(32, 30) == []  # it does not come back


def test_a_held_message_far_ahead_does_not_block_its_fifo_queue(clients, names, front, stack):
    """Finding 4: a delivery time a year ahead on a FIFO topic blocked that queue for
    every group. The held message takes its place when its time comes (as RocketMQ's
    timer puts a delay message into its queue then); what follows it is delivered."""
    topic, group = names
    front.update_topic(topic, read_queue_nums=1, write_queue_nums=1, message_type="FIFO")
    now = int(time.time() * 1000)
    write_raw(stack, topic, [(b"next-year", {"__SHARDINGKEY": "one", "TIMER_DELIVER_MS": str(now + YEAR_MS)}, now)])
    producer = clients.producer(topic)
    for i in range(3):
        producer.send(clients.message(topic, f"m{i}".encode(), group="one"))
    consumer = clients.simple(group, {topic: "*"})
    got: list = []
    end = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < end:
        batch = consumer.receive(4, 30)
        got += batch
        for m in batch:
            consumer.ack(m)
    assert [m.body for m in got] == [b"m0", b"m1", b"m2"]  # in order, the held one not among them
    assert consumer.receive(4, 30) == []


def test_a_held_message_on_a_fifo_queue_is_delivered_when_its_time_comes(clients, names, front, stack):
    """The documented choice: the held message takes its place in the queue's order at
    its delivery time, behind what is out then (as RocketMQ's timer re-puts it)."""
    topic, group = names
    front.update_topic(topic, read_queue_nums=1, write_queue_nums=1, message_type="FIFO")
    now = int(time.time() * 1000)
    write_raw(stack, topic, [(b"soon", {"__SHARDINGKEY": "one", "TIMER_DELIVER_MS": str(now + 3000)}, now)])
    producer = clients.producer(topic)
    for i in range(2):
        producer.send(clients.message(topic, f"m{i}".encode(), group="one"))
    end = time.monotonic() + 10
    while len(front.pull(topic, 0, 0).records) < 3 and time.monotonic() < end:  # all three dispatched
        time.sleep(0.05)
    consumer = clients.simple(group, {topic: "*"})
    first = receive_until(consumer, 2, timeout_s=2.5)
    assert [m.body for m in first] == [b"m0", b"m1"]  # before its time: what follows it comes
    time.sleep(max(0.0, now + 3200 - time.time() * 1000) / 1000)
    assert consumer.receive(4, 30) == []  # due now, but m0 and m1 are out: it waits behind them
    for m in first:
        consumer.ack(m)
    (held,) = receive_until(consumer, 1)
    assert held.body == b"soon" and held.delivery_attempt == 1
    assert held.delivery_timestamp == now + 3000


# ------------------------------------------------------------------ receipt handles


def test_guessed_and_other_group_handles_ack_nothing(clients, names, stack, wire):
    """Finding 8: one AckMessage with 6,000 guessed handles acked a message another
    consumer held. Handles now carry a tag only the shard makes (HMAC)."""
    stub, meta = wire
    topic, group = names
    clients.producer(topic).send(clients.message(topic, b"mine"))
    holder = clients.simple(group, {topic: "*"})
    (m,) = receive_until(holder, 1)
    numbers = m.receipt_handle.split(" ")[1:8]  # shard queue offset generation pop_ms invisible_ms commitlog_offset
    guesses = [" ".join(["m1", *numbers[:3], str(g), *numbers[4:]]) for g in range(1, 40)]  # as handles were
    guesses += [" ".join(["m2", *numbers, t * 22]) for t in "AB_-"]  # the right fields, a made-up tag
    guesses.append(m.receipt_handle[:-1] + ("A" if m.receipt_handle[-1] != "A" else "B"))  # one character off
    res = ack(stub, meta, group, topic, guesses)
    assert res.status.code == d.Code.INVALID_RECEIPT_HANDLE, res.status
    assert {e.status.code for e in res.entries} == {d.Code.INVALID_RECEIPT_HANDLE}
    # another group's consumer of the same message: its handle acks nothing of this group's
    other = clients.simple(group + "_other", {topic: "*"})
    (o,) = receive_until(other, 1)
    assert o.receipt_handle.split(" ")[2:4] == numbers[1:3]  # the same queue and offset
    res = ack(stub, meta, group, topic, [o.receipt_handle])
    assert res.entries[0].status.code == d.Code.INVALID_RECEIPT_HANDLE
    holder.ack(m)  # still the holder's to ack
    other.ack(o)
    res = ack(stub, meta, group, topic, [m.receipt_handle])
    assert res.entries[0].status.code == d.Code.INVALID_RECEIPT_HANDLE  # acked: stale now


def test_forward_to_dead_letter_queue_refuses_an_expired_handle(clients, names, front, wire):
    """Finding 8: ForwardMessageToDeadLetterQueue took a handle AckMessage refuses."""
    stub, meta = wire
    topic, group = names
    clients.producer(topic).send(clients.message(topic, b"late"))
    consumer = clients.simple(group, {topic: "*"})
    (m,) = receive_until(consumer, 1, invisible_s=1)
    time.sleep(1.3)  # its invisible time passes: the handle expired
    res = stub.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            receipt_handle=m.receipt_handle,
            message_id=m.message_id,
            delivery_attempt=1,
            max_delivery_attempts=16,
        ),
        metadata=meta,
        timeout=TIMEOUT,
    )
    assert res.status.code == d.Code.INVALID_RECEIPT_HANDLE, res.status
    assert "expired" in res.status.message
    assert ack(stub, meta, group, topic, [m.receipt_handle]).entries[0].status.code == d.Code.INVALID_RECEIPT_HANDLE
    (again,) = receive_until(consumer, 1)  # not dead-lettered: it comes back
    assert again.body == b"late" and again.delivery_attempt == 2
    consumer.ack(again)
    assert dead_letters(front, group, 1, wait_s=1) == []
