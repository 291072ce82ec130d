"""RocketMQ 5 long topics through the services (LocalStack: the front, commitlog,
builders and dispatcher over real gRPC on loopback, no Ray): a 200-character
``%RETRY%`` topic is sent to (stored as V2 records), pulled (decoded and raw),
queried by msgId, key, unique key and queue offset, and has a status; the
consume-queue builder takes its units; a 200-character ordinary topic is
INVALID_ARGUMENT with the rule in the message. The store is then reopened."""

from __future__ import annotations

import grpc
import pytest

from mqstore.formats.message import MAGIC_V2, decode_record
from mqstore.rpc.v1 import common_pb2, front_pb2
from mqstore.services.query.client import FrontClient, raw_records
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import small_config, wait_dispatched

RETRY = "%RETRY%" + "order_processing_consumer_group-" * 6 + "x"
DLQ = "%DLQ%" + "d" * 250


def test_long_retry_topics_over_the_services(tmp_path) -> None:
    assert len(RETRY) == 200 and len(DLQ) == 255
    cfg = small_config()
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(60)
        res = c.send(
            RETRY,
            [f"r{i}".encode() for i in range(6)],
            queue_ids=[i % 2 for i in range(6)],
            keys=[f"k{i}" for i in range(6)],
            tags=["TagA" if i % 2 else "TagB" for i in range(6)],
        )
        assert list(res.statuses) == [common_pb2.PUT_OK] * 6
        assert c.send(DLQ, [b"dead"], queue_ids=0).statuses[0] == common_pb2.PUT_OK
        wait_dispatched(c)
        p = c.pull(RETRY, 1, 0)
        assert p.status == front_pb2.FOUND and [r.body for r in p.records] == [b"r1", b"r3", b"r5"]
        assert all(r.topic == RETRY for r in p.records)
        raw = raw_records(c.pull(RETRY, 0, 0, raw=True))
        assert [(decode_record(b).magic, decode_record(b).topic, decode_record(b).body) for b in raw] == [
            (MAGIC_V2, RETRY, b"r0"),
            (MAGIC_V2, RETRY, b"r2"),
            (MAGIC_V2, RETRY, b"r4"),
        ]
        assert [r.body for r in c.pull(RETRY, 1, 0, tags="TagA").records] == [b"r1", b"r3", b"r5"]
        (by_id,) = c.query_by_msg_id(res.msg_ids[3])
        assert (by_id.topic, by_id.body, by_id.queue_id, by_id.queue_offset) == (RETRY, b"r3", 1, 1)
        assert [r.body for r in c.query_by_key(RETRY, "k4")] == [b"r4"]
        assert [r.body for r in c.query_by_unique_key(RETRY, res.unique_keys[2])] == [b"r2"]
        assert [r.body for r in c.query_by_offset(RETRY, 0, 2)] == [b"r4"]
        assert {q.queue_id: q.max_offset for q in c.topic_status(RETRY)} == {0: 3, 1: 3}
        assert [r.body for r in c.pull(DLQ, 0, 0).records] == [b"dead"]
        c.commit_offset("order_processing_consumer_group", RETRY, 0, 2)
        assert c.fetch_offset("order_processing_consumer_group", RETRY, 0) == 2
        with pytest.raises(grpc.RpcError) as e:
            c.send("OrderTopic" * 20, [b"x"])
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "the limit is 127 (255 only for topics starting with %RETRY% or %DLQ%)" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            c.pull("%RETRY%" + "g" * 300, 0, 0)
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "the limit is 255" in e.value.details()
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:  # reopened: the same answers
        assert st.wait_ready(60)
        assert [r.body for r in c.pull(RETRY, 0, 0).records] == [b"r0", b"r2", b"r4"]
        assert c.send(RETRY, [b"again"], queue_ids=0).queue_offsets[0] == 3
        wait_dispatched(c)
        assert [r.body for r in c.query_by_key(RETRY, "k1")] == [b"r1"]
        assert c.query_by_offset(RETRY, 0, 3)[0].body == b"again"
