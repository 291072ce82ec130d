"""Over gRPC through a LocalStack (no Ray), one shard and two: the own API's
SendBatch and SendEncoded refuse what the RocketMQ port refuses (message_rules.py):
TIMER_DELIVER_MS past int64 or not a number, born times outside Timestamp's range, a
FIFO topic's message without a group, a queue past the topic's write queues; each
INVALID_ARGUMENT naming the message, and nothing of the batch is written (a SendBatch
split over two shards included: the front checks before any shard writes)."""

from __future__ import annotations

import zlib

import grpc
import pytest

from mqstore.services.query.client import FrontClient, columns
from mqstore.services.startup.local import LocalStack
from mqstore.store import MessageBatch
from tests.services.helpers import small_config

C = grpc.StatusCode
BAD = {  # name -> (topic, keyword columns for message 1, text of the refusal)
    "TIMER_DELIVER_MS past int64": ("Later", {"properties": [{"TIMER_DELIVER_MS": str(1 << 64)}]}, "TIMER_DELIVER_MS"),
    "TIMER_DELIVER_MS not a number": ("Later", {"properties": [{"TIMER_DELIVER_MS": "tomorrow"}]}, "'tomorrow'"),
    "a born time past 9999": ("Plain", {"born_timestamps": [1 << 62]}, "born time"),
    "a FIFO message without a group": ("Fifo", {"properties": [None]}, "message group"),
    "a queue past the write queues": ("Two", {"queue_ids": [5]}, "write queue"),
}
GOOD = {  # message 0 of each batch: one its topic takes
    "Later": {"properties": {"TIMER_DELIVER_MS": "1"}, "queue_ids": 0, "born_timestamps": 1},
    "Plain": {"properties": None, "queue_ids": 0, "born_timestamps": 1},
    "Fifo": {"properties": {"__SHARDINGKEY": "g"}, "queue_ids": 0, "born_timestamps": 1},
    "Two": {"properties": None, "queue_ids": 1, "born_timestamps": 1},
}


@pytest.fixture(scope="module", params=[1, 2], ids=["1-shard", "2-shards"])
def client(request, tmp_path_factory):
    with LocalStack(tmp_path_factory.mktemp("rules"), small_config(), shards=request.param) as st:
        assert st.wait_ready(60)
        with FrontClient(st.front_endpoint) as c:
            c.update_topic("Later", message_type="DELAY")
            c.update_topic("Fifo", message_type="FIFO")
            c.update_topic("Two", read_queue_nums=2, write_queue_nums=2)
            yield c


def batch(name: str) -> MessageBatch:
    """Message 0 good, message 1 the bad one; queue ids spread the two over the shards."""
    topic, bad, _ = BAD[name]
    good = GOOD[topic]
    cols = {}
    for field in ("properties", "queue_ids", "born_timestamps"):
        cols[field] = [good[field], bad.get(field, [good[field]])[0]]
    if "queue_ids" not in bad:
        cols["queue_ids"] = [0, 1]  # two queues: on two shards, most likely two shards
    return MessageBatch(topics=topic, bodies=[b"good", b"bad"], **cols)


def wrote(client: FrontClient) -> list[int]:
    return [s.wrote_offset for s in client.store_status()]


def fails(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


@pytest.mark.parametrize("name", list(BAD))
def test_send_batch_refuses_the_batch(client, name):
    b = batch(name)
    before = wrote(client)
    cols = columns(b.topics, b.bodies, queue_ids=b.queue_ids, properties=b.properties)
    cols.born_timestamps.extend(b.born_timestamps)
    code, text = fails(lambda: client.send_columns(cols))
    assert code is C.INVALID_ARGUMENT and "message 1" in text and BAD[name][2] in text, text
    assert wrote(client) == before


@pytest.mark.parametrize("name", list(BAD))
def test_send_encoded_refuses_the_message(client, name):
    b = batch(name)
    one = MessageBatch(  # the bad message alone: the shards of a split encoded batch answer apart
        topics=b.topics,
        bodies=b.bodies[1:],
        queue_ids=b.queue_ids[1:],
        properties=b.properties[1:],
        born_timestamps=b.born_timestamps[1:],
    )
    before = wrote(client)
    res = None
    try:
        res = client.send_encoded(one)
    except grpc.RpcError as e:
        assert e.code() is C.INVALID_ARGUMENT and BAD[name][2] in e.details(), e.details()
    else:
        assert not res.ok and BAD[name][2] in str(res.errors), res.errors
    assert wrote(client) == before


def test_the_good_messages_are_taken(client):
    for topic, good in GOOD.items():
        cols = columns(topic, [b"fine"], queue_ids=good["queue_ids"], properties=[good["properties"]])
        cols.born_timestamps.append(good["born_timestamps"])
        assert len(client.send_columns(cols).result.statuses) == 1
        assert client.send_encoded(MessageBatch(topics=topic, bodies=[b"fine"], **{k: [v] for k, v in good.items()})).ok


def test_a_fifo_group_keeps_to_one_queue_through_either_send(client):
    groups = [f"g{i}" for i in range(10)]
    props = [{"__SHARDINGKEY": g} for g in groups]
    want = [zlib.crc32(g.encode()) % 4 for g in groups]  # Fifo: 4 write queues
    res = client.send("Fifo", [b"m"] * 10, properties=props)
    assert list(res.queue_ids) == want
    res = client.send_encoded(MessageBatch(topics="Fifo", bodies=[b"m"] * 10, properties=props))
    assert res.ok and res.queue_ids.tolist() == want
