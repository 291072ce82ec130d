"""The Telemetry settings reply (the values clients depend on) and client sessions."""

from __future__ import annotations

from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.services.rocketmq import settings


def test_a_producer_gets_a_body_limit_and_an_exponential_backoff():
    client = v2.Settings(client_type=v2.PRODUCER, publishing=v2.Publishing(topics=[v2.Resource(name="T")]))
    s = settings.reply(client, max_body=1 << 20, max_attempts=17, fifo=False)
    assert s.publishing.max_body_size == 1 << 20 and s.publishing.validate_message_type
    assert s.backoff_policy.WhichOneof("strategy") == "exponential_backoff"  # Java and Node throw without one
    assert s.backoff_policy.max_attempts == 3 and not s.metric.on
    assert [t.name for t in s.publishing.topics] == ["T"]  # the client's own values kept


def test_a_consumer_gets_long_polling_batch_fifo_and_its_retry_policy():
    client = v2.Settings(client_type=v2.PUSH_CONSUMER, subscription=v2.Subscription(group=v2.Resource(name="g")))
    s = settings.reply(client, max_body=1 << 20, max_attempts=5, fifo=True)
    sub = s.subscription
    assert sub.long_polling_timeout.seconds == settings.LONG_POLLING_S and sub.receive_batch_size == 32 and sub.fifo
    assert s.backoff_policy.max_attempts == 5
    assert [d.seconds for d in s.backoff_policy.customized_backoff.next][:3] == [1, 5, 10]
    client.subscription.long_polling_timeout.seconds = 7  # the client's own await time is kept
    assert settings.reply(client, max_body=1, max_attempts=5, fifo=False).subscription.long_polling_timeout.seconds == 7


def test_idle_sessions_without_a_stream_are_forgotten(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(settings.time, "monotonic", lambda: clock[0])
    sessions = settings.Sessions()
    sessions.seen("gone")
    streaming = sessions.seen("streaming")
    streaming.outbox = object()  # an open Telemetry stream keeps a client
    clock[0] += settings.SESSION_IDLE_S + 1
    sessions.seen("new")  # a new client sweeps the idle ones
    assert sessions.get("gone") is None
    assert sessions.get("streaming") is streaming and sessions.get("new") is not None
