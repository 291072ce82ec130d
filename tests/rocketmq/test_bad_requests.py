"""Malformed and refused requests on the RocketMQ port, at the wire level with the
official client's own generated stubs (rocketmq.grpc_protocol) and its signed headers:
every refusal is a gRPC OK answer whose ``status`` carries RocketMQ's code and a reason
(protocol notes §3, §5, §9), the receive stream holds exactly one status and ends with a
delivery timestamp within the deadline, what the proxy leaves unimplemented is gRPC
UNIMPLEMENTED, bytes that are no request are BAD_REQUEST, and after each of them the
server still serves a good call."""

from __future__ import annotations

import itertools
import queue
import time
import uuid

import grpc
import pytest

from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store.pop import ReceiptHandle
from tests import rocketmq_client
from tests.services.helpers import small_config

pytestmark = pytest.mark.slow

rocketmq_client.load()  # before the client's modules: it fixes its log folder at import

from google.protobuf.duration_pb2 import Duration  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: E402
from rocketmq.v5.util.signature import Signature  # noqa: E402

OK, MESSAGE_NOT_FOUND = d.Code.OK, d.Code.MESSAGE_NOT_FOUND
SERVICE = "/apache.rocketmq.v2.MessagingService/"
NORMAL_TOPIC, FIFO_TOPIC, DELAY_TOPIC, MIXED_TOPIC = "BadNormal", "BadFifo", "BadDelay", "BadMixed"
ALIVE_TOPIC = "BadAlive"
MAX_BODY = 4 << 20
STORE_MAX_BODY = small_config().max_message_bytes  # 64 KiB: the port's limit follows the store's
TIMEOUT = 10


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LocalStack(tmp_path_factory.mktemp("rmq-bad"), small_config(), rocketmq_port=0) as st:
        assert st.wait_ready(60)
        front = FrontClient(st.front_endpoint)
        try:
            for topic, kind in ((FIFO_TOPIC, "FIFO"), (DELAY_TOPIC, "DELAY"), (MIXED_TOPIC, "MIXED")):
                assert front.update_topic(topic, message_type=kind).message_type == kind
        finally:
            front.close()
        yield st


@pytest.fixture(scope="module")
def channel(stack):
    with grpc.insecure_channel(stack.rocketmq_endpoint) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel):
    return service_pb2_grpc.MessagingServiceStub(channel)


@pytest.fixture(scope="module")
def meta(stack):
    """The headers the official client sends (signed with empty credentials, as it does)."""
    rmq = rocketmq_client.load()
    config = rmq.ClientConfiguration(stack.rocketmq_endpoint, rmq.Credentials("", ""))
    return Signature.metadata(config, f"bad-requests@{uuid.uuid4().hex[:8]}")


def without_client_id(meta) -> list:
    return [(k, v) for k, v in meta if k != "x-mq-client-id"]


_ids = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


def message_id() -> str:
    return "01" + uuid.uuid4().hex.upper()[:32]


def message(topic: str = NORMAL_TOPIC, body: bytes = b"body", **system) -> d.Message:
    """A v2 message as the Python producer builds it; ``system``: SystemProperties fields
    (``user``: user properties; ``delivery_ms``: the delivery timestamp)."""
    user = system.pop("user", {})
    m = d.Message(topic=d.Resource(name=topic), body=body, user_properties=user)
    sp = m.system_properties
    sp.message_id = system.pop("message_id", message_id())
    sp.message_type = system.pop("message_type", d.NORMAL)
    sp.body_encoding = d.IDENTITY
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.GetCurrentTime()
    if "delivery_ms" in system:
        sp.delivery_timestamp.FromMilliseconds(system.pop("delivery_ms"))
    for name, value in system.items():
        if name == "keys":
            sp.keys.extend(value)
        else:
            setattr(sp, name, value)
    return m


def refused(st, code: int) -> None:
    """A status with ``code`` and a reason."""
    assert st.code == code, (d.Code.Name(st.code) if st.code in d.Code.values() else st.code, st.message)
    assert st.message.strip(), f"code {d.Code.Name(code)} came without a message"


def still_serves(stub, meta) -> None:
    """A good call is answered: a message sent, OK with its id echoed."""
    m = message(ALIVE_TOPIC)
    res = stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=meta, timeout=TIMEOUT)
    assert res.status.code == OK, res.status
    assert [e.message_id for e in res.entries] == [m.system_properties.message_id]
    assert res.entries[0].status.code == OK


def receive(stub, meta, request: s.ReceiveMessageRequest, timeout: float = TIMEOUT) -> tuple[list, float]:
    """Every answer of one receive stream, checked for its shape (exactly one status,
    the delivery timestamp last), and the seconds it took."""
    t = time.monotonic()
    answers = list(stub.ReceiveMessage(request, metadata=meta, timeout=timeout))
    took = time.monotonic() - t
    kinds = [a.WhichOneof("content") for a in answers]
    assert kinds.count("status") == 1, kinds
    assert kinds[0] == "status" and kinds[-1] == "delivery_timestamp", kinds
    assert kinds.count("delivery_timestamp") == 1, kinds
    return answers, took


def receive_request(topic: str = NORMAL_TOPIC, group: str | None = None, **kw) -> s.ReceiveMessageRequest:
    """A SimpleConsumer's receive (10 s invisible, 1 s long poll) unless ``kw`` says otherwise."""
    kw.setdefault("invisible_duration", Duration(seconds=10))
    kw.setdefault("long_polling_timeout", Duration(seconds=1))
    kw.setdefault("batch_size", 16)
    kw.setdefault("filter_expression", d.FilterExpression(type=d.TAG, expression="*"))
    for name in [k for k, v in kw.items() if v is None]:
        del kw[name]
    return s.ReceiveMessageRequest(
        group=d.Resource(name=group or fresh("GBad")),
        message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=0),
        **kw,
    )


# ------------------------------------------------------------------ every RPC wants a client id


def test_a_call_without_client_id_is_40017(stub, meta):
    no_id = without_client_id(meta)
    res = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=NORMAL_TOPIC)), metadata=no_id, timeout=TIMEOUT)
    refused(res.status, d.Code.CLIENT_ID_REQUIRED)
    res = stub.SendMessage(s.SendMessageRequest(messages=[message()]), metadata=no_id, timeout=TIMEOUT)
    refused(res.status, d.Code.CLIENT_ID_REQUIRED)
    res = stub.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), metadata=no_id, timeout=TIMEOUT)
    refused(res.status, d.Code.CLIENT_ID_REQUIRED)
    answers, _ = receive(stub, no_id, receive_request())
    refused(answers[0].status, d.Code.CLIENT_ID_REQUIRED)
    (answer,) = stub.Telemetry(
        iter([s.TelemetryCommand(settings=producer_settings())]), metadata=no_id, timeout=TIMEOUT
    )
    refused(answer.status, d.Code.CLIENT_ID_REQUIRED)
    still_serves(stub, meta)


# ------------------------------------------------------------------ SendMessage

SEND_REFUSALS = {
    "blank message_id": (lambda: message(message_id="  "), d.Code.ILLEGAL_MESSAGE_ID),
    "empty body": (lambda: message(body=b""), d.Code.MESSAGE_BODY_EMPTY),
    "body of 4 MiB + 1": (lambda: message(body=b"x" * (MAX_BODY + 1)), d.Code.MESSAGE_BODY_TOO_LARGE),
    "property UNIQ_KEY": (lambda: message(user={"UNIQ_KEY": "x"}), d.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property DELAY": (lambda: message(user={"DELAY": "2"}), d.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property __SHARDINGKEY": (lambda: message(user={"__SHARDINGKEY": "g"}), d.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property with an empty value": (lambda: message(user={"a": ""}), d.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "tag with |": (lambda: message(tag="a|b"), d.Code.ILLEGAL_MESSAGE_TAG),
    "blank tag": (lambda: message(tag="  "), d.Code.ILLEGAL_MESSAGE_TAG),
    "blank key": (lambda: message(keys=["k1", " "]), d.Code.ILLEGAL_MESSAGE_KEY),
    "message group of 64 bytes": (
        lambda: message(FIFO_TOPIC, message_type=d.FIFO, message_group="g" * 64),
        d.Code.ILLEGAL_MESSAGE_GROUP,
    ),
    "129 user properties": (
        lambda: message(user={f"p{i}": "v" for i in range(129)}),
        d.Code.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    "FIFO without a group": (lambda: message(FIFO_TOPIC, message_type=d.FIFO), d.Code.ILLEGAL_MESSAGE_GROUP),
    "DELAY over 24 h ahead": (
        lambda: message(DELAY_TOPIC, message_type=d.DELAY, delivery_ms=int(time.time() * 1000) + 25 * 3600 * 1000),
        d.Code.ILLEGAL_DELIVERY_TIME,
    ),
    "NORMAL message with a delivery time over 24 h ahead": (
        lambda: message(NORMAL_TOPIC, delivery_ms=int(time.time() * 1000) + 25 * 3600 * 1000),
        d.Code.ILLEGAL_DELIVERY_TIME,
    ),
    "message id of 20 KB": (lambda: message(message_id="A" * 20_000), d.Code.MESSAGE_PROPERTIES_TOO_LARGE),
    "body over the store's max_message_bytes": (
        lambda: message(body=b"x" * (STORE_MAX_BODY + 1)),
        d.Code.MESSAGE_BODY_TOO_LARGE,
    ),
    "FIFO message on a NORMAL topic": (
        lambda: message(NORMAL_TOPIC, message_type=d.FIFO, message_group="g"),
        d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "NORMAL message on a FIFO topic": (
        lambda: message(FIFO_TOPIC, message_type=d.NORMAL),
        d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "DELAY message on a NORMAL topic": (
        lambda: message(NORMAL_TOPIC, message_type=d.DELAY, delivery_ms=int(time.time() * 1000) + 5000),
        d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "topic 'a b'": (lambda: message("a b"), d.Code.ILLEGAL_TOPIC),
    "topic RMQ_SYS_TRANS_HALF_TOPIC": (lambda: message("RMQ_SYS_TRANS_HALF_TOPIC"), d.Code.ILLEGAL_TOPIC),
    "topic SCHEDULE_TOPIC_XXXX": (lambda: message("SCHEDULE_TOPIC_XXXX"), d.Code.ILLEGAL_TOPIC),
    "topic rmq_sys_x": (lambda: message("rmq_sys_x"), d.Code.ILLEGAL_TOPIC),
}


@pytest.mark.parametrize("make, code", SEND_REFUSALS.values(), ids=SEND_REFUSALS.keys())
def test_send_refusals(stub, meta, make, code):
    res = stub.SendMessage(s.SendMessageRequest(messages=[make()]), metadata=meta, timeout=TIMEOUT)
    refused(res.status, code)
    still_serves(stub, meta)


def test_send_without_messages_is_40016(stub, meta):
    res = stub.SendMessage(s.SendMessageRequest(), metadata=meta, timeout=TIMEOUT)
    refused(res.status, d.Code.MESSAGE_CORRUPTED)
    still_serves(stub, meta)


def test_the_types_a_topic_accepts_are_sent(stub, meta):
    """The good side of the type checks: each topic takes its own type; MIXED every one."""
    now = int(time.time() * 1000)
    good = [
        message(FIFO_TOPIC, message_type=d.FIFO, message_group="g" * 63),
        message(DELAY_TOPIC, message_type=d.DELAY, delivery_ms=now + 23 * 3600 * 1000),
        message(MIXED_TOPIC, message_type=d.FIFO, message_group="g"),
        message(MIXED_TOPIC, message_type=d.DELAY, delivery_ms=now + 1000),
        message(MIXED_TOPIC),
        message(NORMAL_TOPIC, user={f"p{i}": "v" for i in range(128)}, tag="t", keys=["k1", "k2"]),
        message(NORMAL_TOPIC, body=b"x" * STORE_MAX_BODY),
    ]
    for m in good:
        res = stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=meta, timeout=TIMEOUT)
        assert res.status.code == OK, (m.topic.name, res.status)


# ------------------------------------------------------------------ ReceiveMessage

RECEIVE_REFUSALS = {
    "group 'a b'": (dict(group="a b"), d.Code.ILLEGAL_CONSUMER_GROUP),
    "system group": (dict(group="CID_RMQ_SYS_x"), d.Code.ILLEGAL_CONSUMER_GROUP),
    "SQL filter": (
        dict(filter_expression=d.FilterExpression(type=d.SQL, expression="a > 1")),
        d.Code.ILLEGAL_FILTER_EXPRESSION,
    ),
    "tag expression 'a ||'": (
        dict(filter_expression=d.FilterExpression(type=d.TAG, expression="a ||")),
        d.Code.ILLEGAL_FILTER_EXPRESSION,
    ),
    "batch_size 33": (dict(batch_size=33), d.Code.BAD_REQUEST),
    "invisible_duration 0": (dict(invisible_duration=Duration(seconds=0)), d.Code.ILLEGAL_INVISIBLE_TIME),
    "invisible_duration over 12 h": (
        dict(invisible_duration=Duration(seconds=12 * 3600, nanos=1_000_000)),
        d.Code.ILLEGAL_INVISIBLE_TIME,
    ),
    "no invisible_duration, no auto_renew": (dict(invisible_duration=None), d.Code.ILLEGAL_INVISIBLE_TIME),
    "topic 'a b'": (dict(topic="a b"), d.Code.ILLEGAL_TOPIC),
}


@pytest.mark.parametrize("kw, code", RECEIVE_REFUSALS.values(), ids=RECEIVE_REFUSALS.keys())
def test_receive_refusals(stub, meta, kw, code):
    answers, took = receive(stub, meta, receive_request(**kw))
    refused(answers[0].status, code)
    assert len(answers) == 2  # the status and the timestamp: no message with a refusal
    assert took < 2.0  # refused at once, not after the long poll
    still_serves(stub, meta)


def test_an_empty_receive_is_40401_and_ends_within_the_deadline(stub, meta):
    answers, took = receive(stub, meta, receive_request(fresh("TEmpty")), timeout=3)
    refused(answers[0].status, MESSAGE_NOT_FOUND)
    assert len(answers) == 2
    assert 0.8 <= took < 3.0, took  # it long-polled its 1 s, and answered before the deadline
    assert abs(answers[-1].delivery_timestamp.ToMilliseconds() - time.time() * 1000) < 5000


def test_a_long_poll_past_the_deadline_still_answers_before_it(stub, meta):
    answers, took = receive(
        stub, meta, receive_request(fresh("TEmpty"), long_polling_timeout=Duration(seconds=20)), timeout=2
    )
    refused(answers[0].status, MESSAGE_NOT_FOUND)
    assert took < 2.0, took


def test_a_receive_with_auto_renew_and_no_invisible_time_is_served(stub, meta):
    """The PushConsumer's receive (auto_renew, no invisible_duration): not refused."""
    answers, _ = receive(stub, meta, receive_request(fresh("TEmpty"), invisible_duration=None, auto_renew=True))
    refused(answers[0].status, MESSAGE_NOT_FOUND)


def test_received_message_then_bad_and_good_handles(stub, meta):
    """A real handle acks; garbage and another shard's handles are 40013 beside it."""
    topic, group = fresh("TGood"), fresh("GGood")
    m = message(topic, body=b"payload", tag="TagA", keys=["k1"])
    assert stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=meta, timeout=TIMEOUT).status.code == OK
    answers, _ = receive(stub, meta, receive_request(topic, group, long_polling_timeout=Duration(seconds=5)))
    assert answers[0].status.code == OK
    (got,) = [a.message for a in answers if a.WhichOneof("content") == "message"]
    assert got.system_properties.message_id == m.system_properties.message_id
    assert got.system_properties.body_encoding == d.IDENTITY
    assert got.system_properties.body_digest.type == d.MD5
    assert got.system_properties.delivery_attempt >= 1
    handle = got.system_properties.receipt_handle
    res = stub.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            entries=[
                s.AckMessageEntry(message_id="x", receipt_handle="garbage"),
                s.AckMessageEntry(message_id=got.system_properties.message_id, receipt_handle=handle),
            ],
        ),
        metadata=meta,
        timeout=TIMEOUT,
    )
    assert res.status.code == d.Code.MULTIPLE_RESULTS, res.status
    refused(res.entries[0].status, d.Code.INVALID_RECEIPT_HANDLE)
    assert res.entries[1].status.code == OK
    # acked: the same handle again is stale
    res = stub.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            entries=[s.AckMessageEntry(message_id=got.system_properties.message_id, receipt_handle=handle)],
        ),
        metadata=meta,
        timeout=TIMEOUT,
    )
    refused(res.status, d.Code.INVALID_RECEIPT_HANDLE)


# ------------------------------------------------------------------ handles

SHARD_7 = ReceiptHandle(
    shard=7,
    queue_id=0,
    offset=0,
    generation=1,
    pop_ms=int(time.time() * 1000),
    invisible_ms=60_000,
    commitlog_offset=0,
    tag="A" * 22,  # well formed: the front refuses it for its shard
).encode()


@pytest.mark.parametrize("handle", ["garbage", "", SHARD_7], ids=["garbage", "empty", "shard 7"])
def test_ack_with_a_bad_handle_is_40013_per_entry_and_on_top(stub, meta, handle):
    res = stub.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name="GHandles"),
            topic=d.Resource(name=NORMAL_TOPIC),
            entries=[s.AckMessageEntry(message_id=message_id(), receipt_handle=handle)] * 2,
        ),
        metadata=meta,
        timeout=TIMEOUT,
    )
    refused(res.status, d.Code.INVALID_RECEIPT_HANDLE)
    assert len(res.entries) == 2
    for e in res.entries:
        refused(e.status, d.Code.INVALID_RECEIPT_HANDLE)
        assert e.receipt_handle == handle
    still_serves(stub, meta)


@pytest.mark.parametrize("handle", ["garbage", SHARD_7], ids=["garbage", "shard 7"])
def test_change_invisible_duration_with_a_bad_handle_is_40013(stub, meta, handle):
    res = stub.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(
            group=d.Resource(name="GHandles"),
            topic=d.Resource(name=NORMAL_TOPIC),
            receipt_handle=handle,
            invisible_duration=Duration(seconds=5),
            message_id=message_id(),
        ),
        metadata=meta,
        timeout=TIMEOUT,
    )
    refused(res.status, d.Code.INVALID_RECEIPT_HANDLE)
    still_serves(stub, meta)


# ------------------------------------------------------------------ what is not served


@pytest.mark.parametrize("method", ["UpdateOffset", "GetOffset", "QueryOffset"])
def test_offset_rpcs_are_unimplemented(stub, meta, method):
    request = {
        "UpdateOffset": s.UpdateOffsetRequest,
        "GetOffset": s.GetOffsetRequest,
        "QueryOffset": s.QueryOffsetRequest,
    }
    with pytest.raises(grpc.RpcError) as e:
        getattr(stub, method)(request[method](), metadata=meta, timeout=TIMEOUT)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    still_serves(stub, meta)


def test_pull_message_is_unimplemented(stub, meta):
    with pytest.raises(grpc.RpcError) as e:
        list(stub.PullMessage(s.PullMessageRequest(), metadata=meta, timeout=TIMEOUT))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    still_serves(stub, meta)


@pytest.mark.parametrize("method", ["SendMessage", "QueryRoute", "AckMessage", "ReceiveMessage"])
def test_garbage_bytes_are_a_bad_request(channel, stub, meta, method):
    """Bytes that are no request: answered like every refusal, BAD_REQUEST in the status."""
    call = (channel.unary_stream if method == "ReceiveMessage" else channel.unary_unary)(SERVICE + method)
    answer = call(b"\xff\x00garbage", metadata=meta, timeout=TIMEOUT)
    if method == "ReceiveMessage":
        (first, last) = [s.ReceiveMessageResponse.FromString(x) for x in answer]
        assert last.HasField("delivery_timestamp")
        st = first.status
    else:
        st = getattr(s, f"{method}Response").FromString(answer).status
    assert st.code == d.BAD_REQUEST and "not a" in st.message, st
    still_serves(stub, meta)


# ------------------------------------------------------------------ QueryRoute, QueryAssignment

ASKED = d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="10.9.8.7", port=18081)])


def route(stub, meta, topic: str, endpoints: d.Endpoints = ASKED) -> s.QueryRouteResponse:
    return stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name=topic), endpoints=endpoints), metadata=meta, timeout=TIMEOUT
    )


def test_route_of_a_new_topic(stub, meta):
    topic = fresh("TRoute")
    res = route(stub, meta, topic)
    assert res.status.code == OK and res.status.message
    assert [q.id for q in res.message_queues] == [0, 1, 2, 3]
    for q in res.message_queues:
        assert q.topic.name == topic
        assert q.permission == d.READ_WRITE
        assert q.broker.id == 0 and q.broker.name
        assert q.broker.endpoints == ASKED  # where the client reached us, as RocketMQ's proxy answers
        assert list(q.accept_message_types) == [d.NORMAL]


def test_route_without_endpoints_names_the_port(stack, stub, meta):
    res = route(stub, meta, fresh("TRoute"), d.Endpoints())
    host, port = stack.rocketmq_endpoint.rsplit(":", 1)
    (address,) = res.message_queues[0].broker.endpoints.addresses
    assert (address.host, address.port) == (host, int(port))
    assert res.message_queues[0].broker.endpoints.scheme == d.IPv4


@pytest.mark.parametrize(
    "topic, types",
    [
        (FIFO_TOPIC, [d.FIFO]),
        (DELAY_TOPIC, [d.DELAY]),
        (MIXED_TOPIC, [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]),
    ],
)
def test_route_accepts_the_topics_types(stub, meta, topic, types):
    res = route(stub, meta, topic)
    assert res.status.code == OK
    for q in res.message_queues:
        assert sorted(q.accept_message_types) == sorted(types)


@pytest.mark.parametrize("topic", ["a b", "SCHEDULE_TOPIC_XXXX"])
def test_route_of_a_bad_topic_is_40002(stub, meta, topic):
    refused(route(stub, meta, topic).status, d.Code.ILLEGAL_TOPIC)
    still_serves(stub, meta)


def assignment(stub, meta, topic: str, group: str = "GAssign") -> s.QueryAssignmentResponse:
    return stub.QueryAssignment(
        s.QueryAssignmentRequest(topic=d.Resource(name=topic), group=d.Resource(name=group), endpoints=ASKED),
        metadata=meta,
        timeout=TIMEOUT,
    )


def test_assignment_of_a_normal_topic_is_one_any_queue(stub, meta):
    res = assignment(stub, meta, NORMAL_TOPIC)
    assert res.status.code == OK
    (a,) = res.assignments
    assert a.message_queue.id == -1
    assert a.message_queue.broker.id == 0 and a.message_queue.broker.endpoints == ASKED
    assert a.message_queue.permission in (d.READ, d.READ_WRITE)


def test_assignment_of_a_fifo_topic_is_one_per_queue(stub, meta):
    res = assignment(stub, meta, FIFO_TOPIC)
    assert res.status.code == OK
    assert sorted(a.message_queue.id for a in res.assignments) == [0, 1, 2, 3]
    assert all(a.message_queue.broker.endpoints == ASKED for a in res.assignments)


def test_assignment_with_a_bad_group_is_40003(stub, meta):
    refused(assignment(stub, meta, NORMAL_TOPIC, group="a b").status, d.Code.ILLEGAL_CONSUMER_GROUP)


# ------------------------------------------------------------------ Telemetry, Heartbeat, termination


def producer_settings() -> d.Settings:
    return d.Settings(
        client_type=d.PRODUCER,
        request_timeout=Duration(seconds=3),
        publishing=d.Publishing(topics=[d.Resource(name=NORMAL_TOPIC)], max_body_size=128 << 20),
        user_agent=d.UA(language=d.PYTHON, version="5.1.2"),
    )


def consumer_settings(group: str = "GTelemetry") -> d.Settings:
    return d.Settings(
        client_type=d.SIMPLE_CONSUMER,
        request_timeout=Duration(seconds=3),
        subscription=d.Subscription(
            group=d.Resource(name=group),
            subscriptions=[
                d.SubscriptionEntry(
                    topic=d.Resource(name=NORMAL_TOPIC), expression=d.FilterExpression(type=d.TAG, expression="*")
                )
            ],
        ),
    )


class Telemetry:
    """One Telemetry stream: ``ask(settings)`` writes a command and reads its answer."""

    def __init__(self, stub, meta) -> None:
        self._out: queue.Queue = queue.Queue()
        self._answers = stub.Telemetry(iter(self._out.get, None), metadata=meta, timeout=60)

    def ask(self, settings: d.Settings) -> d.TelemetryCommand:
        self._out.put(s.TelemetryCommand(settings=settings))
        return next(self._answers)

    def close(self) -> list:
        """Half-close; what else the server said before it ended the stream."""
        self._out.put(None)
        return list(self._answers)


def test_telemetry_answers_producer_and_consumer_settings(stub, meta):
    t = Telemetry(stub, meta)
    answer = t.ask(producer_settings())
    assert answer.status.code == OK
    pub = answer.settings.publishing
    assert pub.max_body_size == STORE_MAX_BODY and pub.validate_message_type  # the store's limit, not 4 MiB
    assert answer.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert answer.settings.backoff_policy.max_attempts > 0
    assert not answer.settings.metric.on
    answer = t.ask(consumer_settings())
    assert answer.status.code == OK
    sub = answer.settings.subscription
    assert sub.HasField("long_polling_timeout") and sub.long_polling_timeout.ToMilliseconds() > 0
    assert sub.HasField("receive_batch_size") and sub.receive_batch_size > 0
    assert sub.HasField("fifo") and not sub.fifo
    policy = answer.settings.backoff_policy
    assert policy.WhichOneof("strategy") == "customized_backoff" and len(policy.customized_backoff.next) > 0
    assert policy.max_attempts > 0
    assert t.close() == []  # the client half-closed: the stream ends


def test_telemetry_settings_of_a_fifo_group(stub, meta):
    t = Telemetry(stub, meta)
    s_ = consumer_settings()
    s_.subscription.subscriptions[0].topic.name = FIFO_TOPIC
    assert t.ask(s_).settings.subscription.fifo
    t.close()


def test_telemetry_settings_with_neither_is_40000_and_the_stream_goes_on(stub, meta):
    t = Telemetry(stub, meta)
    answer = t.ask(d.Settings(client_type=d.PRODUCER))
    refused(answer.status, d.Code.BAD_REQUEST)
    answer = t.ask(producer_settings())  # the same stream still answers
    assert answer.status.code == OK and answer.settings.publishing.max_body_size > 0
    assert t.close() == []
    still_serves(stub, meta)


def test_heartbeat_and_termination_are_ok(stub, meta):
    for request in (
        s.HeartbeatRequest(client_type=d.PRODUCER),
        s.HeartbeatRequest(group=d.Resource(name="GBeat"), client_type=d.SIMPLE_CONSUMER),
    ):
        assert stub.Heartbeat(request, metadata=meta, timeout=TIMEOUT).status.code == OK
    res = stub.NotifyClientTermination(
        s.NotifyClientTerminationRequest(group=d.Resource(name="GBeat")), metadata=meta, timeout=TIMEOUT
    )
    assert res.status.code == OK
    assert (
        stub.NotifyClientTermination(s.NotifyClientTerminationRequest(), metadata=meta, timeout=TIMEOUT).status.code
        == OK
    )
    still_serves(stub, meta)
