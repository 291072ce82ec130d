"""The spark-submit side of reconcile (issue 14, item 10.3): ``jobs/reconcile.py``
takes every option of ``mqstore reconcile``, and ``deploy/spark-submit.sh`` with
``MQSTORE_PY_FILES=1`` leaves no temporary folder behind, whether spark-submit ends
by itself or the script is stopped with SIGTERM. The script runs for real, with the
spark-submit pyspark brings, on local Spark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer.main

import mqstore
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore

pytestmark = pytest.mark.timeout(600)

PROJECT = Path(mqstore.__file__).resolve().parent.parent
SCRIPT = PROJECT / "deploy" / "spark-submit.sh"
MESSAGES = 30


def options(command) -> dict[str, tuple]:
    """Option name -> (its other names, is a flag, default) of a click command."""
    out = {}
    for p in command.params:
        out[p.name] = (tuple(sorted(p.opts + p.secondary_opts)), p.is_flag, p.default)
    return out


def test_the_entry_takes_every_option_of_the_command() -> None:
    from mqstore.cli.main import app
    from mqstore.cli.reconcile import entry_app

    cli = options(typer.main.get_command(app).commands["reconcile"])
    entry = options(typer.main.get_command(entry_app()))
    assert "progress" in cli and cli["progress"][0] == ("--no-progress", "--progress")
    for name, (opts, flag, default) in cli.items():
        assert name in entry, f"jobs/reconcile.py lacks {opts}"
        assert entry[name][:2] == (opts, flag), name
        if name != "master":  # the entry's master is spark-submit's unless given
            assert entry[name][2] == default, name
    assert entry["master"][2] is None
    assert set(entry) - set(cli) == {"log_level", "log_format"}  # mqstore's own options


def test_the_entry_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            str(PROJECT / "jobs" / "reconcile.py"),
            "--store",
            str(tmp_path / "none"),
            "--no-progress",
            "--index-keys",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 1, p
    assert p.stderr.startswith("mqstore: error: no store at") and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("submit-store") / "store"
    with MessageStore(path, StoreConfig(segment_bytes=1 << 20, index_hash_slots=64, index_max_entries=256)) as s:
        s.append(
            MessageBatch.of([Message("T", f"m{i}".encode(), tags="TagA", keys=[f"k{i}"]) for i in range(MESSAGES)])
        )
    return path


def submit_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "SPARK_SUBMIT", "PYSPARK_PYTHON")}
    env.update(TMPDIR=str(tmp), MQSTORE_PY_FILES="1", MQSTORE_PYTHON=sys.executable, SPARK_MASTER="local[1]")
    return env


def leftovers(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("mqstore-py-files.*")) + sorted(tmp.rglob("mqstore.zip"))


@pytest.mark.slow
def test_spark_submit_sh_runs_every_option_and_removes_its_zip(store: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    p = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "--store",
            str(store),
            "--output",
            str(out),
            "--no-progress",
            "--format",
            "json",
            "--chunk-mb",
            "1",
            "--index-keys",
            "sample",
            "--log-level",
            "warning",
        ],
        env=submit_env(tmp),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["ok"] and summary["messages"] == MESSAGES
    assert json.loads((out / "summary.json").read_text())["messages"] == MESSAGES
    assert '"reconcile_progress"' not in p.stderr  # --no-progress was taken
    assert leftovers(tmp) == []


@pytest.mark.slow
def test_spark_submit_sh_removes_its_zip_when_stopped(store: Path, tmp_path: Path) -> None:
    """SIGTERM to the script's process group (a scheduler stopping it, or Ctrl-C's
    SIGINT alike) while spark-submit runs: the script exits 143, the folder is gone."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "--store", str(store), "--no-progress"],
        env=submit_env(tmp),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        t0 = time.monotonic()
        while not list(tmp.glob("mqstore-py-files.*/mqstore.zip")):
            assert proc.poll() is None and time.monotonic() - t0 < 60, "the script made no zip"
            time.sleep(0.05)
        time.sleep(2)  # spark-submit's JVM is up and has the zip
        assert proc.poll() is None, "spark-submit ended before the signal"
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert leftovers(tmp) == []
