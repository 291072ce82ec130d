"""Transactions with two fronts on one port and the official client: the state is the
shard's (services/index/transactions.py), so a transaction sent through one front is
ended through the other, a check-back reaches a producer connected to the other front
when the one that sent the half is gone, nothing is committed twice, and the shard's
builder SIGKILLed and restarted by Ray recovers its pending halves (the fronts'
CheckBacks streams open again by themselves)."""

from __future__ import annotations

import threading
import time

import pytest

from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests.rocketmq.conftest import Clients, receive_until
from tests.rocketmq.fronts import clients_on_each_front, front_of, two_fronts
from tests.services.helpers import small_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ALREADY_ENDED = "the transaction was already ended"
TOPIC_FRESH_S = 2.0  # past the fronts' topic table freshness (1 s)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LocalStack(tmp_path_factory.mktemp("two-fronts-tx"), small_config(), rocketmq_port=0, fronts=2) as st:
        assert st.wait_ready(60)
        svc = st.queue_builders[0].transactions
        svc.timeout_ms, svc.check_interval_ms, svc.tick_s = 2_000, 1_000, 0.2
        yield st


@pytest.fixture
def clients(rmq, stack):
    c = Clients(rmq, stack.rocketmq_endpoint)
    yield c
    c.close()


@pytest.fixture
def tx_topic(names, stack):
    topic, group = names
    with FrontClient(stack.front_endpoint) as fc:
        fc.update_topic(topic, message_type="TRANSACTION")
    time.sleep(TOPIC_FRESH_S)  # the other front sees the type within its topic table's freshness
    return topic, group


def make_checker(rmq, answer=None):
    """A TransactionChecker answering ``answer`` (None: it raises, the client answers
    nothing), recording every message checked."""

    class Checker(rmq.TransactionChecker):
        def __init__(self) -> None:
            self.checked: list = []
            self.lock = threading.Lock()

        def check(self, message):
            with self.lock:
                self.checked.append(message)
            if answer is None:
                raise RuntimeError("no answer")
            return answer

    return Checker()


def end(producer, receipt, topic: str, clients: Clients, resolution):
    """EndTransaction of ``receipt``'s transaction through ``producer``'s front."""
    m = clients.message(topic, b"x")
    m.message_id = receipt.message_id
    return producer.end_transaction(
        receipt.message_queue.endpoints, m, receipt.transaction_id, resolution, 1
    ).status  # SOURCE_CLIENT


def in_topic(stack, topic: str) -> list:
    """Every record of the topic, pulled from each of its 4 queues."""
    with FrontClient(stack.front_endpoint) as fc:
        return [r for q in range(4) for r in fc.pull(topic, q, 0, max_messages=32).records]


def test_a_transaction_sent_through_one_front_is_ended_through_the_other(stack, clients, tx_topic, rmq):
    topic, group = tx_topic
    quiet = make_checker(rmq)
    producers = clients_on_each_front(stack, lambda: clients.producer(topic, checker=quiet))
    consumer = clients.simple(group, {topic: "*"})
    t = producers[0].begin_transaction()
    receipt = producers[0].send(clients.message(topic, b"two-fronts"), t)
    assert end(producers[1], receipt, topic, clients, rmq.TransactionResolution.COMMIT).code == 20000
    assert t.commit().status.message == ALREADY_ENDED  # through the first front: the same shard's answer
    assert end(producers[1], receipt, topic, clients, rmq.TransactionResolution.ROLLBACK).message == ALREADY_ENDED
    (got,) = receive_until(consumer, 1, timeout_s=20)
    assert got.message_id == receipt.message_id
    consumer.ack(got)
    assert consumer.receive(32, 30) == []
    assert len(in_topic(stack, topic)) == 1  # committed once
    assert quiet.checked == []


def test_a_check_back_reaches_a_producer_on_the_other_front(stack, clients, tx_topic, rmq):
    """The producer that sent the halves is gone; the shard's check goes to the front
    that holds the topic's other producer, whose answer ends them there."""
    topic, group = tx_topic
    keeper = stack.queue_builders[0].transactions
    gone = clients_on_each_front(stack, lambda: clients.producer(topic, checker=make_checker(rmq)))
    sender = gone[0]
    receipts = [
        sender.send(clients.message(topic, f"orphan{i}".encode()), sender.begin_transaction()) for i in range(3)
    ]
    sender.shutdown()  # its Telemetry stream closes: front 0 holds no producer of the topic now
    gone[1].shutdown()
    checker = make_checker(rmq, rmq.TransactionResolution.COMMIT)
    answering = None
    for _ in range(24):  # a producer held by the other front (the kernel picks the front)
        p = clients.producer(topic, checker=checker)
        if front_of(stack, p) == 1:
            answering = p
            break
        p.shutdown()
    assert answering is not None
    consumer = clients.simple(group, {topic: "*"})
    got = receive_until(consumer, 3, timeout_s=30)
    assert sorted(m.message_id for m in got) == sorted(r.message_id for r in receipts)
    for m in got:
        consumer.ack(m)
    assert sorted(m.message_id for m in checker.checked) == sorted(r.message_id for r in receipts)
    assert len(keeper.routes.fronts()) == 2  # both fronts keep their stream to the shard
    time.sleep(2.5)  # no check after the answers, nothing delivered again
    assert len(checker.checked) == 3
    assert consumer.receive(32, 30) == []
    assert len(in_topic(stack, topic)) == 3
    assert keeper.halves.pending == {}


def test_a_front_that_goes_away_drops_out_and_the_checks_go_to_the_other(tmp_path, rmq, names):
    topic, group = names
    with LocalStack(tmp_path / "store", small_config(), rocketmq_port=0, fronts=2) as st:
        assert st.wait_ready(60)
        keeper = st.queue_builders[0].transactions
        keeper.timeout_ms, keeper.check_interval_ms, keeper.tick_s = 3_000, 1_000, 0.2
        with FrontClient(st.front_endpoint) as fc:
            fc.update_topic(topic, message_type="TRANSACTION")
        time.sleep(TOPIC_FRESH_S)
        clients = Clients(rmq, st.rocketmq_endpoint)
        try:
            checker = make_checker(rmq, rmq.TransactionResolution.COMMIT)
            producers = clients_on_each_front(st, lambda: clients.producer(topic, checker=checker))
            receipts = [
                producers[1].send(clients.message(topic, f"d{i}".encode()), producers[1].begin_transaction())
                for i in range(3)
            ]
            end_at = time.monotonic() + 10
            while len(keeper.routes.fronts()) < 2 and time.monotonic() < end_at:
                time.sleep(0.05)
            assert len(keeper.routes.fronts()) == 2
            st.fronts[0].close()  # its streams end with it
            end_at = time.monotonic() + 10
            while len(keeper.routes.fronts()) > 1 and time.monotonic() < end_at:
                time.sleep(0.05)
            assert len(keeper.routes.fronts()) == 1
            consumer = clients.simple(group, {topic: "*"})
            got = receive_until(consumer, 3, timeout_s=30)
            assert sorted(m.message_id for m in got) == sorted(r.message_id for r in receipts)
            for m in got:
                consumer.ack(m)
            assert consumer.receive(32, 30) == []  # each committed once
            assert {m.message_id for m in checker.checked} == {r.message_id for r in receipts}
        finally:
            clients.close()


@pytest.mark.crash
def test_the_shards_builder_killed_and_restarted_recovers_its_pending_halves(tmp_path, rmq):
    ray = pytest.importorskip("ray")
    import os
    import signal

    topic, group = "TxKilledBuilder", "g-tx-killed-builder"
    with two_fronts(tmp_path / "store", "mqstore-m-tx-kill") as dep:
        front_api = ray.get(dep.fronts[0].endpoint.remote(), timeout=30)
        with FrontClient(front_api) as fc:
            fc.update_topic(topic, message_type="TRANSACTION")
        time.sleep(TOPIC_FRESH_S)
        endpoint = ray.get(dep.fronts[0].rocketmq_endpoint.remote(), timeout=30)
        clients = Clients(rmq, endpoint)
        try:
            sender = clients.producer(topic, checker=make_checker(rmq))
            receipts = [
                sender.send(clients.message(topic, f"k{i}".encode()), sender.begin_transaction()) for i in range(3)
            ]
            sender.shutdown()  # its process is gone: nobody answers checks until another producer comes
            checker = make_checker(rmq, rmq.TransactionResolution.COMMIT)
            answering = clients.producer(topic, checker=checker)
            assert end(answering, receipts[0], topic, clients, rmq.TransactionResolution.COMMIT).code == 20000
            builder = dep.queue_builders[0]
            old = ray.get(builder.pid.remote(), timeout=30)
            os.kill(old, signal.SIGKILL)
            end_at = time.monotonic() + 120
            while time.monotonic() < end_at:
                try:
                    if ray.get(builder.pid.remote(), timeout=10) != old and ray.get(
                        builder.wait_ready.remote(60), timeout=70
                    ):
                        break
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass
                time.sleep(0.5)
            else:
                raise AssertionError("the consume-queue builder did not come back")
            # the recovered halves: one ended here, one by its check, one ended before the kill
            deadline = time.monotonic() + 60
            while True:
                try:
                    st = end(answering, receipts[1], topic, clients, rmq.TransactionResolution.COMMIT)
                    break
                except Exception:  # the client's 50400 while the fronts find the restarted builder
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            assert st.code == 20000, st
            assert end(answering, receipts[0], topic, clients, rmq.TransactionResolution.COMMIT).message == (
                ALREADY_ENDED
            )
            consumer = clients.simple(group, {topic: "*"})
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < 3 and time.monotonic() < deadline:
                try:
                    got += consumer.receive(3 - len(got), 30)
                except Exception:  # 50400 once per front whose channel to the builder is the old one
                    time.sleep(0.5)
            assert sorted(m.message_id for m in got) == sorted(r.message_id for r in receipts)
            for m in got:
                consumer.ack(m)
            assert receipts[2].message_id in {m.message_id for m in checker.checked}
            assert consumer.receive(32, 30) == []  # each committed once
        finally:
            clients.close()
