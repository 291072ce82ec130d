"""kill -9 at every named durability point of the store, in a real child process.

For each point the child (crash_workload.WORKLOAD: appends under sync flush with
the dispatcher running, consumers committing and persisting offsets, topic
updates, a rollover every ~60 batches, retention deleting the oldest segment)
runs with ``MQSTORE_FAULTS="<point>=kill@<n>"`` and dies by SIGKILL at the n-th
time it passes the point. The parent then reopens the store, waits for dispatch,
checks that every acknowledged message (and every message a consumer saw) is
served at its queue offset, closes the store, and requires ``verify`` to find no
error.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from mqstore.store.store_type import store_type_on_disk
from tests.integration.crash_workload import check_messages, open_store, run_child, verify_errors

POINTS = [  # (point, n-th hit that kills): an early hit, and one after rollovers and retention runs
    ("commitlog.written", 40),
    ("commitlog.written", 500),  # record in the page cache, not flushed, not acknowledged
    ("commitlog.flushed_before_checkpoint", 40),
    ("commitlog.flushed_before_checkpoint", 300),  # checkpoint lags
    ("checkpoint.write.tmp", 3),
    ("checkpoint.write.tmp", 15),  # new checkpoint under .tmp, not renamed
    ("cq.write", 3),
    ("cq.write", 40),  # a consume-queue pwrite cut inside a unit
    ("index.put", 40),
    ("index.put", 300),  # index entries and slots written, header not
    ("config.write.tmp", 4),
    ("config.write.tmp", 60),  # config JSON .tmp written, not renamed
    ("config.write.bak", 4),
    ("config.write.bak", 60),  # config JSON moved to .bak, .tmp not renamed yet
    ("segment.rollover", 1),
    ("segment.rollover", 4),  # BLANK written, the new segment empty
    ("retention.delete", 1),
    ("retention.delete", 3),  # a segment deleted, derived files not cleaned
]


# With the consume queues in one RocksDB (store_type defaultRocksDB): its own points
# and the store's points a queue write follows, at the hit after rollovers.
ROCKS_POINTS = [
    ("rocks.write", 3),
    ("rocks.write", 200),  # a chunk's units never written: the re-dispatch brings them
    ("rocks.offsets_written", 1),
    ("rocks.offsets_written", 3),  # offset entries in the memtable, nothing flushed
    ("rocks.units_flushed", 1),
    ("rocks.units_flushed", 3),  # units in SST files, their offset entries not
    ("commitlog.written", 500),
    ("commitlog.flushed_before_checkpoint", 300),
    ("checkpoint.write.tmp", 15),
    ("index.put", 300),
    ("segment.rollover", 4),
    ("retention.delete", 3),
]


@pytest.mark.crash
@pytest.mark.parametrize(("point", "nth"), POINTS, ids=[f"{p}@{n}" for p, n in POINTS])
def test_kill_at_point_then_reopen(tmp_path: Path, point: str, nth: int) -> None:
    _kill_at_point_then_reopen(tmp_path / "store", point, nth)


@pytest.mark.crash
@pytest.mark.parametrize(("point", "nth"), ROCKS_POINTS, ids=[f"{p}@{n}" for p, n in ROCKS_POINTS])
def test_kill_at_point_then_reopen_rocksdb(tmp_path: Path, point: str, nth: int) -> None:
    store = tmp_path / "store"
    _kill_at_point_then_reopen(store, point, nth, store_type="defaultRocksDB", thorough_flush_s=2)
    assert store_type_on_disk(store) == "defaultRocksDB"


def _kill_at_point_then_reopen(store: Path, point: str, nth: int, **opts) -> None:
    run = run_child(store, faults=f"{point}=kill@{nth}", **opts)
    assert run.returncode == -signal.SIGKILL, (
        f"the child did not die at {point} (status {run.returncode}):\n{run.stderr[-3000:]}"
    )
    assert run.acks, "the child acknowledged nothing before the kill"
    s = open_store(store)
    try:
        assert not s.commitlog.recovery.clean_shutdown
        assert s.wait_dispatched(30)
        assert check_messages(s, run.acks) > 0  # all but those retention deleted
        check_messages(s, run.seen, what="consumed")
        for p in s.consumer_progress("g1"):
            assert p.consumer_offset <= p.broker_offset, p
    finally:
        s.close()
    assert verify_errors(store) == []


def _chain_problems(path: Path, slots: int, max_entries: int) -> list[str]:
    import mmap

    from mqstore.store.verify.index import check_header_and_chains
    from mqstore.store.verify.report import Damage, Findings

    findings = Findings()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        check_header_and_chains(mm, path.name, slots, max_entries, findings, Damage())
    return [f"{f.kind}: {f.detail}" for f in findings.listed()]


def test_index_put_cut_short_in_a_new_file_is_rebuilt_whole(tmp_path: Path) -> None:
    """The hard case of "index.put": the first put into a file made after a full one
    dies after the slots and before the header. The file's header still says "no
    entries" and its end time is the full file's, which the checkpoint already
    covers, so an abnormal load keeps it; its slots point at entries the header does
    not count. Re-dispatching the same entries must leave chains putKey would build."""
    import numpy as np

    from mqstore.formats import index_key_hashes
    from mqstore.store import faults
    from mqstore.store.dispatch import IndexEntries
    from mqstore.store.index_service import IndexService

    slots, max_entries, t0 = 4, 5, 1_700_000_000_000

    def batch(msgs: list[int]) -> IndexEntries:
        return IndexEntries(
            index_key_hashes([f"T#k{i % 3}" for i in msgs]),
            np.array([100 * (i + 1) for i in msgs]),
            np.array([t0 + 1000 * i for i in msgs]),
        )

    svc = IndexService(tmp_path, hash_slots=slots, max_entries=max_entries)
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    svc.put(batch([0, 1, 2, 3]))  # exactly fills the first file
    full_ts = svc.index_msg_timestamp
    assert full_ts == t0 + 3000
    faults.install("index.put=EIO@1")
    try:
        with pytest.raises(OSError):
            svc.put(batch([4, 5, 6]))
    finally:
        faults.install(None)
    svc.close()
    svc = IndexService(tmp_path, hash_slots=slots, max_entries=max_entries)
    svc.load(clean_shutdown=False, index_msg_timestamp=full_ts)
    svc.put(batch([4, 5, 6]))  # the re-dispatch after the restart
    files = svc.files
    svc.close()
    for name in files:
        assert _chain_problems(tmp_path / "index" / name, slots, max_entries) == [], name
