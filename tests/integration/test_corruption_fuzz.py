"""Truncation and garbage in the files a store derives or keeps small state in.

Two closed stores are made once by the crash workload (crash_workload.WORKLOAD, no
retention): one closed cleanly, one closed cleanly and then reopened and killed
with SIGKILL mid-run. Each case copies
one of them, damages one file, and requires that the store still opens, that after
open + wait_dispatched + close ``verify`` finds no error, and that every message
written (acknowledged, for the killed one) is still served at its queue offset.

Damaged files: the last file of a consume queue, the last index file, the
checkpoint, and each config file (consumerOffset.json, topics.json,
delayOffset.json) and its .bak. Damage: a truncation to a random length, or random
bytes written over a random range. Cases come from a seeded random loop (a fixed
number per file kind), so a failure names its seed and replays exactly.
"""

from __future__ import annotations

import random
import shutil
import signal
from pathlib import Path

import pytest

from mqstore.store.repair import repair_store
from tests.integration.crash_workload import check_messages, open_store, run_child, verify_errors

TARGETS = ["consume_queue", "index", "checkpoint"] + [
    f"config/{name}{bak}" for name in ("consumerOffset.json", "topics.json", "delayOffset.json") for bak in ("", ".bak")
]
SEEDS_PER_TARGET = 2  # x 2 kinds of damage x 2 stores
# Stores whose consume queues are one RocksDB (store_type defaultRocksDB): any of its
# files (SST, MANIFEST, CURRENT, OPTIONS) damaged, and the files both types share.
ROCKS_TARGETS = ["rocksdb:sst", "rocksdb:MANIFEST", "rocksdb:CURRENT", "rocksdb:OPTIONS", "index", "checkpoint"]


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, tuple[Path, list[list]]]:
    root = tmp_path_factory.mktemp("bases")
    clean = run_child(root / "clean", batches=200, close=True, retention_every=0)
    assert clean.returncode == 0, clean.stderr[-3000:]
    first = run_child(root / "killed", batches=40, close=True, retention_every=0)  # a clean session first
    assert first.returncode == 0, first.stderr[-3000:]
    killed = run_child(root / "killed", kill_after_acks=1500, retention_every=0, round=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    killed.acks = first.acks + killed.acks
    rocks = run_child(root / "rocks-clean", batches=200, close=True, retention_every=0, store_type="defaultRocksDB")
    assert rocks.returncode == 0, rocks.stderr[-3000:]
    opts = {"retention_every": 0, "store_type": "defaultRocksDB", "thorough_flush_s": 2}
    first_rocks = run_child(root / "rocks-killed", batches=40, close=True, **opts)
    assert first_rocks.returncode == 0, first_rocks.stderr[-3000:]
    rocks_killed = run_child(root / "rocks-killed", kill_after_acks=1500, round=1, **opts)
    assert rocks_killed.returncode == -signal.SIGKILL, rocks_killed.stderr[-3000:]
    rocks_killed.acks = first_rocks.acks + rocks_killed.acks
    for run in (clean, killed, rocks, rocks_killed):
        assert len(run.acks) > 500
    for store in (root / "clean", root / "killed"):
        for name in ("consumerOffset.json", "topics.json", "delayOffset.json"):
            assert (store / "config" / name).exists() and (store / "config" / f"{name}.bak").exists(), name
    return {
        "clean": (root / "clean", clean.acks),
        "killed": (root / "killed", killed.acks),
        "rocks-clean": (root / "rocks-clean", rocks.acks),
        "rocks-killed": (root / "rocks-killed", rocks_killed.acks),
    }


def target_file(store: Path, target: str, rng: random.Random) -> Path:
    if target == "consume_queue":
        queues = sorted(p for p in (store / "consumequeue").glob("*/*") if p.is_dir())
        return sorted(rng.choice(queues).iterdir())[-1]
    if target.startswith("rocksdb:"):
        kind = target.split(":")[1]
        names = "*.sst" if kind == "sst" else f"{kind}*"
        return rng.choice(sorted((store / "consumequeue").glob(names)))
    if target == "index":
        return sorted((store / "index").iterdir())[-1]
    return store / target


def damage(path: Path, kind: str, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    # Mostly near the written data: most of a queue, index or checkpoint file is
    # zeros that nothing reads.
    used = max(1, len(data.rstrip(b"\0")))
    at = min(rng.randrange(used + 64) if rng.random() < 0.7 else rng.randrange(len(data)), len(data) - 1)
    if kind == "truncate":
        path.write_bytes(bytes(data[:at]))
        return f"truncated {path.name} from {len(data)} to {at} bytes"
    n = min(rng.choice([1, 4, 8, 20, 40, 200]), len(data) - at)
    data[at : at + n] = rng.randbytes(n)
    path.write_bytes(bytes(data))
    return f"{n} random bytes at {at} of {path.name} ({len(data)} bytes)"


CASES = [
    (base, target, kind, seed)
    for bases, targets in ((("clean", "killed"), TARGETS), (("rocks-clean", "rocks-killed"), ROCKS_TARGETS))
    for base in bases
    for target in targets
    for kind in ("truncate", "garbage")
    for seed in range(SEEDS_PER_TARGET)
]


@pytest.mark.crash
@pytest.mark.parametrize(("base", "target", "kind"), sorted({c[:3] for c in CASES}), ids=lambda v: str(v))
def test_damaged_file_never_stops_a_start(tmp_path: Path, bases, base: str, target: str, kind: str) -> None:
    source, expected = bases[base]
    for seed in range(SEEDS_PER_TARGET):
        rng = random.Random(f"{base}/{target}/{kind}/{seed}")
        store = tmp_path / f"s{seed}"
        shutil.copytree(source, store)
        what = damage(target_file(store, target, rng), kind, rng)
        context = f"{base} store, seed {seed}: {what}"
        s = open_store(store)  # must not raise
        try:
            assert s.wait_dispatched(30), context
        finally:
            s.close()
        errors = verify_errors(store)
        if errors and target == "rocksdb:sst":  # a rotten block nothing read yet: verify finds it, repair fixes it
            assert all(e.startswith("cq_db_damaged") for e in errors), (context, errors)
            assert repair_store(store).ok, context
            errors = verify_errors(store)
        assert errors == [], context
        s = open_store(store)
        try:
            assert check_messages(s, expected) == len(expected), context
        finally:
            s.close()
        shutil.rmtree(store)


def _copy(bases, base: str, tmp_path: Path) -> tuple[Path, list[list]]:
    source, expected = bases[base]
    store = tmp_path / "store"
    shutil.copytree(source, store)
    return store, expected


def _open_close_verify(store: Path, expected: list[list]) -> None:
    s = open_store(store)
    try:
        assert s.wait_dispatched(30)
        assert check_messages(s, expected) == len(expected)
    finally:
        s.close()
    assert verify_errors(store) == []


@pytest.mark.crash
@pytest.mark.parametrize("name", ["consumerOffset.json", "topics.json", "delayOffset.json"])
def test_unparsable_config_without_bak_is_set_aside_and_rebuilt(tmp_path: Path, bases, name: str) -> None:
    store, expected = _copy(bases, "clean", tmp_path)
    path = store / "config" / name
    path.write_bytes(b'{"offsetTable": {"T0@g1": {0: 12')  # torn
    path.with_name(name + ".bak").unlink()
    _open_close_verify(store, expected)
    assert path.with_name(name + ".corrupt").read_bytes().startswith(b'{"offsetTable"')
    if name == "topics.json":
        s = open_store(store)
        try:
            assert {t: c.write_queue_nums for t, c in s.topics.all().items()} == {"T0": 2, "T1": 2}
        finally:
            s.close()


@pytest.mark.crash
def test_consumer_offsets_past_the_end_are_set_to_it(tmp_path: Path, bases) -> None:
    """A consumerOffset.json that parses but names offsets no queue reaches (damage in
    its digits) would skip messages: the store sets them to the queue's end."""
    import json

    store, expected = _copy(bases, "killed", tmp_path)
    path = store / "config" / "consumerOffset.json"
    table = json.loads(path.read_text())
    table["offsetTable"]["T0@g1"] = {"0": 10**9, "1": 10**12}
    path.write_text(json.dumps(table))
    _open_close_verify(store, expected)
    s = open_store(store)
    try:
        for p in s.consumer_progress("g1"):
            assert p.consumer_offset <= p.broker_offset
        assert {(p.topic, p.queue_id): p.consumer_offset for p in s.consumer_progress("g1")}[("T0", 0)] == (
            s.consume_queues.find("T0", 0).max_offset
        )
    finally:
        s.close()


@pytest.mark.crash
@pytest.mark.parametrize("base", ["clean", "killed"])
def test_checkpoint_ahead_of_the_data_is_not_trusted(tmp_path: Path, bases, base: str) -> None:
    """Garbage that decodes as timestamps later than any record: after a crash,
    recovery would start in the last segment and trust queues and index as flushed."""
    from mqstore.formats.checkpoint import Checkpoint
    from mqstore.store.checkpoint_file import read_checkpoint, write_checkpoint

    store, expected = _copy(bases, base, tmp_path)
    write_checkpoint(
        store, Checkpoint(physic_msg_timestamp=1 << 60, logics_msg_timestamp=1 << 61, index_msg_timestamp=1 << 62)
    )
    _open_close_verify(store, expected)
    cp = read_checkpoint(store)
    assert max(cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) < 1 << 50


@pytest.mark.crash
def test_a_queue_with_a_damaged_older_file_is_rebuilt(tmp_path: Path, bases) -> None:
    """Not the last file: a queue whose files cannot be opened as they are (one too
    short in the middle) is deleted and rebuilt from the commitlog."""
    store, expected = _copy(bases, "clean", tmp_path)
    files = sorted((store / "consumequeue" / "T1" / "0").iterdir())
    assert len(files) >= 3
    files[1].write_bytes(files[1].read_bytes()[:333])
    _open_close_verify(store, expected)


@pytest.mark.crash
def test_delay_progress_position_inside_a_record_is_not_trusted(tmp_path: Path, bases) -> None:
    import json

    store, expected = _copy(bases, "killed", tmp_path)
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        path = store / "config" / name
        table = json.loads(path.read_text())
        table["commitlogOffset"] = 1001  # inside the second record
        path.write_text(json.dumps(table))
    _open_close_verify(store, expected)
