"""Transaction messages with the official Python client (services/rocketmq/transactions.py,
kept with each shard by services/index/transactions.py):
a half message is stored in RMQ_SYS_TRANS_HALF_TOPIC and never in its topic until it
is committed; a commit is received once with the producer's message id, a rollback
never; a transaction left open is checked back through the producer's
TransactionChecker (commit and rollback), one nobody answers is discarded after the
last check; ending twice delivers once; bad transaction ids are 40008; pending halves
are found again after a restart of the whole stack, and the progress point stored as
CID_RMQ_SYS_TRANS's offsets keeps what was resolved from coming back."""

from __future__ import annotations

import threading
import time

import pytest

from mqstore.services.query.client import FrontClient
from mqstore.services.rocketmq import transactions as tx
from mqstore.services.startup.local import LocalStack
from tests.rocketmq.conftest import Clients, receive_until
from tests.rocketmq.test_push_and_restart import reconnected
from tests.services.helpers import free_port, small_config

pytestmark = pytest.mark.slow

INVALID_TRANSACTION_ID = 40008


def keeper(stack, shard: int = 0):
    """Shard ``shard``'s transactions (its consume-queue builder's ShardTransactions)."""
    return stack.queue_builders[shard].transactions


def quick(stack, timeout_ms: int, check_interval_ms: int = 1_000) -> None:
    """Quick checks on every shard's transactions."""
    for b in stack.queue_builders:
        b.transactions.timeout_ms, b.transactions.check_interval_ms, b.transactions.tick_s = (
            timeout_ms,
            check_interval_ms,
            0.2,
        )


def wait_recovered(stack, shard: int = 0, timeout_s: float = 10.0):
    svc = keeper(stack, shard)
    end = time.monotonic() + timeout_s
    while not svc.ready.is_set() and time.monotonic() < end:
        time.sleep(0.05)
    assert svc.ready.is_set()
    return svc


@pytest.fixture
def service(stack):
    """Shard 0's transactions with quick checks (restored afterwards)."""
    svc = keeper(stack)
    saved = (svc.timeout_ms, svc.check_interval_ms, svc.check_max, svc.tick_s)
    svc.timeout_ms, svc.check_interval_ms, svc.tick_s = 1_000, 1_000, 0.2
    yield svc
    svc.timeout_ms, svc.check_interval_ms, svc.check_max, svc.tick_s = saved


@pytest.fixture
def make_checker(rmq):
    def make(answer=None):
        """A TransactionChecker that answers ``answer`` (COMMIT, ROLLBACK; None: it
        raises, so the client answers nothing) and records every message checked."""

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

    return make


@pytest.fixture
def tx_topic(names, front):
    topic, group = names
    front.update_topic(topic, message_type="TRANSACTION")
    return topic, group


def in_topic(front, topic: str) -> list:
    """Every record of the topic, pulled from each of its 4 queues."""
    return [r for q in range(4) for r in front.pull(topic, q, 0, max_messages=32).records]


def half_records(front, message_id: str, timeout_s: float = 10.0) -> list:
    """The half topic's records of ``message_id`` (once the dispatcher put them in its queue)."""
    end = time.monotonic() + timeout_s
    while True:
        found, offset = [], 0
        while got := front.pull(tx.HALF_TOPIC, 0, offset, max_messages=32).records:
            found += [r for r in got if r.properties.get("UNIQ_KEY") == message_id]
            offset = got[-1].queue_offset + 1
        if found or time.monotonic() > end:
            return found
        time.sleep(0.05)


def test_committed_transaction_is_received_once_with_the_producers_id(clients, tx_topic, front, make_checker, rmq):
    topic, group = tx_topic
    checker = make_checker(rmq.TransactionResolution.ROLLBACK)
    producer = clients.producer(topic, checker=checker)
    consumer = clients.simple(group, {topic: "*"})
    t = producer.begin_transaction()
    m = clients.message(topic, b"paid", tag="Pay", keys=("order-1",), props={"amount": "12"})
    receipt = producer.send(m, t)
    assert receipt.transaction_id and receipt.message_id
    (half,) = half_records(front, receipt.message_id)  # stored as RocketMQ's broker stores a half
    assert half.topic == tx.HALF_TOPIC and half.body == b"paid"
    assert half.properties["REAL_TOPIC"] == topic and half.properties["TRAN_MSG"] == "true"
    assert half.properties["PGROUP"] == topic and 0 <= int(half.properties["REAL_QID"]) < 4
    assert half.msg_id == receipt.transaction_id
    assert consumer.receive(32, 30) == []  # a 2 s long poll: not in the topic
    assert in_topic(front, topic) == []
    t.commit()
    (got,) = receive_until(consumer, 1)
    assert got.message_id == receipt.message_id
    assert (got.body, got.tag, set(got.keys), got.properties) == (b"paid", "Pay", {"order-1"}, {"amount": "12"})
    assert got.topic == topic
    consumer.ack(got)
    assert consumer.receive(32, 30) == []
    (stored,) = in_topic(front, topic)
    assert "REAL_TOPIC" not in stored.properties and "TRAN_MSG" not in stored.properties
    assert stored.properties["UNIQ_KEY"] == receipt.message_id
    assert checker.checked == []  # ended within the 6 s before the first check


def test_rolled_back_transaction_is_never_received_nor_checked(clients, tx_topic, front, make_checker, rmq, service):
    topic, group = tx_topic
    checker = make_checker(rmq.TransactionResolution.COMMIT)
    producer = clients.producer(topic, checker=checker)
    consumer = clients.simple(group, {topic: "*"})
    t = producer.begin_transaction()
    producer.send(clients.message(topic, b"cancelled"), t)
    t.rollback()
    time.sleep(2.5)  # past the first check's time: the op record ended it
    assert consumer.receive(32, 30) == []
    assert in_topic(front, topic) == []
    assert checker.checked == []


def test_open_transaction_is_checked_back_and_committed(clients, tx_topic, make_checker, rmq, service):
    topic, group = tx_topic
    checker = make_checker(rmq.TransactionResolution.COMMIT)
    producer = clients.producer(topic, checker=checker)
    consumer = clients.simple(group, {topic: "*"})
    receipt = producer.send(clients.message(topic, b"orphan", tag="T", props={"k": "v"}), producer.begin_transaction())
    got = receive_until(consumer, 1, timeout_s=20)
    assert [m.message_id for m in got] == [receipt.message_id]
    consumer.ack(got[0])
    (checked,) = checker.checked
    assert (checked.topic, checked.message_id, checked.body, checked.tag) == (topic, receipt.message_id, b"orphan", "T")
    assert checked.properties == {"k": "v"}
    time.sleep(2.5)  # no check after the answer
    assert len(checker.checked) == 1
    assert consumer.receive(32, 30) == []


def test_open_transaction_is_checked_back_and_rolled_back(clients, tx_topic, front, make_checker, rmq, service):
    topic, group = tx_topic
    checker = make_checker(rmq.TransactionResolution.ROLLBACK)
    producer = clients.producer(topic, checker=checker)
    consumer = clients.simple(group, {topic: "*"})
    receipt = producer.send(clients.message(topic, b"orphan"), producer.begin_transaction())
    end = time.monotonic() + 15
    while not checker.checked and time.monotonic() < end:
        time.sleep(0.1)
    assert [m.message_id for m in checker.checked] == [receipt.message_id]
    time.sleep(2.5)
    assert len(checker.checked) == 1  # the rollback ended it: no second check
    assert consumer.receive(32, 30) == []
    assert in_topic(front, topic) == []


def test_unanswered_transaction_is_discarded_after_the_last_check(clients, tx_topic, front, make_checker, service):
    topic, group = tx_topic
    service.check_max, service.check_interval_ms = 3, 500
    checker = make_checker(None)  # the client answers nothing
    producer = clients.producer(topic, checker=checker)
    consumer = clients.simple(group, {topic: "*"})
    t = producer.begin_transaction()
    receipt = producer.send(clients.message(topic, b"unknown"), t)
    end = time.monotonic() + 20
    kept = []
    while not kept and time.monotonic() < end:
        kept = [
            r
            for r in front.pull(tx.CHECK_MAX_TOPIC, 0, 0).records
            if r.properties.get("UNIQ_KEY") == receipt.message_id
        ]
        time.sleep(0.2)
    assert len(kept) == 1 and kept[0].properties["REAL_TOPIC"] == topic  # kept where RocketMQ keeps it
    assert len(checker.checked) == 3
    assert t.commit().status.message == "the transaction was already ended"  # discarded is rolled back
    assert consumer.receive(32, 30) == []
    assert len(checker.checked) == 3


def test_ending_twice_delivers_once(clients, tx_topic, make_checker, rmq):
    topic, group = tx_topic
    producer = clients.producer(topic, checker=make_checker(rmq.TransactionResolution.COMMIT))
    consumer = clients.simple(group, {topic: "*"})
    t1, t2 = producer.begin_transaction(), producer.begin_transaction()
    r1 = producer.send(clients.message(topic, b"one"), t1)
    r2 = producer.send(clients.message(topic, b"two"), t2)
    assert t1.commit().status.message == "OK"
    assert t1.commit().status.message == "the transaction was already ended"
    assert t2.rollback().status.code == 20000
    assert t2.commit().status.message == "the transaction was already ended"  # a rollback stands
    assert t1.rollback().status.message == "the transaction was already ended"  # and so does a commit
    got = receive_until(consumer, 2, timeout_s=6)
    assert [m.message_id for m in got] == [r1.message_id]
    assert r2.message_id != r1.message_id


def test_bad_transaction_ids_are_invalid(clients, tx_topic, front, make_checker, rmq):
    topic, _ = tx_topic
    producer = clients.producer(topic, checker=make_checker(rmq.TransactionResolution.COMMIT))
    t = producer.begin_transaction()
    receipt = producer.send(clients.message(topic, b"real"), t)
    normal = front.send(topic + "Plain", [b"normal"]).msg_ids[0]  # a record, but no half (own sends: NORMAL topics)
    endpoints = receipt.message_queue.endpoints

    def end(transaction_id: str, message_id: str = receipt.message_id, topic: str = topic):
        m = clients.message(topic, b"x")
        m.message_id = message_id
        return producer.end_transaction(
            endpoints, m, transaction_id, rmq.TransactionResolution.COMMIT, 1
        ).status  # SOURCE_CLIENT

    for bad in ["", "   ", "garbage", "7F00000100002A9F", "7F00000100002A9FFFFFFFFFFFFFFFFF", normal]:
        st = end(bad)
        assert st.code == INVALID_TRANSACTION_ID and st.message, (bad, st)
    st = end(receipt.transaction_id, message_id="0" * 34)  # another message's id
    assert st.code == INVALID_TRANSACTION_ID and "not" in st.message
    tid = receipt.transaction_id
    for other in (tid[:8] + "FFFF" + tid[12:], "0A0B0C0D" + tid[8:]):  # another port (no shard), another host
        st = end(other)
        assert st.code == INVALID_TRANSACTION_ID and "store host" in st.message, (other, st)
    assert t.commit().status.code == 20000  # the real one still works


def test_pending_halves_are_recovered_after_a_restart(rmq, tmp_path, make_checker):
    root = tmp_path / "store"
    ports = {"front_port": free_port()}
    ports["rocketmq_port"] = free_port(skip=(ports["front_port"],))
    topic = "TxRestart"

    def stack():
        st = LocalStack(root, small_config(), **ports)
        assert st.wait_ready(60)
        quick(st, 3_000)
        return st

    st = stack()
    clients = Clients(rmq, st.rocketmq_endpoint)
    try:
        with FrontClient(st.front_endpoint) as fc:
            fc.update_topic(topic, message_type="TRANSACTION")
        quiet = make_checker(None)
        producer = clients.producer(topic, checker=quiet)
        ts = [producer.begin_transaction() for _ in range(4)]
        receipts = [producer.send(clients.message(topic, f"t{i}".encode()), t) for i, t in enumerate(ts)]
        ts[0].commit()
        ts[3].rollback()
        st.close()  # t1 and t2 are open
        st = stack()
        svc = wait_recovered(st)
        assert sorted(h.message_id for h in svc.halves.pending.values()) == sorted(r.message_id for r in receipts[1:3])
        reconnected(lambda: ts[1].commit())  # a transaction id from before the restart
        assert ts[0].commit().status.message == "the transaction was already ended"
        checker = make_checker(rmq.TransactionResolution.COMMIT)
        clients.producer(topic, checker=checker)  # the producer's process came back: it answers the check
        consumer = clients.simple("g-tx-restart", {topic: "*"})
        got = receive_until(consumer, 3, timeout_s=20)
        assert sorted(m.message_id for m in got) == sorted(r.message_id for r in receipts[:3])
        for m in got:
            consumer.ack(m)
        assert {m.message_id for m in checker.checked} == {receipts[2].message_id}
        time.sleep(1)  # a tick stores the progress
        assert svc.halves.saved == (4, 4)
        st.close()
        st = stack()  # the progress point: nothing is read again, nothing comes back
        svc = wait_recovered(st)
        assert svc.halves.pending == {}
        assert svc.halves.floor == 4
        assert consumer.receive(32, 30) == []
    finally:
        clients.close()
        st.close()


def test_transactions_over_two_shards(rmq, tmp_path, make_checker):
    """Each shard keeps its own half and op queue (the lowest of each topic the routing
    rule puts there): a transaction's half, commit and op are on the shard of its queue."""
    with LocalStack(tmp_path / "two", small_config(), shards=2, rocketmq_port=0) as st:
        assert st.wait_ready(60)
        quick(st, 2_000)
        router = st.front.servicer.router
        for s in (0, 1):
            sh = wait_recovered(st, s).halves
            assert router.shard_of(tx.HALF_TOPIC, sh.half_queue) == s
            assert router.shard_of(tx.OP_TOPIC, sh.op_queue) == s
        topic = "TxSpread"
        with FrontClient(st.front_endpoint) as fc:
            fc.update_topic(topic, message_type="TRANSACTION")
        clients = Clients(rmq, st.rocketmq_endpoint)
        try:
            checker = make_checker(rmq.TransactionResolution.COMMIT)
            producer = clients.producer(topic, checker=checker)
            ts = [producer.begin_transaction() for _ in range(8)]
            receipts = [producer.send(clients.message(topic, f"s{i}".encode()), t) for i, t in enumerate(ts)]
            shards = {tx.parse_transaction_id(r.transaction_id)[0].port - 10911 for r in receipts}
            assert shards == {0, 1}  # the round robin over 4 queues used both shards
            for i, t in enumerate(ts[:6]):
                t.commit() if i % 2 == 0 else t.rollback()
            consumer = clients.simple("g-tx-two", {topic: "*"})
            got = receive_until(consumer, 5, timeout_s=20)  # 0, 2, 4 committed; 6, 7 checked back and committed
            assert sorted(m.message_id for m in got) == sorted(receipts[i].message_id for i in (0, 2, 4, 6, 7))
            assert {m.message_id for m in checker.checked} == {receipts[6].message_id, receipts[7].message_id}
            assert keeper(st, 0).halves.pending == {} and keeper(st, 1).halves.pending == {}
        finally:
            clients.close()
