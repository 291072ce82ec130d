"""The file layer when the disk fails: EIO/EROFS on a sync, a full disk, a power cut.

Errors come through the fault seam (mqstore/store/faults.py: the real call is
replaced by an OSError at a named point) or from a real full tmpfs; crashes are real
child processes killed with SIGKILL; a power cut is the power-loss test mode (the
child's syncs copy what they covered into an image, ``power_cut`` leaves the store
as that image). Every reopen that proves recovery runs in a fresh process.

What is checked (README "Faults"):

* A failed commitlog fdatasync/msync (EIO, EROFS) under sync flush: the batch is not
  acknowledged (StoreNotWritableError naming the cause), every later append fails at
  once, the fsync is never tried again, the state is reported and logged, reads
  keep working, and a fresh process recovers everything acknowledged.
* The periodic flush of async mode failing flips the store to unwritable the same way.
* A full disk (injected ENOSPC at segment allocation, or a real 3 MiB tmpfs, with
  preallocated and sparse segments): a clear "disk_full" error at once, reads keep
  working, writes resume by themselves within 10 s once space is freed.
* EIO on a consume-queue sync, syncfs, the checkpoint, a config file, an index file
  or a directory fsync never crashes the process or makes a later start fail.
* Power cut after kill -9: under sync flush nothing acknowledged is lost; under
  async flush only what was acknowledged after the last flush the writer saw can be
  missing; the store opens and ``mqstore verify`` finds no error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mqstore import FlushMode, MessageBatch, MessageStore, StoreConfig
from mqstore.errors import StoreNotWritableError
from mqstore.store import CommitLog, faults
from mqstore.store.reader import CommitLogReader

pytestmark = [pytest.mark.timeout(180)]

SMALL = {"index_hash_slots": 1000, "index_max_entries": 4000, "consume_queue_file_bytes": 20 * 500}


@pytest.fixture
def plan():
    """faults.install, always removed afterwards."""
    yield faults.install
    faults.install(None)


def _batch(i: int, n: int = 20, *, queues: int = 2, body: int = 200) -> MessageBatch:
    idx = range(i, i + n)
    return MessageBatch(
        topics="T",
        bodies=[f"m{k:08d}".encode() + b"x" * body for k in idx],
        queue_ids=[k % queues for k in idx],
        keys=[f"k{k}" for k in idx],
        tags="A",
    )


REOPEN = r"""
import json, sys
from mqstore.logging import configure_logging
configure_logging(level="error")
from mqstore import MessageBatch, MessageStore
store, expect = sys.argv[1], json.load(open(sys.argv[2]))
out = {}
with MessageStore(store) as s:
    out["clean"] = s.commitlog.recovery.clean_shutdown
    out["writable"] = s.writable
    out["missing"] = [off for off, prefix in expect if s.commitlog.read(off).body[:9] != prefix.encode()]
    s.wait_dispatched()
    queues = {}
    for t, q in s.consume_queues.keys():
        n, off = 0, 0
        while True:
            r = s.pull(t, q, off, max_count=1000)
            n += len(r.records)
            if r.next_offset >= r.max_offset:
                break
            off = r.next_offset
        queues[f"{t}:{q}"] = n
    out["queues"] = queues
    out["after"] = s.append(MessageBatch(topics="After", bodies=[b"after"])).status.name
print(json.dumps(out))
"""


def reopen_in_child(tmp_path: Path, store: Path, expect: list[tuple[int, str]]) -> dict:
    """Open the store in a fresh process, check the expected (offset, body prefix)
    records, pull every queue to its end, append once, close cleanly."""
    exp = tmp_path / "expect.json"
    exp.write_text(json.dumps(expect))
    proc = subprocess.run(
        [sys.executable, "-c", REOPEN, str(store), str(exp)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verify(store: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", "verify", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _append_acked(store, i: int, expect: list[tuple[int, str]], **kw) -> int:
    res = store.append(_batch(i, **kw))
    assert res.status.name == "PUT_OK"
    expect.extend((int(o), f"m{k:08d}") for k, o in zip(range(i, i + len(res.physical_offsets)), res.physical_offsets))
    return i + len(res.physical_offsets)


# ---------------------------------------------------------------------- EIO / EROFS on the commitlog


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
@pytest.mark.parametrize(("err", "cause"), [("EIO", "flush_failed"), ("EROFS", "read_only")])
def test_failed_sync_under_sync_flush_is_never_acknowledged(tmp_path: Path, plan, err: str, cause: str) -> None:
    store_dir = tmp_path / "store"
    expect: list[tuple[int, str]] = []
    s = MessageStore(store_dir, StoreConfig(flush_mode=FlushMode.SYNC, segment_bytes=256 << 10, **SMALL))
    try:
        i = 0
        for _ in range(5):
            i = _append_acked(s, i, expect)
        assert s.writable and s.unwritable_cause is None
        plan(f"commitlog.sync={err}x0")  # every msync of the commitlog fails from now on
        with capture_logs() as logs, pytest.raises(StoreNotWritableError, match="batch not durable") as info:
            s.append(_batch(i))
        assert info.value.cause == cause and err in str(info.value)
        assert faults.hits()["commitlog.sync"] == 1
        events = {e["event"]: e for e in logs}
        assert events["store_not_writable"]["cause"] == cause and events["sync_failed"]["errno"] == err

        # Every later write fails at once, naming the cause; the fsync is never tried again.
        t0 = time.monotonic()
        for _ in range(3):
            with pytest.raises(StoreNotWritableError) as again:
                s.append(_batch(10_000))
            assert again.value.cause == cause and "restart" in str(again.value)
        assert time.monotonic() - t0 < 1.0
        with pytest.raises(StoreNotWritableError):
            s.commitlog.flush()
        time.sleep(0.3)
        assert faults.hits()["commitlog.sync"] == 1
        assert not s.writable and s.unwritable_cause == cause
        st = s.commitlog.stats()
        assert not st.writable and st.unwritable_cause == cause and err in st.error

        # Reads keep working: pull, key query, msgId, queue offset.
        assert s.wait_dispatched(5)
        pulled = s.pull("T", 0, 0, max_count=1000).records + s.pull("T", 1, 0, max_count=1000).records
        assert len(pulled) == len(expect)  # only what was acknowledged is dispatched under sync flush
        assert [r.body[:9] for r in s.query_by_key("T", "k7")] == [b"m00000007"]
        assert s.read_msg_id(pulled[0].msg_id).body == pulled[0].body
        assert s.read_queue_offset("T", 1, 2).queue_offset == 2
    finally:
        s.close()  # never raises; leaves the abort marker
    assert (store_dir / "abort").exists()
    plan(None)

    got = reopen_in_child(tmp_path, store_dir, expect)
    assert got["missing"] == [] and got["clean"] is False and got["writable"] is True
    assert got["queues"]["T:0"] + got["queues"]["T:1"] >= len(expect)  # the unacked batch may be there too
    assert got["after"] == "PUT_OK"
    verify(store_dir)


def test_failed_periodic_flush_in_async_mode_flips_to_unwritable(tmp_path: Path, plan) -> None:
    store_dir = tmp_path / "store"
    cfg = StoreConfig(
        flush_mode=FlushMode.ASYNC, flush_interval_ms=50, flush_least_pages=0, segment_bytes=256 << 10, **SMALL
    )
    expect: list[tuple[int, str]] = []
    s = MessageStore(store_dir, cfg)
    try:
        i = _append_acked(s, 0, expect)
        s.commitlog.flush()
        plan("commitlog.sync=EIOx0")
        with capture_logs() as logs:
            i = _append_acked(s, i, expect)  # acknowledged from the page cache, as async flush does
            deadline = time.monotonic() + 5
            while s.writable and time.monotonic() < deadline:
                time.sleep(0.01)
        assert s.unwritable_cause == "flush_failed"
        assert any(e["event"] == "store_not_writable" and e["cause"] == "flush_failed" for e in logs)
        t0 = time.monotonic()
        with pytest.raises(StoreNotWritableError, match="restart") as info:
            s.append(_batch(i))
        assert info.value.cause == "flush_failed" and time.monotonic() - t0 < 1.0
        time.sleep(0.3)
        assert faults.hits()["commitlog.sync"] == 1  # the periodic flusher stopped: no retry
        assert s.wait_dispatched(5)
        assert len(s.pull("T", 0, 0, max_count=100).records) == 20  # both batches (async dispatches past flushed)
    finally:
        s.close()
    plan(None)
    got = reopen_in_child(tmp_path, store_dir, expect)  # the page cache still held the second batch
    assert got["missing"] == [] and got["clean"] is False and got["after"] == "PUT_OK"


# ---------------------------------------------------------------------- a full disk


def _wait_writable_again(s, make_batch, within_s: float = 10.0):
    """Append until one succeeds; returns how long that took and the result (fails
    after ``within_s``)."""
    t0 = time.monotonic()
    while True:
        try:
            res = s.append(make_batch())
            assert res.status.name == "PUT_OK"
            return time.monotonic() - t0, res
        except StoreNotWritableError as e:
            assert e.cause == "disk_full"
            assert time.monotonic() - t0 < within_s, "writes did not resume after space was freed"
            time.sleep(0.05)


def test_injected_enospc_at_segment_allocation(tmp_path: Path, plan) -> None:
    store_dir = tmp_path / "store"
    s = MessageStore(store_dir, StoreConfig(flush_mode=FlushMode.SYNC, segment_bytes=64 << 10, **SMALL))
    try:
        expect: list[tuple[int, str]] = []
        i = _append_acked(s, 0, expect)  # the first segment is made by the first append
        plan("segment.create=ENOSPCx0")
        with capture_logs() as logs, pytest.raises(StoreNotWritableError, match="disk full") as info:
            for _ in range(100):
                i = _append_acked(s, i, expect)
        assert info.value.cause == "disk_full" and expect
        assert any(e["event"] == "store_not_writable" and e["cause"] == "disk_full" for e in logs)
        assert s.unwritable_cause == "disk_full" and not s.writable
        tries = faults.hits()["segment.create"]
        t0 = time.monotonic()
        with pytest.raises(StoreNotWritableError, match="disk full.*resume once space is freed"):
            s.append(_batch(i))
        assert time.monotonic() - t0 < 0.5
        assert faults.hits()["segment.create"] == tries  # refused at once, no allocation tried
        assert s.wait_dispatched(5)
        assert len(s.pull("T", 0, 0, max_count=1000).records) == len(expect) // 2  # reads work

        plan(None)  # space is back
        with capture_logs() as logs:
            took, _ = _wait_writable_again(s, lambda: _batch(i))
        assert took < 10 and s.writable
        assert any(e["event"] == "store_writable_again" for e in logs)
        assert s.wait_dispatched(5)
        assert len(s.pull("T", 0, 0, max_count=1000).records) == len(expect) // 2 + 10
    finally:
        s.close()
    assert not (store_dir / "abort").exists()  # a full disk is not a failure: the close is clean


def _mount_tiny(mnt: Path, size: str) -> None:
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here (needs root)")


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A real 3 MiB tmpfs, so the disk really fills up."""
    mnt = tmp_path / "tiny"
    _mount_tiny(mnt, "3m")
    yield mnt
    if subprocess.run(["umount", str(mnt)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_real_full_disk_then_space_freed(tiny_disk: Path, tmp_path: Path) -> None:
    ballast = tiny_disk / "ballast"  # what an operator deletes to free space
    ballast.write_bytes(b"b" * (1 << 20))
    store_dir = tiny_disk / "store"
    expect: list[tuple[int, str]] = []
    s = MessageStore(store_dir, StoreConfig(flush_mode=FlushMode.SYNC, segment_bytes=256 << 10, **SMALL))
    try:
        i = 0
        with pytest.raises(StoreNotWritableError, match="disk full") as info:
            for _ in range(1000):
                i = _append_acked(s, i, expect, body=1000)
        assert info.value.cause == "disk_full" and s.unwritable_cause == "disk_full"
        assert len(expect) > 500
        with pytest.raises(StoreNotWritableError, match="disk full"):
            s.append(_batch(i, body=1000))
        assert s.wait_dispatched(5)
        assert len(s.pull("T", 1, 0, max_count=5000).records) == len(expect) // 2  # reads work
        assert s.query_by_key("T", "k3")[0].body[:9] == b"m00000003"

        ballast.unlink()
        took, res = _wait_writable_again(s, lambda: _batch(i, body=1000))
        assert took < 10 and s.writable
        expect.extend((int(o), f"m{k:08d}") for k, o in zip(range(i, i + 20), res.physical_offsets))
    finally:
        s.close()
    got = reopen_in_child(tmp_path, store_dir, expect)
    assert got["missing"] == [] and got["clean"] is True
    assert got["queues"]["T:0"] == sum(1 for _, p in expect if int(p[1:]) % 2 == 0)
    verify(store_dir)


@pytest.mark.parametrize("preallocate", [True, False], ids=["preallocated", "sparse"])
def test_real_full_disk_commitlog_alone(tmp_path: Path, preallocate: bool) -> None:
    """Sparse segments run out of space in the middle of a write, not at allocation:
    the batch fails whole, its bytes are undone, and the log continues after it."""
    mnt = tmp_path / "tiny"
    _mount_tiny(mnt, "1m")
    try:
        ballast = mnt / "ballast"
        ballast.write_bytes(b"b" * (256 << 10))
        cfg = StoreConfig(segment_bytes=(4 << 20) if not preallocate else (256 << 10), preallocate_segments=preallocate)
        with CommitLog(mnt / "store", cfg) as cl:
            n = 0
            with pytest.raises(StoreNotWritableError) as info:
                for k in range(1000):
                    res = cl.append(MessageBatch(topics="T", bodies=[b"z" * 1000] * 20, queue_ids=0))
                    n += 20
            assert info.value.cause == "disk_full" and n
            assert cl.read(int(res.physical_offsets[-1])).body == b"z" * 1000
            ballast.unlink()
            _wait_writable_again(cl, lambda: MessageBatch(topics="T", bodies=[b"y" * 1000] * 20, queue_ids=0))
        records = list(CommitLogReader(mnt / "store").records(check_crc=True))
        assert len(records) == n + 20 and [r.queue_offset for r in records] == list(range(n + 20))
        assert {r.body for r in records[-20:]} == {b"y" * 1000}
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


# ---------------------------------------------------------------------- derived files, checkpoint, config


@pytest.mark.parametrize("point", ["cq.sync", "syncfs", "checkpoint.write", "config.write", "index.sync", "dir.fsync"])
@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_eio_outside_the_commitlog_never_crashes_or_blocks_a_restart(tmp_path: Path, plan, point: str) -> None:
    store_dir = tmp_path / "store"
    queues = 70 if point == "syncfs" else 2  # more than 64 dirty queues are flushed with one syncfs
    cfg = StoreConfig(flush_mode=FlushMode.SYNC, segment_bytes=1 << 20, checkpoint_interval_ms=1, **SMALL)
    expect: list[tuple[int, str]] = []
    s = MessageStore(store_dir, cfg)
    try:
        i = _append_acked(s, 0, expect, n=70, queues=queues)  # creates the segment (its directory fsync must work)
        assert s.wait_dispatched(5)  # and the dispatcher the queue and index files
        plan(f"{point}=EIOx0")
        for _ in range(9):
            i = _append_acked(s, i, expect, n=70, queues=queues)
        s.commit_offset("G", "T", 0, 5)
        assert s.wait_dispatched(5)
        assert s.writable, f"EIO at {point} must not stop commitlog writes"
        assert len(s.pull("T", 0, 0, max_count=1000).records) == 700 // queues
    finally:
        with capture_logs() as logs:
            s.close()  # flushes every derived file: the injected EIO hits here at the latest
    assert faults.hits().get(point, 0) > 0, f"{point} was never reached"
    assert any(e["event"] == "sync_failed" and e["what"] == point for e in logs), [e["event"] for e in logs]
    assert (store_dir / "abort").exists()  # the next open checks and rebuilds the derived files
    plan(None)
    got = reopen_in_child(tmp_path, store_dir, expect)
    assert got["missing"] == [] and got["after"] == "PUT_OK"
    assert sum(v for k, v in got["queues"].items() if k.startswith("T:")) == len(expect)
    verify(store_dir)


# ---------------------------------------------------------------------- power cut after kill -9

WRITER = r"""
import json, sys
from mqstore.logging import configure_logging
from mqstore import FlushMode, MessageBatch, MessageStore, StoreConfig
from mqstore.bench.acklog import AckLog

configure_logging(level="error")
store, ack_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = StoreConfig(
    flush_mode=FlushMode(mode), segment_bytes=256 << 10, flush_interval_ms=100, flush_thorough_interval_ms=500,
    checkpoint_interval_ms=100, index_hash_slots=1000, index_max_entries=4000, consume_queue_file_bytes=20 * 500,
    flush_consume_queue_interval_ms=200,
)
acks = AckLog(ack_path)
i, n = 0, 20
for run in range(2):  # a first run closed cleanly (every file flushed), then one that is cut
    s = MessageStore(store, cfg)
    while run == 1 or i < 2000:
        idx = range(i, i + n)
        res = s.append(MessageBatch(
            topics=[f"T{k % 3}" for k in idx], bodies=[f"m{k:08d}".encode() + b"x" * 200 for k in idx],
            queue_ids=[(k // 3) % 2 for k in idx], keys=[f"k{k}" for k in idx], tags="A",
        ))
        assert res.status.name == "PUT_OK", res.status
        flushed = s.commitlog.flushed_offset  # what a flush covered by the time of the ack
        acks.write_lines([
            json.dumps({"i": k, "off": int(o), "end": int(o + z), "topic": f"T{k % 3}", "queue": (k // 3) % 2,
                        "qo": int(q), "flushed": flushed}) + "\n"
            for k, o, z, q in zip(idx, res.physical_offsets, res.sizes, res.queue_offsets)
        ])
        i += n
    s.close()
"""


def _count_acks(path: Path) -> int:
    try:
        return path.read_bytes().count(b'"i"')
    except FileNotFoundError:
        return 0


def _power_cut_writer(tmp_path: Path, mode: str, *, acks_wanted: int) -> tuple[Path, list[dict]]:
    store, image, ack_log = (
        tmp_path / "store",
        tmp_path / "image",
        tmp_path / "acks.log",
    )  # the ack log is outside the store
    env = dict(os.environ, **{faults.POWER_STORE_ENV: str(store), faults.POWER_IMAGE_ENV: str(image)})
    env.pop(faults.ENV, None)
    err = (tmp_path / "writer.stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), str(ack_log), mode], env=env, stderr=err, stdout=subprocess.DEVNULL
    )
    try:
        t0 = time.monotonic()
        while _count_acks(ack_log) < acks_wanted or time.monotonic() - t0 < 1.5:
            assert proc.poll() is None, (tmp_path / "writer.stderr").read_text()[-3000:]
            assert time.monotonic() - t0 < 60, f"only {_count_acks(ack_log)} acks in 60 s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()
    assert proc.returncode == -signal.SIGKILL
    faults.power_cut(store, image)
    raw = ack_log.read_bytes()
    assert raw.endswith(b"\n")
    return store, [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def _check_after_power_cut(tmp_path: Path, store: Path, acks: list[dict], *, durable_end: int) -> int:
    """Everything acknowledged below ``durable_end`` is there, whole and where it was
    acknowledged; the commitlog is a consistent prefix; the store opens (in a fresh
    process: recovery, re-dispatch), every queue holds exactly its records, and
    verify then finds no error. Returns how many acknowledged messages are missing."""
    assert (store / "abort").exists()
    records = list(CommitLogReader(store).records(check_crc=True))  # read-only: the cut state as it is
    counts: dict[tuple[str, int], int] = {}
    for r in records:  # a prefix: queue offsets 0, 1, 2, ... in every queue
        key = (r.topic, r.queue_id)
        assert r.queue_offset == counts.get(key, 0), (key, r.queue_offset)
        counts[key] = r.queue_offset + 1
    by_offset = {r.physical_offset: r for r in records}
    wrote = records[-1].physical_offset + records[-1].total_size if records else 0
    assert wrote >= durable_end, f"the valid log ends at {wrote}, but {durable_end} was flushed before acks"
    missing = 0
    for a in acks:
        if a["end"] > wrote:
            missing += 1
            assert a["end"] > durable_end, f"message {a['i']} was flushed before the cut and is lost"
            continue
        rec = by_offset[a["off"]]
        assert (rec.body[:9], rec.topic, rec.queue_id, rec.queue_offset) == (
            f"m{a['i']:08d}".encode(),
            a["topic"],
            a["queue"],
            a["qo"],
        ), a
    expect = [(a["off"], f"m{a['i']:08d}") for a in acks if a["end"] <= wrote]
    got = reopen_in_child(tmp_path, store, expect)
    assert got["missing"] == [] and got["after"] == "PUT_OK"
    assert {k: v for k, v in got["queues"].items() if k.startswith("T")} == {
        f"{t}:{q}": n for (t, q), n in counts.items()
    }
    verify(store)
    return missing


@pytest.mark.crash
def test_power_cut_under_sync_flush_loses_nothing_acknowledged(tmp_path: Path) -> None:
    store, acks = _power_cut_writer(tmp_path, "sync", acks_wanted=4000)
    assert len(acks) >= 4000
    missing = _check_after_power_cut(tmp_path, store, acks, durable_end=max(a["end"] for a in acks))
    assert missing == 0


@pytest.mark.crash
def test_power_cut_under_async_flush_loses_only_what_no_flush_covered(tmp_path: Path) -> None:
    store, acks = _power_cut_writer(tmp_path, "async", acks_wanted=6000)
    flushed = max(a["flushed"] for a in acks)  # the last flush the writer saw complete
    assert flushed > 0
    missing = _check_after_power_cut(tmp_path, store, acks, durable_end=flushed)
    assert missing < len(acks)  # bounded: only messages past the last flush


def test_consume_queue_keeps_buffered_units_when_its_file_cannot_be_made(tmp_path: Path, plan) -> None:
    """A full disk while a queue writes its buffered units out (a new file) loses no
    unit: they stay buffered and go out once a file can be made."""
    from mqstore.formats.consume_queue import encode_units
    from mqstore.store.consume_queue import ConsumeQueue

    with ConsumeQueue(tmp_path, "T", 0, file_bytes=20 * 10, preallocate=False) as cq:
        for k in range(8):
            cq.append_run(k, 1, 100 * k + 50, 100 * k + 50, encode_units([100 * k], [50], [0]))
        cq.write_behind()
        for k in range(8, 25):  # units 10.. need two new files
            cq.append_run(k, 1, 100 * k + 50, 100 * k + 50, encode_units([100 * k], [50], [0]))
        plan("cq.create=ENOSPCx0")
        with pytest.raises(StoreNotWritableError, match="disk full"):
            cq.write_behind()
        assert cq.buffered_bytes == 17 * 20
        plan(None)
        cq.write_behind()
        assert cq.read_units(0, 100)["commitlog_offset"].tolist() == [100 * k for k in range(25)]
