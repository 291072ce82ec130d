"""The official client's PushConsumer (settings round trip, QueryAssignment, receive
loops with auto-renew, ack on SUCCESS, redelivery on FAILURE), and consumer state
surviving a restart of the whole stack between receive and ack."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from mqstore.services.startup.local import LocalStack
from tests.rocketmq.conftest import Clients, receive_until
from tests.services.helpers import free_port, small_config

pytestmark = pytest.mark.slow


def test_push_consumer_consumes_a_topic(clients, names, rmq):
    topic, group = names
    producer = clients.producer(topic)
    sent = {producer.send(clients.message(topic, f"p{i}".encode(), tag="T")).message_id for i in range(30)}
    seen: dict[str, int] = {}
    failed_once: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()

    class Listener(rmq.MessageListener):
        def consume(self, message):
            with lock:
                if message.body == b"p7" and message.message_id not in failed_once:
                    failed_once.add(message.message_id)  # one failure: the consumer nacks, it comes back
                    return rmq.ConsumeResult.FAILURE
                seen[message.message_id] = message.delivery_attempt
                if set(seen) >= sent:
                    done.set()
            return rmq.ConsumeResult.SUCCESS

    consumer = rmq.PushConsumer(clients.config(), group, Listener(), {topic: rmq.FilterExpression("*")})
    consumer.startup()  # blocks until the server's settings arrive
    try:
        assert done.wait(60), f"consumed {len(seen)} of {len(sent)}"
        assert set(seen) == sent
        assert len(failed_once) == 1 and seen[next(iter(failed_once))] == 2  # the nacked one, second attempt
    finally:
        consumer.shutdown()


def test_push_consumer_messages_stay_invisible_while_the_listener_works(clients, names, rmq, stack):
    """A listener slower than the invisible time: the front renews the message while
    the client lives, the ack with the handle it received finishes it, and nothing is
    delivered twice."""
    renewals = stack.front.messaging.renewals
    saved = renewals.invisible_ms, renewals.renew_ahead_ms
    renewals.invisible_ms, renewals.renew_ahead_ms = 2000, 1200  # renewed about every second
    topic, group = names
    producer = clients.producer(topic)
    sent = {producer.send(clients.message(topic, f"slow{i}".encode())).message_id for i in range(3)}
    calls: list[str] = []
    lock = threading.Lock()

    class Slow(rmq.MessageListener):
        def consume(self, message):
            with lock:
                calls.append(message.message_id)
            time.sleep(5)  # 2.5 invisible times
            return rmq.ConsumeResult.SUCCESS

    consumer = rmq.PushConsumer(clients.config(), group, Slow(), {topic: rmq.FilterExpression("*")})
    try:
        consumer.startup()
        end = time.monotonic() + 60
        while len(set(calls)) < 3 and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(6)  # the last one finishes, and a duplicate would have time to show
        assert sorted(calls) == sorted(sent), "each message once, none redelivered while its listener ran"
        assert len(renewals) == 0  # every one acked through its renewed handle
    finally:
        consumer.shutdown()
        renewals.invisible_ms, renewals.renew_ahead_ms = saved


def reconnected(call, timeout_s: float = 30.0):
    """``call()`` once the client's channel connects again (gRPC backs off after the
    server went away; a client retries what failed UNAVAILABLE)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except grpc.RpcError as e:
            if e.code() is not grpc.StatusCode.UNAVAILABLE or time.monotonic() > end:
                raise
            time.sleep(0.5)


def test_consumer_state_survives_a_restart_between_receive_and_ack(rmq, tmp_path):
    root = tmp_path / "store"
    ports = {"front_port": free_port()}
    ports["rocketmq_port"] = free_port(skip=(ports["front_port"],))

    def stack():
        st = LocalStack(root, small_config(), max_delivery_attempts=5, **ports)
        assert st.wait_ready(60)
        return st

    st = stack()
    clients = Clients(rmq, st.rocketmq_endpoint)
    try:
        producer = clients.producer("Restarted")
        sent = [producer.send(clients.message("Restarted", f"r{i}".encode())).message_id for i in range(6)]
        consumer = clients.simple("g-restart", {"Restarted": "*"})
        got = receive_until(consumer, 6, invisible_s=60)
        assert sorted(m.message_id for m in got) == sorted(sent)
        short = receive_until(consumer, 0)  # nothing else
        assert short == []
        for m in got[:2]:
            consumer.ack(m)
        st.close()  # the whole stack goes down with 4 messages in flight
        st = stack()  # same directory, same ports: the client reconnects
        reconnected(lambda: consumer.ack(got[2]))  # handles from before the restart still count
        consumer.ack(got[3])
        consumer.change_invisible_duration(got[4], 1)  # and can be changed
        time.sleep(1.5)
        (again,) = receive_until(consumer, 1, invisible_s=60)
        assert again.message_id == got[4].message_id and again.delivery_attempt == 2
        consumer.ack(again)
        consumer.ack(got[5])
        assert consumer.receive(32, 30) == []  # nothing acked comes back, nothing is lost
    finally:
        clients.close()
        st.close()
