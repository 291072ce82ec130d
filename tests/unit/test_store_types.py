"""The consume-queue behaviour the store relies on, for both store types (RocketMQ
storeType): "default" (a file per queue, consume_queues.py) and "defaultRocksDB"
(one RocksDB, rocks_queues.py). Same workloads, same answers."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.errors import CorruptFileError, OffsetError, StoreTypeError
from mqstore.formats.javahash import tags_code
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.read_view import ReadView
from mqstore.store.reads import PullStatus
from mqstore.store.retention import Retention, RetentionConfig
from mqstore.store.store_type import store_type_on_disk
from mqstore.store.verify import verify_store

HOUR_MS = 3_600_000


@pytest.fixture(params=["default", "defaultRocksDB"])
def cfg(request) -> StoreConfig:
    return StoreConfig(
        segment_bytes=64 * 1024,
        consume_queue_file_bytes=20 * 50,
        index_hash_slots=512,
        index_max_entries=4096,
        store_type=request.param,
    )


def fill(store: MessageStore, batches: int = 20) -> None:
    for i in range(batches):
        store.append(
            MessageBatch.of(
                [
                    Message(f"T{j % 3}", os.urandom(100 + j), queue_id=j % 4, tags=f"Tag{j % 5}", keys=[f"k{i}-{j}"])
                    for j in range(25)
                ]
            )
        )


def contents(store_dir: Path, cfg: StoreConfig) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    with MessageStore(store_dir, cfg, background_dispatch=False) as s:
        out = {}
        for cq in s.consume_queues.all():
            units = cq.read_units(cq.min_offset, max(1, cq.max_offset - cq.min_offset))
            out[(cq.topic, cq.queue_id)] = [(int(u[0]), int(u[1]), int(u[2])) for u in units]
        return out


def test_units_point_at_their_records_after_a_reopen(tmp_path: Path, cfg: StoreConfig) -> None:
    with MessageStore(tmp_path, cfg) as s:
        fill(s)
    assert store_type_on_disk(tmp_path) == cfg.store_type
    got = contents(tmp_path, cfg)
    assert len(got) == 12 and sum(map(len, got.values())) == 20 * 25
    with MessageStore(tmp_path, cfg) as s:
        for (topic, qid), units in got.items():
            for qo, (phys, size, tcode) in enumerate(units):
                rec = s.commitlog.read(phys)
                assert (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size) == (topic, qid, qo, size)
                assert tcode == tags_code(rec.tags)
        res = s.append(MessageBatch(topics="T1", bodies=[b"next"], queue_ids=1))  # offsets go on from the queues
        assert res.queue_offsets.tolist() == [len(got[("T1", 1)])]


def test_dispatch_equals_a_rebuild_from_scratch(tmp_path: Path, cfg: StoreConfig) -> None:
    with MessageStore(tmp_path / "a", cfg) as s:
        fill(s)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "consumequeue")
    assert contents(tmp_path / "b", cfg) == contents(tmp_path / "a", cfg)


def test_the_other_type_is_refused_and_none_opens_the_stores_own(tmp_path: Path, cfg: StoreConfig) -> None:
    with MessageStore(tmp_path, cfg) as s:
        fill(s, 2)
    other = "default" if cfg.store_type == "defaultRocksDB" else "defaultRocksDB"
    with pytest.raises(StoreTypeError, match="--store-type"):
        MessageStore(tmp_path, dataclasses.replace(cfg, store_type=other))
    with MessageStore(tmp_path, dataclasses.replace(cfg, store_type=None)) as s:  # the store's own type
        assert s.config.store_type == cfg.store_type
        assert s.pull("T0", 0, 0, max_count=100).max_offset == 6  # j % 12 == 0: 3 a batch


def test_queues_past_a_cut_commitlog_are_truncated(tmp_path: Path, cfg: StoreConfig) -> None:
    with MessageStore(tmp_path, cfg) as s:
        fill(s, 40)
        assert s.wait_dispatched()
        s.flush_derived()  # the queues durable past the cut
        cut_at = int(s.read_queue_offset("T0", 0, 30).physical_offset)
    seg = tmp_path / "commitlog" / f"{cut_at - cut_at % cfg.segment_bytes:020d}"
    with open(seg, "r+b") as f:
        f.seek(cut_at % cfg.segment_bytes + 4)
        f.write(b"\0\0\0\0")  # break the magic: the commitlog ends here now
    (tmp_path / "abort").touch()
    with MessageStore(tmp_path, cfg) as s:
        assert s.commitlog.wrote_offset == cut_at
        cq = s.consume_queues.find("T0", 0)
        assert cq.max_offset == 30
        assert int(cq.read_units(0, 100)["commitlog_offset"].max()) < cut_at
        assert s.append(MessageBatch(topics="T0", bodies=[b"new"], queue_ids=0)).queue_offsets.tolist() == [30]
    with MessageStore(tmp_path, cfg) as s:
        assert s.read_queue_offset("T0", 0, 30).body == b"new"
    assert verify_store(tmp_path).ok


class StepClock:
    """Store time set by the test (one second per step below)."""

    now = 1_700_000_000_000

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


def test_pull_tags_offset_at_time_and_topic_status(tmp_path: Path, cfg: StoreConfig) -> None:
    clock = StepClock()
    with MessageStore(tmp_path, cfg, clock=clock) as s:
        for i in range(10):
            clock.now = 1_700_000_000_000 + i * 1000
            s.append(MessageBatch(topics="T", bodies=[b"m"] * 3, queue_ids=0, tags=f"Tag{i % 2}"))
        assert s.wait_dispatched()
        assert [s.offset_at_time("T", 0, 1_700_000_000_000 + d) for d in (0, 4000, 4500, 10**8)] == [0, 12, 15, 30]
        got = s.pull("T", 0, 0, max_count=1000)
        assert [r.queue_offset for r in got.records] == list(range(30)) and got.max_offset == 30
        tagged = s.pull("T", 0, 0, max_count=1000, tags={"Tag1"})
        assert [r.queue_offset for r in tagged.records] == [o for o in range(30) if (o // 3) % 2]
        assert s.pull("T", 0, 30).status is PullStatus.NO_NEW_MESSAGE
        assert s.pull("Nope", 0, 0).status is PullStatus.NO_MESSAGE_IN_QUEUE
        (st,) = s.topic_status("T")
        assert (st.queue_id, st.min_offset, st.max_offset, st.last_store_timestamp) == (0, 0, 30, clock.now)
        s.update_topic("Made", read_queue_nums=2, write_queue_nums=2)  # queues made ahead, empty
        assert [(q.queue_id, q.max_offset) for q in s.topic_status("Made")] == [(0, 0), (1, 0)]
        assert s.pull("Made", 1, 0).status is PullStatus.NO_MESSAGE_IN_QUEUE
    with MessageStore(tmp_path, cfg) as s:
        assert [(q.queue_id, q.max_offset) for q in s.topic_status("Made")] == [(0, 0), (1, 0)]
        assert s.append(MessageBatch(topics="Made", bodies=[b"x"], queue_ids=1)).queue_offsets.tolist() == [0]
        assert s.wait_dispatched() and s.pull("Made", 1, 0).records[0].body == b"x"
    with ReadView(tmp_path) as v:  # the query commands' view reads the store's type from disk
        assert v.pull("T", 0, 28, max_count=5).next_offset == 30
        assert v.offset_at_time("T", 0, 1_700_000_004_000) == 12


def _age_and_clean(s: MessageStore, store_dir: Path, segments: int) -> int:
    now = time.time_ns() // 1_000_000
    names = sorted(p.name for p in (store_dir / "commitlog").iterdir())
    t = int((now - 100 * HOUR_MS) * 1_000_000)
    for name in names[:segments]:
        os.utime(store_dir / "commitlog" / name, ns=(t, t))
    Retention(
        s.commitlog,
        s.consume_queues,
        dispatched_offset=lambda: s.dispatcher.dispatched_offset,
        config=RetentionConfig(delete_when=str(time.localtime(now / 1000).tm_hour)),
        disk_usage=lambda: 0.1,
        consumer_offsets=s.consumer_offsets,
    ).run_once(now)
    return int(names[segments])


@pytest.mark.parametrize("abnormal", [False, True])
def test_retention_moves_min_offsets_and_pulls_start_there(tmp_path: Path, cfg: StoreConfig, abnormal: bool) -> None:
    with MessageStore(tmp_path, cfg) as s:
        for _ in range(20):
            s.append(
                MessageBatch(topics="T", bodies=[os.urandom(1000) for _ in range(25)], queue_ids=np.arange(25) % 4)
            )
        assert s.wait_dispatched()
        cl_min = _age_and_clean(s, tmp_path, 5)
        assert s.commitlog.min_offset == cl_min
        ends = {}
        for q in range(4):
            cq = s.consume_queues.find("T", q)
            assert cq.min_offset > 0
            (first,) = cq.read_units(cq.min_offset, 1)
            assert int(first["commitlog_offset"]) >= cl_min
            with pytest.raises(OffsetError):
                cq.read_units(cq.min_offset - 1, 1)
            below = s.pull("T", q, 0, max_count=5)
            assert (below.status, below.next_offset) == (PullStatus.OFFSET_TOO_SMALL, cq.min_offset)
            ends[q] = (cq.min_offset, cq.max_offset)
    if abnormal:
        (tmp_path / "abort").touch()
    with MessageStore(tmp_path, cfg) as s:
        for q in range(4):
            cq = s.consume_queues.find("T", q)
            assert (cq.min_offset, cq.max_offset) == ends[q]
            assert s.pull("T", q, ends[q][0], max_count=1).records[0].queue_offset == ends[q][0]
    assert verify_store(tmp_path).ok


def test_the_type_stays_when_the_queues_are_gone(tmp_path: Path, cfg: StoreConfig) -> None:
    with MessageStore(tmp_path, cfg) as s:
        fill(s, 2)
    shutil.rmtree(tmp_path / "consumequeue")  # config/mqstore.json still says what the store is
    assert store_type_on_disk(tmp_path) == cfg.store_type
    other = "default" if cfg.store_type == "defaultRocksDB" else "defaultRocksDB"
    with pytest.raises(StoreTypeError):
        MessageStore(tmp_path, dataclasses.replace(cfg, store_type=other))
    with MessageStore(tmp_path, dataclasses.replace(cfg, store_type=None)) as s:
        assert s.config.store_type == cfg.store_type and s.pull("T0", 0, 0).max_offset == 6


ROCKS = StoreConfig(segment_bytes=64 * 1024, index_hash_slots=512, index_max_entries=4096, store_type="defaultRocksDB")


@pytest.mark.parametrize("damage", ["sst_lost", "sst_torn", "manifest_lost"])
def test_a_damaged_rocksdb_is_set_aside_and_rebuilt(tmp_path: Path, damage: str) -> None:
    with MessageStore(tmp_path, ROCKS) as s:
        fill(s, 8)
    want = contents(tmp_path, ROCKS)
    db = tmp_path / "consumequeue"
    ssts = sorted(db.glob("*.sst"))
    assert ssts  # the close flushed the memtables
    if damage == "sst_lost":
        ssts[-1].unlink()
    elif damage == "sst_torn":
        os.truncate(ssts[-1], ssts[-1].stat().st_size // 2)
    else:
        for m in db.glob("MANIFEST-*"):
            m.unlink()
    assert contents(tmp_path, ROCKS) == want
    assert list(tmp_path.glob("consumequeue.damaged-*"))
    assert verify_store(tmp_path).ok


def _rot(db: Path) -> None:
    """Garbage in the middle of the largest SST file (a block of units): RocksDB opens
    the database and finds the damage only when a read lands on that block."""
    sst = max(db.glob("*.sst"), key=lambda p: p.stat().st_size)
    data = bytearray(sst.read_bytes())
    data[len(data) // 4 : len(data) // 4 + 16] = bytes(16)
    sst.write_bytes(bytes(data))


def test_a_rotten_rocksdb_block_fails_reads_clearly_and_the_next_open_rebuilds(tmp_path: Path) -> None:
    with MessageStore(tmp_path, ROCKS) as s:
        fill(s, 8)
    want = contents(tmp_path, ROCKS)
    _rot(tmp_path / "consumequeue")
    with MessageStore(tmp_path, ROCKS) as s:
        with pytest.raises(
            CorruptFileError, match="are damaged.*the store rebuilds them from the commitlog when it next opens"
        ):
            for topic, qid in want:
                s.pull(topic, qid, 0, max_count=1000)
    assert (tmp_path / "consumequeue" / "MQSTORE_DAMAGED").exists()
    assert contents(tmp_path, ROCKS) == want
    assert list(tmp_path.glob("consumequeue.damaged-*")) and verify_store(tmp_path).ok


def test_verify_reports_a_rotten_rocksdb_block_and_repair_rebuilds(tmp_path: Path) -> None:
    from mqstore.store.repair import repair_store

    with MessageStore(tmp_path, ROCKS) as s:
        fill(s, 8)
    want = contents(tmp_path, ROCKS)
    _rot(tmp_path / "consumequeue")
    report = verify_store(tmp_path)
    assert {f.kind for f in report.findings if f.severity.name == "ERROR"} == {"cq_db_damaged"}
    assert repair_store(tmp_path).ok
    assert verify_store(tmp_path).ok and contents(tmp_path, ROCKS) == want


def test_repair_rebuilds_a_rocksdb_whose_units_disagree_with_the_records(tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    from mqstore.formats.rocks_queue import OFFSET_FAMILY, encode_value, queue_prefix, unit_key
    from mqstore.store.repair import repair_store

    with MessageStore(tmp_path, ROCKS) as s:
        fill(s, 8)
    want = contents(tmp_path, ROCKS)
    opts = Options(raw_mode=True)
    db = Rdict(str(tmp_path / "consumequeue"), opts, column_families={OFFSET_FAMILY: Options(raw_mode=True)})
    phys, size, tcode = want[("T1", 1)][3]
    db[unit_key(queue_prefix("T1", 1), 3)] = encode_value(phys, size + 1, tcode, 0)  # a wrong size
    db.flush(True)
    db.get_column_family(OFFSET_FAMILY).close()
    db.close()
    report = verify_store(tmp_path)
    assert not report.ok and any(f.kind == "cq_size_mismatch" for f in report.findings)
    result = repair_store(tmp_path)
    assert result.after is not None and result.after.ok
    assert contents(tmp_path, ROCKS) == want


@pytest.mark.slow  # four CLI processes
def test_the_cli_makes_a_rocksdb_store_and_refuses_the_other_type(tmp_path: Path) -> None:
    from tests.unit.test_cli import mq

    store = tmp_path / "s"
    made = mq("send", "--store", str(store), "--create", "--store-type", "defaultRocksDB", "--topic", "T", "a", "b")
    assert made.returncode == 0, made.stderr
    assert store_type_on_disk(store) == "defaultRocksDB" and (store / "consumequeue" / "CURRENT").is_file()
    refused = mq("send", "--store", str(store), "--store-type", "default", "--topic", "T", "c")
    assert refused.returncode == 1 and "open it with --store-type defaultRocksDB" in refused.stderr
    again = mq("send", "--store", str(store), "--topic", "T", "c")  # no flag: the store's own type
    assert again.returncode == 0, again.stderr
    pulled = mq("pull", "--store", str(store), "--topic", "T", "--queue", "0", "--offset", "0")
    assert pulled.returncode == 0 and pulled.stdout.count('"topic": "T"') == 2


def test_delayed_messages_are_delivered_once_when_due(tmp_path: Path, cfg: StoreConfig) -> None:
    from mqstore.store.schedule import SCHEDULE_TOPIC

    clock = StepClock()

    def delayed(level: int, body: bytes) -> Message:
        return Message("Orders", body, queue_id=1, properties={"DELAY": str(level)})

    with MessageStore(tmp_path, cfg, clock=clock, background_dispatch=False) as s:
        res = s.append(MessageBatch.of([delayed(1, b"a"), delayed(1, b"b"), delayed(2, b"c")]))
        s.dispatcher.catch_up()
        (unit, _) = s.consume_queues.find(SCHEDULE_TOPIC, 0).read_units(0, 10)
        assert int(unit["tags_code"]) == res.store_timestamp + 1000  # the deliver time, in the tags code
        assert s.scheduler.deliver_due(clock.now + 999) == 0
        clock.now += 1000
        assert s.scheduler.deliver_due(clock.now) == 2
    with MessageStore(tmp_path, cfg, clock=clock, background_dispatch=False) as s:
        clock.now += 5000
        assert s.scheduler.deliver_due(clock.now) == 1  # level 2 (5 s) only: nothing twice
        s.dispatcher.catch_up()
        assert [r.body for r in s.pull("Orders", 1, 0).records] == [b"a", b"b", b"c"]
