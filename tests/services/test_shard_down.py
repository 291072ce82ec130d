"""A shard that is down is a partial failure, said plainly (LocalStack and a
hand-built front: every hop over gRPC on loopback, no Ray; the same on Ray:
test_shard_down_ray.py).

Status answers within 2 s with a row per shard (the missing one UNAVAILABLE, naming
what did not answer); a send to a shard that is down fails fast with UNAVAILABLE
naming it; a batch spanning shards reports each message (stored, or NOT_STORED with
its shard's error); `mqstore status` and `mqstore send` say the same and exit 1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest

from mqstore.rpc.v1 import commitlog_pb2, common_pb2
from mqstore.services.common.errors import RpcError
from mqstore.services.common.peers import Placement, fixed
from mqstore.services.query.client import FrontClient, columns
from mqstore.services.query.front import ShardUnreachable, _merge_parts
from mqstore.services.query.host import FrontHost
from mqstore.services.query.routing import Router
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import small_config, wait_dispatched

pytestmark = pytest.mark.timeout(120)
TOPIC = "Partial"


def mq(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=60, input=stdin
    )


def queues_of(shards: int) -> dict[int, list[int]]:
    router = Router(shards)
    return {s: [q for q in range(8) if router.shard_of(TOPIC, q) == s] for s in range(shards)}


def close_shard(st: LocalStack, i: int) -> None:
    """Shard ``i``'s four processes stop (their ports refuse connections)."""
    for h in (st.dispatchers[i], st.queue_builders[i], st.index_builders[i], st.shards[i]):
        h.close()


def close_rest(st: LocalStack, down: set[int]) -> None:
    st.front.close()
    for i in range(len(st.shards)):
        if i not in down:
            for h in (st.dispatchers[i], st.queue_builders[i], st.index_builders[i], st.shards[i]):
                h.close()


def timed(fn):
    t0 = time.monotonic()
    try:
        return fn(), None, time.monotonic() - t0
    except grpc.RpcError as e:
        return None, e, time.monotonic() - t0


def pulled(c: FrontClient, q: int) -> list[bytes]:
    return [r.body for r in c.pull(TOPIC, q, 0, max_messages=100).records]


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_a_shard_whose_processes_stopped(tmp_path):
    st = LocalStack(tmp_path, small_config(), shards=2)
    try:
        assert st.wait_ready(30)
        qs = queues_of(2)
        with FrontClient(st.front_endpoint) as c:
            c.update_topic(TOPIC, write_queue_nums=8, read_queue_nums=8)
            assert set(c.send(TOPIC, [b"before"] * 8, queue_ids=list(range(8))).statuses) == {common_pb2.PUT_OK}
            wait_dispatched(c)
            close_shard(st, 1)

            shards, err, took = timed(c.store_status)
            assert err is None and took < 2.0, (err, took)
            assert [s.state for s in shards] == ["SERVING", "UNAVAILABLE"]
            down = shards[1]
            assert down.error.startswith("UNAVAILABLE: shard 1 did not answer"), down.error
            for part in ("commitlog", "consume-queue builder", "index builder", "dispatcher"):
                assert f"{part}: " in down.error, down.error
            assert down.queue_builder.state == down.index_builder.state == "UNAVAILABLE"
            assert not shards[0].error and shards[0].node_id == "" == down.node_id  # no Ray: no node ids

            # A send to a queue of shard 1 fails fast, UNAVAILABLE, naming the shard.
            _, err, took = timed(lambda: c.send(TOPIC, [b"x"], queue_ids=qs[1][0]))
            assert err is not None and err.code() is grpc.StatusCode.UNAVAILABLE and took < 3.0, (err, took)
            assert "shard 1" in err.details(), err.details()

            # A batch over both shards: shard 0's part stored, shard 1's NOT_STORED, said why.
            bodies = [f"mixed-{q}".encode() for q in range(8)]
            resp, err, took = timed(lambda: c.send_columns(columns(TOPIC, bodies, queue_ids=list(range(8)))))
            assert err is None and took < 3.0, (err, took)
            r = resp.result
            for q in range(8):
                if q in qs[0]:
                    assert r.statuses[q] == common_pb2.PUT_OK and r.physical_offsets[q] >= 0 and r.msg_ids[q]
                else:
                    assert r.statuses[q] == common_pb2.NOT_STORED and r.shards[q] == 1, q
                    assert r.physical_offsets[q] == -1 and r.queue_offsets[q] == -1 and not r.msg_ids[q]
                    assert r.queue_ids[q] == q
            (e,) = resp.shard_errors
            assert (e.shard, e.code) == (1, "UNAVAILABLE") and "shard 1" in e.message
            # ... and what was reported stored is stored, nothing else.
            wait_dispatched_shard(c, 0)
            for q in qs[0]:
                assert pulled(c, q) == [b"before", f"mixed-{q}".encode()]

            # Automatic queues (round robin) spread over both shards as well.
            resp = c.send_columns(columns(TOPIC, [b"rr"] * 8))
            statuses = np.asarray(resp.result.statuses)
            shard_of = np.asarray(resp.result.shards)
            assert (statuses[shard_of == 0] == common_pb2.PUT_OK).all()
            assert (statuses[shard_of == 1] == common_pb2.NOT_STORED).all() and (shard_of == 1).any()

        # The CLI: status prints the partial table and exits 1 within a few seconds.
        t0 = time.monotonic()
        p = mq("status", "--server", st.front_endpoint)
        assert p.returncode == 1 and time.monotonic() - t0 < 10, p.stderr
        header, row0, row1 = p.stdout.splitlines()
        assert "node" in header.split() and " SERVING " in row0
        assert " UNAVAILABLE " in row1 and "shard 1 did not answer" in row1
        p = mq("status", "--server", st.front_endpoint, "--format", "json")
        rows = [json.loads(x) for x in p.stdout.splitlines()]
        assert p.returncode == 1 and [x["state"] for x in rows] == ["SERVING", "UNAVAILABLE"]
        assert all("node_id" in x for x in rows)
        # send: a line per message, the failed ones with their shard's error; exit 1.
        p = mq("send", "--server", st.front_endpoint, "--topic", TOPIC, "a", "b", "c", "d")
        assert p.returncode == 1, p.stderr
        lines = [json.loads(x) for x in p.stdout.splitlines()]
        assert len(lines) == 4 and {x["status"] for x in lines} == {"PUT_OK", "NOT_STORED"}, lines
        for x in lines:
            if x["status"] == "NOT_STORED":
                assert x["shard"] == 1 and x["error"].startswith("UNAVAILABLE: ") and x["msg_id"] == ""
        assert "shard 1 did not store its part: UNAVAILABLE" in p.stderr and "not stored" in p.stderr
    finally:
        close_rest(st, {1})


def test_shard_zero_down_does_not_stop_the_others(tmp_path):
    """Topic configs (perms, write queues) are read from any shard that answers: with
    shard 0 down, shard 1's part of a batch is stored, and quickly (shard 0 is asked last
    for a while)."""
    st = LocalStack(tmp_path, small_config(), shards=2)
    try:
        assert st.wait_ready(30)
        qs = queues_of(2)
        with FrontClient(st.front_endpoint) as c:
            close_shard(st, 0)
            for _ in range(3):
                resp, err, took = timed(lambda: c.send_columns(columns(TOPIC, [b"z"] * 8, queue_ids=list(range(8)))))
                assert err is None and took < 3.0, (err, took)
                want = [common_pb2.PUT_OK if q in qs[1] else common_pb2.NOT_STORED for q in range(8)]
                assert list(resp.result.statuses) == want
                assert [(e.shard, e.code) for e in resp.shard_errors] == [(0, "UNAVAILABLE")]
            wait_dispatched_shard(c, 1)
            assert all(pulled(c, q) == [b"z"] * 3 for q in qs[1])
    finally:
        close_rest(st, {0})


def wait_dispatched_shard(c: FrontClient, shard: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        s = c.store_status()[shard]
        if s.state == "SERVING" and s.dispatched_offset >= s.confirm_offset:
            return
        assert time.monotonic() < deadline, s
        time.sleep(0.02)


def test_parts_that_fail_differently_are_each_reported(tmp_path):
    """Three shards: 0 stores its part, 1 refuses its part (a body over the limit:
    RESOURCE_EXHAUSTED), 2 is down (UNAVAILABLE). Every message says what became
    of it, also when no part is stored but the parts failed differently; every part
    failing with one code fails the call with that code, naming each shard."""
    st = LocalStack(tmp_path, small_config(), shards=3)
    try:
        assert st.wait_ready(30)
        qs = queues_of(3)
        with FrontClient(st.front_endpoint) as c:
            c.update_topic(TOPIC, write_queue_nums=8, read_queue_nums=8)
            close_shard(st, 2)
            big = b"x" * (small_config().max_message_bytes + 1)
            bodies = [big if q == qs[1][0] else f"m{q}".encode() for q in range(8)]
            resp = c.send_columns(columns(TOPIC, bodies, queue_ids=list(range(8))))
            r = resp.result
            for q in range(8):
                want = common_pb2.PUT_OK if q in qs[0] else common_pb2.NOT_STORED
                assert r.statuses[q] == want, (q, r.statuses[q])
            assert [(e.shard, e.code) for e in resp.shard_errors] == [(1, "RESOURCE_EXHAUSTED"), (2, "UNAVAILABLE")]
            # No part stored, the codes differ: still one status per message.
            only_bad = [q for q in range(8) if q not in qs[0]]
            resp = c.send_columns(
                columns(TOPIC, [big if q == qs[1][0] else b"y" for q in only_bad], queue_ids=only_bad)
            )
            assert set(resp.result.statuses) == {common_pb2.NOT_STORED} and len(resp.shard_errors) == 2
            # Every part failing alike: the call fails with that code, naming each shard.
            bad_names = [q for q in range(8) if q not in qs[2]]
            with pytest.raises(grpc.RpcError) as e:
                c.send(TOPIC, [big] * len(bad_names), queue_ids=bad_names)
            assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "shard 0" in e.value.details() and "shard 1" in e.value.details()
            wait_dispatched_shard(c, 0)
            for q in qs[0]:
                assert pulled(c, q) == [f"m{q}".encode()]
            for q in qs[1]:
                assert pulled(c, q) == []
    finally:
        close_rest(st, {2})


def _append_answer(n: int, base: int) -> commitlog_pb2.AppendBatchResponse:
    return commitlog_pb2.AppendBatchResponse(
        result=common_pb2.AppendResult(
            statuses=[common_pb2.PUT_OK] * n,
            msg_ids=[f"id{base + j}" for j in range(n)],
            physical_offsets=[base + j for j in range(n)],
            sizes=[100] * n,
            queue_ids=[0] * n,
            queue_offsets=list(range(n)),
            unique_keys=[""] * n,
            store_timestamps=[1] * n,
        )
    )


def test_merging_parts_never_reports_a_message_stored_that_was_not():
    rows = [np.array([0, 3]), np.array([1, 4]), np.array([2, 5])]
    parts = list(enumerate(rows))
    qids = np.arange(6)
    lost = grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, None, None, details="deadline")
    resp = _merge_parts(6, qids, parts, [_append_answer(2, 10), ShardUnreachable("shard 1 is down"), lost])
    assert list(resp.result.statuses) == [
        common_pb2.PUT_OK,
        common_pb2.NOT_STORED,  # never reached: nothing written
        common_pb2.SHARD_FAILED,  # the answer was lost: it may be stored
        common_pb2.PUT_OK,
        common_pb2.NOT_STORED,
        common_pb2.SHARD_FAILED,
    ]
    assert list(resp.result.physical_offsets) == [10, -1, -1, 11, -1, -1]
    assert [(e.shard, e.code) for e in resp.shard_errors] == [(1, "UNAVAILABLE"), (2, "DEADLINE_EXCEEDED")]
    # A shard answering the wrong number of statuses: none of its messages counts as stored.
    resp = _merge_parts(6, qids, parts, [_append_answer(2, 10), _append_answer(1, 20), _append_answer(2, 30)])
    assert [resp.result.statuses[i] for i in (1, 4)] == [common_pb2.SHARD_FAILED] * 2
    assert resp.shard_errors[0].shard == 1 and resp.shard_errors[0].code == "INTERNAL"
    # One part: its error as it was; every part failing alike: that code, every shard named.
    with pytest.raises(ShardUnreachable):
        _merge_parts(2, qids[:2], [(1, np.array([0, 1]))], [ShardUnreachable("down")])
    with pytest.raises(RpcError) as e:
        _merge_parts(6, qids, parts, [ShardUnreachable("a"), ShardUnreachable("b"), ShardUnreachable("c")])
    assert e.value.code is grpc.StatusCode.UNAVAILABLE and "shard 0: a; shard 1: b; shard 2: c" in str(e.value)


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_a_shard_never_found_answers_within_the_budget(tmp_path):
    """Shard 1's processes are never found (as an actor Ray can not place: the
    resolver waits forever) and its locator says so: status answers within 2 s
    naming it and with shard 0's node id; sends to it fail in about 2.5 s."""
    st = LocalStack(tmp_path, small_config(), shards=2)
    front = None

    async def never() -> str:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def locator(state: str, node: str):
        async def locate() -> dict[str, Placement]:
            names = {"cl": "commitlog", "cq": "consumequeue", "ix": "index", "dp": "dispatcher"}
            return {k: Placement(f"{v}-x", state, node) for k, v in names.items()}

        return locate

    try:
        assert st.wait_ready(30)
        shard0 = {
            "cl": fixed(st.shards[0].endpoint),
            "cq": fixed(st.queue_builders[0].endpoint),
            "ix": fixed(st.index_builders[0].endpoint),
        }
        front = FrontHost(
            [(shard0, fixed(st.dispatchers[0].endpoint)), ({"cl": never, "cq": never, "ix": never}, never)],
            auth=st.auth,
            locators=[locator("ALIVE", "a" * 56), locator("PENDING_CREATION", "")],
        )
        qs = queues_of(2)
        with FrontClient(front.endpoint) as c:
            for _ in range(2):  # the second time the lookups are still pending: the same answer
                shards, err, took = timed(c.store_status)
                assert err is None and took < 2.0, (err, took)
                assert [s.state for s in shards] == ["SERVING", "UNAVAILABLE"]
                assert shards[0].node_id == "a" * 56 and shards[1].node_id == ""
                assert "commitlog: no answer within 1.5 s (commitlog-x is not placed on any node yet" in shards[1].error
            _, err, took = timed(lambda: c.send(TOPIC, [b"x"], queue_ids=qs[1][0]))
            assert err.code() is grpc.StatusCode.UNAVAILABLE and took < 4.0, (err, took)
            assert "shard 1 can not be reached: its commitlog was not found within 2.5 s" in err.details()
            resp, err, took = timed(lambda: c.send_columns(columns(TOPIC, [b"y"] * 8, queue_ids=list(range(8)))))
            assert err is None and took < 4.0, (err, took)
            want = [common_pb2.PUT_OK if q in qs[0] else common_pb2.NOT_STORED for q in range(8)]
            assert list(resp.result.statuses) == want
    finally:
        if front is not None:
            front.close()
        st.close()
