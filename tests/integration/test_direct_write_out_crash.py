"""Kill -9 inside the compiled write-out of many queues (``ConsumeQueues._write_direct``:
past 64 queues their runs go straight into their files from compiled loops, one call
per writer thread). The fault point ``cq.write_runs`` is hit before each call, so a
kill there leaves some threads' queues written and the others not: the open must
serve every acknowledged message and verify clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mqstore.store import faults
from tests.integration.crash_workload import check_messages, open_store, verify_errors

TOPICS = 100  # one queue each: past the 64 queues from which a write-out is compiled

# A child that appends to TOPICS topics, makes every queue's file (a thorough flush),
# appends a second round, then writes it out thoroughly with the fault plan in argv[2]
# installed: SIGKILL before the nth compiled call.
CHILD = r"""
import json, sys
from pathlib import Path
from mqstore.logging import configure_logging
from mqstore.store import faults
from mqstore.store.messages import MessageBatch
from mqstore.store.message_store import MessageStore
from tests.integration.crash_workload import retention_config, store_config

configure_logging(level="error")
store_dir, plan, topics = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
store = MessageStore(store_dir, store_config(), retention=retention_config())


def send(round_):
    names = [f"T{t}" for t in range(topics)] * 3
    ids = [f"r{round_}-{j}" for j in range(len(names))]
    res = store.append(MessageBatch(topics=names, queue_ids=[0] * len(names), bodies=[(m + "|").encode() for m in ids]))
    acks = [[names[j], 0, int(res.queue_offsets[j]), int(res.physical_offsets[j]), ids[j]] for j in range(len(names))]
    print(json.dumps({"ack": acks}), flush=True)


send(0)
assert store.wait_dispatched()
store.flush_derived()  # every queue's file made and written
send(1)
assert store.wait_dispatched()
faults.install(plan)
store.flush_derived()
print(json.dumps({"hits": faults.hits()}), flush=True)
"""


def run_write_out_child(store: Path, plan: str) -> tuple[list[list], int]:
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in (faults.ENV, faults.POWER_STORE_ENV, faults.POWER_IMAGE_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), plan, str(TOPICS)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        env=env,
    )
    acks = [a for line in proc.stdout.splitlines() if line.startswith('{"ack"') for a in json.loads(line)["ack"]]
    return acks, proc.returncode


@pytest.mark.crash
@pytest.mark.parametrize("nth", [1, 3], ids=["before-any-call", "after-two-calls"])
def test_kill_inside_the_compiled_write_out_of_many_queues(tmp_path: Path, nth: int) -> None:
    store = tmp_path / "store"
    acked, rc = run_write_out_child(store, f"cq.write_runs=kill@{nth}")
    assert rc == -signal.SIGKILL, "the write-out never reached the compiled call"
    assert len(acked) == 2 * 3 * TOPICS
    s = open_store(store)
    try:
        assert not s.commitlog.recovery.clean_shutdown
        assert s.wait_dispatched(30)
        assert check_messages(s, acked) == len(acked)
        assert all(s.consume_queues.find(f"T{t}", 0).max_offset == 6 for t in range(TOPICS))
    finally:
        s.close()
    assert verify_errors(store) == []
