"""Metrics, status and logs of a deployment (LocalStack: every hop over gRPC, no Ray):
the front's Prometheus endpoint scraped over HTTP while messages go through it,
StoreStatus and `mqstore status --server` for serving and recovering shards, and
the fields every log event of an actor carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mqstore.services.commitlog.servicer import CommitLogServicer
from mqstore.services.commitlog.state import CommitLogState
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import fixed
from mqstore.services.common.server import ServerThread, start_grpc_server
from mqstore.services.query.client import FrontClient
from mqstore.services.query.host import FrontHost
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import code_of, free_port, small_config, wait_dispatched

pytestmark = pytest.mark.timeout(120)


def mq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=60)


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} from http://127.0.0.1:port/metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def total(samples: dict, name: str, **labels) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    port = free_port()
    with LocalStack(tmp_path_factory.mktemp("obs"), small_config(), shards=2, metrics_port=port) as st:
        assert st.wait_ready(30)
        yield st, port


def test_metrics_endpoint_moves_with_sends_and_queries(stack):
    st, port = stack
    before = scrape(port)
    assert total(before, "mqstore_shard_up") == 2
    with FrontClient(st.front_endpoint) as c:
        for _ in range(4):
            c.send("MetricsTopic", [b"m" * 100] * 50, keys="mk")
        wait_dispatched(c)
        assert len(c.query_by_key("MetricsTopic", "mk")) == 32
        c.pull("MetricsTopic", 0, 0)
        assert code_of(lambda: c.pull("MetricsTopic", 0, -1)) is grpc.StatusCode.INVALID_ARGUMENT
    after = scrape(port)

    def moved(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("mqstore_front_sent_messages_total") == 200
    assert moved("mqstore_front_request_seconds_count", method="SendBatch") == 4
    assert moved("mqstore_front_request_seconds_count", method="QueryByKey") == 1  # query latency
    assert moved("mqstore_front_requests_total", method="Pull", code="INVALID_ARGUMENT") == 1
    assert moved("mqstore_shard_appended_messages_total") == 200  # rate() of it is the append rate
    assert moved("mqstore_shard_appended_bytes_total") > 200 * 100
    assert moved("mqstore_shard_append_seconds_count") == 8  # a batch splits in two, one part per shard
    assert moved("mqstore_shard_append_seconds_sum") > 0
    assert moved("mqstore_shard_flush_seconds_count") >= 2  # sync flush: at least one fsync per shard
    assert moved("mqstore_shard_append_seconds_bucket", le="+Inf") == 8
    for shard in ("0", "1"):
        assert total(after, "mqstore_shard_dispatch_lag_bytes", shard=shard) == 0  # dispatched
        assert (
            total(after, "mqstore_shard_commitlog_bytes", shard=shard)
            == total(after, "mqstore_shard_wrote_offset", shard=shard)
            > 0
        )
        assert total(after, "mqstore_shard_queues", shard=shard) >= 1
        assert total(after, "mqstore_shard_writable", shard=shard) == 1
        assert total(after, "mqstore_shard_disk_free_bytes", shard=shard) > 0
        assert total(after, "mqstore_shard_recovery_percent", shard=shard, phase="ready") == 100


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_status_command_reads_the_front(stack):
    st, _ = stack
    with FrontClient(st.front_endpoint) as c:  # each shard has a queue (whichever test of the module ran first)
        c.send("StatusTopic", [b"s"] * 16)
        wait_dispatched(c)
    p = mq("status", "--server", st.front_endpoint)
    assert p.returncode == 0, p.stderr
    header, *rows = p.stdout.splitlines()
    for col in (
        "shard",
        "state",
        "writable",
        "recovery",
        "wrote",
        "flushed",
        "dispatched",
        "dispatch_lag",
        "queues",
        "commitlog",
        "disk_free",
        "builders",
    ):
        assert col in header.split()
    assert len(rows) == 2 and all(" SERVING " in r and " yes " in r and "SERVING/SERVING" in r for r in rows), p.stdout
    p = mq("status", "--server", st.front_endpoint, "--format", "json")
    shards = [json.loads(x) for x in p.stdout.splitlines()]
    assert [s["shard"] for s in shards] == [0, 1]
    assert all(s["state"] == "SERVING" and s["writable"] and s["recovery_phase"] == "ready" for s in shards)
    assert all(s["wrote_offset"] == s["flushed_offset"] == s["dispatched_offset"] for s in shards)  # sync flush, idle
    assert all(s["queue_count"] >= 1 and s["commitlog_bytes"] == s["wrote_offset"] for s in shards)
    for s in shards:  # both builders have everything dispatched, recovered against the commitlog's open
        for b in (s["queue_builder"], s["index_builder"]):
            assert b["state"] == "SERVING" and b["commitlog_incarnation"] == s["incarnation"], b
            assert b["progress_offset"] == s["wrote_offset"]


def test_status_of_a_recovering_shard_and_an_unreachable_one(tmp_path):
    """A shard still opening its store reports its phase; one that does not answer
    is UNAVAILABLE with the reason; `mqstore status` exits 1."""
    t = ServerThread("test-recovering")
    sh = CommitLogState(tmp_path / "s", small_config())  # never opened: stays RECOVERING
    sh.progress.set_phase("commitlog", total=1000)
    sh.progress.advance(420)
    server = t.run(start_grpc_server("127.0.0.1", 0, [CommitLogServicer(sh).registration()], serving=False))
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    front = FrontHost(
        [({"cl": fixed(f"127.0.0.1:{server.port}")}, None), ({"cl": fixed(dead)}, None)], auth=InternalAuth.new()
    )
    try:
        with FrontClient(front.endpoint) as c:
            recovering, gone = c.store_status()
        assert (recovering.state, recovering.recovery_phase, recovering.recovery_percent) == (
            "RECOVERING",
            "commitlog",
            42,
        )
        assert gone.state == "UNAVAILABLE" and gone.error.startswith("UNAVAILABLE")
        p = mq("status", "--server", front.endpoint)
        assert p.returncode == 1
        assert "commitlog 42%" in p.stdout and "RECOVERING" in p.stdout and "UNAVAILABLE" in p.stdout
    finally:
        front.close()
        t.run(server.stop(0))
        t.stop()


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_local_status_command(tmp_path):
    store = tmp_path / "local"
    assert mq("send", "--store", str(store), "--create", "--topic", "L", "a", "b").returncode == 0
    p = mq("status", "--store", str(store), "--format", "json")
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)
    assert st["writable"] and st["wrote"] > 0 and st["queues"] == 2  # round robin over two queues


def test_actor_logs_carry_component_and_shard():
    code = (
        "from mqstore.logging import configure_logging; import structlog; "
        "configure_logging(level='info', context={'component': 'shard', 'shard': 3}); "
        "structlog.get_logger('x').info('hello', a=1); structlog.get_logger('y').info('mine', shard=9)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    first, second = (json.loads(x) for x in p.stderr.splitlines())
    assert first["event"] == "hello" and first["component"] == "shard" and first["shard"] == 3 and first["a"] == 1
    assert second["shard"] == 9  # an event's own field wins


def test_a_shard_whose_layout_does_not_match_fails_and_says_why(tmp_path):
    """Placement "resource": a shard pins the layout on its own node's disk; a root
    laid out for another shard count fails the open (FAILED in StoreStatus, with the
    reason; `serve` exits 1 on it)."""
    from mqstore.services.commitlog.host import CommitLogHost
    from mqstore.services.query.routing import pin_layout

    pin_layout(tmp_path, 2)
    auth = InternalAuth.new()
    host = CommitLogHost(
        tmp_path / "shard-0",
        small_config(),
        shard=0,
        layout=(tmp_path, 3),
        auth=auth,
    )
    front = FrontHost([({"cl": fixed(host.endpoint)}, None)], auth=auth)
    try:
        assert host.wait_ready(30) is False
        with FrontClient(front.endpoint) as c:
            (st,) = c.store_status()
        assert st.state == "FAILED" and "laid out for 2 shard(s)" in st.error, st
        assert not (tmp_path / "shard-0" / "commitlog").exists()  # the store was never opened
    finally:
        front.close()
        host.close()
