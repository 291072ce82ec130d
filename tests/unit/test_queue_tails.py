"""The open after a crash of a store whose summary of queue ends lists many queues
(mqstore/store/queue_tails.py, ConsumeQueues.load/recover past _CHECK_AT_OPEN_UP_TO):
the summary's rows are kept unread, the re-dispatch writes over what the
write-behind left past them, and only queues holding data where the re-dispatch
does not write (units of records lost with the commitlog's tail) are read and cut.

A crash here is made without a process: the store is closed after the queues went
on past an earlier summary, then that summary, its mtime and the durable offset
of its time are put back and the abort marker is made (what a kill -9 after the
write-behind leaves). The SIGKILL cases are in
tests/integration/test_many_topics_open.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from mqstore.bench.workload import Workload
from mqstore.formats.consume_queue import UNIT_DTYPE, decode_units
from mqstore.store import MessageBatch, StoreConfig, queue_tails
from mqstore.store import consume_queues as cqs_module
from mqstore.store import queue_ends as qe
from mqstore.store.derived_offset import DERIVED_OFFSET_FILE
from mqstore.store.json_files import CONFIG_DIR
from mqstore.store.known_queues import KnownQueues
from mqstore.store.lockfile import create_abort_marker
from mqstore.store.message_store import MessageStore

CFG = StoreConfig(
    segment_bytes=256 * 1024, consume_queue_file_bytes=20 * 50, index_hash_slots=512, index_max_entries=2048
)
TOPICS, QUEUES = 6, 4
FB = 1000  # the queue file size: 50 units


# ------------------------------------------------------------------ the probe of one queue


def queue_file(directory: Path, base: int, units: int, *, junk_at: int | None = None) -> None:
    """A sparse queue file at ``base`` with ``units`` units from its start."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{base:020d}", "wb") as f:
        f.truncate(FB)
        u = np.zeros(units, UNIT_DTYPE)
        u["commitlog_offset"] = np.arange(units) * 100
        u["size"] = 100
        f.write(u.tobytes())
        if junk_at is not None:
            f.seek(junk_at)
            f.write(b"\x01" * 20)


def test_probe_finds_data_where_the_redispatch_does_not_write(tmp_path: Path) -> None:
    d = tmp_path / "q"
    queue_file(d, 0, 10)
    assert queue_tails.probe(str(d), 10 * 20, FB, FB) == queue_tails.CLEAN
    assert queue_tails.probe(str(d), 7 * 20, FB, FB) == queue_tails.DIRTY  # units 7..9 past the stop, same page
    assert queue_tails.probe(str(d), 0, FB, FB) == queue_tails.DIRTY
    queue_file(d, 0, 10, junk_at=980)  # a later page... of a 1000-byte file: the same page
    assert queue_tails.probe(str(d), 10 * 20, FB, FB) == queue_tails.DIRTY
    big = tmp_path / "big"  # a file of several pages: data in a later page found by SEEK_DATA
    big.mkdir()
    with open(big / f"{0:020d}", "wb") as f:
        f.truncate(20 * 1000)
        f.write(b"\x01" * 200)
        f.seek(3 * 4096 + 40)
        f.write(b"\x01" * 20)
    assert queue_tails.probe(str(big), 200, 20 * 1000, 20 * 1000) == queue_tails.DIRTY
    assert queue_tails.probe(str(big), 4 * 4096, 20 * 1000, 20 * 1000) == queue_tails.CLEAN


def test_probe_of_the_file_after_the_listed_ones(tmp_path: Path) -> None:
    d = tmp_path / "q"
    queue_file(d, 0, 50)  # full: the stop is the next file's start
    assert queue_tails.probe(str(d), FB, FB, FB) == queue_tails.CLEAN  # no next file
    (d / f"{FB:020d}").touch()  # made, never sized (a crash inside the creation)
    assert queue_tails.probe(str(d), FB, FB, FB) == queue_tails.CLEAN
    queue_file(d, FB, 3)
    assert queue_tails.probe(str(d), FB, FB, FB) == queue_tails.DIRTY
    assert queue_tails.probe(str(d), FB + 60, FB, FB) == queue_tails.CLEAN


def test_probe_of_files_that_do_not_fit_the_row(tmp_path: Path) -> None:
    d = tmp_path / "q"
    d.mkdir()
    assert queue_tails.probe(str(d), 200, FB, FB) == queue_tails.UNFIT  # a listed file gone
    (d / f"{0:020d}").write_bytes(b"\x00" * 400)
    assert queue_tails.probe(str(d), 200, FB, FB) == queue_tails.UNFIT  # of another size


def test_stop_offsets_are_the_row_or_the_recovery_walks_end() -> None:
    rows = [("A", 0, 0, 1, 0, 10, 1000), ("A", 1, 0, 1, 0, 20, 2000), ("B", 0, 0, 1, 0, 5, 500)]
    known = KnownQueues(qe.build(rows, file_bytes=FB, progress_offset=2000, cleaned_min=0))
    known.keep(np.arange(3))
    expected = {("A", 0): 14, ("A", 1): 20, ("C", 0): 3}
    assert queue_tails.stop_offsets(known, known.live_rows(), expected).tolist() == [14, 20, 5]
    assert queue_tails.stop_offsets(known, np.array([2, 0]), expected).tolist() == [5, 14]


# ------------------------------------------------------------------ the open after a crash


def fill(store: MessageStore, start: int, messages: int) -> list[list]:
    """Append messages start..start+messages-1; their acks [topic, queue, queue offset, commitlog offset, key]."""
    w = Workload(body_size=64, topics=TOPICS, queues=QUEUES)
    acks = []
    for i in range(start, start + messages, 100):
        b = w.batch(i, 100)
        res = store.append(b)
        topics = b.topics if isinstance(b.topics, list) else [b.topics] * 100
        for j in range(100):
            acks.append([topics[j], int(b.queue_ids[j]), int(res.queue_offsets[j]), int(res.physical_offsets[j])])
    return acks


def crashed_after_summary(
    tmp_path: Path, first: int, more: int, *, boot: str | None = "another"
) -> tuple[Path, list[list], list[list]]:
    """A store as a crash leaves it ``more`` messages after a thorough flush at
    ``first`` messages, every unit of those written out behind (see the module
    docstring), with abort markers of ``boot`` (None: this one, a kill -9; else a
    machine crash, the boot the markers were made in). Returns it with the acks
    before and after the summary."""
    store = tmp_path / "s"
    with MessageStore(store, CFG) as s:
        before = fill(s, 0, first)
    summary = qe.path_of(store)
    saved, st = summary.read_bytes(), summary.stat()
    derived = store / CONFIG_DIR / DERIVED_OFFSET_FILE
    durable = derived.read_bytes()
    with MessageStore(store, CFG) as s:
        after = fill(s, first, more)
        s.append(MessageBatch(topics="LateTopic", bodies=[b"late"] * 10, queue_ids=0))  # a topic it does not list
    summary.write_bytes(saved)
    os.utime(summary, ns=(st.st_atime_ns, st.st_mtime_ns))
    derived.write_bytes(durable)
    for name in ("abort", "abort.consumequeue", "abort.index"):
        create_abort_marker(store, name)
        if boot is not None:
            (store / name).write_text(boot)
    return store, before, after


def full_read(store: Path, tmp_path: Path) -> dict:
    """The queues as an open that reads every queue makes them (a copy without the summary)."""
    copy = tmp_path / "full-read"
    shutil.copytree(store, copy)
    qe.path_of(copy).unlink()
    with MessageStore(copy, CFG) as s:
        assert s.consume_queues.summary_queues == 0
        assert s.wait_dispatched(30)
        return queues_of(s)


def queues_of(s: MessageStore) -> dict:
    out = {}
    for cq in s.consume_queues.all():
        units = cq.read_units(cq.min_offset, max(cq.max_offset - cq.min_offset, 1)).tolist()
        out[(cq.topic, cq.queue_id)] = (cq.min_offset, cq.max_offset, cq.max_physical_offset, units)
    return out


def units_on_disk(store: Path) -> dict[tuple[str, int], np.ndarray]:
    """Every queue's units as a reader of the files finds them (RocketMQ's rule: up to
    the first invalid unit)."""
    out = {}
    for qdir in sorted((store / "consumequeue").glob("*/*")):
        files = sorted(qdir.iterdir())
        units = [decode_units(f.read_bytes()) for f in files]
        valid = []
        for u in units:
            valid.append(u)
            if len(u) * 20 < FB:
                break
        out[(qdir.parent.name, int(qdir.name))] = np.concatenate(valid) if valid else np.zeros(0, UNIT_DTYPE)
    return out


def lazy(monkeypatch) -> None:
    """Make every summary 'big' (the rows kept unread)."""
    monkeypatch.setattr(cqs_module, "_CHECK_AT_OPEN_UP_TO", 0)


def served(s: MessageStore, acks: list[list]) -> None:
    for topic, qid, qo, phys in acks:
        units = s.consume_queues.find(topic, qid).read_units(qo, 1)
        assert len(units) == 1 and int(units[0]["commitlog_offset"]) == phys, (topic, qid, qo)


@pytest.mark.parametrize(
    ("first", "boot"),
    [(1200, None), (1100, "another")],
    ids=["kill-rows-end-a-file", "machine-crash-rows-end-inside-a-file"],
)
def test_crash_open_keeps_the_rows_and_the_redispatch_writes_over_their_tails(
    tmp_path: Path, monkeypatch, first: int, boot: str | None
) -> None:
    store, before, after = crashed_after_summary(tmp_path, first, 600, boot=boot)
    want = full_read(store, tmp_path)
    lazy(monkeypatch)
    opened, probed = [], []
    real = cqs_module.ConsumeQueues._open_from_files
    monkeypatch.setattr(
        cqs_module.ConsumeQueues, "_open_from_files", lambda self, *k: opened.append(k) or real(self, *k)
    )
    real_probe = queue_tails.probe_rows
    monkeypatch.setattr(queue_tails, "probe_rows", lambda *a: probed.extend(a[2].tolist()) or real_probe(*a))
    with MessageStore(store, CFG) as s:
        assert not s.commitlog.recovery.clean_shutdown
        assert s.consume_queues.summary_queues == TOPICS * QUEUES  # every listed queue kept unread
        assert s.consume_queues.probed_dirty == 0
        assert len(probed) == (0 if boot is None else TOPICS * QUEUES)  # a process's death: nothing to look for
        assert opened == [("LateTopic", 0)]  # only the queue the summary does not list
        assert s.wait_dispatched(30)
        assert queues_of(s) == want
        served(s, before + after)


def test_crash_open_cuts_units_of_records_lost_with_the_commitlogs_tail(tmp_path: Path, monkeypatch) -> None:
    """A power cut that kept queue pages the write-behind wrote but not the commitlog's
    last pages: units past the recovered end are cut, nothing below it is lost."""
    store, before, after = crashed_after_summary(tmp_path, 1100, 600, boot="another")
    cut = after[300][3]  # the commitlog is lost from message 1,400 on
    for seg in sorted((store / "commitlog").iterdir()):
        base = int(seg.name)
        if base + seg.stat().st_size > cut:
            with open(seg, "r+b") as f:
                f.seek(max(cut - base, 0))
                f.write(b"\0" * (seg.stat().st_size - max(cut - base, 0)))
    want = full_read(store, tmp_path)
    lazy(monkeypatch)
    with MessageStore(store, CFG) as s:
        assert s.commitlog.wrote_offset == cut
        assert s.consume_queues.summary_queues == TOPICS * QUEUES
        assert s.consume_queues.probed_dirty == TOPICS * QUEUES  # every queue had units past the cut
        assert s.wait_dispatched(30)
        assert queues_of(s) == want
        served(s, before + after[:300])
    for key, units in units_on_disk(store).items():  # no unit left pointing past the commitlog's end
        assert (units["commitlog_offset"].astype(np.int64) + units["size"] <= cut).all(), key


def test_abort_markers_hold_the_boot_they_were_made_in(tmp_path: Path) -> None:
    from mqstore.store.lockfile import boot_id, marker_boot

    create_abort_marker(tmp_path, "abort.x")
    assert marker_boot(tmp_path, "abort.x") == boot_id()
    (tmp_path / "abort.x").write_bytes(b"")  # RocketMQ's, or its content lost in a power cut: not known
    assert marker_boot(tmp_path, "abort.x") is None
    assert marker_boot(tmp_path, "abort.none") is None


def test_units_written_again_after_a_crash_dirty_no_page_where_the_file_holds_them(tmp_path: Path, monkeypatch) -> None:
    """ConsumeQueue._same_below: what the re-dispatch writes again over bytes the
    file holds is compared first; only bytes that differ are written."""
    from mqstore.formats.consume_queue import encode_units
    from mqstore.store.consume_queue import ConsumeQueue
    from mqstore.store.file_pool import PooledFile

    def units(first: int, n: int) -> bytes:
        phys = np.arange(first, first + n, dtype=np.int64) * 100
        return encode_units(phys, np.full(n, 100, np.int64), np.zeros(n, np.int64))

    cq = ConsumeQueue(tmp_path, "T", 0, file_bytes=FB, preallocate=False)
    cq.append_run(0, 30, 100, 3000, units(0, 30))
    cq.write_behind()
    cq.close()
    writes = []
    real = PooledFile.write
    monkeypatch.setattr(
        PooledFile, "write", lambda self, pos, data: writes.append((pos, len(data))) or real(self, pos, data)
    )
    for differ in (False, True):
        writes.clear()
        cq = ConsumeQueue(tmp_path, "T", 0, file_bytes=FB, preallocate=False, known=(0, 1, 0, 10, 1000))  # a row at 10
        cq._same_below = 25 * 20  # the file holds units 10..24 as the re-dispatch makes them
        data = bytearray(units(10, 20))
        if differ:  # unit 22 torn: the piece below _same_below is written
            data[12 * 20 : 12 * 20 + 8] = (2201).to_bytes(8, "big")
        cq.append_run(10, 20, 1100, 3000, bytes(data))
        cq.write_behind()
        assert writes == ([(10 * 20, 15 * 20)] if differ else []) + [(25 * 20, 5 * 20)]
        got = cq.read_units(0, 30)["commitlog_offset"].tolist()
        assert got == [100 * i for i in range(22)] + [2201 if differ else 2200] + [100 * i for i in range(23, 30)]
        cq.close()
