"""Client sessions on the RocketMQ port belong to the authenticated caller (issue 25,
finding 5 and 6): keyed by (user, client id), noted only once a call is authenticated,
bounded per user and in all, a Telemetry stream's settings bounded. Another user who
reuses a producer's client id gets none of its check-backs, and a termination with
someone else's id releases nothing of theirs. Also ChangeInvisibleDuration's Sub on
the topic and the system topics, at the wire with the official client's stubs."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid

import grpc
import pytest

from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests import rocketmq_client
from tests.rocketmq.conftest import Clients
from tests.services.helpers import small_config

pytestmark = pytest.mark.slow

rocketmq_client.load()  # before the client's modules: it fixes its log folder at import

from google.protobuf.duration_pb2 import Duration  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: E402
from rocketmq.v5.util.signature import Signature  # noqa: E402

ROOT, PROD, CONS, MALL = (
    ("root", "root-secret-1"),
    ("prod", "prod-secret-1"),
    ("cons", "cons-secret-1"),
    ("mall", "mall-secret-1"),
)
ACL = {
    "users": [{"access_key": "root", "secret_key": ROOT[1], "admin": True}]
    + [{"access_key": u, "secret_key": k} for u, k in (PROD, CONS, MALL)],
    "rules": [
        {"user": "prod", "resource": "Topic:Sess*", "actions": ["Pub"], "decision": "Allow"},
        {"user": "cons", "resource": "Topic:Sess*", "actions": ["Sub"], "decision": "Allow"},
        {"user": "cons", "resource": "Group:cg-*", "actions": ["Sub"], "decision": "Allow"},
        {"user": "mall", "resource": "Topic:Mall*", "actions": ["Pub", "Sub"], "decision": "Allow"},
        {"user": "mall", "resource": "Group:cg-*", "actions": ["Sub"], "decision": "Allow"},
        {"user": "mall", "resource": "Topic:*", "actions": ["Pub", "Sub"], "decision": "Allow"},
        {"user": "mall", "resource": "Topic:Sess*", "actions": ["Pub", "Sub"], "decision": "Deny"},
    ],
}
TX_TOPIC, TOPIC = "SessTx", "SessOrders"
TIMEOUT = 10
UNAUTHORIZED, FORBIDDEN, TOO_MANY = 40100, 40300, 42900


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    f = tmp_path_factory.mktemp("acl") / "acl.json"
    f.write_text(json.dumps(ACL))
    f.chmod(0o600)
    with LocalStack(tmp_path_factory.mktemp("store"), small_config(), acl=f, rocketmq_port=0) as st:
        assert st.wait_ready(60)
        with FrontClient(st.front_endpoint, access_key=ROOT[0], secret_key=ROOT[1]) as root:
            root.update_topic(TX_TOPIC, message_type="TRANSACTION")
        yield st


@pytest.fixture(scope="module")
def stub(stack):
    with grpc.insecure_channel(stack.rocketmq_endpoint) as ch:
        yield service_pb2_grpc.MessagingServiceStub(ch)


@pytest.fixture
def clients(stack):
    c = Clients(rocketmq_client.load(), stack.rocketmq_endpoint)
    yield c
    c.close()


def meta(stack, user: tuple[str, str], client_id: str) -> tuple:
    """Headers the official client signs for ``user`` as ``client_id``."""
    rmq = rocketmq_client.load()
    return Signature.metadata(rmq.ClientConfiguration(stack.rocketmq_endpoint, rmq.Credentials(*user)), client_id)


def new_id() -> str:
    return f"client@{uuid.uuid4().hex[:12]}"


def publishing(*topics: str) -> d.Settings:
    return d.Settings(
        client_type=d.PRODUCER,
        request_timeout=Duration(seconds=3),
        publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]),
        user_agent=d.UA(language=d.PYTHON, version="5.1.2"),
    )


class Stream:
    """One Telemetry stream whose answers a thread collects."""

    def __init__(self, stub, metadata) -> None:
        self._out: queue.Queue = queue.Queue()
        self.got: list = []
        self._calls = stub.Telemetry(iter(self._out.get, None), metadata=metadata, timeout=60)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for command in self._calls:
                self.got.append(command)
        except grpc.RpcError:
            pass

    def ask(self, settings: d.Settings, wait_s: float = TIMEOUT) -> d.TelemetryCommand:
        n = len(self.got)
        self._out.put(s.TelemetryCommand(settings=settings))
        end = time.monotonic() + wait_s
        while len(self.got) <= n:
            assert time.monotonic() < end, "no answer on the stream"
            time.sleep(0.01)
        return self.got[n]

    def close(self) -> list:
        self._out.put(None)
        self._reader.join(TIMEOUT)
        return self.got


@pytest.fixture
def quick_checks(stack):
    svc = stack.queue_builders[0].transactions  # the shard keeps its transactions
    saved = (svc.timeout_ms, svc.check_interval_ms, svc.tick_s)
    svc.timeout_ms, svc.check_interval_ms, svc.tick_s = 1_000, 1_000, 0.2
    yield svc
    svc.timeout_ms, svc.check_interval_ms, svc.tick_s = saved


def test_another_user_reusing_a_producers_client_id_gets_none_of_its_check_backs(stack, stub, clients, quick_checks):
    rmq = clients.rmq
    checked: list = []

    class Checker(rmq.TransactionChecker):
        def check(self, message):
            checked.append(message.message_id)
            return rmq.TransactionResolution.COMMIT

    producer = clients.producer(TX_TOPIC, config=clients.config(*PROD), checker=Checker())
    thief = Stream(stub, meta(stack, MALL, producer.client_id))  # the producer's id, another user
    assert thief.ask(publishing(TX_TOPIC)).status.code == FORBIDDEN  # no Pub there: nothing kept
    assert thief.ask(publishing("MallOwn")).status.code == 20000  # its own topic: fine, its own session
    receipt = producer.send(clients.message(TX_TOPIC, b"secret body"), producer.begin_transaction())
    end = time.monotonic() + 20
    while not checked and time.monotonic() < end:
        time.sleep(0.1)
    assert checked == [receipt.message_id]  # the producer was asked, not the thief
    got = thief.close()
    assert [c for c in got if c.HasField("recover_orphaned_transaction_command")] == []
    assert all(b"secret body" not in c.SerializeToString() for c in got)


def auto_renew_receive(stub, metadata, group: str) -> list:
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=group),
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=-1),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=8,
        auto_renew=True,
        long_polling_timeout=Duration(seconds=3),
    )
    answers = list(stub.ReceiveMessage(request, metadata=metadata, timeout=TIMEOUT))
    return [a.message for a in answers if a.HasField("message")]


def test_a_termination_with_another_users_client_id_releases_nothing_of_theirs(stack, stub, clients):
    clients.producer(TOPIC, config=clients.config(*PROD)).send(clients.message(TOPIC, b"held"))
    renewals = stack.front.messaging.renewals
    client_id, group = new_id(), f"cg-{uuid.uuid4().hex[:8]}"
    consumer = meta(stack, CONS, client_id)
    end = time.monotonic() + 20
    got: list = []
    while not got and time.monotonic() < end:
        got = auto_renew_receive(stub, consumer, group)
    assert len(got) == 1 and len(renewals) == 1  # held for the push consumer while it lives
    res = stub.NotifyClientTermination(
        s.NotifyClientTerminationRequest(group=d.Resource(name=group)),
        metadata=meta(stack, MALL, client_id),
        timeout=TIMEOUT,
    )
    assert res.status.code == 20000  # its own (empty) session ends
    assert len(renewals) == 1
    assert stack.front.messaging.sessions.get(("cons", client_id)) is not None
    assert auto_renew_receive(stub, meta(stack, CONS, new_id()), group) == []  # still invisible
    stub.NotifyClientTermination(
        s.NotifyClientTerminationRequest(group=d.Resource(name=group)), metadata=consumer, timeout=TIMEOUT
    )
    assert len(renewals) == 0  # the owner's termination releases it: visible again at once
    again = auto_renew_receive(stub, meta(stack, CONS, new_id()), group)
    assert [m.system_properties.message_id for m in again] == [got[0].system_properties.message_id]


def route(stub, metadata, topic: str = TOPIC) -> s.QueryRouteResponse:
    return stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=metadata, timeout=TIMEOUT)


def test_refused_calls_record_no_session(stack, stub):
    sessions = stack.front.messaging.sessions
    before = len(sessions)
    for _ in range(200):  # distinct, long client ids, a wrong secret
        res = route(stub, meta(stack, ("prod", "not-the-secret"), "x" * 400 + uuid.uuid4().hex))
        assert res.status.code == UNAUTHORIZED
    res = route(stub, meta(stack, PROD, "y" * 2000))
    assert res.status.code == 40000 and "characters" in res.status.message  # a client id no client has
    assert len(sessions) == before


def test_sessions_per_user_and_in_all_are_bounded(stack, stub):
    sessions = stack.front.messaging.sessions
    saved = sessions.max_total, sessions.max_per_user
    mine = sum(1 for k in list(sessions._by_key) if k.user == "prod")
    sessions.max_per_user = mine + 3
    try:
        ids = [new_id() for _ in range(4)]
        codes = [route(stub, meta(stack, PROD, i)).status for i in ids]
        assert [c.code for c in codes] == [20000, 20000, 20000, TOO_MANY]
        assert "'prod' has" in codes[-1].message
        assert route(stub, meta(stack, PROD, ids[0])).status.code == 20000  # a known client goes on
        assert route(stub, meta(stack, CONS, new_id())).status.code == 20000  # another user is not held back
        sessions.max_total = len(sessions)
        res = route(stub, meta(stack, CONS, new_id()))
        assert res.status.code == TOO_MANY and "client sessions" in res.status.message
        refused = stack.front.metrics.registry.get_sample_value
        assert refused("mqstore_rocketmq_sessions_refused_total", {"bound": "per_user"}) >= 1
        assert refused("mqstore_rocketmq_sessions_refused_total", {"bound": "total"}) >= 1
        assert refused("mqstore_rocketmq_sessions", {}) == len(sessions)
    finally:
        sessions.max_total, sessions.max_per_user = saved


def test_a_streams_settings_are_bounded(stack, stub):
    client_id = new_id()
    stream = Stream(stub, meta(stack, MALL, client_id))
    huge = publishing(*(f"MallT{i}" for i in range(8000)))
    answer = stream.ask(huge)
    assert answer.status.code == 41300 and "8000 topics" in answer.status.message
    assert stack.front.messaging.sessions.get(("mall", client_id)).settings is None  # nothing kept
    assert stream.ask(publishing("MallT1")).status.code == 20000  # the stream goes on
    stream.close()


def test_the_settings_one_user_keeps_are_bounded(stack, stub):
    """Finding 6: 300 streams naming 8,000 topics each grew the front by 859 MiB."""
    sessions = stack.front.messaging.sessions
    saved = sessions.max_settings_per_user
    big = publishing(*(f"MallT{i}" for i in range(900)))
    sessions.max_settings_per_user = sessions._settings_by_user.get("mall", 0) + 3 * big.ByteSize() + 100
    streams = [Stream(stub, meta(stack, MALL, new_id())) for _ in range(4)]
    try:
        answers = [st.ask(big).status for st in streams]
        assert [a.code for a in answers] == [20000, 20000, 20000, TOO_MANY]
        assert "bytes of client settings per user" in answers[-1].message
    finally:
        sessions.max_settings_per_user = saved
        for st in streams:
            st.close()


def test_change_invisible_duration_needs_sub_on_the_topic(stack, stub):
    res = stub.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(
            group=d.Resource(name="cg-1"),
            topic=d.Resource(name="MallPrivate"),  # cons may Sub on the group, not on this topic
            receipt_handle="whatever",
            invisible_duration=Duration(seconds=5),
        ),
        metadata=meta(stack, CONS, new_id()),
        timeout=TIMEOUT,
    )
    assert res.status.code == FORBIDDEN and "Topic:MallPrivate" in res.status.message


SYSTEM = ["TBW102", "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"]


@pytest.mark.parametrize("topic", SYSTEM)
def test_system_topics_are_refused_for_send_route_and_receive(stack, stub, topic):
    """``mall`` may Pub and Sub on every topic: the refusal is the topic's, not the ACL's."""
    who = meta(stack, MALL, new_id())
    m = d.Message(topic=d.Resource(name=topic), body=b"x")
    m.system_properties.message_id = "01" + uuid.uuid4().hex.upper()[:32]
    m.system_properties.message_type = d.NORMAL
    m.system_properties.born_timestamp.GetCurrentTime()
    m.system_properties.born_host = "127.0.0.1"
    res = stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=who, timeout=TIMEOUT)
    assert res.status.code == 40002 and "system topic" in res.status.message
    assert route(stub, who, topic).status.code == 40002
    request = s.ReceiveMessageRequest(
        group=d.Resource(name="cg-sys"),
        message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=-1),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=10),
        long_polling_timeout=Duration(seconds=1),
    )
    (first, *_) = stub.ReceiveMessage(request, metadata=who, timeout=TIMEOUT)
    assert first.status.code == 40002
    stream = Stream(stub, who)
    assert stream.ask(publishing(topic)).status.code == 40002
    stream.close()
