"""``serve --fronts 2`` on Ray (real processes, one shared RocketMQ port): a front is
SIGKILLed while official producers and consumers run through both; they keep going
through the other front (their channels reconnect to the shared port), every send the
client saw acknowledged is received (none lost; a message whose ack died with the
front comes back after its invisible time), and Ray restarts the killed front, which
serves again on the same port. The fronts are placed with ``front_placement="spread"``
(one node here: both land on it, on its address and the shared port), so routes name
every front's address, asked of Ray, instead of the client's access point."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from tests.rocketmq.conftest import Clients
from tests.rocketmq.fronts import clients_on_each_front, front_of, kill_front, served, two_fronts, wait_restarted

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.crash, pytest.mark.timeout(300)]
NS = "mqstore-two-fronts-kill"
INVISIBLE_S = 5  # a received message whose ack was lost comes back this soon


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with two_fronts(tmp_path_factory.mktemp("two-fronts-ray"), NS, front_placement="spread") as dep:
        yield dep


class Running:
    """Producer and consumer threads over given clients: ``acked`` bodies whose send
    the client saw succeed, ``received`` bodies received (and acked, or tried)."""

    def __init__(self, clients: Clients, topic: str, producers: list, consumers: list) -> None:
        self.acked: set[bytes] = set()
        self.received: set[bytes] = set()
        self.send_errors = 0
        self._lock = threading.Lock()
        self._stop_sending = threading.Event()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._send, args=(clients, topic, p, k), daemon=True)
            for k, p in enumerate(producers)
        ] + [threading.Thread(target=self._consume, args=(c,), daemon=True) for c in consumers]
        for t in self._threads:
            t.start()

    def _send(self, clients: Clients, topic: str, producer, k: int) -> None:
        n = 0
        while not self._stop_sending.is_set():
            body = f"p{k}-{n}".encode()
            n += 1
            try:
                producer.send(clients.message(topic, body))
            except Exception:  # noqa: BLE001 - the front died under the call: not acknowledged
                with self._lock:
                    self.send_errors += 1
                time.sleep(0.1)
                continue
            with self._lock:
                self.acked.add(body)
            time.sleep(0.01)

    def _consume(self, consumer) -> None:
        while not self._stop.is_set():
            try:
                messages = consumer.receive(16, INVISIBLE_S)
            except Exception:  # noqa: BLE001 - the front died under the call
                time.sleep(0.2)
                continue
            for m in messages:
                with self._lock:
                    self.received.add(bytes(m.body))
                try:
                    consumer.ack(m)
                except Exception:  # noqa: BLE001 - its ack died with the front: it comes back
                    pass

    def stop_sending(self) -> None:
        self._stop_sending.set()

    def stop(self) -> None:
        self._stop_sending.set()
        self._stop.set()
        for t in self._threads:
            t.join(60)


def test_spread_routes_name_the_fronts(deployment):
    """Spread fronts: a route names the fronts' own addresses (as Ray knows them), not
    the access point the client used (here a DNS name)."""
    host, port = deployment.rocketmq_endpoint.rsplit(":", 1)
    with grpc.insecure_channel(deployment.rocketmq_endpoint) as ch:
        route = ch.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=v2.QueryRouteRequest.SerializeToString,
            response_deserializer=v2.QueryRouteResponse.FromString,
        )
        asked = v2.Endpoints(scheme=v2.DOMAIN_NAME, addresses=[v2.Address(host="localhost", port=int(port))])
        answer = route(
            v2.QueryRouteRequest(topic=v2.Resource(name="SpreadRoute"), endpoints=asked),
            metadata=[("x-mq-client-id", "spread-route")],
            timeout=10,
        )
    assert answer.status.code == v2.OK, answer.status
    named = {(a.host, a.port) for q in answer.message_queues for a in q.broker.endpoints.addresses}
    assert named == {(host, int(port))}
    assert {q.broker.endpoints.scheme for q in answer.message_queues} == {v2.IPv4}


def test_a_front_killed_under_load(deployment, rmq):
    dep = deployment
    topic, group = "TwoFrontsKilled", "g_two_fronts_killed"
    clients = Clients(rmq, dep.rocketmq_endpoint)
    run = None
    try:
        producers = list(clients_on_each_front(dep, lambda: clients.producer(topic)).values())
        consumers = list(clients_on_each_front(dep, lambda: clients.simple(group, {topic: "*"})).values())
        run = Running(clients, topic, producers, consumers)
        time.sleep(4)
        with_both = len(run.acked)
        assert with_both > 0
        old = kill_front(dep, 1)
        time.sleep(6)
        after_kill = len(run.acked)
        assert after_kill > with_both  # producers keep going through front 0
        wait_restarted(dep, 1, old)
        # The restarted front serves again on the shared port: a new client lands on it.
        again = clients_on_each_front(dep, lambda: clients.producer(topic))[1]
        again.send(clients.message(topic, b"on the restarted front"))
        assert front_of(dep, again) == 1
        time.sleep(2)
        run.stop_sending()
        acked = set(run.acked)
        end = time.monotonic() + 90
        while not acked <= run.received and time.monotonic() < end:
            time.sleep(0.5)
        run.stop()
        missing = acked - run.received
        assert not missing, f"{len(missing)} acknowledged sends never received, e.g. {sorted(missing)[:5]}"
        assert served(dep)[1]["rocketmq"] > 0
    finally:
        if run is not None:
            run.stop()
        clients.close()
