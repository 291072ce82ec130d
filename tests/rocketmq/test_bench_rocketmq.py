"""``mqstore bench rocketmq``: the official Python client's producers and SimpleConsumers,
each in a process of its own, against a whole deployment (LocalStack) running in a
process of its own, so ``--serve-pid`` measures that process and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from mqstore.bench.rocketmq_bench import _front_of, _per_message, _split

STACK = textwrap.dedent(
    """
    import json, os, sys
    ready = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the stack's logs go to stderr; stdout carries the ready line only
    from mqstore.services.startup.local import LocalStack
    with LocalStack(sys.argv[1], rocketmq_port=0) as st:
        assert st.wait_ready(60)
        print(json.dumps({"rocketmq": st.rocketmq_endpoint, "pid": os.getpid()}), file=ready, flush=True)
        sys.stdin.read()  # until the test closes it
    """
)


def mq(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(RocketMQ endpoint, pid, store root) of a LocalStack in a child process."""
    root = tmp_path_factory.mktemp("bench-rmq")
    p = subprocess.Popen(
        [sys.executable, "-c", STACK, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = p.stdout.readline()
        assert line, "the stack process ended before its ready line"
        ready = json.loads(line)
        yield ready["rocketmq"], ready["pid"], root
    finally:
        p.stdin.close()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_bench_rocketmq_sends_and_consumes_every_message_once(served):
    endpoint, pid, root = served
    p = mq(
        "bench",
        "rocketmq",
        "--server",
        endpoint,
        "--producers",
        "2",
        "--consumers",
        "2",
        "--messages",
        "400",
        "--body-size",
        "64",
        "--serve-pid",
        str(pid),
        "--shard-dir",
        str(root),
    )
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "bench rocketmq: send:" in p.stderr and "bench rocketmq: receive:" in p.stderr  # progress
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ok"] is True
    assert out["sent"] == 400 and out["send_errors"] == 0
    assert out["consumed"] == 400 and out["acks"] == 400
    assert out["duplicates"] == 0 and out["missing"] == 0 and out["foreign"] == 0
    assert out["receive_errors"] == 0 and out["ack_errors"] == 0
    assert out["send_msgs_per_s"] > 0 and out["receive_msgs_per_s"] > 0
    assert out["producer_cpu_us_per_msg"] > 0 and out["consumer_cpu_us_per_msg"] > 0
    per = out["client_cpu_us_per_msg"]
    assert [x["messages"] for x in per["producers"]] == [200, 200]
    assert sum(x["messages"] for x in per["consumers"]) == 400
    assert all(x["us_per_msg"] > 0 and x["pid"] != pid for x in per["producers"] + per["consumers"])
    server = out["server_cpu_us_per_msg"]
    for phase in ("send", "receive"):
        assert server[phase]["serve"] > 0  # the LocalStack's process: the whole deployment is one process
        assert server[phase]["total"] >= server[phase]["serve"]
        goal = out["goal"][phase]
        assert goal["front_us_per_msg"] is None  # no process of its own is the front here
        assert goal["client_us_per_msg"] > 0
    assert out["front_below_client"] is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--server", "nohost"], "can not reach the RocketMQ port nohost:8081"),  # no port: 8081
        (["--server", "127.0.0.1:1"], "can not reach the RocketMQ port"),
        (["--server", "127.0.0.1:1", "--serve-pid", "1"], "--serve-pid needs --shard-dir"),
        (["--server", "127.0.0.1:1", "--topic", "a.b"], "--topic must match"),
    ],
)
def test_bench_rocketmq_bad_input_is_one_line_and_exit_1(args, message):
    p = mq("bench", "rocketmq", *args, timeout=60)
    assert p.returncode == 1
    assert message in p.stderr and "Traceback" not in p.stderr


def test_front_and_per_message_figures():
    assert _split(10, 3) == [4, 3, 3] and sum(_split(7, 7)) == 7
    cpu = _per_message({"front": 1.0, "commitlog-0": 2.0}, {"front": 1.5, "commitlog-0": 2.1, "new": 0.0005}, 1000)
    assert cpu == {"front": 500.0, "commitlog-0": 100.0, "total": 600.5}
    assert _front_of(cpu) == 500.0
    assert _front_of({"1:front": 2.0, "2:front": 3.0, "total": 5.0}) == 5.0
    assert _front_of({"serve": 1.0, "total": 1.0}) is None


def test_help_names_every_option():
    from typer.testing import CliRunner

    from mqstore.cli.main import app

    r = CliRunner().invoke(app, ["bench", "rocketmq", "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert r.exit_code == 0
    for opt in ("--server", "--producers", "--consumers", "--messages", "--body-size", "--topic", "--group"):
        assert opt in r.output
    assert "--serve-pid" in r.output and "--shard-dir" in r.output and "--access-key" in r.output
