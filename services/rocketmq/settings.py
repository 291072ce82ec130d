"""The Settings a client gets back on its Telemetry stream, and what the front keeps
of each client (its session: per authenticated user and client id, bounded).

Clients send their settings when they open the stream (and every 5 minutes); the
answer is theirs merged with the server's values, and several of those values are
load-bearing (protocol notes §5, Telemetry): a producer without
``publishing.max_body_size`` can send nothing, Java and Node clients throw without
a backoff strategy, a push consumer without ``long_polling_timeout`` polls with 0.

Sessions are each front's own (``serve --fronts N``): a client's calls, its Telemetry
stream included, ride one HTTP/2 connection, so they reach the front that holds its
session. When that front dies the client reconnects to another and resends its
settings on a new stream (when it next syncs them: the Python client every 5 minutes);
calls that come before them work there all the same: no
call but the stream's own answers (and transaction check-backs, which need the
stream) reads the settings, and the new front notes the session at the first call
(tests/rocketmq/test_two_fronts.py test_calls_on_a_front_that_never_got_the_settings).
The bounds (``max_sessions``, per user, settings bytes) are per front.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from google.protobuf.duration_pb2 import Duration

from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.services.rocketmq.status import Code, ProtocolError

LONG_POLLING_S = 20  # RocketMQ's proxy default
RECEIVE_BATCH = 32
# RocketMQ's default consumer redelivery delays (the 18 levels of a group's retry policy).
CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


def reply(client: v2.Settings, *, max_body: int, max_attempts: int, fifo: bool) -> v2.Settings:
    """The client's settings with the server's values filled in."""
    s = v2.Settings()
    s.CopyFrom(client)
    s.metric.CopyFrom(v2.Metric(on=False))
    if client.HasField("publishing"):
        s.publishing.max_body_size = max_body
        s.publishing.validate_message_type = True
        s.backoff_policy.CopyFrom(
            v2.RetryPolicy(
                max_attempts=3,
                exponential_backoff=v2.ExponentialBackoff(
                    initial=Duration(nanos=10_000_000), max=Duration(seconds=1), multiplier=2.0
                ),
            )
        )
    elif client.HasField("subscription"):
        sub = s.subscription
        sub.fifo = fifo
        sub.receive_batch_size = RECEIVE_BATCH
        if not client.subscription.HasField("long_polling_timeout") or not (
            client.subscription.long_polling_timeout.seconds or client.subscription.long_polling_timeout.nanos
        ):
            sub.long_polling_timeout.CopyFrom(Duration(seconds=LONG_POLLING_S))
        s.backoff_policy.CopyFrom(
            v2.RetryPolicy(
                max_attempts=max_attempts,
                customized_backoff=v2.CustomizedBackoff(next=[Duration(seconds=d) for d in CONSUMER_BACKOFF_S]),
            )
        )
    return s


class SessionKey(NamedTuple):
    """Whose session: the authenticated user's access key ("" on a front without
    ACL) and the client's ``x-mq-client-id``. Another user's client id names nothing
    of theirs."""

    user: str
    client_id: str


@dataclass
class ClientSession:
    """What the front knows of one client of one user."""

    key: SessionKey
    settings: v2.Settings | None = None
    group: str = ""
    last_seen: float = field(default_factory=time.monotonic)
    # Commands the server sends on the client's open Telemetry stream (transaction
    # check-backs, transactions.py); None while no stream is open.
    outbox: asyncio.Queue | None = None
    settings_bytes: int = 0  # the size of ``settings``, counted in the Sessions' budgets

    @property
    def client_id(self) -> str:
        return self.key.client_id


SESSION_IDLE_S = 300.0  # a client without a stream, silent this long (it heartbeats every 10 s), is forgotten
MAX_SESSIONS = 20_000  # sessions kept in all
MAX_SESSIONS_PER_USER = 2_000  # per user under ACL (without ACL every client is the anonymous user: MAX_SESSIONS)
MAX_CLIENT_ID_CHARS = 512  # RocketMQ client ids are "<host>@<pid>@<n>@<time>", well below this
MAX_SETTINGS_TOPICS = 1_000  # topics a producer's settings, or subscriptions a consumer's, may name
MAX_SETTINGS_BYTES = 256 << 10  # the settings a stream keeps, serialized
MAX_SETTINGS_BYTES_PER_USER = 16 << 20  # settings kept for one user's sessions, serialized
MAX_SETTINGS_BYTES_TOTAL = 128 << 20  # settings kept for every session
MAX_STREAM_PENDING = 16  # answers a Telemetry stream holds for a client that does not read them
_FULL_SWEEP_EVERY_S = 1.0  # at the bound, idle sessions are looked for at most this often


class Sessions:
    """Clients by (user, client id): their latest settings and when they were last
    heard of. A session is noted only for an authenticated call (the caller names the
    user). Clients that vanish without saying so (killed) are forgotten once idle for
    ``SESSION_IDLE_S`` with no Telemetry stream open. At most ``max_total`` sessions,
    ``max_per_user`` per user: a new one past a bound is refused (TOO_MANY_REQUESTS)
    and counted in ``refused`` by reason; the settings kept are bounded per stream
    (``check_settings``), per user and in all (``keep_settings``). Used on the front's
    event loop only."""

    def __init__(
        self, *, max_total: int = MAX_SESSIONS, max_per_user: int = MAX_SESSIONS_PER_USER, anonymous: bool = False
    ) -> None:
        """``anonymous``: the front has no ACL (every client is the user "": only
        ``max_total`` applies)."""
        self.max_total = max_total
        self.max_per_user = max_total if anonymous else max_per_user
        self.max_settings_total = MAX_SETTINGS_BYTES_TOTAL
        self.max_settings_per_user = MAX_SETTINGS_BYTES_TOTAL if anonymous else MAX_SETTINGS_BYTES_PER_USER
        self._settings_total = 0
        self._settings_by_user: dict[str, int] = {}
        self._by_key: dict[SessionKey, ClientSession] = {}
        self._per_user: dict[str, int] = {}
        self._swept = time.monotonic()
        self._full_swept = 0.0
        self.refused: dict[str, int] = {"total": 0, "per_user": 0, "settings": 0}

    def seen(self, key: SessionKey) -> ClientSession:
        """The session of ``key``, noted as heard from now; created if new, unless a
        bound refuses it (ProtocolError TOO_MANY_REQUESTS)."""
        now = time.monotonic()
        s = self._by_key.get(key)
        if s is None:
            if now - self._swept > SESSION_IDLE_S / 10:
                self._sweep(now)
            self._check_room(key.user, now)
            s = self._by_key[key] = ClientSession(key)
            self._per_user[key.user] = self._per_user.get(key.user, 0) + 1
        s.last_seen = now
        return s

    def _check_room(self, user: str, now: float) -> None:
        full = len(self._by_key) >= self.max_total
        user_full = self._per_user.get(user, 0) >= self.max_per_user
        if (full or user_full) and now - self._full_swept > _FULL_SWEEP_EVERY_S:
            self._full_swept = now
            self._sweep(now)
            full = len(self._by_key) >= self.max_total
            user_full = self._per_user.get(user, 0) >= self.max_per_user
        if full:
            self.refused["total"] += 1
            raise ProtocolError(
                Code.TOO_MANY_REQUESTS,
                f"the front keeps at most {self.max_total} client sessions and has no room for another: "
                "try again once idle clients are forgotten",
            )
        if user_full:
            self.refused["per_user"] += 1
            raise ProtocolError(
                Code.TOO_MANY_REQUESTS,
                f"user {user!r} has {self.max_per_user} client sessions, the most one user may have: "
                "shut down clients that are not needed (NotifyClientTermination), or reuse one",
            )

    def check_settings(self, s: v2.Settings) -> None:
        """``check_settings``, its refusals counted."""
        try:
            check_settings(s)
        except ProtocolError:
            self.refused["settings"] += 1
            raise

    def keep_settings(self, session: ClientSession, s: v2.Settings) -> None:
        """Keep ``s`` as ``session``'s settings (replacing its last ones) if the bytes
        of settings kept for its user and in all stay within the budgets;
        ProtocolError TOO_MANY_REQUESTS otherwise (its last settings stay)."""
        size = s.ByteSize()
        user = session.key.user
        if self._by_key.get(session.key) is not session:  # forgotten meanwhile: nothing to count
            session.settings, session.settings_bytes = s, 0
            return
        delta = size - session.settings_bytes
        mine = self._settings_by_user.get(user, 0)
        if self._settings_total + delta > self.max_settings_total or mine + delta > self.max_settings_per_user:
            self.refused["settings"] += 1
            raise ProtocolError(
                Code.TOO_MANY_REQUESTS,
                f"the front keeps at most {self.max_settings_per_user} bytes of client settings per user and "
                f"{self.max_settings_total} in all, and has no room for these {size}: shut down clients "
                "that are not needed",
            )
        session.settings, session.settings_bytes = s, size
        self._settings_total += delta
        self._settings_by_user[user] = mine + delta

    def _sweep(self, now: float) -> None:
        self._swept = now
        for key in [k for k, s in self._by_key.items() if s.outbox is None and now - s.last_seen > SESSION_IDLE_S]:
            self._drop(key)

    def get(self, key: SessionKey) -> ClientSession | None:
        return self._by_key.get(key)

    def forget(self, key: SessionKey) -> None:
        self._drop(key)

    def _drop(self, key: SessionKey) -> None:
        session = self._by_key.pop(key, None)
        if session is not None:
            if session.settings_bytes:
                self._settings_total -= session.settings_bytes
                kept = self._settings_by_user[key.user] - session.settings_bytes
                if kept:
                    self._settings_by_user[key.user] = kept
                else:
                    del self._settings_by_user[key.user]
                session.settings_bytes = 0
            left = self._per_user[key.user] - 1
            if left:
                self._per_user[key.user] = left
            else:
                del self._per_user[key.user]

    def producers(self, topic: str, may_publish: Callable[[str], bool] | None = None) -> list[ClientSession]:
        """Clients with an open Telemetry stream whose publishing settings name
        ``topic`` and whose user ``may_publish(user)`` on it now (None: every user)."""
        return [
            s
            for s in self._by_key.values()
            if s.outbox is not None
            and s.settings is not None
            and s.settings.HasField("publishing")
            and any(t.name == topic for t in s.settings.publishing.topics)
            and (may_publish is None or may_publish(s.key.user))
        ]

    def client_ids(self) -> list[str]:
        """The client ids this front keeps a session of (``FrontActor.clients``: which
        front holds a client, with ``serve --fronts N``)."""
        return [k.client_id for k in self._by_key]

    def publishing_topics(self) -> set[str]:
        """Every topic the publishing settings of a client with an open Telemetry stream
        name (the topics whose transaction check-backs this front can pass on)."""
        return {
            t.name
            for s in self._by_key.values()
            if s.outbox is not None and s.settings is not None and s.settings.HasField("publishing")
            for t in s.settings.publishing.topics
        }

    def users(self) -> int:
        """Users with at least one session."""
        return len(self._per_user)

    def __len__(self) -> int:
        return len(self._by_key)


def check_client_id(client_id: str) -> None:
    """A client id the front may keep (ProtocolError BAD_REQUEST if too long)."""
    if len(client_id) > MAX_CLIENT_ID_CHARS:
        raise ProtocolError(
            Code.BAD_REQUEST, f"the client id has {len(client_id)} characters, more than {MAX_CLIENT_ID_CHARS}"
        )


def check_settings(s: v2.Settings) -> None:
    """Settings a stream may keep: at most ``MAX_SETTINGS_TOPICS`` topics (producer)
    or subscriptions (consumer) and ``MAX_SETTINGS_BYTES`` in all (ProtocolError
    PAYLOAD_TOO_LARGE otherwise: nothing of them is kept)."""
    named = len(s.publishing.topics) if s.HasField("publishing") else len(s.subscription.subscriptions)
    if named > MAX_SETTINGS_TOPICS:
        raise ProtocolError(
            Code.PAYLOAD_TOO_LARGE, f"the settings name {named} topics, more than {MAX_SETTINGS_TOPICS} per client"
        )
    size = s.ByteSize()
    if size > MAX_SETTINGS_BYTES:
        raise ProtocolError(
            Code.PAYLOAD_TOO_LARGE, f"the settings take {size} bytes, more than {MAX_SETTINGS_BYTES} per client"
        )


__all__ = ["ClientSession", "SessionKey", "Sessions", "check_client_id", "check_settings", "reply"]
