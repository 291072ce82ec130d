"""scripts/run.sh, the README's main job, serves the store (`mqstore serve` on its
defaults, its own local Ray): started in the background, the README's first send
and pull examples run against it (only the port changed), SIGTERM closes the store
cleanly. Setup is skipped (this interpreter already has mqstore)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.services.helpers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]
README_ADDRESS = "127.0.0.1:8080"


def readme_examples() -> dict[str, list[str]]:
    """The first `mqstore send` and `mqstore pull` of the README's serving section."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Serving over gRPC") :]
    found = {}
    for line in section.splitlines():
        m = re.match(r"mqstore (send|pull) (.*?)(\s+#.*)?$", line.strip())
        if m and m.group(1) not in found and f"--server {README_ADDRESS}" in line:
            found[m.group(1)] = shlex.split(m.group(0).split(" #")[0])[1:]
    assert set(found) == {"send", "pull"}, found
    return found


def test_readme_names_run_sh_as_the_main_job():
    text = (ROOT / "README.md").read_text()
    two = text[text.index("## Two commands") : text.index("## A short tour")]
    assert "bash scripts/run.sh" in two and "mqstore serve" in two
    script = (ROOT / "scripts" / "run.sh").read_text()
    assert "serve --store ./data" in script


def test_run_sh_serves_the_readme_examples(tmp_path):
    port, metrics = free_port(), free_port(skip=(free_port(),))
    store = tmp_path / "data"
    env = {**os.environ, "MQSTORE_SKIP_SETUP": "1", "MQSTORE_PYTHON": sys.executable}
    err = open(tmp_path / "run.err", "w+")
    proc = subprocess.Popen(
        [
            "bash",
            str(ROOT / "scripts" / "run.sh"),
            "--store",
            str(store),
            "--port",
            str(port),
            "--metrics-port",
            str(metrics),
        ],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()
        assert line, (tmp_path / "run.err").read_text()[-4000:]
        ready = json.loads(line)
        assert ready["front"] == f"127.0.0.1:{port}" and ready["store"] == str(store)
        address = f"127.0.0.1:{port}"
        ex = readme_examples()

        def run(args: list[str]) -> subprocess.CompletedProcess:
            args = [address if a == README_ADDRESS else a for a in args]
            return subprocess.run(
                [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=60
            )

        p = run(ex["send"])
        assert p.returncode == 0, p.stderr
        sent = [json.loads(x) for x in p.stdout.splitlines()]
        assert [s["status"] for s in sent] == ["PUT_OK"] * len(sent) and sent
        deadline = time.monotonic() + 30
        while True:  # the dispatcher follows the flushed offset within milliseconds
            p = run(ex["pull"])
            assert p.returncode == 0, p.stderr
            if len(p.stdout.splitlines()) > len(sent):  # table: a header and one row per message
                break
            assert time.monotonic() < deadline, p.stdout
            time.sleep(0.2)
        assert all(s["msg_id"] in p.stdout for s in sent), p.stdout
        proc.send_signal(signal.SIGTERM)  # run.sh execs serve: this is the serve process
        assert proc.wait(60) == 0
        assert not (store / "abort").exists() and (store / "commitlog").is_dir()
        assert "mqstore: stopped" in (tmp_path / "run.err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
