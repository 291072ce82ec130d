"""The official RocketMQ 5 Python client against a whole deployment in this process
(``LocalStack`` with the RocketMQ port; every hop real gRPC on loopback).

One stack per module; tests keep out of each other's way with topics and groups of
their own (``names``). Consumers long-poll 2 s so an empty receive is quick.
"""

from __future__ import annotations

import contextlib
import itertools
import time

import pytest

from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests import rocketmq_client

MAX_ATTEMPTS = 3  # deliveries before %DLQ%<group>: small, so the DLQ test is quick
AWAIT_S = 2


@pytest.fixture(scope="module")
def rmq():
    return rocketmq_client.load()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LocalStack(tmp_path_factory.mktemp("rmq-stack"), rocketmq_port=0, max_delivery_attempts=MAX_ATTEMPTS) as st:
        assert st.wait_ready(60)
        yield st


@pytest.fixture(scope="module")
def front(stack):
    c = FrontClient(stack.front_endpoint)
    yield c
    c.close()


_counter = itertools.count()


@pytest.fixture
def names(request):
    """A topic and a group only this test uses."""
    n = next(_counter)
    base = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[:40]
    return f"T_{base}_{n}", f"G_{base}_{n}"


class Clients:
    """Start clients of the official library against the stack; all shut down at the end."""

    def __init__(self, rmq, endpoint: str) -> None:
        self.rmq = rmq
        self.endpoint = endpoint
        self._started: list = []

    def config(self, ak: str = "", sk: str = ""):
        return self.rmq.ClientConfiguration(self.endpoint, self.rmq.Credentials(ak, sk), request_timeout=5)

    def producer(self, *topics: str, config=None, checker=None):
        p = self.rmq.Producer(config or self.config(), topics, checker)
        p.startup()
        self._started.append(p)
        return p

    def simple(self, group: str, subscription: dict, *, config=None, await_s: int = AWAIT_S):
        subs = {t: (e if not isinstance(e, str) else self.rmq.FilterExpression(e)) for t, e in subscription.items()}
        c = self.rmq.SimpleConsumer(config or self.config(), group, subs, await_s)
        c.startup()
        self._started.append(c)
        return c

    def message(self, topic: str, body: bytes, *, tag=None, keys=(), props=None, group=None, deliver_at=None):
        m = self.rmq.Message()
        m.topic = topic
        m.body = body
        if tag:
            m.tag = tag
        for k in keys:
            m.keys = k  # the setter adds one key per assignment
        for k, v in (props or {}).items():
            m.add_property(k, v)
        if group:
            m.message_group = group
        if deliver_at is not None:
            m.delivery_timestamp = deliver_at
        return m

    def close(self) -> None:
        for c in reversed(self._started):
            with contextlib.suppress(Exception):
                c.shutdown()
        self._started.clear()


@pytest.fixture
def clients(rmq, stack):
    c = Clients(rmq, stack.rocketmq_endpoint)
    yield c
    c.close()


def receive_until(consumer, count: int, *, invisible_s: int = 30, timeout_s: float = 30.0, batch: int = 32) -> list:
    """Receive until ``count`` messages came (or the time is up), never asking for more
    than are still wanted: every message received."""
    got: list = []
    end = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < end:
        got.extend(consumer.receive(min(batch, count - len(got)), invisible_s))
    return got
