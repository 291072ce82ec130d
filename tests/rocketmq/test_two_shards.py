"""The RocketMQ port over two shards: a topic's queues live on both, a receive pops
from both (one look at each, then a long poll on both), acks and dead letters go to
the shard the receipt handle names, and a group's %DLQ% queue on each shard is one a
consumer of the DLQ topic reads."""

from __future__ import annotations

import time

import pytest

from mqstore.services.startup.local import LocalStack
from tests.rocketmq.conftest import Clients, receive_until
from tests.services.helpers import small_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    with LocalStack(
        tmp_path_factory.mktemp("two"), small_config(), shards=2, rocketmq_port=0, max_delivery_attempts=2
    ) as st:
        assert st.wait_ready(60)
        yield st


@pytest.fixture
def two_clients(rmq, two):
    c = Clients(rmq, two.rocketmq_endpoint)
    yield c
    c.close()


def test_send_receive_ack_over_two_shards(two_clients):
    producer = two_clients.producer("Spread")
    sent = {producer.send(two_clients.message("Spread", f"s{i}".encode())).message_id for i in range(40)}
    consumer = two_clients.simple("g-spread", {"Spread": "*"})
    got = receive_until(consumer, 40)
    assert {m.message_id for m in got} == sent and len(got) == 40
    assert {m.queue_id for m in got} == {0, 1, 2, 3} if hasattr(got[0], "queue_id") else True
    for m in got:
        consumer.ack(m)
    assert consumer.receive(32, 30) == []


def test_dead_letters_from_both_shards_reach_one_dlq_topic(two_clients):
    producer = two_clients.producer("Poison2")
    for i in range(8):  # round robin over 4 queues: both shards hold some
        producer.send(two_clients.message("Poison2", f"p{i}".encode()))
    consumer = two_clients.simple("g-poison2", {"Poison2": "*"})
    for _ in range(2):  # max attempts 2
        got = receive_until(consumer, 8, invisible_s=1)
        assert len(got) == 8
        time.sleep(1.2)
    end = time.monotonic() + 10
    while consumer.receive(32, 30) and time.monotonic() < end:
        pass  # the third look moves them to the DLQ instead
    dlq = two_clients.simple("g-poison2-dlq", {"%DLQ%g-poison2": "*"})
    dead = receive_until(dlq, 8, timeout_s=30)
    assert sorted(m.body for m in dead) == sorted(f"p{i}".encode() for i in range(8))
