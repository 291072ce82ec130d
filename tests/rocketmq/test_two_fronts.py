"""Two fronts sharing one API port and one RocketMQ port (``serve --fronts 2``), in this
process (``LocalStack(fronts=2)``: two FrontHosts with SO_REUSEPORT, the kernel spreads
connections): the official client sends, receives and push-consumes through both, a
topic changed through one front is seen by the other within the topic table's
freshness bound, a client's calls work on a front that never got its settings, a push
consumer's messages come back after their invisible time when the front renewing them
dies, and mqstore's own API sends and pulls through both. (A front SIGKILLed under load
on Ray: test_two_fronts_kill.py.)"""

from __future__ import annotations

import threading
import time
import uuid

import grpc
import pytest

from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store.topic_configs import PERM_READ
from tests.rocketmq.conftest import Clients, receive_until
from tests.rocketmq.fronts import api_front_of, clients_on_each_front, front_of, holders, served
from tests.services.helpers import small_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
FRESH_S = 5.0  # generous bound on the topic table's 1 s freshness (a loaded 2-core machine)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LocalStack(tmp_path_factory.mktemp("two-fronts"), small_config(), rocketmq_port=0, fronts=2) as st:
        assert st.wait_ready(60)
        assert len({f.rocketmq_endpoint for f in st.fronts}) == 1  # one port, shared
        assert len({f.endpoint for f in st.fronts}) == 1
        yield st


@pytest.fixture
def clients(rmq, stack):
    c = Clients(rmq, stack.rocketmq_endpoint)
    yield c
    c.close()


@pytest.fixture
def api(stack):
    made: list[FrontClient] = []

    def make() -> FrontClient:
        made.append(FrontClient(stack.front_endpoint))
        return made[-1]

    yield make
    for c in made:
        c.close()


def test_sends_and_receives_through_both_fronts(stack, clients, names):
    topic, group = names
    before = served(stack)
    producers = clients_on_each_front(stack, lambda: clients.producer(topic))
    sent = set()
    for k, p in producers.items():
        sent |= {p.send(clients.message(topic, f"f{k}-{i}".encode())).message_id for i in range(10)}
    consumers = clients_on_each_front(stack, lambda: clients.simple(group, {topic: "*"}))
    got: list = []
    end = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < end:
        for c in consumers.values():
            for m in c.receive(16, 30):
                c.ack(m)
                got.append(m.message_id)
    assert sorted(got) == sorted(sent)  # each once: every ack reached the front that holds its consumer
    after = served(stack)
    assert all(a["rocketmq"] > b["rocketmq"] for a, b in zip(after, before)), (before, after)


def test_push_consumer_with_producers_on_both_fronts(stack, clients, names, rmq):
    topic, group = names
    producers = clients_on_each_front(stack, lambda: clients.producer(topic))
    sent = set()
    for k, p in producers.items():
        sent |= {p.send(clients.message(topic, f"push{k}-{i}".encode())).message_id for i in range(15)}
    seen: set[str] = set()
    lock, done = threading.Lock(), threading.Event()

    class Listener(rmq.MessageListener):
        def consume(self, message):
            with lock:
                seen.add(message.message_id)
                if seen >= sent:
                    done.set()
            return rmq.ConsumeResult.SUCCESS

    consumer = rmq.PushConsumer(clients.config(), group, Listener(), {topic: rmq.FilterExpression("*")})
    consumer.startup()
    try:
        assert done.wait(60), f"consumed {len(seen)} of {len(sent)}"
        assert front_of(stack, consumer) in (0, 1)
    finally:
        consumer.shutdown()
    assert seen == sent


def test_a_topic_changed_through_one_front_is_seen_by_the_other(stack, clients, names, api):
    """Each front keeps its own topic table, fetched from the shards at most 1 s ago
    (shard_set.TopicTable): a topic created through front A shows in front B's routes,
    and B refuses sends once A made it read-only, both within the bound."""
    topic, _ = names
    fronts = clients_on_each_front(stack, api, which=api_front_of)
    a, b = fronts[0], fronts[1]
    b.route(refresh=True)  # B's table is fresh now: what follows is A's change reaching it
    a.update_topic(topic, read_queue_nums=6, write_queue_nums=6)
    t0 = time.monotonic()
    while b.route(refresh=True).write_queue_nums.get(topic) != 6:
        assert time.monotonic() - t0 < FRESH_S, "front B never saw the topic front A created"
        time.sleep(0.05)
    on_b = clients_on_each_front(stack, lambda: clients.producer(topic))[1]
    on_b.send(clients.message(topic, b"before"))
    a.update_topic(topic, perm=PERM_READ)
    t0 = time.monotonic()
    while True:
        try:
            on_b.send(clients.message(topic, b"after"))
        except Exception as e:  # noqa: BLE001 - the client raises its own exception types
            assert "403" in str(e) or "FORBIDDEN" in str(e).upper() or "perm" in str(e), e
            break
        assert time.monotonic() - t0 < FRESH_S, "front B still takes sends on a topic made read-only through A"
        time.sleep(0.05)


class _Raw:
    """apache.rocketmq.v2.MessagingService calls on a channel of its own, as one client."""

    def __init__(self, endpoint: str, client_id: str) -> None:
        self.channel = grpc.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)])
        self.md = [("x-mq-client-id", client_id)]
        self.client_id = client_id

    def call(self, method: str, request, answer):
        rpc = self.channel.unary_unary(
            f"/apache.rocketmq.v2.MessagingService/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=answer.FromString,
        )
        return rpc(request, metadata=self.md, timeout=10)

    def receive(self, request) -> list:
        rpc = self.channel.unary_stream(
            "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
            request_serializer=v2.ReceiveMessageRequest.SerializeToString,
            response_deserializer=v2.ReceiveMessageResponse.FromString,
        )
        return [r.message for r in rpc(request, metadata=self.md, timeout=10) if r.HasField("message")]


def _raw_on(stack, front: int, prefix: str) -> _Raw:
    """A raw client whose connection the front ``front`` holds: channels are opened
    until one lands there."""
    for _ in range(24):
        raw = _Raw(stack.rocketmq_endpoint, f"{prefix}-{uuid.uuid4().hex[:8]}")
        assert raw.call("Heartbeat", v2.HeartbeatRequest(), v2.HeartbeatResponse).status.code == v2.OK
        if raw.client_id in holders(stack)[front]:
            return raw
        raw.channel.close()
    raise AssertionError(f"no connection reached front {front}")


def test_calls_on_a_front_that_never_got_the_settings(stack, names):
    """A client whose front died reconnects to another and may call before it resends
    its settings (Telemetry): no call but the stream's own answers reads them, so sends,
    receives and acks work on the new front with the defaults."""
    topic, group = names
    raw = _raw_on(stack, 1, "no-settings")
    try:
        msg = v2.Message(topic=v2.Resource(name=topic), body=b"no settings")
        msg.system_properties.message_id = uuid.uuid4().hex.upper()
        msg.system_properties.body_encoding = v2.IDENTITY
        msg.system_properties.message_type = v2.NORMAL
        msg.system_properties.born_host = "test"
        msg.system_properties.born_timestamp.GetCurrentTime()
        sent = raw.call("SendMessage", v2.SendMessageRequest(messages=[msg]), v2.SendMessageResponse)
        assert sent.status.code == v2.OK, sent.status
        queue = v2.MessageQueue(topic=v2.Resource(name=topic), id=-1)
        got = []
        end = time.monotonic() + 30
        while not got and time.monotonic() < end:
            request = v2.ReceiveMessageRequest(
                group=v2.Resource(name=group),
                message_queue=queue,
                filter_expression=v2.FilterExpression(type=v2.TAG, expression="*"),
                batch_size=4,
            )
            request.invisible_duration.FromSeconds(30)
            request.long_polling_timeout.FromSeconds(2)
            got = raw.receive(request)
        assert [m.body for m in got] == [b"no settings"]
        ack = raw.call(
            "AckMessage",
            v2.AckMessageRequest(
                group=v2.Resource(name=group),
                topic=v2.Resource(name=topic),
                entries=[
                    v2.AckMessageEntry(
                        message_id=got[0].system_properties.message_id,
                        receipt_handle=got[0].system_properties.receipt_handle,
                    )
                ],
            ),
            v2.AckMessageResponse,
        )
        assert ack.status.code == v2.OK, ack.status
    finally:
        raw.channel.close()


def test_mqstore_api_sends_and_pulls_through_both_fronts(stack, names, api):
    topic, _ = names
    fronts = clients_on_each_front(stack, api, which=api_front_of)
    bodies = {k: [f"api{k}-{i}".encode() for i in range(20)] for k in fronts}
    for k, c in fronts.items():
        r = c.send(topic, bodies[k], queue_ids=0)
        assert len(r.statuses) == 20
    for c in fronts.values():  # each front pulls what both sent
        deadline = time.monotonic() + 30
        while True:
            got = [rec.body for rec in c.pull(topic, 0, 0, max_messages=64).records]
            if len(got) == 40 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert sorted(got) == sorted(bodies[0] + bodies[1])


def test_push_messages_come_back_after_their_front_dies(tmp_path, rmq, names):
    """The front that received a push consumer's messages renews them and maps the
    client's handles (renewal.py); when it dies the client reconnects to the other
    front, its acks with the handles it holds fail as stale, and the messages come
    back once their last invisible time passes: delivered again (at least once),
    none lost, and then acked for good through the other front."""
    topic, group = names
    with LocalStack(tmp_path, small_config(), rocketmq_port=0, fronts=2) as st:
        assert st.wait_ready(60)
        for f in st.fronts:  # renewed about every second, back 2 s after the last renewal
            f.messaging.renewals.invisible_ms, f.messaging.renewals.renew_ahead_ms = 2000, 1200
        clients = Clients(rmq, st.rocketmq_endpoint)
        try:
            producer = clients.producer(topic)
            sent = {producer.send(clients.message(topic, f"r{i}".encode())).message_id for i in range(3)}
            calls: list[str] = []
            lock = threading.Lock()
            started = threading.Event()

            class Slow(rmq.MessageListener):
                def consume(self, message):
                    with lock:
                        calls.append(message.message_id)
                    started.set()
                    if message.delivery_attempt == 1:
                        time.sleep(4)  # renewed by its front meanwhile; the front dies before the ack
                    return rmq.ConsumeResult.SUCCESS

            consumer = rmq.PushConsumer(clients.config(), group, Slow(), {topic: rmq.FilterExpression("*")})
            consumer.startup()
            try:
                holder = front_of(st, consumer)
                assert started.wait(30)
                time.sleep(1.5)  # at least one renewal: the handle the client holds is no longer current
                st.fronts[holder].close()
                end = time.monotonic() + 60
                while not set(calls) >= sent or len(calls) < len(sent) + 1:
                    assert time.monotonic() < end, f"calls {calls}"
                    time.sleep(0.2)
                time.sleep(3)  # what is still to come shows
            finally:
                consumer.shutdown()
            assert set(calls) == sent  # none lost
            assert len(calls) > len(sent)  # the renewed ones came again: at least once
            check = clients.simple(group, {topic: "*"})
            assert receive_until(check, 1, invisible_s=5, timeout_s=4) == []  # all acked for good
        finally:
            clients.close()
