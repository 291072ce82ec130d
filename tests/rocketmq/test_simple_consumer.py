"""The official Python client's Producer and SimpleConsumer against mqstore's RocketMQ
port: send and receive exactly once, tag filters, redelivery with the attempt count,
ChangeInvisibleDuration, the dead-letter queue, FIFO order, delay messages, and
messages crossing between the client and mqstore's own API."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.rocketmq.conftest import MAX_ATTEMPTS, receive_until

pytestmark = pytest.mark.slow


def test_producer_sends_and_simple_consumer_receives_exactly_those(clients, names):
    topic, group = names
    producer = clients.producer(topic)
    sent = {}
    for i in range(20):
        m = clients.message(
            topic, f"body-{i}".encode(), tag=f"Tag{i % 3}", keys=(f"order-{i}", f"user-{i % 4}"), props={"n": str(i)}
        )
        receipt = producer.send(m)
        sent[receipt.message_id] = i
    assert len(sent) == 20
    consumer = clients.simple(group, {topic: "*"})
    got = receive_until(consumer, 20)
    assert sorted(m.message_id for m in got) == sorted(sent)
    for m in got:
        i = sent[m.message_id]
        assert m.body == f"body-{i}".encode()
        assert m.tag == f"Tag{i % 3}"
        assert sorted(m.keys) == sorted([f"order-{i}", f"user-{i % 4}"])
        assert m.properties["n"] == str(i)
        assert m.delivery_attempt == 1
        assert m.topic == topic
        consumer.ack(m)
    assert consumer.receive(32, 30) == []  # everything acked: nothing more, after the long poll


def test_tag_filter_takes_only_its_tags(clients, names):
    topic, group = names
    producer = clients.producer(topic)
    for i in range(12):
        producer.send(clients.message(topic, f"m{i}".encode(), tag="TagA" if i % 3 == 0 else "TagB"))
    consumer = clients.simple(group, {topic: "TagA"})
    got = receive_until(consumer, 4)
    assert sorted(m.body for m in got) == [b"m0", b"m3", b"m6", b"m9"]
    assert {m.tag for m in got} == {"TagA"}
    for m in got:
        consumer.ack(m)
    assert consumer.receive(32, 30) == []  # the TagB ones were consumed silently for this group


def test_unacked_message_comes_back_with_attempt_two(clients, names, rmq):
    topic, group = names
    clients.producer(topic).send(clients.message(topic, b"again"))
    consumer = clients.simple(group, {topic: "*"})
    (first,) = receive_until(consumer, 1, invisible_s=1)
    assert first.delivery_attempt == 1
    old_handle = first.receipt_handle
    time.sleep(1.5)
    (second,) = receive_until(consumer, 1, invisible_s=30)
    assert second.message_id == first.message_id and second.body == b"again"
    assert second.delivery_attempt == 2
    assert second.receipt_handle != old_handle
    consumer.ack(second)
    with pytest.raises(rmq.v5.exception.client_exception.BadRequestException) as e:
        consumer.ack(first)  # its handle is stale: INVALID_RECEIPT_HANDLE
    assert e.value.code == 40013


def test_change_invisible_duration_gives_a_new_handle_and_voids_the_old(clients, names, rmq):
    topic, group = names
    clients.producer(topic).send(clients.message(topic, b"later"))
    consumer = clients.simple(group, {topic: "*"})
    (m,) = receive_until(consumer, 1, invisible_s=60)
    old_handle = m.receipt_handle
    consumer.change_invisible_duration(m, 1)  # the client keeps the new handle in m
    assert m.receipt_handle != old_handle
    time.sleep(1.5)
    (again,) = receive_until(consumer, 1, invisible_s=30)  # visible again after 1 s, not 60
    assert again.message_id == m.message_id and again.delivery_attempt == 2
    consumer.ack(again)
    m.receipt_handle = old_handle
    with pytest.raises(rmq.v5.exception.client_exception.BadRequestException):
        consumer.ack(m)


def test_dead_letter_queue_after_max_attempts(clients, names, front):
    topic, group = names
    clients.producer(topic).send(clients.message(topic, b"poison", tag="Bad"))
    consumer = clients.simple(group, {topic: "*"})
    ids = set()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        (m,) = receive_until(consumer, 1, invisible_s=1)
        assert m.delivery_attempt == attempt
        ids.add(m.message_id)
        time.sleep(1.2)
    assert consumer.receive(32, 30) == []  # attempt MAX_ATTEMPTS + 1 goes to the DLQ, not to the consumer
    dlq = f"%DLQ%{group}"
    end, records = time.monotonic() + 10, []
    while not records and time.monotonic() < end:  # the DLQ write is dispatched to its queue shortly after
        records = [r for q in range(4) for r in front.pull(dlq, q, 0).records]
        time.sleep(0.1)
    assert [r.body for r in records] == [b"poison"]
    assert records[0].properties["DLQ_ORIGIN_TOPIC"] == topic
    assert records[0].properties["UNIQ_KEY"] in ids
    dlq_consumer = clients.simple(f"{group}_dlq", {dlq: "*"})  # the DLQ is a topic like any other
    (d,) = receive_until(dlq_consumer, 1)
    assert d.body == b"poison" and d.tag == "Bad"


def test_fifo_topic_delivers_each_message_group_in_order(clients, names, front):
    topic, group = names
    front.update_topic(topic, message_type="FIFO")
    producer = clients.producer(topic)
    for i in range(10):
        for g in ("alpha", "beta", "gamma"):
            producer.send(clients.message(topic, f"{g}-{i}".encode(), group=g))
    consumer = clients.simple(group, {topic: "*"})
    seen: dict[str, list[int]] = {}
    end = time.monotonic() + 60
    while sum(map(len, seen.values())) < 30 and time.monotonic() < end:
        batch = consumer.receive(4, 30)
        for m in batch:
            g, i = m.body.decode().split("-")
            seen.setdefault(g, []).append(int(i))
            assert m.message_group == g
        for m in batch:
            consumer.ack(m)
    assert seen == {g: list(range(10)) for g in ("alpha", "beta", "gamma")}


def test_fifo_queue_gives_nothing_more_while_a_message_is_in_flight(clients, names, front):
    topic, group = names
    front.update_topic(topic, read_queue_nums=1, write_queue_nums=1, message_type="FIFO")
    producer = clients.producer(topic)
    for i in range(3):
        producer.send(clients.message(topic, f"m{i}".encode(), group="one"))
    consumer = clients.simple(group, {topic: "*"})
    (first,) = receive_until(consumer, 1, invisible_s=5, batch=1)
    out_until = time.monotonic() + 5
    assert first.body == b"m0"
    assert consumer.receive(1, 30) == []  # m1 waits while m0 is out (a 2 s long poll)
    time.sleep(max(0.0, out_until - time.monotonic()) + 0.2)
    (again,) = receive_until(consumer, 1, batch=1)
    assert again.body == b"m0" and again.delivery_attempt == 2  # m0 again, before m1
    consumer.ack(again)
    got = receive_until(consumer, 2)
    assert [m.body for m in got] == [b"m1", b"m2"]


def test_delay_message_arrives_no_earlier_than_its_time(clients, names, front):
    topic, group = names
    front.update_topic(topic, message_type="DELAY")
    consumer = clients.simple(group, {topic: "*"})
    at = int(time.time()) + 4  # the Python client takes seconds (its docs say ms)
    clients.producer(topic).send(clients.message(topic, b"later", deliver_at=at))
    assert consumer.receive(32, 30) == []  # a 2 s long poll: not yet
    got = receive_until(consumer, 1, timeout_s=20)
    arrived = time.time()
    assert [m.body for m in got] == [b"later"]
    assert arrived >= at
    assert got[0].delivery_timestamp == at * 1000  # read back in ms


def test_client_message_is_found_by_key_and_own_api_message_is_received(clients, names, front, stack):
    topic, group = names
    receipt = clients.producer(topic).send(clients.message(topic, b"from-client", keys=("client-key-1",)))
    front.send(topic, [b"from-mqstore"], tags="TagM", keys="own-key")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mqstore.cli.main",
            "query-msg-by-key",
            "--server",
            stack.front_endpoint,
            "--topic",
            topic,
            "client-key-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "from-client" in out.stdout and receipt.message_id in out.stdout
    consumer = clients.simple(group, {topic: "*"})
    got = receive_until(consumer, 2)
    by_body = {m.body: m for m in got}
    assert set(by_body) == {b"from-client", b"from-mqstore"}
    assert by_body[b"from-mqstore"].tag == "TagM" and set(by_body[b"from-mqstore"].keys) == {"own-key"}
    assert by_body[b"from-client"].message_id == receipt.message_id
