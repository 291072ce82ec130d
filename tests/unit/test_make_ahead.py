"""A topic created through the store has its queues' directories and files made
ahead (issue 26 item 3): the first message waits for no mkdir, an empty made-ahead
queue answers a pull as RocketMQ does (NO_MESSAGE_IN_QUEUE: its max offset is 0), and
the files change nothing a reopen or verify sees."""

from __future__ import annotations

import os
from pathlib import Path

from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.reads import PullStatus
from mqstore.store.verify import verify_store

CFG = StoreConfig(
    segment_bytes=256 * 1024, consume_queue_file_bytes=20 * 50, index_hash_slots=512, index_max_entries=2048
)


def test_update_topic_makes_its_queues_ahead(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        s.update_topic("Ahead", read_queue_nums=3, write_queue_nums=3)
        assert s.consume_queues.wait_made(timeout=30)
        for q in range(3):
            assert os.listdir(tmp_path / "consumequeue" / "Ahead" / str(q)) == ["00000000000000000000"]
        empty = s.pull("Ahead", 1, 0)
        assert (empty.status, empty.records) == (PullStatus.NO_MESSAGE_IN_QUEUE, [])
        s.append(MessageBatch.of([Message("Ahead", b"first", queue_id=1)]))
        assert s.wait_dispatched()
        assert [r.body for r in s.pull("Ahead", 1, 0).records] == [b"first"]
    with MessageStore(tmp_path, CFG) as s:  # the empty made-ahead queues open as empty ones
        assert [r.body for r in s.pull("Ahead", 1, 0).records] == [b"first"]
        assert s.pull("Ahead", 0, 0).status is PullStatus.NO_MESSAGE_IN_QUEUE
        s.append(MessageBatch.of([Message("Ahead", b"second", queue_id=0)]))
        assert s.wait_dispatched()
        assert [r.body for r in s.pull("Ahead", 0, 0).records] == [b"second"]
    report = verify_store(tmp_path)
    assert report.ok, [f for f in report.findings]


def test_update_of_a_topic_with_messages_makes_nothing_ahead(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        s.append(MessageBatch.of([Message("Used", b"x", queue_id=0)]))
        assert s.wait_dispatched()
        s.update_topic("Used", read_queue_nums=2, write_queue_nums=2)
        assert s.consume_queues.wait_made(timeout=30)
        assert not (tmp_path / "consumequeue" / "Used" / "1").exists()  # made when its first unit comes
