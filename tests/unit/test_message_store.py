"""The store engine end to end in one process: dispatch, reopen, recovery of derived files."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.errors import NotFoundError
from mqstore.formats.javahash import tags_code
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.reads import PullStatus

CFG = StoreConfig(
    segment_bytes=256 * 1024, consume_queue_file_bytes=20 * 50, index_hash_slots=512, index_max_entries=2048
)


def fill(store: MessageStore, batches: int = 40) -> None:
    for i in range(batches):
        store.append(
            MessageBatch.of(
                [
                    Message(f"T{j % 3}", os.urandom(100 + j), queue_id=j % 4, tags=f"Tag{j % 5}", keys=[f"k{i}-{j}"])
                    for j in range(25)
                ]
            )
        )


def queue_contents(store_dir: Path) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    """Every consume-queue unit of the store, read through a fresh open."""
    out = {}
    with MessageStore(store_dir, CFG, background_dispatch=False) as s:
        for cq in s.consume_queues.all():
            units = cq.read_units(cq.min_offset, cq.max_offset - cq.min_offset)
            out[(cq.topic, cq.queue_id)] = [(int(u[0]), int(u[1]), int(u[2])) for u in units]
    return out


def test_units_point_at_their_records(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
    contents = queue_contents(tmp_path)
    assert len(contents) == 12 and sum(map(len, contents.values())) == 40 * 25
    with MessageStore(tmp_path, CFG) as s:
        for (topic, qid), units in contents.items():
            for qo, (phys, size, tcode) in enumerate(units):
                rec = s.commitlog.read(phys)
                assert (rec.topic, rec.queue_id, rec.queue_offset, rec.total_size) == (topic, qid, qo, size)
                assert tcode == tags_code(rec.tags)


def test_dispatch_equals_a_rebuild_from_scratch(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "a", CFG) as s:
        fill(s)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "consumequeue")
    assert queue_contents(tmp_path / "b") == queue_contents(tmp_path / "a")


def test_torn_consume_queue_is_rebuilt_on_abnormal_open(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
    want = queue_contents(tmp_path)
    qdir = tmp_path / "consumequeue" / "T1" / "2"
    last = sorted(qdir.iterdir())[-1]
    data = bytearray(last.read_bytes())
    cut = 20 * 7 + 9
    data[cut:] = os.urandom(len(data) - cut)  # garbage from inside unit 7 on
    last.write_bytes(bytes(data))
    (tmp_path / "abort").touch()
    assert queue_contents(tmp_path) == want


def test_consume_queues_ahead_of_a_cut_commitlog_are_truncated(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        fill(s)
        assert s.wait_dispatched()
        cut_at = int(s.read_queue_offset("T0", 0, 30).physical_offset)
    seg = tmp_path / "commitlog" / f"{cut_at - cut_at % CFG.segment_bytes:020d}"
    with open(seg, "r+b") as f:
        f.seek(cut_at % CFG.segment_bytes + 4)
        f.write(b"\0\0\0\0")  # break the magic: the commitlog ends here now
    (tmp_path / "abort").touch()
    with MessageStore(tmp_path, CFG) as s:
        assert s.commitlog.wrote_offset == cut_at
        cq = s.consume_queues.find("T0", 0)
        assert cq.max_offset == 30
        units = cq.read_units(0, 100)
        assert int(units["commitlog_offset"].max()) < cut_at
        res = s.append(MessageBatch(topics="T0", bodies=[b"new"], queue_ids=0))
        assert res.queue_offsets.tolist() == [30]
    with MessageStore(tmp_path, CFG) as s:
        assert s.read_queue_offset("T0", 0, 30).body == b"new"


def test_pull_with_tags_and_offsets(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        fill(s, 8)
        assert s.wait_dispatched()
        got = s.pull("T1", 1, 0, max_count=1000)
        assert [r.queue_offset for r in got.records] == list(range(got.max_offset))
        want = [r.queue_offset for r in got.records if r.tags in ("Tag1", "Tag3")]
        tagged = s.pull("T1", 1, 0, max_count=1000, tags={"Tag1", "Tag3"})
        assert want and [r.queue_offset for r in tagged.records] == want  # every match, not a subset
        assert tagged.status is PullStatus.FOUND and tagged.next_offset == got.max_offset
        first = s.pull("T1", 1, 0, max_count=1, tags={"Tag1", "Tag3"})  # full: go on after the one taken
        assert [r.queue_offset for r in first.records] == want[:1] and first.next_offset == want[0] + 1
        at_end = s.pull("T1", 1, got.max_offset)
        assert (at_end.records, at_end.status, at_end.next_offset) == ([], PullStatus.NO_NEW_MESSAGE, got.max_offset)
        assert s.pull("Nope", 0, 0).status is PullStatus.NO_MESSAGE_IN_QUEUE


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_background_dispatch_keeps_up(tmp_path: Path, flush: str) -> None:
    from mqstore.store import FlushMode

    cfg = StoreConfig(segment_bytes=1 << 20, flush_mode=FlushMode(flush))
    with MessageStore(tmp_path, cfg) as s:
        for _ in range(50):
            s.append(MessageBatch(topics="T", bodies=[b"z" * 64] * 200, queue_ids=np.arange(200) % 4, tags="A"))
        deadline = time.monotonic() + 30  # the reput thread builds the queues while the store runs

        def done() -> bool:  # (the loop moves dispatched_offset just after the sinks took a chunk)
            return (
                s.dispatcher.dispatched_offset == s.commitlog.wrote_offset
                and sum(cq.max_offset for cq in s.consume_queues.all()) == 10_000
            )

        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.dispatcher.running and done()


def test_consumer_offsets_and_topic_configs_persist(tmp_path: Path) -> None:
    from mqstore.errors import OffsetError

    with MessageStore(tmp_path, CFG) as s:
        s.update_topic("Auto", write_queue_nums=2)
        res = s.append(MessageBatch(topics="Auto", bodies=[b"x"] * 6))
        assert sorted(set(res.queue_ids.tolist())) == [0, 1]  # spread over the topic's 2 queues
        assert s.wait_dispatched()
        s.commit_offset("g", "Auto", 0, 2)
        with pytest.raises(OffsetError):
            s.commit_offset("g", "Auto", 1, 4)  # only 3 messages there
    with MessageStore(tmp_path, CFG) as s:
        rows = {(r.topic, r.queue_id): (r.broker_offset, r.consumer_offset, r.lag) for r in s.consumer_progress("g")}
        assert rows == {("Auto", 0): (3, 2, 1)}
        assert s.topics.get("Auto").write_queue_nums == 2
        res = s.append(MessageBatch(topics="Auto", bodies=[b"y"] * 4))
        assert sorted(set(res.queue_ids.tolist())) == [0, 1]


def test_layout_is_read_back_from_the_store(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        s.append(MessageBatch(topics="T", bodies=[b"x"]))
    with MessageStore(tmp_path) as s:  # default config: shaping values come from the store
        assert s.config.segment_bytes == CFG.segment_bytes
        assert s.config.consume_queue_file_bytes == CFG.consume_queue_file_bytes
        (qid,) = [q for t, q in s.consume_queues.keys() if t == "T"]
        assert s.read_queue_offset("T", qid, 0).body == b"x"


def test_transaction_halves_are_indexed_but_not_queued(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:  # producers may not set these bits: written as a transaction API would
        s.commitlog.append(
            MessageBatch(
                topics="Tx",
                bodies=[b"half", b"commit", b"rollback", b"plain"],
                queue_ids=0,
                keys=["kh", "kc", "kr", "kp"],
                sysflags=[0x4, 0x8, 0xC, 0x0],
            )
        )
        assert s.wait_dispatched()
        assert [r.body for r in s.pull("Tx", 0, 0).records] == [b"commit", b"plain"]
        assert [r.body for r in s.query_by_key("Tx", "kh")] == [b"half"]  # prepared halves are indexed
        with pytest.raises(NotFoundError):  # rollbacks are not
            s.query_by_key("Tx", "kr")


def test_offset_at_time(tmp_path: Path) -> None:
    import time as _time

    class Step:
        now = 1_700_000_000_000

        def now_ms(self) -> int:
            return self.now

        def monotonic(self) -> float:
            return _time.monotonic()

    clock = Step()
    with MessageStore(tmp_path, CFG, clock=clock) as s:
        for i in range(10):
            clock.now = 1_700_000_000_000 + i * 1000
            s.append(MessageBatch(topics="T", bodies=[b"m"] * 3, queue_ids=0))
        assert s.wait_dispatched()
        assert s.offset_at_time("T", 0, 1_700_000_000_000) == 0
        assert s.offset_at_time("T", 0, 1_700_000_004_000) == 12
        assert s.offset_at_time("T", 0, 1_700_000_004_500) == 15
        assert s.offset_at_time("T", 0, 1_800_000_000_000) == 30
