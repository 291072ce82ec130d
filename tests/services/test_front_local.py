"""The public API over real gRPC on loopback, without Ray: LocalStack runs a shard's
commitlog, consume-queue builder, index builder and dispatcher, and the front, in
this process, every hop a gRPC call. The Ray actors wrap exactly these hosts
(tests/services/test_ray_stack.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from mqstore.formats.message import decode_record
from mqstore.rpc.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, front_pb2
from mqstore.services.common.server import sync_channel
from mqstore.services.query.client import FrontClient, columns, decode_pulled, raw_records
from mqstore.services.query.routing import shard_dir
from mqstore.services.startup.local import LocalStack
from mqstore.store.topic_configs import TopicConfigs
from tests.services.helpers import code_of, small_config, wait_dispatched

C = grpc.StatusCode


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    st = LocalStack(root, small_config())
    assert st.wait_ready(60)
    yield st
    st.close()
    assert not (root / "abort").exists(), "close must leave a clean store"


@pytest.fixture(scope="module")
def client(stack):
    with FrontClient(stack.front_endpoint) as c:
        yield c


def test_the_dispatcher_reads_the_segments_of_its_node(stack, client):
    """The local stack's dispatcher maps the commitlog's segments and gets only the
    bounds of each range over ReadRange; records that span several 1 MiB segments
    (BLANKs between them) reach the consume queues and the index intact."""
    bodies = [f"{i:06d}".encode() * 500 for i in range(1500)]  # 3 KB each: 4.5 MB, five segments
    res = client.send("MapTopic", bodies, queue_ids=0, keys=[f"map{i}" for i in range(1500)])
    assert list(res.statuses) == [common_pb2.PUT_OK] * 1500
    wait_dispatched(client)
    got, off = [], 0
    while (p := client.pull("MapTopic", 0, off, max_messages=1000)).status == front_pb2.FOUND:
        got += [r.body for r in p.records]
        off = p.next_offset
    assert got == bodies
    assert [r.body for r in client.query_by_key("MapTopic", "map1234")] == [bodies[1234]]
    assert [d.status()["reads"] for d in stack.dispatchers] == ["local"]


def test_send_then_pull_every_queue(client):
    bodies = [f"m{i}".encode() for i in range(400)]
    res = client.send(
        "PullTopic", bodies, tags=["TagA" if i % 2 else "TagB" for i in range(400)], keys=[f"k{i}" for i in range(400)]
    )
    assert list(res.statuses) == [common_pb2.PUT_OK] * 400
    assert sorted(set(res.queue_ids)) == [0, 1, 2, 3]  # automatic ids: round robin over 4 write queues
    wait_dispatched(client)
    got = {}
    for q in range(4):
        off = 0
        while True:
            p = client.pull("PullTopic", q, off, max_messages=37)
            if p.status == front_pb2.NO_NEW_MESSAGE:
                break
            assert p.status == front_pb2.FOUND
            for r in p.records:
                assert r.queue_id == q and r.queue_offset >= off
                got[r.body] = r
            off = p.next_offset
        assert off == p.max_offset == 100
    assert set(got) == set(bodies)
    one = got[b"m7"]
    assert (one.tags, one.keys, one.msg_id) == ("TagA", "k7", res.msg_ids[7])


def test_pull_with_tags_and_raw(client):
    res = client.send("TagTopic", [b"a0", b"b0", b"a1", b"b1", b"a2"], queue_ids=0, tags=["A", "B", "A", "B", "A"])
    assert list(res.queue_offsets) == [0, 1, 2, 3, 4]
    wait_dispatched(client)
    p = client.pull("TagTopic", 0, 0, tags="A")
    assert [r.body for r in p.records] == [b"a0", b"a1", b"a2"] and p.next_offset == 5
    p = client.pull("TagTopic", 0, 0, tags="B || Nope", max_messages=1)
    assert [r.body for r in p.records] == [b"b0"] and p.next_offset == 2
    p = client.pull("TagTopic", 0, 0, tags="Nope")
    assert p.status == front_pb2.NO_MATCHED_MESSAGE and p.next_offset == 5
    raw = client.pull("TagTopic", 0, 1, raw=True, max_messages=2)
    assert [decode_record(b).body for b in raw_records(raw)] == [b"b0", b"a1"] and raw.next_offset == 3
    assert [r.body for r in decode_pulled(raw)] == [b"b0", b"a1"]
    assert client.pull("TagTopic", 0, 9).status == front_pb2.OFFSET_OVERFLOW
    assert client.pull("TagTopic", 3, 0).status == front_pb2.NO_MESSAGE_IN_QUEUE


def test_every_query(client):
    t0 = int(time.time() * 1000)
    res = client.send(
        "QueryTopic",
        [b"first", b"second", b"third"],
        queue_ids=1,
        keys=["order-1", "order-1 x", "order-2"],
        unique_keys=["U1", "U2", "U3"],
    )
    wait_dispatched(client)
    assert client.query_by_msg_id(res.msg_ids[1])[0].body == b"second"
    assert [r.body for r in client.query_by_unique_key("QueryTopic", "U3")] == [b"third"]
    assert sorted(r.body for r in client.query_by_key("QueryTopic", "order-1")) == [b"first", b"second"]
    assert [r.body for r in client.query_by_key("QueryTopic", "x")] == [b"second"]
    assert client.query_by_key("QueryTopic", "order-1", begin_ms=t0 - 2000, end_ms=t0 + 600_000)  # index times: seconds
    assert code_of(lambda: client.query_by_key("QueryTopic", "order-1", begin_ms=1, end_ms=2)) is C.NOT_FOUND
    assert [r.body for r in client.query_by_offset("QueryTopic", 1, 2)] == [b"third"]
    assert client.offset_by_time("QueryTopic", 1, 0) == 0
    assert client.offset_by_time("QueryTopic", 1, t0 + 3_600_000) == 3
    st = client.topic_status("QueryTopic")
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in st] == [(1, 0, 3)]
    assert st[0].last_store_timestamp >= t0


def test_consumer_offsets(client):
    client.send("OffsetTopic", [b"x"] * 5, queue_ids=2)
    wait_dispatched(client)
    assert client.fetch_offset("g1", "OffsetTopic", 2) == -1
    client.commit_offset("g1", "OffsetTopic", 2, 3)
    assert client.fetch_offset("g1", "OffsetTopic", 2) == 3
    rows = client.consumer_progress("g1")
    assert [(r.topic, r.queue_id, r.broker_offset, r.consumer_offset, r.lag) for r in rows] == [
        ("OffsetTopic", 2, 5, 3, 2)
    ]
    assert code_of(lambda: client.commit_offset("g1", "OffsetTopic", 2, 6)) is C.INVALID_ARGUMENT  # past the max


def test_topics(stack, client):
    cfg = client.update_topic("Orders", write_queue_nums=2, read_queue_nums=2)
    queues = stack.queue_builders[0].state.store_dir / "consumequeue" / "Orders"  # made ahead (issue 26 item 3)
    deadline = time.monotonic() + 30
    while not all((queues / str(q) / "00000000000000000000").exists() for q in (0, 1)):
        assert time.monotonic() < deadline, "the new topic's queue files were not made ahead"
        time.sleep(0.05)
    assert (cfg.topic, cfg.write_queue_nums) == ("Orders", 2)
    res = client.send("Orders", [b"o"] * 10)
    assert sorted(set(res.queue_ids)) == [0, 1]
    assert code_of(lambda: client.update_topic("Orders", write_queue_nums=70000)) is C.INVALID_ARGUMENT


def _big(n):
    return b"x" * n


BAD_FRONT = [
    ("empty batch", lambda c: c.send_columns(common_pb2.MessageColumns(topics=["T"])), C.INVALID_ARGUMENT),
    ("no topic", lambda c: c.send_columns(common_pb2.MessageColumns(bodies=[b"x"])), C.INVALID_ARGUMENT),
    ("bad topic", lambda c: c.send("bad topic!", [b"x"]), C.INVALID_ARGUMENT),
    ("queue id", lambda c: c.send("T", [b"x"], queue_ids=70000), C.INVALID_ARGUMENT),
    ("column length", lambda c: c.send("T", [b"x", b"y"], tags=["a", "b", "c"]), C.INVALID_ARGUMENT),
    ("one unique key for two", lambda c: c.send("T", [b"x", b"y"], unique_keys=["u"]), C.INVALID_ARGUMENT),
    ("separator in tags", lambda c: c.send("T", [b"x"], tags="a\x01b"), C.INVALID_ARGUMENT),
    (
        "bad born host",
        lambda c: c.send_columns(columns("T", [b"x"]).__class__(topics=["T"], bodies=[b"x"], born_hosts=["nohost"])),
        C.INVALID_ARGUMENT,
    ),
    ("body too large", lambda c: c.send("T", [_big(65 * 1024)]), C.RESOURCE_EXHAUSTED),
    ("batch too long", lambda c: c.send("T", [b"x"] * 10_001), C.RESOURCE_EXHAUSTED),
    ("negative pull offset", lambda c: c.pull("T", 0, -1), C.INVALID_ARGUMENT),
    ("pull queue id", lambda c: c.pull("T", 65536, 0), C.INVALID_ARGUMENT),
    ("pull too many", lambda c: c.pull("T", 0, 0, max_messages=10_001), C.RESOURCE_EXHAUSTED),
    ("bad tag expression", lambda c: c.pull("T", 0, 0, tags="A ||"), C.INVALID_ARGUMENT),
    ("malformed msgId", lambda c: c.query_by_msg_id("zz"), C.INVALID_ARGUMENT),
    ("msgId past the end", lambda c: c.query_by_msg_id("7F00000100002A9F00000000FFFFFFFF"), C.NOT_FOUND),
    ("msgId of another host", lambda c: c.query_by_msg_id("0A00000500002A9F0000000000000000"), C.NOT_FOUND),
    ("msgId inside a record", lambda c: c.query_by_msg_id("7F00000100002A9F0000000000000001"), C.NOT_FOUND),
    ("unknown key", lambda c: c.query_by_key("T", "nope"), C.NOT_FOUND),
    ("empty key", lambda c: c.query_by_key("T", ""), C.INVALID_ARGUMENT),
    ("query max_num", lambda c: c.query_by_key("T", "k", max_num=65), C.RESOURCE_EXHAUSTED),
    ("offset past the queue", lambda c: c.query_by_offset("PullTopic", 0, 10**9), C.NOT_FOUND),
    ("unknown topic status", lambda c: c.topic_status("NoSuchTopic"), C.NOT_FOUND),
    ("bad group", lambda c: c.commit_offset("bad group", "T", 0, 0), C.INVALID_ARGUMENT),
    ("empty group", lambda c: c.fetch_offset("", "T", 0), C.INVALID_ARGUMENT),
]


@pytest.mark.parametrize("name,call,code", BAD_FRONT, ids=[b[0] for b in BAD_FRONT])
def test_bad_request_gets_its_code_and_the_server_keeps_answering(client, name, call, code):
    client.send("Alive", [b"x"], queue_ids=0)  # something to pull afterwards
    assert code_of(lambda: call(client)) is code
    assert client.pull("Alive", 0, 0).status in (
        front_pb2.FOUND,
        front_pb2.NO_NEW_MESSAGE,
        front_pb2.NO_MESSAGE_IN_QUEUE,
    )


def test_garbage_bytes_are_invalid_argument_and_do_not_kill_the_server(stack, client):
    """Bytes that are not the request message: INVALID_ARGUMENT naming the method, on
    the front and (with the secret) on an internal server."""
    for endpoint, method, auth in (
        (stack.front_endpoint, "/mqstore.v1.FrontService/SendBatch", None),
        (stack.shards[0].endpoint, "/mqstore.v1.CommitLogService/AppendBatch", stack.auth),
    ):
        with sync_channel(endpoint, auth=auth) as ch:
            call = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as e:
                call(b"\xff\xff\xff\xff\x0f", timeout=10)
        assert e.value.code() is C.INVALID_ARGUMENT and "malformed request" in e.value.details(), e.value
    assert client.send("Alive", [b"y"], queue_ids=0).statuses[0] == common_pb2.PUT_OK


def test_health_and_reflection_on_every_server(stack):
    servers = {
        stack.front_endpoint: "mqstore.v1.FrontService",
        stack.shards[0].endpoint: "mqstore.v1.CommitLogService",
        stack.queue_builders[0].endpoint: "mqstore.v1.ConsumeQueueService",
        stack.index_builders[0].endpoint: "mqstore.v1.IndexService",
        stack.dispatchers[0].endpoint: "mqstore.v1.DispatcherService",
    }
    for endpoint, service in servers.items():
        with sync_channel(endpoint, auth=None if endpoint == stack.front_endpoint else stack.auth) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for name in ("", service):
                assert (
                    health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status
                    == health_pb2.HealthCheckResponse.SERVING
                )
            refl = reflection_pb2_grpc.ServerReflectionStub(ch)
            answers = refl.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
            names = {s.name for a in answers for s in a.list_services_response.service}
            assert service in names and "grpc.health.v1.Health" in names
    for endpoint in list(servers)[1:]:  # internal servers: reflection (a stream) without the secret is refused too
        with sync_channel(endpoint) as ch:
            refl = reflection_pb2_grpc.ServerReflectionStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                list(
                    refl.ServerReflectionInfo(
                        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
                    )
                )
            assert e.value.code() is grpc.StatusCode.UNAUTHENTICATED


def test_store_status(client):
    (s,) = client.store_status()
    assert s.state == "SERVING" and s.writable and s.wrote_offset == s.flushed_offset and s.dispatched_offset >= 0


def test_a_message_indexed_twice_is_answered_once(tmp_path):
    """Reopening a store indexes its last message again (as RocketMQ does); the
    front answers each message once."""
    cfg = small_config()
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        c.send("Twice", [b"only"], keys="dup")
        wait_dispatched(c)
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        assert [r.body for r in c.query_by_key("Twice", "dup")] == [b"only"]


def test_delayed_messages_are_delivered_through_the_builder(client):
    """DELAY level 1 (1 s): stored under the delay topic first; the consume-queue
    builder's scheduler reads the delay queue where it is built and delivers the
    real message to the commitlog (DeliverDelayed) when it is due."""
    res = client.send("Later", [b"soon"], queue_ids=2, properties={"DELAY": "1"})
    assert list(res.statuses) == [common_pb2.PUT_OK]
    sent = time.monotonic()
    wait_dispatched(client)
    assert client.pull("Later", 2, 0).status != front_pb2.FOUND  # not before its time
    deadline = sent + 15
    while (p := client.pull("Later", 2, 0)).status != front_pb2.FOUND:
        assert time.monotonic() < deadline, "the delayed message was never delivered"
        time.sleep(0.1)
    assert [r.body for r in p.records] == [b"soon"] and time.monotonic() - sent >= 0.9
    assert p.records[0].properties.get("SCHEDULE_SOURCE") == "1:0" and "DELAY" not in p.records[0].properties


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_a_topics_message_type_is_answered_and_persisted(tmp_path):
    """update_topic(..., message_type=...) goes to every shard: answered, written to
    each shard's topics.json as the attribute message.type, and still there after a
    reopen (ListTopics on each shard). Not given, the topic keeps its type (a new
    one: NORMAL); a name that is not a type is INVALID_ARGUMENT naming it."""
    cfg = small_config()
    with LocalStack(tmp_path, cfg, shards=2) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(60)
        assert c.update_topic("Fifo", message_type="FIFO").message_type == "FIFO"
        assert c.update_topic("Plain").message_type == "NORMAL"
        assert c.update_topic("Any", message_type="MIXED").message_type == "MIXED"
        kept = c.update_topic("Fifo", write_queue_nums=8, read_queue_nums=8)
        assert (kept.message_type, kept.write_queue_nums) == ("FIFO", 8)
        with pytest.raises(grpc.RpcError) as e:
            c.update_topic("Fifo", message_type="fifo")
        assert e.value.code() is C.INVALID_ARGUMENT
        assert "'fifo'" in e.value.details() and "NORMAL, FIFO, DELAY, TRANSACTION, MIXED" in e.value.details()
        cli = [sys.executable, "-m", "mqstore.cli.main", "update-topic", "--server", st.front_endpoint]
        p = subprocess.run([*cli, "--topic", "Delay", "--message-type", "DELAY"], capture_output=True, text=True)
        assert p.returncode == 0 and json.loads(p.stdout)["attributes"] == {"message.type": "DELAY"}, p.stderr
    for i in range(2):
        tc = TopicConfigs(shard_dir(tmp_path, i, 2))
        assert tc.get("Fifo").attributes == {"message.type": "FIFO"} and tc.get("Plain").attributes == {}
    with LocalStack(tmp_path, cfg, shards=2) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(60)
        for shard in st.shards:
            with sync_channel(shard.endpoint, auth=st.auth) as ch:
                listed = commitlog_pb2_grpc.CommitLogServiceStub(ch).ListTopics(commitlog_pb2.ListTopicsRequest())
            assert {t.topic: t.message_type for t in listed.configs} == {
                "Any": "MIXED",
                "Delay": "DELAY",
                "Fifo": "FIFO",
                "Plain": "NORMAL",
            }
        assert c.update_topic("Fifo", write_queue_nums=8, read_queue_nums=8).message_type == "FIFO"
        assert c.update_topic("Fifo", message_type="NORMAL").message_type == "NORMAL"
