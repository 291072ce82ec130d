"""The index out of disk space (issue 25, item 3), over loopback gRPC (LocalStack):
the consume queues are still fed and served, the index builder says it is stuck
and why (its health NOT_SERVING, the shard's status row names it, ``mqstore status``
exits 1), and once space is back the index catches up from its own progress."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mqstore.cli.queries import shard_status_row
from mqstore.services.common.server import sync_channel
from mqstore.services.dispatcher import reput
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store import faults
from mqstore.store.index_service import IndexService
from tests.services.helpers import small_config

H = health_pb2.HealthCheckResponse
FULL = "index.create=ENOSPCx0,index.reserve=ENOSPCx0"


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    faults.install(None)


def _health(stack: LocalStack, endpoint: str) -> int:
    with sync_channel(endpoint, auth=stack.auth) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def _keyed(c: FrontClient, key: str) -> list:
    """QueryByKey's records; none (NOT_FOUND) is an empty list."""
    try:
        return c.query_by_key("T", key, max_num=64)
    except grpc.RpcError as e:
        if e.code() is grpc.StatusCode.NOT_FOUND:
            return []
        raise


def _until(what, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def test_consume_queues_are_served_while_the_index_has_no_space_and_it_catches_up(tmp_path):
    with LocalStack(tmp_path, small_config()) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        ix = st.index_builders[0]
        # Every allocation for the index fails (a new file, blocks of one): a full disk, for the index only.
        faults.install(FULL)
        res = c.send("T", [f"m{i}".encode() for i in range(40)], keys=[f"k{i % 4}" for i in range(40)])
        assert len(res.msg_ids) == 40

        # The consume queues go on: a pull returns every new message.
        def pulled():
            got = [r.body for q in range(4) for r in c.pull("T", q, 0, max_messages=100).records]
            return got if len(got) == 40 else None

        assert sorted(_until("consume queues dispatched", pulled)) == sorted(f"m{i}".encode() for i in range(40))

        # The index builder is stuck, says why, and is not healthy; the status row names it.
        row = _until("index builder stuck", lambda: (s := c.store_status()[0]).index_builder.stuck and s)
        assert "disk full" in row.index_builder.stuck and row.index_builder.stuck_since_ms > 0
        assert "index builder stuck" in row.error
        assert row.dispatched_offset >= row.confirm_offset  # the consume queues' dispatch is not held back
        assert "STUCK (" in shard_status_row(row)["builders"]
        assert _until("index health", lambda: _health(st, ix.endpoint) == H.NOT_SERVING)
        assert _health(st, st.queue_builders[0].endpoint) == H.SERVING
        assert st.dispatchers[0].dispatcher.status().index_behind

        # Space is back: the index catches up from its own progress and answers.
        faults.install(None)
        found = _until("index caught up", lambda: len(r := _keyed(c, "k1")) == 10 and r)
        assert sorted(r.body for r in found) == sorted(f"m{i}".encode() for i in range(1, 40, 4))
        _until("index healthy", lambda: _health(st, ix.endpoint) == H.SERVING)
        row = _until("not stuck", lambda: (s := c.store_status()[0]).index_builder.stuck == "" and s)
        assert "stuck" not in row.error
        _until("index in step", lambda: not st.dispatchers[0].dispatcher.status().index_behind)
        # And it stays in step: later messages are indexed with the consume queues.
        c.send("T", [b"late"], keys=["k-late"])
        _until("late key indexed", lambda: _keyed(c, "k-late"))


def test_an_index_builder_that_does_not_answer_is_reported_stuck_and_holds_nothing_back(tmp_path, monkeypatch):
    """The index builder's process is gone: sends and pulls go on, and once the index
    has not advanced for INDEX_STUCK_S the status row says the index builder is stuck
    and why (catching up, however long, is not stuck)."""
    monkeypatch.setattr(reput, "INDEX_STUCK_S", 0.5)
    with LocalStack(tmp_path, small_config()) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        st.index_builders[0].close()
        c.send("T", [f"m{i}".encode() for i in range(8)], queue_ids=0, keys="k")
        got = _until("pulled", lambda: len(r := c.pull("T", 0, 0, max_messages=100).records) == 8 and r)
        assert [r.body for r in got] == [f"m{i}".encode() for i in range(8)]
        row = _until("index builder stuck", lambda: (s := c.store_status()[0]).index_builder.stuck and s)
        assert "UNAVAILABLE" in row.index_builder.stuck and "index builder stuck" in row.error
        assert row.dispatched_offset >= row.confirm_offset


def test_consume_queues_are_served_while_the_index_builder_recovers(tmp_path, monkeypatch):
    """Dispatch does not wait for the index's recovery: while the index builder is held
    in its recovery (cutting entries), sends are pulled, and the status row shows the
    index builder RECOVERING with its step; once it serves, it catches up."""
    gate = threading.Event()
    truncate = IndexService.truncate

    def held(self, *a, **kw):
        gate.wait(30)
        return truncate(self, *a, **kw)

    monkeypatch.setattr(IndexService, "truncate", held)
    with LocalStack(tmp_path, small_config()) as st, FrontClient(st.front_endpoint) as c:
        try:
            assert st.shards[0].wait_ready(30) and st.queue_builders[0].wait_ready(30)
            assert st.front.wait_serving(30)
            c.send("T", [f"m{i}".encode() for i in range(8)], queue_ids=0, keys="k")
            got = _until("pulled", lambda: len(r := c.pull("T", 0, 0, max_messages=100).records) == 8 and r)
            assert [r.body for r in got] == [f"m{i}".encode() for i in range(8)]
            ix = c.store_status()[0].index_builder
            assert ix.state == "RECOVERING" and ix.recovery_step.startswith("cutting index entries past")
            assert "[cutting index entries past" in shard_status_row(c.store_status()[0])["builders"]
        finally:
            gate.set()
        found = _until("index caught up", lambda: len(r := _keyed(c, "k")) == 8 and r)
        assert sorted(r.body for r in found) == [f"m{i}".encode() for i in range(8)]
