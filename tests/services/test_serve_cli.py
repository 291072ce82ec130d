"""``mqstore serve`` as a real process (its own local Ray), driven by the CLI's
``--server`` commands, stopped with SIGTERM: every store closed cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mqstore.services.query.client import FrontClient
from tests.services.helpers import free_port, wait_dispatched

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def mq(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=60, input=stdin
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve") / "data"
    port = free_port()
    metrics_port = free_port(skip=(port,))
    env = {**os.environ, "RAY_DEDUP_LOGS": "0"}
    err = open(root.parent / "serve.err", "w+")  # a file, not a pipe: a full pipe would block the server
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mqstore.cli.main",
            "serve",
            "--store",
            str(root),
            "--port",
            str(port),
            "--shards",
            "2",
            "--segment-bytes",
            str(1 << 20),
            "--actor-log-level",
            "info",
            "--metrics-port",
            str(metrics_port),
        ],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
    )
    proc.err_path = root.parent / "serve.err"
    proc.metrics_port = metrics_port
    try:
        line = proc.stdout.readline()  # the ready line (blocks until every shard recovered)
        assert line, proc.err_path.read_text()
        ready = json.loads(line)
        assert ready["front"] == f"127.0.0.1:{port}" and ready["shards"] == 2
        assert ready["metrics"] == f"127.0.0.1:{metrics_port}"
        yield f"127.0.0.1:{port}", root, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the process, not its group (Ray's daemons share the group)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
        err.close()


def test_cli_against_a_server(server):
    endpoint, root, _ = server
    assert mq("update-topic", "--server", endpoint, "--topic", "CliTopic", "--write-queue-nums", "4").returncode == 0
    p = mq(
        "send",
        "--server",
        endpoint,
        "--topic",
        "CliTopic",
        "--tags",
        "TagA",
        "--keys",
        "ord-1",
        "--queue",
        "2",
        stdin="hello\nworld\n",
    )
    assert p.returncode == 0, p.stderr
    sent = [json.loads(x) for x in p.stdout.splitlines()]
    assert [s["queue_offset"] for s in sent] == [0, 1] and {s["status"] for s in sent} == {"PUT_OK"}
    with FrontClient(endpoint) as c:
        wait_dispatched(c)
    p = mq("pull", "--server", endpoint, "--topic", "CliTopic", "--queue", "2", "--offset", "0", "--tags", "TagA")
    assert p.returncode == 0, p.stderr
    assert [json.loads(x)["body"] for x in p.stdout.splitlines()] == ["hello", "world"]
    assert json.loads(p.stderr.strip().splitlines()[-1])["next_offset"] == 2
    p = mq("query-msg-by-id", "--server", endpoint, sent[1]["msg_id"])
    assert json.loads(p.stdout)["body"] == "world", p.stderr
    p = mq("query-msg-by-key", "--server", endpoint, "--topic", "CliTopic", "ord-1")
    assert [json.loads(x)["body"] for x in p.stdout.splitlines()] == ["world", "hello"], p.stderr
    p = mq("query-msg-by-unique-key", "--server", endpoint, "--topic", "CliTopic", sent[0]["unique_key"])
    assert json.loads(p.stdout)["body"] == "hello", p.stderr
    p = mq("query-msg-by-offset", "--server", endpoint, "--topic", "CliTopic", "--queue", "2", "--offset", "1")
    assert json.loads(p.stdout)["body"] == "world", p.stderr
    p = mq("topic-status", "--server", endpoint, "--topic", "CliTopic", "--format", "json")
    rows = [(r["queue_id"], r["max_offset"]) for r in map(json.loads, p.stdout.splitlines())]
    assert rows == [(0, 0), (1, 0), (2, 2), (3, 0)], p.stderr  # update-topic made its 4 queues ahead
    with FrontClient(endpoint) as c:
        c.commit_offset("cli-group", "CliTopic", 2, 1)
    p = mq("consumer-progress", "--server", endpoint, "--group", "cli-group", "--format", "json")
    assert json.loads(p.stdout)["lag"] == 1, p.stderr
    p = mq("query-msg-by-key", "--server", endpoint, "--topic", "CliTopic", "nope")
    assert p.returncode == 1 and p.stderr.strip().startswith("mqstore: error: NOT_FOUND"), p.stderr
    p = mq("pull", "--server", endpoint, "--store", str(root), "--topic", "CliTopic", "--queue", "0", "--offset", "0")
    assert p.returncode == 2 and "--store DIR or --server" in p.stderr


def test_bench_append_and_consume_through_the_server(server):
    endpoint, _, _ = server
    p = mq(
        "bench",
        "append",
        "--server",
        endpoint,
        "--messages",
        "3000",
        "--batch",
        "500",
        "--producers",
        "2",
        "--topics",
        "2",
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["acked"] == 3000 and out["msgs_per_s"] > 0 and out["p99_ms"] >= out["p50_ms"]
    with FrontClient(endpoint) as c:
        wait_dispatched(c)
    for consumers in ("1", "3"):  # 3 consumers share the 8 queues unevenly: every message still once
        p = mq("bench", "consume", "--server", endpoint, "--topics", "2", "--batch", "700", "--consumers", consumers)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
        assert out["messages"] == 3000 and out["queues"] == 8 and out["consumers"] == int(consumers)


def test_bench_append_per_topic_in_two_passes_through_the_server(server):
    """--shape per-topic sends batch k to topic k % topics (60 batches: 60 of the 300
    topics, auto-created on two shards); --passes 2 sends them again once the first
    pass is dispatched: every topic touched holds both passes, 4 queues each."""
    endpoint, _, _ = server
    p = mq(
        "bench",
        "append",
        "--server",
        endpoint,
        "--messages",
        "6000",
        "--batch",
        "100",
        "--topics",
        "300",
        "--shape",
        "per-topic",
        "--passes",
        "2",
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["shape"] == "per-topic" and [x["acked"] for x in out["passes"]] == [6000, 6000]
    assert all(x["dispatch_lag_bytes_at_end"] >= 0 for x in out["passes"])
    with FrontClient(endpoint) as c:
        wait_dispatched(c)
        for t in (2, 30, 59):  # (BenchTopic0 and 1 are the round-robin test's too)
            assert [q.max_offset for q in c.topic_status(f"BenchTopic{t}")] == [50, 50, 50, 50]


def test_metrics_status_and_actor_logs(server):
    endpoint, _, proc = server
    with FrontClient(endpoint) as c:
        c.send("Metered", [b"x"] * 30)
    text = urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10).read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("mqstore_front_sent_messages_total", ())] >= 30
    assert sum(v for (n, _), v in samples.items() if n == "mqstore_shard_up") == 2
    assert sum(v for (n, _), v in samples.items() if n == "mqstore_shard_appended_messages_total") >= 30
    p = mq("status", "--server", endpoint)
    assert p.returncode == 0 and p.stdout.count(" SERVING ") == 2, p.stdout + p.stderr
    p = mq("status", "--server", endpoint, "--format", "json")
    nodes = {json.loads(x)["node_id"] for x in p.stdout.splitlines()}
    assert len(nodes) == 1 and len(nodes.pop()) == 56, p.stdout  # both shards on this machine's Ray node
    # every actor logs JSON lines carrying its component and shard (Ray prefixes them with the actor)
    events = []
    for line in proc.err_path.read_text().splitlines():
        if "{" in line:
            with contextlib.suppress(ValueError):
                events.append(json.loads(line[line.index("{") :]))
    seen = {(e.get("component"), e.get("shard")) for e in events if "component" in e}
    assert {(c, i) for c in ("commitlog", "consumequeue", "index", "dispatcher") for i in (0, 1)} | {
        ("front", None)
    } <= seen, seen
    assert len({e.get("node_id") for e in events if "component" in e}) == 1  # one node, named in every event


def test_sigterm_closes_every_store(server):
    endpoint, root, proc = server
    with FrontClient(endpoint) as c:
        c.send("Last", [b"x"] * 20)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    for shard in ("shard-0", "shard-1"):
        assert (root / shard / "commitlog").is_dir() and not (root / shard / "abort").exists()
    assert json.loads((root / "mqstore-layout.json").read_text())["shards"] == 2
    assert "stopped" in proc.err_path.read_text()
    p = mq("topic-status", "--store", str(root / "shard-0"), "--topic", "Last", "--format", "json")
    q = mq("topic-status", "--store", str(root / "shard-1"), "--topic", "Last", "--format", "json")
    total = sum(json.loads(x)["max_offset"] for out in (p.stdout, q.stdout) for x in out.splitlines())
    assert total == 20
    assert Path(root / "shard-0" / "lock").exists()


def test_a_shard_that_can_not_be_placed_and_sigterm(tmp_path):
    """A new user's trial: `serve --shards 2 --placement resource` on a Ray node that
    offers only mqstore_shard_0, so shard 1 is never placed. No ready line, but the
    front answers: `mqstore status` prints both rows within seconds (shard 1
    UNAVAILABLE, not placed), a send of four messages stores shard 0's two and says
    the other two were not stored (exit 1); SIGTERM closes shard 0's store cleanly
    and promptly."""
    root = tmp_path / "data"
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    env = {**os.environ, "RAY_DEDUP_LOGS": "0", "RAY_OVERRIDE_RESOURCES": json.dumps({"mqstore_shard_0": 1})}
    err_path = tmp_path / "serve.err"
    err = open(err_path, "w+")
    args = ["serve", "--store", str(root), "--port", str(port), "--shards", "2", "--placement", "resource"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore.cli.main", *args, "--metrics-port", "0", "--segment-bytes", str(1 << 20)],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # shard 1 never opens: no ready line; shard 0 serves once open
            assert proc.poll() is None, err_path.read_text()
            try:
                with FrontClient(endpoint, timeout=5) as c:
                    shards = c.store_status()
                if shards[0].state == "SERVING" and shards[0].queue_builder.state == "SERVING":
                    break
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(1)
        t0 = time.monotonic()
        p = mq("status", "--server", endpoint)
        assert p.returncode == 1 and time.monotonic() - t0 < 10, p.stderr
        header, row0, row1 = p.stdout.splitlines()
        assert " SERVING " in row0 and " UNAVAILABLE " in row1 and "commitlog-1 is not placed" in row1, p.stdout
        assert "node" in header.split() and re.search(r" [0-9a-f]{56} ", row0), row0  # a Ray node id (hex)
        p = mq("send", "--server", endpoint, "--topic", "Trial", "a", "b", "c", "d")
        assert p.returncode == 1, p.stderr
        statuses = [json.loads(x)["status"] for x in p.stdout.splitlines()]
        assert sorted(statuses) == ["NOT_STORED", "NOT_STORED", "PUT_OK", "PUT_OK"], p.stdout
        assert "shard 1 did not store its part: UNAVAILABLE" in p.stderr, p.stderr
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        took = time.monotonic() - t0
        assert took < 20, f"serve took {took:.1f} s to stop"
        print(f"serve stopped in {took:.1f} s")
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    shard0 = root / "shard-0"
    assert not [f for f in ("abort", "abort.consumequeue", "abort.index") if (shard0 / f).exists()], (
        "not closed cleanly"
    )
    assert "stopped" in err_path.read_text()
    p = mq("topic-status", "--store", str(shard0), "--topic", "Trial", "--format", "json")
    assert sum(json.loads(x)["max_offset"] for x in p.stdout.splitlines()) == 2, p.stdout + p.stderr
