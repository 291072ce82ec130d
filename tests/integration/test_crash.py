"""Crash tests: a real ``mqstore bench append`` process is killed with SIGKILL
mid-stream and the store it leaves behind is reopened and checked.

What these tests prove (each with a real child process, real segment files of
1 MiB so that rollover happens while writing, real fdatasync, and ``kill -9``):

* The ``--ack-log`` holds only whole lines after a kill -9: every non-blank line
  parses as JSON, and the file ends with a newline.
* Sync flush: every message the writer acknowledged survives, at the physical
  offset, topic, queue id, queue offset and msgId it was acknowledged with, and is
  intact (body CRC re-checked on the raw segment bytes, body, topic, queue, TAGS,
  KEYS and UNIQ_KEY re-derived from the deterministic workload). Reopening runs abnormal recovery
  (the abort file stays behind). After recovery the queue offsets continue from the
  recovered log (next offset == records of that queue in a full walk > the largest
  acknowledged one) and a new append lands right where recovery cut the log and
  survives a clean close/reopen.
* Async flush: the recovered commitlog is a clean prefix: records laid out
  back to back (a BLANK only where a segment ends), strictly increasing physical
  offsets, per-queue offsets exactly 0, 1, 2, ... with valid CRCs, ending exactly at
  the recovered write position, every record whole (properties included: the
  writer sets TOTALSIZE only after a record is copied, so a kill mid-copy leaves no
  torn record); acknowledged messages below it are all present.
* Three kill -9 / recover rounds on one store lose nothing acknowledged in any
  round, and each round's writer continues the physical and queue offsets.
* While a writer holds the store, a second process cannot open it
  (StoreLockedError) and the failed attempt does not disturb the writer; once the
  writer is killed the store opens (and recovers) normally.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from mqstore.bench.workload import Workload, topic_name
from mqstore.errors import StoreLockedError
from mqstore.formats import BLANK_MAGIC, MessageRecord, decode_record, offset_to_file_name
from mqstore.store import COMMITLOG_DIR, CommitLog, MessageBatch, PutStatus, StoreConfig
from mqstore.store.reader import CommitLogReader

pytestmark = [pytest.mark.crash, pytest.mark.timeout(120)]

SEGMENT = 1 << 20
TOPICS = 3
QUEUES = 4
BODY = 200
BATCH = 50
OVERALL_TIMEOUT_S = 30.0  # a writer that never acknowledges enough fails the test
ROLLOVER_ACKS = 2 * SEGMENT // BODY  # records take more than BODY bytes: these span a segment rollover
ACK_KEYS = {"msg_id", "physical_offset", "topic", "queue_id", "queue_offset"}

QueueKey = tuple[str, int]


@dataclass(frozen=True)
class Ack:
    msg_id: str
    physical_offset: int
    topic: str
    queue_id: int
    queue_offset: int


# ---------------------------------------------------------------------- the writer


def _writer_cmd(store: Path, ack_log: Path, flush: str, producers: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mqstore.cli.main",
        "bench",
        "append",
        "--store",
        str(store),
        "--messages",
        "100000000",
        "--body-size",
        str(BODY),
        "--topics",
        str(TOPICS),
        "--queues",
        str(QUEUES),
        "--flush",
        flush,
        "--producers",
        str(producers),
        "--batch",
        str(BATCH),
        "--segment-bytes",
        str(SEGMENT),
        "--ack-log",
        str(ack_log),
    ]


def _acked_so_far(ack_log: Path) -> int:
    """Acknowledged lines written so far (the file may still be growing)."""
    try:
        return ack_log.read_bytes().count(b'"msg_id"')
    except FileNotFoundError:
        return 0


class Writer:
    """One ``mqstore bench append`` child; always reaped, killed if still running."""

    def __init__(self, store: Path, ack_log: Path, *, flush: str, producers: int, logs: Path) -> None:
        self.store = store
        self.ack_log = ack_log
        self._out = (logs / f"{ack_log.name}.stdout").open("wb")
        self._err_path = logs / f"{ack_log.name}.stderr"
        self._err = self._err_path.open("wb")
        self.proc = subprocess.Popen(
            _writer_cmd(store, ack_log, flush, producers), stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL
        )
        self.started = time.monotonic()

    def stderr(self) -> str:
        self._err.flush()
        return self._err_path.read_text(errors="replace")[-4000:]

    def wait_for_acks(self, at_least: int, *, soft_seconds: float, floor: int = 1000) -> int:
        """Poll until ``at_least`` acked lines, or ``soft_seconds`` have passed with at
        least ``floor`` of them; fail after OVERALL_TIMEOUT_S or if the child exits."""
        while True:
            n = _acked_so_far(self.ack_log)
            elapsed = time.monotonic() - self.started
            if n >= at_least or (elapsed >= soft_seconds and n >= floor):
                return n
            if self.proc.poll() is not None:
                pytest.fail(
                    f"writer exited on its own (status {self.proc.returncode}) after {n} acks:\n{self.stderr()}"
                )
            if elapsed > OVERALL_TIMEOUT_S:
                pytest.fail(f"writer acknowledged only {n} messages in {elapsed:.1f} s:\n{self.stderr()}")
            time.sleep(0.02)

    def kill9(self) -> None:
        assert self.proc.poll() is None, f"writer was not running at the kill:\n{self.stderr()}"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == -signal.SIGKILL, f"writer ended with {self.proc.returncode}, not by SIGKILL"
        assert (self.store / "abort").exists(), "a killed writer must leave the abort marker behind"
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._out.close()
        self._err.close()


def _crash_writer(
    tmp_path: Path,
    store: Path,
    name: str,
    *,
    flush: str,
    producers: int,
    at_least: int = 20_000,
    soft_seconds: float = 3.0,
) -> list[Ack]:
    """Start a writer, let it acknowledge a while, kill -9 it, return its ack log."""
    ack_log = tmp_path / f"{name}.acks"
    w = Writer(store, ack_log, flush=flush, producers=producers, logs=tmp_path)
    try:
        w.wait_for_acks(at_least, soft_seconds=soft_seconds, floor=ROLLOVER_ACKS)  # (a loaded machine acks slowly)
        w.kill9()
    finally:
        w.close()
    acks = _read_ack_log(ack_log)
    assert len(acks) >= 1000, f"only {len(acks)} acks before the kill: the test proves too little"
    return acks


def _read_ack_log(path: Path) -> list[Ack]:
    """Parse the ack log; it must consist of whole lines only, even after kill -9."""
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), f"ack log ends with a torn line: {raw[-200:]!r}"
    acks: list[Ack] = []
    for n, line in enumerate(raw.decode("utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            pytest.fail(f"{path.name} line {n} is not JSON ({e}): {line[:300]!r}")
        assert set(obj) == ACK_KEYS, f"{path.name} line {n} has keys {sorted(obj)}"
        acks.append(Ack(obj["msg_id"], obj["physical_offset"], obj["topic"], obj["queue_id"], obj["queue_offset"]))
    assert len({a.physical_offset for a in acks}) == len(acks), "an offset was acknowledged twice"
    assert len({a.msg_id for a in acks}) == len(acks), "a msgId was acknowledged twice"
    assert len({(a.topic, a.queue_id, a.queue_offset) for a in acks}) == len(acks), (
        "a queue offset was acknowledged twice"
    )
    return acks


# ---------------------------------------------------------------------- checks


class RawSegments:
    """The segment files' bytes, read straight from disk (independent of CommitLog)."""

    def __init__(self, store: Path) -> None:
        self._dir = store / COMMITLOG_DIR
        self._cache: dict[int, bytes] = {}

    def segment(self, offset: int) -> tuple[int, bytes]:
        base = offset - offset % SEGMENT
        if base not in self._cache:
            self._cache[base] = (self._dir / offset_to_file_name(base)).read_bytes()
        return base, self._cache[base]

    def decode(self, offset: int) -> MessageRecord:
        """The record at ``offset``, with its body CRC checked."""
        base, buf = self.segment(offset)
        return decode_record(buf, offset - base, check_crc=True)

    def blank_at(self, offset: int) -> tuple[int, int]:
        base, buf = self.segment(offset)
        return struct.unpack_from(">ii", buf, offset - base)


_EXPECTED_TAIL = Workload(body_size=BODY, topics=TOPICS, queues=QUEUES).batch(0, 1).bodies[0][8:]


_WORKLOAD = Workload(body_size=BODY, topics=TOPICS, queues=QUEUES)


def _check_workload_record(rec: MessageRecord) -> int:
    """A bench record is whole: body, topic, queue id and properties all follow from
    the message index in its first 8 body bytes. Returns that index."""
    assert len(rec.body) == BODY, f"record at {rec.physical_offset}: body of {len(rec.body)} bytes"
    i = int.from_bytes(rec.body[:8], "big")
    where = f"record at {rec.physical_offset} (message {i})"
    assert rec.body[8:] == _EXPECTED_TAIL, f"{where}: body bytes differ from the workload"
    assert rec.topic == topic_name(i % TOPICS), where
    assert rec.queue_id == (i // TOPICS) % QUEUES, where
    assert rec.tags == f"Tag{i % 16}", f"{where}: {rec.properties}"
    assert rec.keys == _WORKLOAD.batch(i, 1).keys[0], f"{where}: {rec.properties}"
    assert rec.unique_key and len(rec.unique_key) == 32, f"{where}: {rec.properties}"
    return i


def _walk(store: Path) -> list[MessageRecord]:
    """Every record of the commitlog, CRC checked, as a read-only tool sees it."""
    return list(CommitLogReader(store).records(check_crc=True))


def _check_clean_prefix(walk: list[MessageRecord], cl: CommitLog, raw: RawSegments) -> dict[QueueKey, int]:
    """The walk is a gap-free prefix from the first segment to the recovered write
    position; returns the number of records per queue.

    Records lie back to back; where one does not, the previous segment must end with
    a BLANK covering exactly the gap. Queue offsets per queue run 0, 1, 2, ..."""
    assert walk, "the recovered commitlog holds no record at all"
    counts: dict[QueueKey, int] = defaultdict(int)
    pos, wrote = cl.min_offset, cl.wrote_offset
    for rec in walk:
        phys = rec.physical_offset
        if phys != pos:
            assert phys > pos and phys % SEGMENT == 0 and phys - pos >= 8 and phys - pos < SEGMENT, (
                f"gap or overlap in the walk: expected a record at {pos}, found one at {phys}"
            )
            assert raw.blank_at(pos) == (phys - pos, BLANK_MAGIC), f"no BLANK fills the segment end at {pos}"
        key = (rec.topic, rec.queue_id)
        assert rec.queue_offset == counts[key], (
            f"{key}: queue offset {rec.queue_offset} at {phys}, expected {counts[key]}"
        )
        counts[key] += 1
        pos = phys + rec.total_size
    if pos != wrote:
        # Legal only when the kill came after the BLANK ending a segment was written
        # and before any record of the next one: recovery then starts the new segment.
        assert wrote % SEGMENT == 0 and 8 <= wrote - pos < SEGMENT, f"walk ends at {pos}, write position is {wrote}"
        assert raw.blank_at(pos) == (wrote - pos, BLANK_MAGIC), f"no BLANK between the walk's end {pos} and {wrote}"
    return dict(counts)


def _check_acks_intact(cl: CommitLog, acks: list[Ack], walk_offsets: set[int], raw: RawSegments) -> None:
    """Every ack is readable through the store and from the raw bytes, and unchanged."""
    for a in acks:
        assert a.physical_offset in walk_offsets, f"acked offset {a.physical_offset} is not in the CRC-checked walk"
        rec = cl.read(a.physical_offset)
        got = (rec.msg_id, rec.physical_offset, rec.topic, rec.queue_id, rec.queue_offset)
        want = (a.msg_id, a.physical_offset, a.topic, a.queue_id, a.queue_offset)
        assert got == want, f"acked message differs after recovery: got {got}, acked {want}"
        on_disk = raw.decode(a.physical_offset)  # raises DecodeError on a CRC mismatch
        assert on_disk == rec
        _check_workload_record(rec)


def _reopen(store: Path) -> CommitLog:
    cl = CommitLog(store, StoreConfig(segment_bytes=SEGMENT))
    assert cl.recovery.clean_shutdown is False, "the abort marker of the killed writer was not seen"
    assert cl.wrote_offset == cl.recovery.wrote_offset
    return cl


def _segments_spanned(acks: list[Ack]) -> int:
    return len({a.physical_offset // SEGMENT for a in acks})


# ---------------------------------------------------------------------- tests


def test_sync_flush_kill9_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    store = tmp_path / "store"
    acks = _crash_writer(tmp_path, store, "sync", flush="sync", producers=4)
    assert _segments_spanned(acks) >= 2, "no segment rollover happened before the kill"

    cl = _reopen(store)
    try:
        raw = RawSegments(store)
        walk = _walk(store)
        for rec in walk:
            _check_workload_record(rec)
        counts = _check_clean_prefix(walk, cl, raw)
        _check_acks_intact(cl, acks, {r.physical_offset for r in walk}, raw)

        # Queue offsets continue after the recovered log, past everything acknowledged.
        max_acked: dict[QueueKey, int] = defaultdict(lambda: -1)
        for a in acks:
            max_acked[(a.topic, a.queue_id)] = max(max_acked[(a.topic, a.queue_id)], a.queue_offset)
        keys = [(topic_name(t), q) for t in range(TOPICS) for q in range(QUEUES)]
        assert set(counts) == set(keys) and set(max_acked) == set(keys)
        for key in keys:
            assert cl.queue_offset(*key) == counts[key], (
                f"{key}: next offset {cl.queue_offset(*key)} != {counts[key]} records"
            )
            assert cl.queue_offset(*key) > max_acked[key]

        # A new batch lands where recovery cut the log and takes the next offsets.
        wrote_before = cl.wrote_offset
        bodies = [f"after-crash-{t}-{q}".encode() for t, q in keys]
        res = cl.append(MessageBatch(topics=[t for t, _ in keys], bodies=bodies, queue_ids=[q for _, q in keys]))
        assert res.status is PutStatus.PUT_OK
        assert res.queue_offsets.tolist() == [counts[k] for k in keys]
        first = int(res.physical_offsets[0])
        assert first == wrote_before or (first % SEGMENT == 0 and first > wrote_before)
        for key, off, body in zip(keys, res.physical_offsets.tolist(), bodies):
            rec = cl.read(off)
            assert (rec.topic, rec.queue_id, rec.queue_offset, rec.body) == (*key, counts[key], body)
            assert cl.queue_offset(*key) == counts[key] + 1
        new = list(zip(res.physical_offsets.tolist(), res.msg_ids, bodies))
    finally:
        cl.close()

    # The new batch and every ack survive a clean close; this open is a normal one.
    with CommitLog(store, StoreConfig(segment_bytes=SEGMENT)) as cl2:
        assert cl2.recovery.clean_shutdown is True
        for off, msg_id, body in new:
            rec = cl2.read(off)
            assert (rec.msg_id, rec.body) == (msg_id, body)
        for a in acks[:: max(1, len(acks) // 500)]:
            assert cl2.read(a.physical_offset).msg_id == a.msg_id


def test_async_flush_kill9_recovers_a_clean_prefix(tmp_path: Path) -> None:
    store = tmp_path / "store"
    acks = _crash_writer(tmp_path, store, "async", flush="async", producers=1)
    assert _segments_spanned(acks) >= 2, "no segment rollover happened before the kill"

    cl = _reopen(store)
    try:
        raw = RawSegments(store)
        walk = _walk(store)
        offsets = [r.physical_offset for r in walk]
        assert all(a < b for a, b in zip(offsets, offsets[1:])), "physical offsets are not strictly increasing"
        for rec in walk:
            _check_workload_record(rec)
            raw.decode(rec.physical_offset)  # CRC again, on the raw bytes
        counts = _check_clean_prefix(walk, cl, raw)
        for key, n in counts.items():
            assert cl.queue_offset(*key) == n

        # A kill -9 keeps the page cache: acknowledged messages below the recovered
        # write position must all be there (the prefix itself is what async promises).
        below = [a for a in acks if a.physical_offset < cl.wrote_offset]
        assert below, "recovery kept none of the acknowledged messages"
        _check_acks_intact(cl, below, set(offsets), raw)
    finally:
        cl.close()


def test_repeated_kill9_and_recovery_lose_nothing_acknowledged(tmp_path: Path) -> None:
    store = tmp_path / "store"
    all_acks: list[Ack] = []
    prev_wrote = 0
    prev_next: dict[QueueKey, int] = {}
    for rnd, at_least in enumerate((12_000, 6_000, 16_000)):
        acks = _crash_writer(
            tmp_path, store, f"round{rnd}", flush="sync", producers=4, at_least=at_least, soft_seconds=2.0
        )
        # This round's writer continued after what the last recovery kept.
        assert min(a.physical_offset for a in acks) >= prev_wrote
        for a in acks:
            assert a.queue_offset >= prev_next.get((a.topic, a.queue_id), 0), f"round {rnd} reused a queue offset: {a}"
        all_acks.extend(acks)
        assert len({a.physical_offset for a in all_acks}) == len(all_acks), "two rounds acknowledged one offset"

        cl = _reopen(store)
        try:
            raw = RawSegments(store)
            walk = _walk(store)
            counts = _check_clean_prefix(walk, cl, raw)
            _check_acks_intact(cl, all_acks, {r.physical_offset for r in walk}, raw)
            for key, n in counts.items():
                assert cl.queue_offset(*key) == n
                assert n >= prev_next.get(key, 0)
            assert cl.wrote_offset >= prev_wrote
            prev_wrote = cl.wrote_offset
            prev_next = counts
        finally:
            cl.close()
    assert _segments_spanned(all_acks) >= 3


def test_second_process_cannot_open_a_running_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ack_log = tmp_path / "lock.acks"
    w = Writer(store, ack_log, flush="sync", producers=2, logs=tmp_path)
    try:
        w.wait_for_acks(2_000, soft_seconds=3.0, floor=1)
        with pytest.raises(StoreLockedError):
            CommitLog(store, StoreConfig(segment_bytes=SEGMENT))
        # The refused open changed nothing: the writer keeps acknowledging.
        before = _acked_so_far(ack_log)
        deadline = time.monotonic() + 10
        while _acked_so_far(ack_log) <= before + 500:
            assert w.proc.poll() is None, f"writer died after the refused open:\n{w.stderr()}"
            assert time.monotonic() < deadline, "writer stopped acknowledging after the refused open"
            time.sleep(0.02)
        # A read-only reader needs no lock and sees records of the running store.
        first = next(iter(CommitLogReader(store).records()))
        assert first.physical_offset == 0
        w.kill9()
    finally:
        w.close()

    acks = _read_ack_log(ack_log)
    cl = _reopen(store)  # the lock died with the writer
    try:
        raw = RawSegments(store)
        walk = _walk(store)
        _check_clean_prefix(walk, cl, raw)
        _check_acks_intact(cl, acks, {r.physical_offset for r in walk}, raw)
    finally:
        cl.close()
    with CommitLog(store, StoreConfig(segment_bytes=SEGMENT)) as again:
        assert again.recovery.clean_shutdown is True
