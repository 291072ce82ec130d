"""What a newcomer met (issue 25, item 8), each pinned: update-topic keeps what it
is not given, flags are plain flags, server addresses are checked, an unknown topic
or queue is an error, sends past the write queues are refused, pop groups show in
consumer-progress, the README's examples paste and print only their results."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import NamedTuple
from unittest import mock

import pytest

from mqstore.cli.main import main
from mqstore.cli.target import rocketmq_address, server_address
from mqstore.store.topic_configs import TopicConfigs


def mq(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=120, **kw
    )


class Ran(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def cli(*args: str) -> Ran:
    """``mqstore ARGS`` in this process (fast: no interpreter start), through the
    console entry point, so errors end as they do for a user: one line, exit 1."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with mock.patch.object(sys, "argv", ["mqstore", *args]), redirect_stdout(out), redirect_stderr(err):
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Ran(code, out.getvalue(), err.getvalue())


def test_update_keeps_what_it_is_not_given(tmp_path: Path) -> None:
    """RocketMQ's updateTopic keeps the rest: closing a topic, then setting its type,
    leaves it closed with its 8 write queues."""
    tc = TopicConfigs(tmp_path)
    tc.create_or_update("Closed", write_queue_nums=8, read_queue_nums=8)
    tc.create_or_update("Closed", perm=0)
    cfg = tc.create_or_update("Closed", message_type="FIFO")
    assert (cfg.perm, cfg.write_queue_nums, cfg.read_queue_nums, cfg.message_type) == (0, 8, 8, "FIFO")
    assert TopicConfigs(tmp_path).get("Closed") == cfg  # as persisted
    new = tc.create_or_update("Fresh")  # a new topic takes the defaults
    assert (new.perm, new.write_queue_nums, new.read_queue_nums, new.message_type) == (6, 4, 4, "NORMAL")


def test_update_topic_command_keeps_omitted_options(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    r = cli("update-topic", "--store", store, "--create", "--topic", "Closed", "--write-queue-nums", "8", "--perm", "0")
    assert r.exit_code == 0, r.output
    r = cli("update-topic", "--store", store, "--topic", "Closed", "--message-type", "FIFO")
    out = json.loads(r.stdout)
    assert (out["perm"], out["writeQueueNums"], out["attributes"]) == (0, 8, {"message.type": "FIFO"})


def test_flags_show_as_flags_in_the_help() -> None:
    """--create takes no value: the help shows no <bool> after it (`--create true`
    looked like setting it, and sent "true" as a message)."""
    for cmd in (["send"], ["update-topic"], ["bench", "append"], ["serve"], ["acl", "add-user"]):
        r = cli(*cmd, "--help")
        assert r.exit_code == 0 and "<bool>" not in r.stdout, (cmd, r.stdout)
    assert "  --create " in cli("send", "--help").stdout


@pytest.mark.parametrize(
    ("given", "expected"),
    [("localhost", "localhost:8080"), ("127.0.0.1:9000", "127.0.0.1:9000"), ("[::1]", "[::1]:8080")],
)
def test_a_server_without_port_means_8080(given: str, expected: str) -> None:
    assert server_address(given) == expected
    assert rocketmq_address(given) == expected.replace(":8080", ":8081")  # bench rocketmq: RocketMQ's port


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("127.0.0.1:99999", "not a port number (1..65535)"),
        ("127.0.0.1:0", "not a port number"),
        ("127.0.0.1:http", "not a port number"),
        ("::1", "in brackets"),
        (":8080", "names no host"),
    ],
)
def test_bad_server_addresses_are_usage_errors(given: str, why: str) -> None:
    """Refused before anything connects (gRPC would try port 443, or wrap 99999 to 34463)."""
    for cmd in (["status"], ["pull", "--topic", "T", "--queue", "0", "--offset", "0"], ["acl", "list-users"]):
        r = cli(*cmd, "--server", given)
        assert r.exit_code == 2 and why in r.stderr and "--server" in r.stderr, (cmd, r.stderr)


class _FakeRay:
    """ray as start_ray uses it for a local instance; init writes a missing token
    file as Ray's generate_and_save_token does (open(), under the umask)."""

    class exceptions:
        AuthenticationError = RuntimeError

    def init(self, **kw) -> None:
        path = Path.home() / ".ray" / "auth_token"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("f" * 64)


def test_ray_token_file_is_0600_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """serve's local Ray instance: the token file is made 0600 under umask 022 (Ray
    alone made it 0644), and one an earlier run left 0644 is narrowed."""
    from mqstore.services.startup.serve import start_ray

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # (start_ray sets it; restored after the test)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    token = tmp_path / ".ray" / "auth_token"
    old = os.umask(0o022)
    try:
        start_ray(_FakeRay(), None, "ns", {})
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert len(token.read_text()) == 64  # Ray's format: 256 bits in hex
        token.chmod(0o644)
        start_ray(_FakeRay(), None, "ns", {})
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
    finally:
        os.umask(old)


HOLD = (
    "import sys, time; from pathlib import Path; from mqstore.store.lockfile import StoreLock; "
    "StoreLock(Path(sys.argv[1])); print('held', flush=True); time.sleep(120)"
)


@pytest.mark.slow  # starts a process holding the store, over ~2 s (tests/README.md)
def test_serve_on_a_held_store_fails_at_once_naming_the_holder(tmp_path: Path) -> None:
    """Before Ray starts (here Ray can not start at all: tests/unit forbids it), in
    one line with the holder's pid; it used to fail after 55 s and ~30 log lines."""
    from mqstore.services.startup.serve import ServeError, serve

    root = tmp_path / "store"
    root.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ServeError) as e:
            serve(root, port=0, rocketmq_port=None, metrics_port=0)
        msg = str(e.value)
        assert f"pid {holder.pid}" in msg and str(root) in msg and "\n" not in msg
    finally:
        holder.kill()
        holder.wait()


def test_a_send_past_the_write_queues_is_refused(tmp_path: Path) -> None:
    """As RocketMQ's broker ("queueId[5] is illegal"): a topic with 2 write queues takes
    queues 0 and 1 only, whichever column names it; nothing of the batch is written."""
    from mqstore.errors import InvalidMessageError
    from mqstore.store import MessageBatch
    from mqstore.store.config import StoreConfig
    from mqstore.store.message_store import MessageStore

    with MessageStore(tmp_path / "s", StoreConfig(segment_bytes=1 << 20), background_dispatch=False) as s:
        s.update_topic("Two", write_queue_nums=2, read_queue_nums=2)
        assert s.append(MessageBatch(topics="Two", bodies=[b"a"], queue_ids=1)).queue_offsets.tolist() == [0]
        wrote = s.log.commitlog.wrote_offset
        for batch in (
            MessageBatch(topics="Two", bodies=[b"a"], queue_ids=5),
            MessageBatch(topics=["Any", "Two"], bodies=[b"a", b"b"], queue_ids=[7, 2]),
        ):
            with pytest.raises(InvalidMessageError, match="topic 'Two'.s 2 write queue"):
                s.append(batch)
        assert s.log.commitlog.wrote_offset == wrote
        s.append(MessageBatch(topics="NoConfig", bodies=[b"a"], queue_ids=7))  # no config: any queue


def test_pull_of_an_unknown_topic_or_queue_is_an_error_with_store(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    assert cli("update-topic", "--store", store, "--create", "--topic", "Two", "--write-queue-nums", "2").exit_code == 0
    r = cli("pull", "--store", store, "--topic", "NoSuchTopic", "--queue", "0", "--offset", "0")
    assert r.exit_code == 1 and r.stderr.startswith("mqstore: error: topic 'NoSuchTopic' does not exist"), r.stderr
    r = cli("pull", "--store", store, "--topic", "Two", "--queue", "5", "--offset", "0")
    assert r.exit_code == 1 and "topic 'Two' has no queue 5" in r.stderr, r.stderr
    r = cli("pull", "--store", store, "--topic", "Two", "--queue", "1", "--offset", "0")
    assert r.exit_code == 0 and '"status": "NO_MESSAGE_IN_QUEUE"' in r.stderr, r.stderr


FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = -c ]; then echo 3.11.fake; exit 0; fi
echo "$*" >> "$(dirname "$0")/../pip.log"
"""


def test_setup_installs_only_when_something_changed(tmp_path: Path) -> None:
    """scripts/setup.sh on a complete venv whose stamp matches runs no pip (run.sh and
    test.sh took 69-100 s each time); a changed kernel source or pyproject.toml, or a
    kernel not built, installs again. (A copy of the script over a fake venv.)"""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "setup.sh").write_text((Path(__file__).parents[2] / "scripts" / "setup.sh").read_text())
    (root / "pyproject.toml").write_text("[project]\n")
    (root / "setup.py").write_text("")
    (root / "mqstore" / "kernels").mkdir(parents=True)
    (root / "mqstore" / "kernels" / "_scan.pyx").write_text("# v1\n")
    (root / "mqstore" / "kernels" / "_scan.cpython-311-x86_64-linux-gnu.so").write_text("")
    (root / "proto").mkdir()
    (root / "proto" / "a.proto").write_text("syntax = 'proto3';\n")
    venv_bin = root / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("mqstore", ""), ("pytest", ""), ("ruff", "")):
        (venv_bin / name).write_text(text)
        (venv_bin / name).chmod(0o755)
    log = root / ".venv" / "pip.log"

    def installs() -> int:
        before = len(log.read_text().splitlines()) if log.exists() else 0
        subprocess.run(["bash", str(root / "scripts" / "setup.sh")], check=True, timeout=60)
        return len(log.read_text().splitlines()) - before

    assert installs() == 2  # no stamp yet: pip upgrades itself, then installs the project
    assert installs() == 0  # nothing changed
    (root / "mqstore" / "kernels" / "_scan.pyx").write_text("# v2\n")
    assert installs() == 2
    assert installs() == 0
    (root / "mqstore" / "kernels" / "_scan.cpython-311-x86_64-linux-gnu.so").unlink()  # not built
    assert installs() == 2


def test_as_a_library_mqstore_logs_warnings_on_stderr_only(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``import mqstore`` sets up when the program has not configured structlog."""
    import structlog

    from mqstore.logging import configure_library_default

    monkeypatch.delenv("MQSTORE_LOG_LEVEL", raising=False)
    structlog.reset_defaults()
    configure_library_default()
    log = structlog.get_logger("t")
    log.info("store_opened", n=1)
    log.warning("disk_nearly_full", n=2)
    out, err = capsys.readouterr()
    assert out == "" and [json.loads(x)["event"] for x in err.splitlines()] == ["disk_nearly_full"]
    structlog.configure(  # the program's own, later: it wins
        processors=[structlog.processors.KeyValueRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(),
    )
    structlog.get_logger("t").info("store_opened")
    assert "event='store_opened'" in capsys.readouterr().out
