"""The front's gRPC health (both ports, overall and per service) answers NOT_SERVING
until every shard serves, then SERVING: a readiness probe that waits for SERVING and
sends at once is answered, never "shard 0 is recovering its store"."""

from __future__ import annotations

import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mqstore.rpc.v1 import common_pb2
from mqstore.services.commitlog.state import CommitLogState
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import small_config

H = health_pb2.HealthCheckResponse


def health(endpoint: str, names: tuple[str, ...]) -> set[int]:
    with grpc.insecure_channel(endpoint) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return {stub.Check(health_pb2.HealthCheckRequest(service=n), timeout=5).status for n in names}


def test_health_is_not_serving_until_every_shard_serves_then_a_probe_may_send_at_once(tmp_path, monkeypatch):
    gate = threading.Event()
    opened = CommitLogState.open

    def held_open(self, *a, **kw):  # shard 1 recovers until the test lets it
        if self.shard == 1:
            gate.wait(30)
        return opened(self, *a, **kw)

    monkeypatch.setattr(CommitLogState, "open", held_open)
    with LocalStack(tmp_path, small_config(), shards=2, rocketmq_port=0) as st:
        ports = {
            st.front_endpoint: ("", "mqstore.v1.FrontService"),
            st.rocketmq_endpoint: ("", "apache.rocketmq.v2.MessagingService"),
        }
        assert st.shards[0].wait_ready(30)  # shard 0 serves, shard 1 does not yet
        time.sleep(0.5)  # the front has looked at its shards more than once
        for endpoint, names in ports.items():
            assert health(endpoint, names) == {H.NOT_SERVING}, endpoint
        gate.set()
        end = time.monotonic() + 30
        while health(st.front_endpoint, ports[st.front_endpoint]) != {H.SERVING}:  # the probe
            assert time.monotonic() < end, "the front never said SERVING"
            time.sleep(0.02)
        with FrontClient(st.front_endpoint) as client:  # sends at once, to every queue of both shards
            res = client.send("Ready", [b"x"] * 4, queue_ids=list(range(4)))
            assert list(res.statuses) == [common_pb2.PUT_OK] * 4
        assert health(st.rocketmq_endpoint, ports[st.rocketmq_endpoint]) == {H.SERVING}
