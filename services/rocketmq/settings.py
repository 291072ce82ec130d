"""The Settings a client gets back on its Telemetry stream, and what the front keeps
of each client.

Clients send their settings when they open the stream (and every 5 minutes); the
answer is theirs merged with the server's values, and several of those values are
load-bearing (protocol notes §5, Telemetry): a producer without
``publishing.max_body_size`` can send nothing, Java and Node clients throw without
a backoff strategy, a push consumer without ``long_polling_timeout`` polls with 0.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from google.protobuf.duration_pb2 import Duration

from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2

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


@dataclass
class ClientSession:
    """What the front knows of one client (by ``x-mq-client-id``)."""

    client_id: str
    settings: v2.Settings | None = None
    group: str = ""
    last_seen: float = field(default_factory=time.monotonic)
    # Commands the server sends on the client's open Telemetry stream (transaction
    # check-backs, transactions.py); None while no stream is open.
    outbox: asyncio.Queue | None = None


SESSION_IDLE_S = 300.0  # a client without a stream, silent this long (it heartbeats every 10 s), is forgotten


class Sessions:
    """Clients by id: their latest settings and when they were last heard of. Clients
    that vanish without saying so (killed) are forgotten once idle for
    ``SESSION_IDLE_S`` with no Telemetry stream open."""

    def __init__(self) -> None:
        self._by_id: dict[str, ClientSession] = {}
        self._swept = time.monotonic()

    def seen(self, client_id: str) -> ClientSession:
        now = time.monotonic()
        s = self._by_id.get(client_id)
        if s is None:
            if now - self._swept > SESSION_IDLE_S / 10:
                self._sweep(now)
            s = self._by_id[client_id] = ClientSession(client_id)
        s.last_seen = now
        return s

    def _sweep(self, now: float) -> None:
        self._swept = now
        for cid in [c for c, s in self._by_id.items() if s.outbox is None and now - s.last_seen > SESSION_IDLE_S]:
            del self._by_id[cid]

    def get(self, client_id: str) -> ClientSession | None:
        return self._by_id.get(client_id)

    def forget(self, client_id: str) -> None:
        self._by_id.pop(client_id, None)

    def producers(self, topic: str) -> list[ClientSession]:
        """Clients with an open Telemetry stream whose publishing settings name ``topic``."""
        return [
            s
            for s in self._by_id.values()
            if s.outbox is not None
            and s.settings is not None
            and s.settings.HasField("publishing")
            and any(t.name == topic for t in s.settings.publishing.topics)
        ]

    def __len__(self) -> int:
        return len(self._by_id)


__all__ = ["ClientSession", "Sessions", "reply"]
