"""``mqstore serve --fronts 2`` as a real process (its own local Ray): both fronts
listen on the one API port and the one RocketMQ port, each has its own metrics port
(--metrics-port + k), the ready line lists both, tools label their processes "front"
and "front-1", and SIGTERM closes them with the stores."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from mqstore.bench.processes import deployment_processes
from mqstore.services.query.client import FrontClient
from tests.services.helpers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _free_pair(skip: tuple[int, ...]) -> int:
    """A free port whose next one is free too (the two fronts' metrics ports)."""
    for _ in range(50):
        p = free_port(skip=skip)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
            except OSError:
                skip = (*skip, p)
                continue
        return p
    raise RuntimeError("no two free ports in a row")


def test_serve_two_fronts(tmp_path):
    root = tmp_path / "data"
    port = free_port()
    rocketmq_port = free_port(skip=(port,))
    metrics = _free_pair((port, rocketmq_port))
    err = open(tmp_path / "serve.err", "w+")
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
            "--rocketmq-port",
            str(rocketmq_port),
            "--metrics-port",
            str(metrics),
            "--fronts",
            "2",
            "--namespace",
            "mqstore-serve-fronts",
            "--segment-bytes",
            str(1 << 20),
        ],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env={**os.environ, "RAY_DEDUP_LOGS": "0"},
    )
    try:
        line = proc.stdout.readline()
        assert line, (tmp_path / "serve.err").read_text()
        ready = json.loads(line)
        assert ready["front"] == f"127.0.0.1:{port}" and ready["rocketmq"] == f"127.0.0.1:{rocketmq_port}"
        assert ready["metrics"] == f"127.0.0.1:{metrics}"
        assert ready["fronts"] == [
            {
                "name": "front",
                "front": f"127.0.0.1:{port}",
                "rocketmq": f"127.0.0.1:{rocketmq_port}",
                "metrics": f"127.0.0.1:{metrics}",
            },
            {
                "name": "front-1",
                "front": f"127.0.0.1:{port}",
                "rocketmq": f"127.0.0.1:{rocketmq_port}",
                "metrics": f"127.0.0.1:{metrics + 1}",
            },
        ]
        labels = {p.label for p in deployment_processes(proc.pid, [root])}
        assert {"front", "front-1", "commitlog-0"} <= labels, labels
        clients = [FrontClient(ready["front"]) for _ in range(8)]  # a connection each: the kernel spreads them
        try:
            for k, c in enumerate(clients):
                assert len(c.send("ServeFronts", [f"m{k}".encode()]).statuses) == 1
        finally:
            for c in clients:
                c.close()
        answered = []
        for m in (metrics, metrics + 1):
            text = urllib.request.urlopen(f"http://127.0.0.1:{m}/metrics", timeout=10).read().decode()
            answered.append(
                sum(
                    float(x.split()[-1])
                    for x in text.splitlines()
                    if x.startswith("mqstore_front_requests_total{") and 'method="Send' in x
                )
            )
        assert sum(answered) == 8, answered
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not (root / "abort").exists()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        err.close()
