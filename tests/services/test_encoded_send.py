"""Encoded sends over real gRPC on loopback (LocalStack, no Ray): the client encodes
a batch, the front forwards the bytes unparsed (SendEncoded), the commitlog checks
and writes them (AppendEncoded). Stored messages read back as sent; a bad batch is
refused whole with a clear status; the ACL and the routing hold as for SendBatch."""

from __future__ import annotations

import json
import time
import zlib

import grpc
import pytest

from mqstore.bench.remote import LagProbe, run_remote_append
from mqstore.formats.msgid import Host
from mqstore.rpc.v1 import common_pb2, front_pb2
from mqstore.services.query.client import FrontClient, decode_pulled
from mqstore.services.startup.local import LocalStack
from mqstore.store.config import StoreConfig
from mqstore.store.messages import Bodies, MessageBatch, Texts
from mqstore.store.record_batch import BatchEncoder, encode_for_send
from tests.services.helpers import small_config, wait_dispatched

C = grpc.StatusCode


def fails(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


def stored(client: FrontClient, topic: str) -> int:
    """How many messages the topic's queues hold (0: none ever)."""
    try:
        return sum(q.max_offset for q in client.topic_status(topic))
    except grpc.RpcError as e:
        assert e.code() is C.NOT_FOUND
        return 0


def pull_all(client: FrontClient, topic: str, queue_id: int) -> list:
    out, off = [], 0
    while (p := client.pull(topic, queue_id, off, max_messages=1000, raw=True)).status == front_pb2.FOUND:
        out += decode_pulled(p)
        off = p.next_offset
    return out


@pytest.fixture(scope="module", params=[1, 2], ids=["1-shard", "2-shards"])
def stack(request, tmp_path_factory):
    with LocalStack(tmp_path_factory.mktemp("enc"), small_config(), shards=request.param) as st:
        assert st.wait_ready(60)
        yield st


@pytest.fixture(scope="module")
def client(stack):
    with FrontClient(stack.front_endpoint) as c:
        yield c


def test_encoded_batches_are_stored_as_sent(stack, client):
    n = 600
    bodies = [f"body-{i}".encode() * (1 + i % 7) for i in range(n)]
    batch = MessageBatch(
        topics=["EncA" if i % 3 else "EncB" for i in range(n)],
        bodies=Bodies.of(bodies),
        tags=Texts.of([f"t{i % 4}" for i in range(n)]),
        keys=[f"k{i} common" for i in range(n)],
        properties=[{"color": "red"} if i % 5 == 0 else None for i in range(n)],
        born_hosts=Host("10.1.2.3", 4567),
    )
    res = client.send_encoded(batch)
    assert res.ok and len(res) == n and not res.errors
    # every message where the answer says, with what was sent
    wait_dispatched(client)
    seen = {}
    for topic in ("EncA", "EncB"):
        for q in range(4):
            for r in pull_all(client, topic, q):
                seen[r.unique_key] = r
    keys = res.unique_keys
    assert len(seen) == n
    for i in range(n):
        r = seen[keys[i]]
        assert r.body == bodies[i] and r.topic == batch.topics[i]
        assert r.queue_id == res.queue_ids[i] and r.queue_offset == res.queue_offsets[i]
        assert r.physical_offset == res.physical_offsets[i]
        assert r.tags == f"t{i % 4}" and r.keys == f"k{i} common" and r.born_host == Host("10.1.2.3", 4567)
        assert (r.properties.get("color") == "red") == (i % 5 == 0)
    # msgIds name the records, as the columnar path's do
    i = 17
    found = client.query_by_msg_id(res.msg_ids[i])
    assert [m.body for m in found] == [bodies[i]]
    assert [m.body for m in client.query_by_key("EncA", "k17")] == [bodies[17]]


def test_given_queues_and_both_paths_share_queue_offsets(client):
    first = client.send("EncQ", [b"a", b"b"], queue_ids=2)
    res = client.send_encoded(MessageBatch(topics="EncQ", bodies=[b"c", b"d"], queue_ids=2))
    assert res.queue_ids.tolist() == [2, 2]
    assert res.queue_offsets.tolist() == [first.queue_offsets[-1] + 1, first.queue_offsets[-1] + 2]
    again = client.send("EncQ", [b"e"], queue_ids=2)
    assert again.queue_offsets[0] == res.queue_offsets[-1] + 1


def test_bad_batches_are_refused_whole_with_a_clear_status(client):
    route = client.route()
    shards = route.shards

    def raw(records: bytes, topics=("EncBad",), shard=0, n=shards):
        req = common_pb2.EncodedBatch(records=records, topics=list(topics), shard=shard, shards=n)
        return client.stub.SendEncoded(req, timeout=10)

    code, text = fails(lambda: raw(b"\x00" * 100))
    assert code is C.INVALID_ARGUMENT and "encoded record 0" in text
    code, text = fails(
        lambda: client.send_encoded(MessageBatch(topics="EncBad", bodies=[b"x"], properties={"DELAY": "2"}))
    )
    assert code is C.INVALID_ARGUMENT and "SendBatch" in text
    code, text = fails(lambda: client.send_encoded(MessageBatch(topics="SCHEDULE_TOPIC_XXXX", bodies=[b"x"])))
    assert code is C.PERMISSION_DENIED and "SCHEDULE_TOPIC_XXXX" in text
    code, text = fails(lambda: raw(b"", shard=shards, n=shards))
    assert code is C.FAILED_PRECONDITION and "GetRoute" in text
    code, text = fails(lambda: raw(b"", n=shards + 1))
    assert code is C.FAILED_PRECONDITION
    # records of a topic the request does not declare (the ACL saw only the declared ones)
    host = Host("127.0.0.1", 10911)
    data = encode_for_send(
        BatchEncoder(StoreConfig(store_host=host), _Clock()), MessageBatch(topics="Hidden", bodies=[b"x"], queue_ids=0)
    ).data
    shard = next(s for s in range(shards) if _shard_of("Hidden", 0, shards) == s)
    code, text = fails(lambda: raw(data, topics=("EncBad",), shard=shard))
    assert code is C.PERMISSION_DENIED and "Hidden" in text
    wait_dispatched(client)
    assert stored(client, "EncBad") == stored(client, "Hidden") == 0


class _Clock:
    def now_ms(self) -> int:
        return 1

    def monotonic(self) -> float:
        return 0.0


def _shard_of(topic: str, queue_id: int, shards: int) -> int:
    return 0 if shards == 1 else (zlib.crc32(topic.encode()) + queue_id) % shards


def test_acl_applies_to_encoded_sends(tmp_path):
    acl = tmp_path / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "users": [{"access_key": "root", "secret_key": "root-secret-1", "admin": True}]
                + [{"access_key": "prod", "secret_key": "prod-secret-1"}],
                "rules": [{"user": "prod", "resource": "Topic:Ok*", "actions": ["Pub"], "decision": "Allow"}],
            }
        )
    )
    acl.chmod(0o600)
    with LocalStack(tmp_path / "store", small_config(), acl=acl) as st:
        assert st.wait_ready(60)
        with FrontClient(st.front_endpoint, access_key="prod", secret_key="prod-secret-1") as c:
            assert c.send_encoded(MessageBatch(topics="OkTopic", bodies=[b"x"])).ok
            code, text = fails(lambda: c.send_encoded(MessageBatch(topics=["OkTopic", "Secret"], bodies=[b"x", b"y"])))
            assert code is C.PERMISSION_DENIED and "Secret" in text
        with FrontClient(st.front_endpoint) as anonymous:
            assert (
                fails(lambda: anonymous.send_encoded(MessageBatch(topics="OkTopic", bodies=[b"x"])))[0]
                is C.UNAUTHENTICATED
            )
        with FrontClient(st.front_endpoint, access_key="root", secret_key="root-secret-1") as root:
            wait_dispatched(root)
            assert stored(root, "OkTopic") == 1 and stored(root, "Secret") == 0


def test_lag_probe_sees_its_messages_become_readable(stack):
    probe = LagProbe(stack.front_endpoint, every_s=0.02)
    deadline = time.monotonic() + 30  # three probes however loaded the machine (a fixed 0.5 s saw 1 under load)
    while len(probe._lags) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    r = probe.stop()
    assert r["dispatch_lag_probes"] >= 3
    assert 0 < r["dispatch_lag_p50_ms"] <= r["dispatch_lag_p99_ms"] <= r["dispatch_lag_max_ms"] < 5_000


@pytest.mark.parametrize("wire", ["encoded", "columns"])
def test_remote_append_bench_sends_either_way(client, stack, wire):
    r = run_remote_append(stack.front_endpoint, messages=2500, producers=2, batch=1000, wire=wire, probe_lag=True)
    assert r["acked"] == 2500 and r["wire"] == wire and r["bytes"] > 2500 * 128
    assert "dispatch_lag_p99_ms" in r
    with pytest.raises(ValueError, match="wire"):
        run_remote_append(stack.front_endpoint, messages=1, wire="json")


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_a_batch_over_two_shards_with_one_down_says_what_each_message_became(tmp_path):
    """One shard's commitlog is gone: its part is NOT_STORED (the front could not
    reach it, nothing was written: safe to send again), the other part is stored, and
    the error names the shard; the call itself succeeds."""
    with LocalStack(tmp_path, small_config(), shards=2) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(60)
        c.route()  # both shards answered the route
        topics = [f"Down{i}" for i in range(8)]
        batch = MessageBatch(topics=[topics[i % 8] for i in range(64)], bodies=[b"m%d" % i for i in range(64)])
        assert c.send_encoded(batch).ok
        st.shards.pop(1).close()  # (LocalStack closes the rest)
        res = c.send_encoded(batch)
        on = res.shards
        assert set(on.tolist()) == {0, 1}
        assert (res.statuses[on == 0] == common_pb2.PUT_OK).all()
        assert (res.statuses[on == 1] == common_pb2.NOT_STORED).all()
        assert (res.physical_offsets[on == 1] == -1).all() and (res.physical_offsets[on == 0] >= 0).all()
        assert list(res.errors) == [1] and res.errors[1].startswith("UNAVAILABLE") and "shard 1" in res.errors[1]
        assert [m for m, s in zip(res.msg_ids, on.tolist()) if s == 1] == [""] * int((on == 1).sum())
