"""Every query command of the CLI, with ``--store`` (read-only, ReadView) on copy A
and with ``--server`` on copy B (the served stack): the same exit code, the same
stdout (records as JSON lines, every field), the same last stderr line (pull's
offsets and status, or the error). A ``--server`` error names its gRPC code first
(``NOT_FOUND: ...``) and an error may name the target (the directory or the
address): those are the only differences allowed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.equivalence.conftest import BLANK, SPARSE

pytestmark = pytest.mark.slow
UNKNOWN_QUEUE = 9


def mq(*args: str, target: tuple[str, str]) -> tuple[int, str, str]:
    p = subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args, *target], capture_output=True, text=True, timeout=120
    )
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    last = re.sub(r"^mqstore: error: [A-Z_]+: ", "mqstore: error: ", last).replace(target[1], "<target>")
    return p.returncode, p.stdout, last


@pytest.fixture(scope="module")
def targets(store_a, client_b):
    return ("--store", str(store_a.store_dir)), ("--server", client_b.endpoint)


def some_ids(store_a) -> dict:
    cq = store_a.consume_queues.find("EqA", 1)
    rec = store_a.read_queue_offset("EqA", 1, cq.min_offset + 2)
    return {
        "msg_id": rec.msg_id,
        "uniq": rec.unique_key,
        "key": rec.keys.split()[0],
        "lo": cq.min_offset,
        "hi": cq.max_offset,
    }


QUESTIONS = {
    "by id": lambda i: ["query-msg-by-id", i["msg_id"]],
    "by id, table": lambda i: ["query-msg-by-id", i["msg_id"], "--format", "table"],
    "by id, gone": lambda i: ["query-msg-by-id", i["msg_id"][:-16] + "0" * 16],
    "by id, malformed": lambda i: ["query-msg-by-id", "zz"],
    "by unique key": lambda i: ["query-msg-by-unique-key", "--topic", "EqA", i["uniq"]],
    "by unique key, none": lambda i: ["query-msg-by-unique-key", "--topic", "EqA", "nope"],
    "by key": lambda i: ["query-msg-by-key", "--topic", "EqA", i["key"], "--max", "64"],
    "by key, none": lambda i: ["query-msg-by-key", "--topic", "EqB", "no-such-key"],
    "by offset": lambda i: ["query-msg-by-offset", "--topic", "EqA", "--queue", "1", "--offset", str(i["lo"] + 1)],
    "by offset, below": lambda i: ["query-msg-by-offset", "--topic", "EqA", "--queue", "1", "--offset", "0"],
    "by offset, pre-blank": lambda i: ["query-msg-by-offset", "--topic", BLANK, "--queue", "0", "--offset", "1"],
    "pull": lambda i: ["pull", "--topic", "EqA", "--queue", "1", "--offset", str(i["lo"]), "--max", "40"],
    "pull, tags": lambda i: ["pull", "--topic", SPARSE, "--queue", "0", "--offset", "0", "--tags", "Rare"],
    "pull, below": lambda i: ["pull", "--topic", "EqA", "--queue", "1", "--offset", "0"],
    "pull, at the end": lambda i: ["pull", "--topic", "EqA", "--queue", "1", "--offset", str(i["hi"])],
    "pull, unknown queue": lambda i: ["pull", "--topic", "EqA", "--queue", str(UNKNOWN_QUEUE), "--offset", "0"],
    "pull, bad tags": lambda i: ["pull", "--topic", "EqA", "--queue", "1", "--offset", "0", "--tags", "A ||"],
    "topic status": lambda i: ["topic-status", "--topic", "EqC"],
    "topic status, json": lambda i: ["topic-status", "--topic", "EqC", "--format", "json"],
    "topic status, unknown": lambda i: ["topic-status", "--topic", "NoSuchTopic"],
    "consumer progress": lambda i: ["consumer-progress", "--group", "g1", "--format", "json"],
    "consumer progress, none": lambda i: ["consumer-progress", "--group", "nobody"],
}


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_the_same_answer_from_store_and_server(targets, store_a, question):
    args = QUESTIONS[question](some_ids(store_a))
    local, served = (mq(*args, target=t) for t in targets)
    assert local == served, f"{args}\n--store:  {local}\n--server: {served}"
    code, out, _ = local
    assert code in (0, 1) and (code == 1 or out or question.startswith("pull, "))
