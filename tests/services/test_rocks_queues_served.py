"""A shard served over gRPC on loopback (LocalStack: commitlog, consume-queue builder,
index builder, dispatcher and front, every hop a gRPC call) whose consume queues are
one RocksDB (``store_type="defaultRocksDB"``): send over many topics, pull, pop and
ack, topic status with queues made ahead, offset by time, consumer offsets; then a
reopen keeps it all and verify finds the store sound."""

from __future__ import annotations

import time

import pytest

from mqstore.rpc.v1 import common_pb2, consume_queue_pb2, consume_queue_pb2_grpc, front_pb2
from mqstore.services.common.server import sync_channel
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store.store_type import store_type_on_disk
from mqstore.store.verify import verify_store
from tests.services.helpers import small_config, wait_dispatched

TOPICS = 200


@pytest.mark.slow  # a served stack, opened twice
def test_served_store_with_queues_in_rocksdb(tmp_path) -> None:
    cfg = small_config(store_type="defaultRocksDB")
    t0 = int(time.time() * 1000)
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(60)
        topics = [f"T{i % TOPICS}" for i in range(2000)]
        res = c.send(
            topics, [f"m{i}".encode() for i in range(2000)], queue_ids=[(i // TOPICS) % 4 for i in range(2000)]
        )
        assert list(res.statuses) == [common_pb2.PUT_OK] * 2000
        wait_dispatched(c)
        p = c.pull("T7", 1, 0, max_messages=32)
        assert p.status == front_pb2.FOUND and [r.body for r in p.records] == [b"m207", b"m1007", b"m1807"]
        assert c.offset_by_time("T7", 1, t0) == 0 and c.offset_by_time("T7", 1, 1 << 60) == 3
        c.update_topic("Made", read_queue_nums=3, write_queue_nums=3)
        assert [(q.queue_id, q.max_offset) for q in c.topic_status("Made")] == [(0, 0), (1, 0), (2, 0)]
        assert c.pull("Made", 2, 0).status == front_pb2.NO_MESSAGE_IN_QUEUE
        c.commit_offset("g", "T7", 1, 2)
        with sync_channel(st.queue_builders[0].endpoint, auth=st.auth) as ch:
            stub = consume_queue_pb2_grpc.ConsumeQueueServiceStub(ch)
            popped = stub.Pop(
                consume_queue_pb2.PopRequest(
                    group="p", topic="T3", queue_ids=[0, 1, 2, 3], max_messages=32, invisible_ms=60_000, max_attempts=16
                ),
                timeout=30,
            )
            want = sorted([(q, 0) for q in range(4)] + [(q, 1) for q in range(4)] + [(q, 2) for q in range(2)])
            assert sorted((m.queue_id, m.queue_offset) for m in popped.messages) == want
            acked = stub.AckPop(
                consume_queue_pb2.AckPopRequest(
                    group="p", topic="T3", receipt_handles=[m.receipt_handle for m in popped.messages]
                ),
                timeout=30,
            )
            assert len(acked.outcomes) == 10
    assert store_type_on_disk(tmp_path) == "defaultRocksDB"  # one shard: the root is its store
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(60)
        assert [r.body for r in c.pull("T7", 1, 0).records] == [b"m207", b"m1007", b"m1807"]
        assert [(q.queue_id, q.max_offset) for q in c.topic_status("Made")] == [(0, 0), (1, 0), (2, 0)]
        assert c.fetch_offset("g", "T7", 1) == 2
        assert sum(q.max_offset for t in range(TOPICS) for q in c.topic_status(f"T{t}")) == 2000
    assert verify_store(tmp_path).ok
