"""A shard that is down, on real Ray (one session for the module): two 2-shard
deployments, one whose shard 1 actors are killed for good (ray.kill), one whose shard 1
can not be placed (placement resource, no node offers mqstore_shard_1). Status answers
within 2 s with each shard's Ray node id and names what is missing; sends to the
missing shard fail fast with UNAVAILABLE; a batch over both shards is reported per
message; `mqstore status --server` prints the partial table; closing the deployment
closes the live shard cleanly and promptly. (`mqstore serve` stopped by SIGTERM in the
same situation: test_serve_cli.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
import pytest

from mqstore.rpc.v1 import common_pb2
from mqstore.services.query.client import FrontClient, columns
from mqstore.services.query.routing import Router
from tests.services.helpers import free_port, local_ray, small_config, wait_dispatched

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
TOPIC = "Down"
ABORT_FILES = ("abort", "abort.consumequeue", "abort.index")


@pytest.fixture(scope="module")
def node():
    # no node offers mqstore_shard_1
    with local_ray(resources={"mqstore_shard_0": 1}, object_store_memory=128 << 20):
        yield ray.get_runtime_context().get_node_id()


def status_within(c: FrontClient, limit: float = 2.0):
    t0 = time.monotonic()
    shards = c.store_status()
    took = time.monotonic() - t0
    assert took < limit, f"status took {took:.2f} s"
    return shards


def send_fails_fast(c: FrontClient, queue: int, limit: float) -> str:
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        c.send(TOPIC, [b"lost"], queue_ids=queue)
    took = time.monotonic() - t0
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE and took < limit, (e.value, took)
    assert "shard 1" in e.value.details(), e.value.details()
    return e.value.details()


def check_mixed_batch(c: FrontClient, qs: dict[int, list[int]], queues: int = 8) -> None:
    resp = c.send_columns(columns(TOPIC, [f"m{q}".encode() for q in range(queues)], queue_ids=list(range(queues))))
    for q in range(queues):
        want = common_pb2.PUT_OK if q in qs[0] else common_pb2.NOT_STORED
        assert resp.result.statuses[q] == want, (q, resp)
    assert [(e.shard, e.code) for e in resp.shard_errors] == [(1, "UNAVAILABLE")]


def status_cli(endpoint: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", "status", "--server", endpoint, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p, time.monotonic() - t0


def close_promptly(dep, limit: float = 20.0) -> float:
    t0 = time.monotonic()
    dep.close()
    took = time.monotonic() - t0
    assert took < limit, f"closing took {took:.1f} s"
    return took


def test_shard_killed_for_good(node, tmp_path):
    from mqstore.services.startup.deployment import start_deployment

    root = tmp_path / "data"
    dep = start_deployment(
        root, small_config(), shards=2, port=free_port(), namespace="mqstore-down-a", internal_host="127.0.0.1"
    )
    closed = False
    try:
        assert dep.wait_ready(120)
        router = Router(2)
        qs = {s: [q for q in range(8) if router.shard_of(TOPIC, q) == s] for s in (0, 1)}
        with FrontClient(dep.front_endpoint) as c:
            c.update_topic(TOPIC, write_queue_nums=8, read_queue_nums=8)
            c.send(TOPIC, [b"first"] * 8, queue_ids=list(range(8)))
            wait_dispatched(c)
            shards = status_within(c)
            assert [s.node_id for s in shards] == [node, node]

            for a in (dep.dispatchers[1], dep.queue_builders[1], dep.index_builders[1], dep.shards[1]):
                ray.kill(a, no_restart=True)
            time.sleep(0.5)

            shards = status_within(c)
            assert [s.state for s in shards] == ["SERVING", "UNAVAILABLE"], shards
            assert shards[0].node_id == node and shards[1].node_id == node  # (where it was last seen)
            err = shards[1].error
            assert err.startswith("UNAVAILABLE: shard 1 did not answer"), err
            for part in ("commitlog", "consume-queue builder", "index builder", "dispatcher"):
                assert f"{part}: " in err, err
            assert "commitlog-1 " in err and ("does not exist" in err or "dead" in err), err

            send_fails_fast(c, qs[1][0], 1.5)  # an actor dead for good: at once
            send_fails_fast(c, qs[1][0], 1.5)
            check_mixed_batch(c, qs)
            c.send(TOPIC, [b"ok"], queue_ids=qs[0][0])  # shard 0 serves as before

        p, took = status_cli(dep.front_endpoint)
        assert p.returncode == 1 and took < 10, (p.stderr, took)
        rows = [json.loads(x) for x in p.stdout.splitlines()]
        assert [(r["state"], r["node_id"]) for r in rows] == [("SERVING", node), ("UNAVAILABLE", node)]

        closed = True
        close_promptly(dep)
        assert not [f for f in ABORT_FILES if (root / "shard-0" / f).exists()], "shard 0 not closed cleanly"
    finally:
        if not closed:
            dep.close()


def test_shard_that_can_not_be_placed(node, tmp_path):
    from mqstore.services.startup.deployment import start_deployment

    root = tmp_path / "data"
    dep = start_deployment(
        root,
        small_config(),
        shards=2,
        port=free_port(),
        namespace="mqstore-down-b",
        internal_host="127.0.0.1",
        placement="resource",
    )
    closed = False
    try:
        deadline = time.monotonic() + 120
        while True:  # poll_ready never says ready: shard 1 has no node
            ready, failed = dep.poll_ready(1.0)
            assert not ready and not failed
            with FrontClient(dep.front_endpoint) as c:
                shards = status_within(c)
            if shards[0].state == "SERVING" and shards[0].queue_builder.state == "SERVING":
                break
            assert time.monotonic() < deadline, shards
        router = Router(2)
        qs = {s: [q for q in range(8) if router.shard_of(TOPIC, q) == s] for s in (0, 1)}
        with FrontClient(dep.front_endpoint) as c:
            shards = status_within(c)
            assert shards[0].node_id == node and shards[1].node_id == ""
            assert shards[1].state == "UNAVAILABLE"
            assert "commitlog-1 is not placed on any node yet" in shards[1].error, shards[1].error
            details = send_fails_fast(c, qs[1][0], 4.0)
            assert "not found within 2.5 s" in details, details
            check_mixed_batch(c, qs, 4)  # (no UpdateTopic: it needs every shard; the default 4 queues)

        p, took = status_cli(dep.front_endpoint)
        assert p.returncode == 1 and took < 10, (p.stderr, took)
        rows = [json.loads(x) for x in p.stdout.splitlines()]
        assert [(r["state"], r["node_id"]) for r in rows] == [("SERVING", node), ("UNAVAILABLE", "")]

        closed = True
        close_promptly(dep)
        assert (root / "shard-0" / "commitlog").is_dir() and not (root / "shard-1").exists()
        assert not [f for f in ABORT_FILES if (root / "shard-0" / f).exists()], "shard 0 not closed cleanly"
    finally:
        if not closed:
            dep.close()
