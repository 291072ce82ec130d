"""The ``mqstore`` command, run as a real subprocess: output contracts and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def mq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_bench_append_prints_the_contracted_fields(tmp_path: Path) -> None:
    ack = tmp_path / "acks"
    p = mq(
        "bench",
        "append",
        "--store",
        str(tmp_path / "s"),
        "--messages",
        "5000",
        "--body-size",
        "64",
        "--topics",
        "3",
        "--queues",
        "2",
        "--batch",
        "700",
        "--producers",
        "2",
        "--segment-bytes",
        str(1 << 20),
        "--ack-log",
        str(ack),
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    for field in ("messages", "bytes", "seconds", "msgs_per_s", "mb_per_s", "p50_ms", "p99_ms"):
        assert field in out
    assert out["messages"] == 5000 and out["acked"] == 5000
    lines = [json.loads(x) for x in ack.read_text().splitlines() if x.strip()]
    assert len(lines) == 5000
    assert set(lines[0]) == {"msg_id", "physical_offset", "topic", "queue_id", "queue_offset"}
    per_queue: dict[tuple[str, int], list[int]] = {}
    for rec in lines:
        per_queue.setdefault((rec["topic"], rec["queue_id"]), []).append(rec["queue_offset"])
    assert len(per_queue) == 6
    assert all(sorted(v) == list(range(len(v))) for v in per_queue.values())


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_print_decodes_records_as_json(tmp_path: Path) -> None:
    store = tmp_path / "s"
    assert (
        mq("bench", "append", "--store", str(store), "--messages", "20", "--segment-bytes", str(1 << 20)).returncode
        == 0
    )
    p = mq("print", "--store", str(store), "--count", "3")
    assert p.returncode == 0, p.stderr
    recs = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(recs) == 3
    assert recs[0]["physical_offset"] == 0 and recs[1]["physical_offset"] == recs[0]["size"]
    assert recs[0]["properties"]["TAGS"] == "Tag0" and "UNIQ_KEY" in recs[0]["properties"]
    p2 = mq("print", "--store", str(store), "--offset", str(recs[1]["physical_offset"]), "--count", "1")
    assert json.loads(p2.stdout)["msg_id"] == recs[1]["msg_id"]


@pytest.mark.slow  # a bench command run, over ~2 s (tests/README.md)
def test_bench_disk_reports_throughput(tmp_path: Path) -> None:
    p = mq("bench", "disk", "--store", str(tmp_path), "--bytes", str(8 << 20), "--rounds", "2")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["bytes"] == 8 << 20 and out["mb_per_s"] > 0 and len(out["rounds_mb_per_s"]) == 2
    assert not (tmp_path / "bench-disk.tmp").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["print", "--store", "/nonexistent/store"], "is it a store"),
        (["print", "--store", "{tmp}", "--offset", "7"], "offset"),
    ],
)
@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_errors_are_one_line_and_exit_1(tmp_path: Path, args: list[str], message: str) -> None:
    store = tmp_path / "s"
    mq("bench", "append", "--store", str(store), "--messages", "3", "--segment-bytes", str(1 << 20))
    p = mq(*[a.replace("{tmp}", str(store)) for a in args])
    assert p.returncode == 1
    assert p.stderr.startswith("mqstore: error:") and message in p.stderr
    assert "Traceback" not in p.stderr


def test_a_locked_store_is_a_clear_error(tmp_path: Path) -> None:
    from mqstore.store import CommitLog

    with CommitLog(tmp_path / "s"):
        p = mq("bench", "append", "--store", str(tmp_path / "s"), "--messages", "3")
    assert p.returncode == 1 and "already open" in p.stderr


# One process start (~1-2 s) each: the top-level help in the fast tier, the rest in the
# full suite (test_newcomer.py's in-process help checks cover the subcommands fast).
@pytest.mark.parametrize(
    "cmd",
    [[]]
    + [
        pytest.param(cmd, marks=pytest.mark.slow)
        for cmd in (["bench"], ["bench", "append"], ["bench", "disk"], ["bench", "recover"], ["print"])
    ],
)
def test_every_command_has_help(cmd: list[str]) -> None:
    p = mq(*cmd, "--help")
    assert p.returncode == 0 and "Usage" in p.stdout


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_update_topic_message_type(tmp_path: Path) -> None:
    """--message-type sets RocketMQ 5's message.type attribute (in topics.json, and in
    the printed config); left out, the topic keeps its type (a new one: NORMAL); a
    name that is not a type exits 1 with one line naming it, changing nothing."""
    store = tmp_path / "s"
    p = mq("update-topic", "--store", str(store), "--create", "--topic", "Fifo", "--message-type", "FIFO")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["attributes"] == {"message.type": "FIFO"}
    p = mq("update-topic", "--store", str(store), "--topic", "Fifo", "--write-queue-nums", "8")
    out = json.loads(p.stdout)
    assert (out["writeQueueNums"], out["attributes"]) == (8, {"message.type": "FIFO"})
    bad = mq("update-topic", "--store", str(store), "--topic", "Fifo", "--message-type", "fifo")
    assert bad.returncode == 1 and bad.stderr.startswith("mqstore: error:") and "Traceback" not in bad.stderr
    assert "'fifo'" in bad.stderr and "NORMAL, FIFO, DELAY, TRANSACTION, MIXED" in bad.stderr
    table = json.loads((store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert table["Fifo"]["attributes"] == {"message.type": "FIFO"} and table["Fifo"]["writeQueueNums"] == 8
    usage = mq("update-topic", "--help")
    assert usage.returncode == 0 and "--message-type" in usage.stdout and "MIXED" in usage.stdout


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_store_query_commands(tmp_path: Path) -> None:
    store = tmp_path / "s"
    p = mq(
        "bench",
        "append",
        "--store",
        str(store),
        "--messages",
        "6000",
        "--topics",
        "2",
        "--queues",
        "2",
        "--segment-bytes",
        str(1 << 20),
        "--index-hash-slots",
        "512",
        "--index-max-entries",
        "4096",
    )
    assert p.returncode == 0, p.stderr
    assert len(list((store / "commitlog").iterdir())) >= 2 and len(list((store / "index").iterdir())) >= 2
    by_offset = json.loads(
        mq(
            "query-msg-by-offset", "--store", str(store), "--topic", "BenchTopic1", "--queue", "0", "--offset", "5"
        ).stdout
    )
    assert by_offset["queue_offset"] == 5 and by_offset["topic"] == "BenchTopic1"
    by_id = json.loads(mq("query-msg-by-id", "--store", str(store), by_offset["msg_id"]).stdout)
    assert by_id == by_offset
    by_uniq = json.loads(
        mq("query-msg-by-unique-key", "--store", str(store), "--topic", "BenchTopic1", by_offset["unique_key"]).stdout
    )
    assert by_uniq["msg_id"] == by_offset["msg_id"]
    first_key = by_offset["keys"].split()[0]
    by_key = [
        json.loads(x)
        for x in mq("query-msg-by-key", "--store", str(store), "--topic", "BenchTopic1", first_key).stdout.splitlines()
    ]
    assert [r["msg_id"] for r in by_key] == [by_offset["msg_id"]]
    pulled = [
        json.loads(x)
        for x in mq(
            "pull",
            "--store",
            str(store),
            "--topic",
            "BenchTopic1",
            "--queue",
            "0",
            "--offset",
            "0",
            "--max",
            "50",
            "--tags",
            "Tag1 || Tag5",
        ).stdout.splitlines()
    ]
    assert pulled and {r["tags"] for r in pulled} <= {"Tag1", "Tag5"}
    status = mq("topic-status", "--store", str(store), "--topic", "BenchTopic0", "--format", "json")
    rows = [json.loads(x) for x in status.stdout.splitlines()]
    assert [r["max_offset"] for r in rows] == [1500, 1500]
    assert mq("update-topic", "--store", str(store), "--topic", "NewT", "--write-queue-nums", "8").returncode == 0
    missing = mq("consumer-progress", "--store", str(store), "--group", "nobody")
    assert missing.returncode == 1 and "no committed offsets" in missing.stderr
    none = mq("query-msg-by-key", "--store", str(store), "--topic", "BenchTopic1", "absent-key")
    assert none.returncode == 1 and "no message" in none.stderr


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_bench_consume_and_query(tmp_path: Path) -> None:
    store = tmp_path / "s"
    mq(
        "bench",
        "append",
        "--store",
        str(store),
        "--messages",
        "4000",
        "--segment-bytes",
        str(1 << 20),
        "--index-hash-slots",
        "512",
        "--index-max-entries",
        "20000",
    )
    consume = json.loads(mq("bench", "consume", "--store", str(store)).stdout.splitlines()[-1])
    assert consume["messages"] == 4000 and consume["msgs_per_s"] > 0
    query = json.loads(mq("bench", "query", "--store", str(store), "--lookups", "200").stdout.splitlines()[-1])
    assert query["lookups"] == 200 and query["found"] == 200 and query["p99_us"] > 0


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_bench_reopen_checks_queues_and_runs_retention(tmp_path: Path) -> None:
    store = tmp_path / "s"
    p = mq(
        "bench",
        "append",
        "--store",
        str(store),
        "--messages",
        "20000",
        "--body-size",
        "64",
        "--topics",
        "300",
        "--segment-bytes",
        str(1 << 20),
    )
    assert p.returncode == 0, p.stderr
    p = mq("bench", "reopen", "--store", str(store), "--sample", "100", "--delete-segments", "2")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["clean_shutdown"] and out["queues"] == 1200 and out["sampled_queues"] == 100
    assert out["mismatches"] == 0 and out["checked_units"] > 0
    assert out["segments_deleted"] == 2 and out["queue_mins_moved"] > 0
    assert out["mismatches_after_retention"] == 0 and 0 < out["checked_units_after_retention"] < out["checked_units"]
    assert out["peak_queue_files_open"] <= out["max_open_queue_files"]
    p = mq("bench", "reopen", "--store", str(tmp_path / "nothing"))
    assert p.returncode == 1 and "is it a store" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_bench_retention_reports_both_rounds(tmp_path: Path) -> None:
    p = mq(
        "bench",
        "retention",
        "--store",
        str(tmp_path / "s"),
        "--segment-bytes",
        str(1 << 20),
        "--fill-segments",
        "4",
        "--round-messages",
        "2000",
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["segments_deleted"] >= 3 and out["batches_while_deleting"] >= 1
    assert out["p99_idle_ms"] > 0 and out["p99_deleting_ms"] > 0 and out["p99_ratio"] > 0


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_bench_recover_before_checkpoint_times_the_open(tmp_path: Path) -> None:
    p = mq(
        "bench",
        "recover",
        "--store",
        str(tmp_path / "s"),
        "--before-checkpoint",
        str(8 << 20),
        "--bytes",
        str(1 << 20),
        "--body-size",
        "512",
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["bytes_before_checkpoint"] >= 8 << 20 and out["bytes_after_checkpoint"] >= 1 << 20
    assert not out["clean_shutdown"] and out["open_seconds"] > 0


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_only_create_makes_a_store(tmp_path: Path) -> None:
    """A mistyped --store names the missing directory and exits 1, creating nothing;
    --create makes the store; queries never create one."""
    missing = tmp_path / "typo"
    for args in (
        ("send", "--topic", "T", "x"),
        ("update-topic", "--topic", "T"),
        ("pull", "--topic", "T", "--queue", "0", "--offset", "0"),
        ("topic-status", "--topic", "T"),
        ("query-msg-by-key", "--topic", "T", "k"),
    ):
        p = mq(*args, "--store", str(missing))
        assert p.returncode == 1 and f"no store at {missing}" in p.stderr and "Traceback" not in p.stderr, (
            args,
            p.stderr,
        )
        assert not missing.exists()
    assert mq("send", "--store", str(missing), "--create", "--topic", "T", "--queue", "0", "x").returncode == 0
    p = mq("pull", "--store", str(missing), "--topic", "T", "--queue", "0", "--offset", "0")
    assert p.returncode == 0 and json.loads(p.stdout)["body"] == "x"
    assert json.loads(p.stderr.splitlines()[-1]) == {
        "next_offset": 1,
        "min_offset": 0,
        "max_offset": 1,
        "status": "FOUND",
    }
