"""Consumer state of the RocketMQ port on real Ray: with messages received and not yet
acked, each actor (the consume-queue builder, which keeps the pop state, the
commitlog, the front, the dispatcher, the index builder) is killed with SIGKILL and
restarted by Ray; afterwards the handles from before
the kill still ack, nothing acked is delivered again, nothing unacked is lost (it
comes back with the next attempt)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.rocketmq.conftest import Clients, receive_until
from tests.services.helpers import free_port, local_ray, small_config

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.crash, pytest.mark.timeout(300)]
NS = "mqstore-rmq-kill"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from mqstore.services.startup.deployment import start_deployment

    with local_ray(NS):
        root = tmp_path_factory.mktemp("ray")
        port = free_port()
        dep = start_deployment(
            root,
            small_config(),
            port=port,
            rocketmq_port=free_port(skip=(port,)),
            namespace=NS,
            internal_host="127.0.0.1",
        )
        try:
            assert dep.wait_ready(120)
            yield dep
        finally:
            dep.close()


def kill_9(actor) -> None:
    """SIGKILL the actor's process; return once Ray restarted it (a new pid answers)."""
    before = ray.get(actor.pid.remote())
    os.kill(before, signal.SIGKILL)
    end = time.monotonic() + 90
    while time.monotonic() < end:
        try:
            if ray.get(actor.pid.remote(), timeout=10) != before:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        time.sleep(0.2)
    raise AssertionError("the actor did not come back")


def eventually(call, timeout_s: float = 60.0):
    """``call()`` once the store answers again (the client sees UNAVAILABLE or
    PROXY_TIMEOUT while the killed process comes back)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except Exception:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


@pytest.mark.parametrize("victim", ["consumequeue", "commitlog", "front", "dispatcher", "index"])
def test_kill_9_between_receive_and_ack(deployment, rmq, victim):
    dep = deployment
    actor = {
        "consumequeue": dep.queue_builders[0],
        "commitlog": dep.shards[0],
        "front": dep.front,
        "dispatcher": dep.dispatchers[0],
        "index": dep.index_builders[0],
    }[victim]
    topic, group = f"Killed_{victim}", f"g_{victim}"
    clients = Clients(rmq, dep.rocketmq_endpoint)
    try:
        producer = clients.producer(topic)
        sent = sorted(producer.send(clients.message(topic, f"{victim}-{i}".encode())).message_id for i in range(8))
        consumer = clients.simple(group, {topic: "*"})
        got = receive_until(consumer, 6, invisible_s=60, batch=6)
        rest = receive_until(consumer, 2, invisible_s=4)  # these two come back after the kill
        assert sorted(m.message_id for m in got + rest) == sent
        for m in got[:3]:
            consumer.ack(m)
        kill_9(actor)
        for m in got[3:]:
            eventually(lambda m=m: consumer.ack(m))  # handles from before the kill still ack
        back = eventually(lambda: receive_until(consumer, 2, invisible_s=60, timeout_s=20))
        assert sorted(m.message_id for m in back) == sorted(m.message_id for m in rest)
        assert {m.delivery_attempt for m in back} == {2}
        for m in back:
            consumer.ack(m)
        assert consumer.receive(32, 30) == []  # nothing acked comes again
    finally:
        clients.close()
