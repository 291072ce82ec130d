"""What a newcomer met (issue 25, item 8), over gRPC through a LocalStack (no Ray):
UpdateTopic keeps what the request does not set, an unknown topic or queue is an
error of the CLI's --server pull, sends past a topic's write queues are refused,
and pop groups show in consumer-progress."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest

from mqstore import Bodies, MessageBatch
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import code_of, small_config, wait_dispatched
from tests.unit.test_newcomer import cli


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    st = LocalStack(tmp_path_factory.mktemp("newcomer"), small_config(), rocketmq_port=0)
    assert st.wait_ready(60)
    yield st
    st.close()


@pytest.fixture(scope="module")
def client(stack):
    with FrontClient(stack.front_endpoint) as c:
        yield c


def test_update_topic_keeps_what_the_request_does_not_set(stack, client) -> None:
    client.update_topic("Closed", write_queue_nums=8, read_queue_nums=8)
    assert client.update_topic("Closed", perm=0).write_queue_nums == 8
    cfg = client.update_topic("Closed", message_type="FIFO")
    assert (cfg.perm, cfg.write_queue_nums, cfg.read_queue_nums, cfg.message_type) == (0, 8, 8, "FIFO")
    kept = stack.shards[0].state.log_store.topics.get("Closed")  # config/topics.json
    assert (kept.perm, kept.write_queue_nums) == (0, 8)
    fresh = client.update_topic("Fresh")
    assert (fresh.perm, fresh.write_queue_nums, fresh.message_type) == (6, 4, "NORMAL")
    r = cli("update-topic", "--server", stack.front_endpoint, "--topic", "Closed", "--message-type", "MIXED")
    assert r.exit_code == 0, r.output
    assert '"perm": 0' in r.stdout and '"writeQueueNums": 8' in r.stdout


@pytest.mark.slow  # runs `mqstore serve` (it stops before Ray starts)
def test_a_second_serve_on_a_held_store_fails_at_once(tmp_path) -> None:
    """One line naming the holder, exit 1, in seconds (it took 55 s and ~30 log lines)."""
    from tests.unit.test_newcomer import HOLD

    root = tmp_path / "store"
    root.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "mqstore.cli.main", "serve", "--store", str(root), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 1 and time.monotonic() - t0 < 30, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mqstore: error:") and f"pid {holder.pid}" in lines[0], lines
    finally:
        holder.kill()
        holder.wait()


def test_pull_of_an_unknown_topic_or_queue_is_an_error(stack, client) -> None:
    """mqstore pull --server: an unknown topic or a queue the topic does not have exits
    1 naming it (it said NO_MESSAGE_IN_QUEUE and exited 0); an empty queue the topic
    has is no error."""
    ep = stack.front_endpoint
    client.update_topic("Empty", write_queue_nums=2, read_queue_nums=2)
    client.send("Held", [b"x"], queue_ids=1)
    r = cli("pull", "--server", ep, "--topic", "NoSuchTopic", "--queue", "0", "--offset", "0")
    assert r.exit_code == 1 and "topic 'NoSuchTopic' does not exist" in r.stderr, r.output
    r = cli("pull", "--server", ep, "--topic", "Empty", "--queue", "5", "--offset", "0")
    assert r.exit_code == 1 and "topic 'Empty' has no queue 5" in r.stderr and "queues 0..1" in r.stderr, r.output
    r = cli("pull", "--server", ep, "--topic", "Empty", "--queue", "1", "--offset", "0")
    assert r.exit_code == 0 and "NO_MESSAGE_IN_QUEUE" in r.stderr, r.output
    wait_dispatched(client)
    r = cli("pull", "--server", ep, "--topic", "Held", "--queue", "3", "--offset", "0")
    assert r.exit_code == 1 and "topic 'Held' has no queue 3" in r.stderr, r.output


def test_a_send_past_the_write_queues_is_refused_over_grpc(stack, client) -> None:
    """SendBatch (mqstore send --server) and SendEncoded alike: INVALID_ARGUMENT, exit 1."""
    client.update_topic("TwoQueues", write_queue_nums=2, read_queue_nums=2)
    r = cli("send", "--server", stack.front_endpoint, "--topic", "TwoQueues", "--queue", "5", "hello")
    assert r.exit_code == 1 and "INVALID_ARGUMENT" in r.stderr and "2 write queue" in r.stderr, r.output
    bad = MessageBatch("TwoQueues", Bodies.of([b"a"]), queue_ids=2)
    assert code_of(lambda: client.send_encoded(bad)) is grpc.StatusCode.INVALID_ARGUMENT
    assert client.send("TwoQueues", [b"ok"], queue_ids=1).queue_offsets[0] == 0
