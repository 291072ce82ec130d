"""A RocketMQ 5 (pop) group's progress in ``mqstore consumer-progress``: after its
messages were received and acked it said "no committed offsets" and exited 1; now
each queue shows the pop cursor as the consumer offset, the lag and what is in
flight, the same with --server and with --store (read next to the running stack)."""

from __future__ import annotations

import json

import pytest

from tests.rocketmq.conftest import receive_until
from tests.unit.test_newcomer import cli

pytestmark = pytest.mark.slow  # the official client against a served stack


def test_pop_groups_show_their_progress(stack, front, clients, names) -> None:
    topic, group = names
    front.update_topic(topic, write_queue_nums=2, read_queue_nums=2)
    producer = clients.producer(topic)
    for i in range(40):
        producer.send(clients.message(topic, b"m%d" % i))
    consumer = clients.simple(group, {topic: "*"})
    got = receive_until(consumer, 40)
    assert len(got) == 40
    for msg in got[:30]:
        consumer.ack(msg)  # 10 stay in flight
    shard_dir = stack.shards[0].state.store_dir
    for target in (["--server", stack.front_endpoint], ["--store", str(shard_dir)]):
        r = cli("consumer-progress", *target, "--group", group, "--format", "json")
        assert r.exit_code == 0, (target, r.stderr)
        rows = [json.loads(x) for x in r.stdout.splitlines()]
        assert [(x["topic"], x["queue_id"], x["kind"]) for x in rows] == [(topic, 0, "pop"), (topic, 1, "pop")]
        assert sum(x["broker_offset"] for x in rows) == 40 and sum(x["consumer_offset"] for x in rows) == 40
        assert sum(x["lag"] for x in rows) == 0 and sum(x["in_flight"] for x in rows) == 10, rows
    r = cli("consumer-progress", "--server", stack.front_endpoint, "--group", "nobody")
    assert r.exit_code == 1 and "has received nothing" in r.stderr
