"""The Telemetry settings reply (the values clients depend on) and client sessions."""

from __future__ import annotations

import pytest

from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.services.rocketmq import settings
from mqstore.services.rocketmq.status import ProtocolError


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
    sessions.seen(K("gone"))
    streaming = sessions.seen(K("streaming"))
    streaming.outbox = object()  # an open Telemetry stream keeps a client
    clock[0] += settings.SESSION_IDLE_S + 1
    sessions.seen(K("new"))  # a new client sweeps the idle ones
    assert sessions.get(K("gone")) is None
    assert sessions.get(K("streaming")) is streaming and sessions.get(K("new")) is not None


def K(client_id: str, user: str = "") -> settings.SessionKey:  # noqa: N802 - reads as a type
    return settings.SessionKey(user, client_id)


def test_sessions_are_per_user_another_users_client_id_names_nothing_of_theirs():
    sessions = settings.Sessions()
    mine = sessions.seen(K("c1", "alice"))
    mine.settings = v2.Settings(publishing=v2.Publishing(topics=[v2.Resource(name="T")]))
    mine.outbox = object()
    theirs = sessions.seen(K("c1", "mallory"))
    assert theirs is not mine and theirs.settings is None
    sessions.forget(K("c1", "mallory"))
    assert sessions.get(K("c1", "alice")) is mine
    assert sessions.producers("T") == [mine]
    assert sessions.producers("T", lambda user: user != "alice") == []  # the user may no longer Pub


def test_sessions_are_bounded_per_user_and_in_all():
    sessions = settings.Sessions(max_total=5, max_per_user=2)
    sessions.seen(K("a1", "alice"))
    sessions.seen(K("a2", "alice"))
    with pytest.raises(ProtocolError, match="user 'alice' has 2 client sessions") as e:
        sessions.seen(K("a3", "alice"))
    assert e.value.code == v2.Code.TOO_MANY_REQUESTS
    sessions.seen(K("a1", "alice"))  # a known session is always served
    for i in range(3):
        sessions.seen(K("b", f"user{i}"))
    with pytest.raises(ProtocolError, match="at most 5 client sessions") as e:
        sessions.seen(K("c", "carol"))
    assert e.value.code == v2.Code.TOO_MANY_REQUESTS
    assert sessions.refused == {"total": 1, "per_user": 1, "settings": 0} and len(sessions) == 5
    sessions.forget(K("a1", "alice"))  # room again, for alice too
    sessions.seen(K("a3", "alice"))
    assert len(sessions) == 5 and sessions.users() == 4


def test_at_the_bound_idle_sessions_make_room(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(settings.time, "monotonic", lambda: clock[0])
    sessions = settings.Sessions(max_total=2)
    sessions.seen(K("old1"))
    sessions.seen(K("old2"))
    clock[0] += settings.SESSION_IDLE_S + 1
    sessions.seen(K("old2"))  # heard from again: kept
    sessions.seen(K("new"))  # old1 was idle: forgotten to make room
    assert sessions.get(K("old1")) is None and len(sessions) == 2


def test_anonymous_front_has_only_the_total_bound():
    sessions = settings.Sessions(max_total=3, max_per_user=1, anonymous=True)
    for i in range(3):
        sessions.seen(K(f"c{i}"))
    assert len(sessions) == 3


def test_client_ids_and_settings_are_bounded():
    settings.check_client_id("host@123@0@abc")
    with pytest.raises(ProtocolError, match="7000 characters") as e:
        settings.check_client_id("x" * 7000)
    assert e.value.code == v2.Code.BAD_REQUEST
    many = v2.Settings(
        subscription=v2.Subscription(
            group=v2.Resource(name="g"),
            subscriptions=[
                v2.SubscriptionEntry(topic=v2.Resource(name=f"T{i}")) for i in range(settings.MAX_SETTINGS_TOPICS + 1)
            ],
        )
    )
    sessions = settings.Sessions()
    with pytest.raises(ProtocolError, match="topics, more than") as e:
        sessions.check_settings(many)
    assert e.value.code == v2.Code.PAYLOAD_TOO_LARGE and sessions.refused["settings"] == 1
    big = v2.Settings(publishing=v2.Publishing(topics=[v2.Resource(name="T" * 127)] * 900))
    big.client_properties["x"] = "y" * settings.MAX_SETTINGS_BYTES
    with pytest.raises(ProtocolError, match="bytes, more than"):
        settings.check_settings(big)
    settings.check_settings(v2.Settings(publishing=v2.Publishing(topics=[v2.Resource(name="T")] * 900)))


def test_settings_kept_are_bounded_per_user_and_in_all():
    sessions = settings.Sessions()
    sessions.max_settings_per_user, sessions.max_settings_total = 3000, 5000
    s = v2.Settings(publishing=v2.Publishing(topics=[v2.Resource(name="T" * 100)] * 9))
    size = s.ByteSize()
    assert 900 < size < 1000
    kept = [sessions.seen(K(f"a{i}", "alice")) for i in range(3)]
    for one in kept:
        sessions.keep_settings(one, s)
    fourth = sessions.seen(K("a3", "alice"))
    with pytest.raises(ProtocolError, match="bytes of client settings per user") as e:
        sessions.keep_settings(fourth, s)
    assert e.value.code == v2.Code.TOO_MANY_REQUESTS and fourth.settings is None
    sessions.keep_settings(kept[0], s)  # the same size again replaces, and fits
    for i in range(2):
        sessions.keep_settings(sessions.seen(K(f"b{i}", "bob")), s)
    with pytest.raises(ProtocolError, match="in all"):
        sessions.keep_settings(sessions.seen(K("c", "carol")), s)
    assert sessions.refused["settings"] == 2
    sessions.forget(K("a0", "alice"))  # a forgotten session's settings free their bytes
    sessions.keep_settings(fourth, s)
    assert fourth.settings is s
