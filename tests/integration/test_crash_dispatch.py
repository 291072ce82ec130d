"""kill -9 while a real writer appends and dispatches; recovery must leave the
commitlog, the consume queues (and the index) consistent with each other.

After each kill the store is reopened (abnormal recovery: commitlog cut at the first
invalid record, consume queues cut to it and re-dispatched). Then every record of the
commitlog must have exactly its unit in its queue, every unit must point at its
record, and no acknowledged message may be missing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqstore.formats.javahash import tags_code
from mqstore.store import StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.reader import CommitLogReader

SEG = 1 << 20


def run_and_kill(store: Path, ack: Path, flush: str, min_acks: int = 3000) -> list[dict]:
    return kill_bench_append(
        store,
        ack,
        [
            "--body-size",
            "150",
            "--topics",
            "3",
            "--queues",
            "4",
            "--flush",
            flush,
            "--producers",
            "2",
            "--batch",
            "100",
            "--segment-bytes",
            str(SEG),
            "--index-hash-slots",
            "1000",
            "--index-max-entries",
            "4000",
        ],
        min_acks=min_acks,
        settle_s=0.3,
    )


def kill_bench_append(store: Path, ack: Path, args: list[str], *, min_acks: int, settle_s: float) -> list[dict]:
    """`mqstore bench append` into ``store`` (with ``args``) in a child process,
    SIGKILLed ``settle_s`` after ``min_acks`` acknowledgements (about 120 bytes each
    in ``ack``): the acknowledged messages."""
    cmd = [
        sys.executable,
        "-m",
        "mqstore.cli.main",
        "bench",
        "append",
        "--store",
        str(store),
        "--messages",
        "100000000",
        "--ack-log",
        str(ack),
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"writer exited early: {proc.stderr.read().decode()[-2000:]}")
            if ack.exists() and ack.stat().st_size > min_acks * 120:
                break
            time.sleep(0.05)
        time.sleep(settle_s)  # kill somewhere in the middle of appending and dispatching
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return [json.loads(x) for x in ack.read_text().splitlines() if x.strip()]


def check_consistent(store: Path, acked: list[dict]) -> None:
    records = list(CommitLogReader(store).records(check_crc=True))
    with MessageStore(store, StoreConfig(segment_bytes=SEG), background_dispatch=False) as s:
        assert not s.commitlog.recovery.clean_shutdown
        assert s.dispatcher.dispatched_offset == s.commitlog.wrote_offset
        by_queue: dict[tuple[str, int], list] = {}
        for r in records:
            by_queue.setdefault((r.topic, r.queue_id), []).append(r)
        for (topic, qid), recs in by_queue.items():
            cq = s.consume_queues.find(topic, qid)
            assert cq is not None and cq.max_offset == len(recs), (topic, qid)
            units = cq.read_units(0, len(recs))
            for r, u in zip(recs, units):
                assert (int(u["commitlog_offset"]), int(u["size"]), int(u["tags_code"])) == (
                    r.physical_offset,
                    r.total_size,
                    tags_code(r.tags),
                ), (topic, qid, r.queue_offset)
        assert sum(cq.max_offset for cq in s.consume_queues.all()) == len(records)
        offsets = {r.physical_offset for r in records}
        for a in acked:
            assert a["physical_offset"] in offsets
            rec = s.read_queue_offset(a["topic"], a["queue_id"], a["queue_offset"])
            assert rec.physical_offset == a["physical_offset"] and rec.msg_id == a["msg_id"]
        if s.index is not None:  # every acknowledged message is found by its key
            for a in acked[-50:]:
                rec = s.commitlog.read(a["physical_offset"])
                hits = s.query_by_key(rec.topic, rec.keys.split()[0], max_num=64)
                assert rec.physical_offset in [h.physical_offset for h in hits]


@pytest.mark.crash
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_kill9_during_append_and_dispatch(tmp_path: Path, flush: str) -> None:
    store = tmp_path / "store"
    acked: list[dict] = []
    for round_ in range(2):
        acked += run_and_kill(store, tmp_path / f"acks-{round_}", flush)
        check_consistent(store, acked if flush == "sync" else [])
