"""The deployment on real Ray: commitlog, consume-queue builder, index builder,
dispatcher and front actors, each with its gRPC server, found by name; each killed
mid-load (ray.kill: SIGKILL, restart allowed) under sync flush comes back with
nothing acknowledged lost, no unit lost or doubled. One Ray session and one deployment for the module (Ray start-up is
seconds and hundreds of MB)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import grpc
import pytest

from mqstore.rpc.v1 import front_pb2
from mqstore.services.query.client import FrontClient
from mqstore.store.reader import CommitLogReader
from tests.services.helpers import Load, code_of, free_port, local_ray, small_config, wait_dispatched

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
NS = "mqstore-test"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from mqstore.services.startup.deployment import start_deployment

    root = tmp_path_factory.mktemp("ray")
    with local_ray(NS):
        dep = start_deployment(root, small_config(), port=free_port(), namespace=NS, internal_host="127.0.0.1")
        try:
            assert dep.wait_ready(120)
            yield dep, root
        finally:
            dep.close()
    assert not [f for f in ("abort", "abort.consumequeue", "abort.index") if (root / f).exists()], "close must be clean"


@pytest.fixture(scope="module")
def client(deployment):
    with FrontClient(deployment[0].front_endpoint) as c:
        yield c


def test_actors_are_named_and_serve_grpc(deployment, client):
    from mqstore.services.common.actor import builder_name, dispatcher_name, shard_name

    dep, _ = deployment
    for name in (shard_name(0), builder_name("consumequeue", 0), builder_name("index", 0)):
        assert ray.get(ray.get_actor(name, namespace=NS).endpoint.remote()).startswith("127.0.0.1:")
    pids = {
        ray.get(a.pid.remote())
        for a in (dep.shards[0], dep.queue_builders[0], dep.index_builders[0], dep.dispatchers[0], dep.front)
    }
    assert len(pids) == 5  # a process each
    assert ray.get(ray.get_actor(dispatcher_name(0), namespace=NS).status.remote())["running"]
    res = client.send("RayTopic", [b"one", b"two"], queue_ids=1, keys="rk", tags="T")
    wait_dispatched(client)
    assert [r.body for r in client.pull("RayTopic", 1, 0).records] == [b"one", b"two"]
    assert client.query_by_msg_id(res.msg_ids[1])[0].body == b"two"
    assert len(client.query_by_key("RayTopic", "rk")) == 2
    assert client.query_by_unique_key("RayTopic", res.unique_keys[0])[0].body == b"one"
    client.commit_offset("rg", "RayTopic", 1, 2)
    assert client.fetch_offset("rg", "RayTopic", 1) == 2
    assert code_of(lambda: client.send("bad topic", [b"x"])) is grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: client.pull("RayTopic", 1, -3)) is grpc.StatusCode.INVALID_ARGUMENT
    assert client.pull("RayTopic", 1, 2).status == front_pb2.NO_NEW_MESSAGE  # still answering


def _restart(actor) -> None:
    """ray.kill with restart allowed; returns once the new incarnation answers."""
    before = ray.get(actor.pid.remote())
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if ray.get(actor.pid.remote(), timeout=10) != before:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        time.sleep(0.2)
    raise AssertionError("the actor did not come back")


def _pull_all(client, topic: str) -> list:
    records = []
    for q in range(4):
        off = 0
        while True:
            p = client.pull(topic, q, off, max_messages=1000)
            if p.status != front_pb2.FOUND:
                assert p.status in (front_pb2.NO_NEW_MESSAGE, front_pb2.NO_MESSAGE_IN_QUEUE), p.status
                break
            records.extend(p.records)
            off = p.next_offset
    return records


def _check(client, root, topic: str, acked: list[bytes]) -> Counter:
    wait_dispatched(client, timeout=60)
    records = _pull_all(client, topic)
    pulled = Counter(r.body for r in records)
    assert not [b for b in acked if pulled[b] != 1], "an acknowledged message is missing or doubled"
    assert max(pulled.values()) == 1, "a unit was dispatched twice"
    per_queue: dict[int, list[int]] = {}
    for r in records:
        per_queue.setdefault(r.queue_id, []).append(r.queue_offset)
    assert all(offs == list(range(len(offs))) for offs in per_queue.values()), "queue offsets have holes"
    in_log = Counter(rec.body for rec in CommitLogReader(root).records(check_crc=False) if rec.topic == topic)
    assert in_log == pulled, "every record of the commitlog is in a consume queue exactly once"
    return pulled


def test_shard_killed_mid_load_loses_nothing_acknowledged(deployment, client):
    dep, root = deployment
    load = Load(dep.front_endpoint, "KillShard")
    time.sleep(1.5)
    _restart(dep.shards[0])  # SIGKILL: the store reopens with abnormal recovery
    assert ray.get(dep.shards[0].wait_ready.remote(60))
    time.sleep(1.5)
    load.stop()
    assert load.acked and load.sent_batches > 10
    pulled = _check(client, root, "KillShard", load.acked)
    print(f"kill shard: acked {len(load.acked)}, failed batches {load.failures}, stored {len(pulled)}")
    assert len(pulled) >= len(load.acked)  # unacknowledged batches may be stored too (at least once)
    st = ray.get(dep.dispatchers[0].status.remote())
    assert st["resyncs"] >= 2  # the dispatcher followed the shard's new incarnation
    assert st["reads"] == "local"  # placed on the shard's node: it maps the segments, ReadRange sends bounds


def test_sends_in_flight_when_the_commitlog_is_killed_are_answered(deployment, client):
    """kill -9 of the commitlog actor's process under 4 producers with a 120 s
    deadline: every send is answered within 10 s of the kill (UNAVAILABLE while the
    actor restarts, PUT_OK after), and nothing acknowledged is lost."""
    dep, root = deployment
    pid = ray.get(dep.shards[0].pid.remote())
    load = Load(dep.front_endpoint, "KillNine", threads=4, deadline_s=120)
    time.sleep(1.5)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    time.sleep(12)  # the restart (about 3 s), then sends succeed again
    load.stop()
    assert ray.get(dep.shards[0].wait_ready.remote(60))
    late = [
        (round(t0 - killed_at, 2), round(t1 - max(t0, killed_at), 2), code)
        for t0, t1, code in load.calls
        if t1 - max(t0, killed_at) > 10
    ]
    assert not late, late
    after = [code for t0, _, code in load.calls if t0 > killed_at + 8]
    assert after and set(after) == {"OK"}, Counter(after)  # back to normal once the actor is back
    codes = Counter(code for t0, t1, code in load.calls if t1 > killed_at)
    assert set(codes) <= {"OK", "UNAVAILABLE"}, codes
    _check(client, root, "KillNine", load.acked)


@pytest.mark.parametrize("which", ["queue_builders", "index_builders"])
def test_builder_killed_mid_load_loses_and_doubles_nothing(deployment, client, which):
    """A builder's process dies with units or keys only in memory: it recovers its
    files against the commitlog, the dispatcher fills the gap; appends never stop."""
    dep, root = deployment
    topic = f"Kill-{which}"
    load = Load(dep.front_endpoint, topic)
    time.sleep(1.5)
    actor = getattr(dep, which)[0]
    _restart(actor)
    assert ray.get(actor.wait_ready.remote(60))
    time.sleep(1.0)
    load.stop()
    assert load.failures == 0  # the commitlog kept accepting
    pulled = _check(client, root, topic, load.acked)
    assert len(pulled) == len(load.acked)
    for body in (load.acked[0], load.acked[len(load.acked) // 2], load.acked[-1]):
        (rec,) = client.query_by_key(topic, body.decode())
        assert rec.body == body


def test_dispatcher_killed_mid_load_loses_and_doubles_nothing(deployment, client):
    dep, root = deployment
    load = Load(dep.front_endpoint, "KillDispatcher")
    time.sleep(1.0)
    _restart(dep.dispatchers[0])
    time.sleep(1.0)
    _restart(dep.dispatchers[0])  # twice, for good measure
    time.sleep(1.0)
    load.stop()
    assert load.failures == 0  # appends never wait for the dispatcher
    pulled = _check(client, root, "KillDispatcher", load.acked)
    assert len(pulled) == len(load.acked)


def test_front_killed_comes_back_on_its_port(deployment, client):
    dep, _ = deployment
    _restart(dep.front)
    deadline = time.monotonic() + 60
    while True:  # the client's channel reconnects by itself
        try:
            res = client.send("FrontBack", [b"again"], queue_ids=0)
            break
        except grpc.RpcError:
            assert time.monotonic() < deadline, "the front did not come back"
            time.sleep(0.2)
    assert ray.get(dep.front.endpoint.remote()) == dep.front_endpoint
    wait_dispatched(client)
    assert client.query_by_msg_id(res.msg_ids[0])[0].body == b"again"
