"""The summary of queue ends (config/queueEnds.bin): its format, its use by the open
after a clean close, and every way it can be wrong without costing a unit: corrupt,
stale, disagreeing with a queue changed after it. Crashes with a summary are in
tests/integration/test_queue_ends_crash.py."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.bench.workload import Workload
from mqstore.formats.consume_queue import decode_units
from mqstore.store import CommitLog, MessageBatch, StoreConfig
from mqstore.store import queue_ends as qe
from mqstore.store.consume_queue import ConsumeQueue
from mqstore.store.consume_queues import ConsumeQueues
from mqstore.store.dispatch import ReputLoop
from mqstore.store.message_store import MessageStore
from mqstore.store.repair import repair_store
from mqstore.store.verify import verify_store
from mqstore.store.verify.report import Severity

CFG = StoreConfig(
    segment_bytes=256 * 1024, consume_queue_file_bytes=20 * 50, index_hash_slots=512, index_max_entries=2048
)
TOPICS, QUEUES = 6, 4


def fill(store: MessageStore, messages: int = 1200, start: int = 0, topics: int = TOPICS) -> None:
    w = Workload(body_size=64, topics=topics, queues=QUEUES)
    for i in range(start, start + messages, 200):
        store.append(w.batch(i, 200))


def ends_of(s: MessageStore) -> dict[tuple[str, int], tuple[int, int, int, list]]:
    """Per queue: min offset, max offset, max physical offset and its units."""
    out = {}
    for cq in s.consume_queues.all():
        units = cq.read_units(cq.min_offset, max(cq.max_offset - cq.min_offset, 1)).tolist()
        out[(cq.topic, cq.queue_id)] = (cq.min_offset, cq.max_offset, cq.max_physical_offset, units)
    return out


def full_read(store_dir: Path, tmp_path: Path) -> dict:
    """The queues as an open without the summary makes them (a copy of the store)."""
    copy = tmp_path / "full-read"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store_dir, copy)
    qe.path_of(copy).unlink(missing_ok=True)
    with MessageStore(copy, CFG) as s:
        assert s.consume_queues.summary_queues == 0
        return ends_of(s)


def closed_store(tmp_path: Path) -> Path:
    store = tmp_path / "s"
    with MessageStore(store, CFG) as s:
        fill(s)
    assert qe.path_of(store).exists()
    return store


# ------------------------------------------------------------------ the file


def sample() -> qe.QueueEnds:
    rows = [
        ("TopicB", 3, 0, 1, 0, 7, 4096),
        ("TopicA", 0, 2000, 3, 120, 240, 99_000),
        ("%RETRY%g1", 65535, 0, 1, 0, 0, -1),
        ("TopicA", 1, 0, 1, 4, 50, 777),
    ]
    return qe.build(rows, file_bytes=1000, progress_offset=123_456, cleaned_min=4096)


def test_round_trip(tmp_path: Path) -> None:
    ends = sample()
    back = qe.decode(qe.encode(ends))
    assert back.topics == ["%RETRY%g1", "TopicA", "TopicB"]
    assert back.keys() == [("%RETRY%g1", 65535), ("TopicA", 0), ("TopicA", 1), ("TopicB", 3)]
    assert (back.file_bytes, back.progress_offset, back.cleaned_min) == (1000, 123_456, 4096)
    assert back.rows.tobytes() == ends.rows.tobytes()
    assert back.rows[1].tolist()[3:] == (2000, 3, 120, 240, 99_000)
    (tmp_path / "config").mkdir()
    qe.write(tmp_path, ends)
    read = qe.read(tmp_path)
    assert read.rows.tobytes() == ends.rows.tobytes() and read.mtime_ns == qe.path_of(tmp_path).stat().st_mtime_ns
    assert not qe.path_of(tmp_path).with_name(qe.QUEUE_ENDS_FILE + ".tmp").exists()
    assert qe.decode(qe.encode(qe.build([], file_bytes=20, progress_offset=0, cleaned_min=0))).keys() == []


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: d[: len(d) // 2], id="truncated"),
        pytest.param(lambda d: d[:-1], id="last-byte-gone"),
        pytest.param(lambda d: d[:10], id="shorter-than-a-header"),
        pytest.param(lambda d: b"", id="empty"),
        pytest.param(lambda d: os.urandom(len(d)), id="garbage"),
        pytest.param(lambda d: _flip(d, 100), id="bit-flip"),
        pytest.param(lambda d: b"MQQX" + d[4:], id="magic"),
        pytest.param(lambda d: d[:4] + (2).to_bytes(4, "little") + d[8:], id="version-2"),
    ],
)
def test_damaged_files_do_not_decode(damage) -> None:
    with pytest.raises(qe.QueueEndsError):
        qe.decode(damage(qe.encode(sample())))


def test_rows_out_of_range_or_order_do_not_decode() -> None:
    base = sample()
    for field, value in (("max_offset", 51), ("min_offset", 400), ("files", 0), ("first_file", 500), ("topic", 9)):
        bad = qe.QueueEnds(base.file_bytes, 1, 0, list(base.topics), base.rows.copy())
        bad.rows[1][field] = value
        with pytest.raises(qe.QueueEndsError):
            qe.decode(qe.encode(bad))
    swapped = qe.QueueEnds(base.file_bytes, 1, 0, list(base.topics), base.rows[::-1].copy())
    with pytest.raises(qe.QueueEndsError, match="sorted"):
        qe.decode(qe.encode(swapped))


# ------------------------------------------------------------------ the open


def test_clean_reopen_takes_every_queue_from_the_summary(tmp_path: Path) -> None:
    store = closed_store(tmp_path)
    want = full_read(store, tmp_path)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == TOPICS * QUEUES
        assert s.consume_queues.pool.opened == 0  # not one queue file opened by the open
        assert s.consume_queues.ends() == {k: v[1] for k, v in want.items()}
        assert s.status()["queues"] == TOPICS * QUEUES
        assert ends_of(s) == want
        fill(s, 400, start=1200)  # queues opened from their rows go on as usual
        assert s.wait_dispatched()
    after = full_read(store, tmp_path)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == TOPICS * QUEUES
        assert ends_of(s) == after
    assert sum(v[1] - v[0] for v in after.values()) == 1600


def test_thorough_flush_writes_the_summary(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        s.flush_derived()
        ends = qe.read(tmp_path)
        assert ends.progress_offset == s.commitlog.wrote_offset
        assert ends.cleaned_min == s.commitlog.min_offset
        rows = dict(zip(ends.keys(), ends.rows.tolist()))
        for cq in s.consume_queues.all():
            row = rows[(cq.topic, cq.queue_id)]
            want = (int(cq.files[0]), len(cq.files), cq.min_offset, cq.max_offset, cq.max_physical_offset)
            assert tuple(row[3:]) == want


def test_flushes_from_two_threads_write_the_summary_one_at_a_time(tmp_path: Path) -> None:
    """A caller's flush_derived (bench's settle, a test) next to the builder's own
    thorough flush: each writes queueEnds.bin.tmp and renames it, so unserialised one
    rename found the other's file gone, and an older summary could land last."""
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        errors: list[BaseException] = []

        def flushes() -> None:
            try:
                for _ in range(15):
                    s.flush_derived()
            except BaseException as e:  # noqa: BLE001 - reported by the assert below
                errors.append(e)

        threads = [threading.Thread(target=flushes) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert qe.read(tmp_path).progress_offset == s.commitlog.wrote_offset


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: d[: len(d) - 7], id="truncated"),
        pytest.param(lambda d: os.urandom(len(d)), id="garbage"),
        pytest.param(lambda d: d[:4] + (9).to_bytes(4, "little") + d[8:], id="wrong-version"),
    ],
)
def test_corrupt_summary_falls_back_to_reading_every_queue(tmp_path: Path, damage) -> None:
    store = closed_store(tmp_path)
    want = full_read(store, tmp_path)
    path = qe.path_of(store)
    path.write_bytes(damage(path.read_bytes()))
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == 0
        assert ends_of(s) == want
    assert len(qe.read(store)) == TOPICS * QUEUES  # written anew at the close


def test_summary_older_than_the_commitlog_is_not_trusted(tmp_path: Path) -> None:
    """A clean close whose summary is not the last one (a copy put back, another
    program writing the store): the commitlog ends past what it was written at."""
    store = closed_store(tmp_path)
    old = qe.path_of(store).read_bytes()
    with MessageStore(store, CFG) as s:
        fill(s, 600, start=1200, topics=TOPICS + 2)  # more units, and new queues
    qe.path_of(store).write_bytes(old)
    want = full_read(store, tmp_path)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == 0
        assert ends_of(s) == want
    assert len(want) == (TOPICS + 2) * QUEUES


def test_summary_of_other_queue_corrections_is_not_used(tmp_path: Path) -> None:
    """Queues corrected against another commitlog min offset (retention since)."""
    store = closed_store(tmp_path)
    ends = qe.read(store)
    ends.cleaned_min += 1
    qe.write(store, ends)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == 0


def test_queue_changed_after_the_summary_is_read_from_its_files(tmp_path: Path) -> None:
    store = closed_store(tmp_path)
    time.sleep(0.01)  # a later mtime
    qdir = store / "consumequeue" / "BenchTopic1" / "2"
    last = sorted(qdir.iterdir())[-1]
    data = bytearray(last.read_bytes())
    units = len(decode_units(bytes(data)))
    data[(units - 3) * 20 :] = bytes(len(data) - (units - 3) * 20)  # its last 3 units gone
    last.write_bytes(bytes(data))
    want = full_read(store, tmp_path)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == TOPICS * QUEUES - 1
        assert ends_of(s) == want
        cq = s.consume_queues.find("BenchTopic1", 2)
        assert cq.max_offset == sum(1 for i in range(1200) if i % TOPICS == 1 and (i // TOPICS) % QUEUES == 2)


def test_queue_directory_gone_after_the_summary_is_rebuilt(tmp_path: Path) -> None:
    store = closed_store(tmp_path)
    want = full_read(store, tmp_path)
    shutil.rmtree(store / "consumequeue" / "BenchTopic4" / "1")
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == TOPICS * QUEUES - 1
        assert s.wait_dispatched()
        assert ends_of(s) == want  # rebuilt from the commitlog


def test_queue_directory_not_in_the_summary_is_read(tmp_path: Path) -> None:
    store = closed_store(tmp_path)
    ends = qe.read(store)
    keep = np.array([k != ("BenchTopic3", 0) for k in ends.keys()])
    ends.rows = ends.rows[keep]
    qe.write(store, ends)
    want = full_read(store, tmp_path)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == TOPICS * QUEUES - 1
        assert ends_of(s) == want


# ------------------------------------------------------------------ verify and repair


def test_verify_flags_a_summary_the_store_would_trust_wrongly_and_repair_moves_it(tmp_path: Path) -> None:
    store = closed_store(tmp_path)
    assert verify_store(store).ok
    ends = qe.read(store)
    ends.rows[0]["max_offset"] -= 1
    qe.write(store, ends)  # newer than every queue file: the open would take it as it is
    report = verify_store(store)
    kinds = {f.kind: f.severity for f in report.findings}
    assert kinds.get("queue_ends_mismatch") is Severity.ERROR
    result = repair_store(store)
    assert result.ok, [f.detail for f in result.after.findings]
    assert any("queueEnds.bin" in d for d in result.done)
    assert verify_store(store).ok


def test_verify_warns_about_an_unreadable_summary(tmp_path: Path) -> None:
    store = closed_store(tmp_path)
    qe.path_of(store).write_bytes(b"not a summary")
    report = verify_store(store)
    assert report.ok
    assert [f.severity for f in report.findings if f.kind == "queue_ends_unreadable"] == [Severity.WARNING]


# ------------------------------------------------------------------ re-dispatch


def test_redispatch_skips_built_units_in_bulk(tmp_path: Path, monkeypatch) -> None:
    """Records whose units the queues hold (a re-dispatch after a restart) never go
    through put_units' per-unit rules: one comparison per chunk."""
    cl = CommitLog(tmp_path, StoreConfig(segment_bytes=8 << 20))
    w = Workload(body_size=32, topics=50, queues=4)
    for start in range(0, 2000, 500):
        cl.append(w.batch(start, 500))
    cqs = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    cqs.load()
    ReputLoop(cl, [cqs], dispatched_offset=0).catch_up()
    cqs.flush()
    before = {(cq.topic, cq.queue_id): cq.read_units(0, 100).tobytes() for cq in cqs.all()}
    cqs.close()
    cqs = ConsumeQueues(tmp_path, file_bytes=20 * 100, max_open_files=8)
    cqs.load()

    def refuse(*a, **k):
        raise AssertionError("put_units called for a re-dispatch")

    monkeypatch.setattr(ConsumeQueue, "put_units", refuse)
    ReputLoop(cl, [cqs], dispatched_offset=0).catch_up()
    assert {(cq.topic, cq.queue_id): cq.read_units(0, 100).tobytes() for cq in cqs.all()} == before
    assert cqs.last_dispatched_timestamp > 0
    monkeypatch.undo()
    cl.append(MessageBatch(topics="BenchTopic0", bodies=[b"x"], queue_ids=0))
    ReputLoop(cl, [cqs], dispatched_offset=0).catch_up()  # and what follows is dispatched as usual
    assert cqs.find("BenchTopic0", 0).max_offset == 11
    cqs.close()
    cl.close()
