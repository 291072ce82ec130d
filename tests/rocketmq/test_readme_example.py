"""README.md's RocketMQ 5 example, run as written (its endpoint pointed at this
module's stack) in a process of its own: it prints what it sent and what it received
(it printed only the id it sent, and nothing it received)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import rocketmq_client

pytestmark = pytest.mark.slow  # a client process against a served stack

README = Path(__file__).parents[2] / "README.md"


def test_the_readme_example_prints_what_it_received(stack) -> None:
    example = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "SimpleConsumer(" in b)
    assert "127.0.0.1:8081" in example
    code = example.replace("127.0.0.1:8081", stack.rocketmq_endpoint)
    env = {**os.environ, "HOME": str(rocketmq_client.HOME)}  # the client's logs: not into the real home
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    sent, received = p.stdout.splitlines()
    msg_id = sent.removeprefix("sent ")
    assert sent.startswith("sent ") and received == f"received {msg_id} b'hello'", p.stdout
