"""What a producer or consumer may not do, in-process (``MessageStore``): reserved
topics, transaction bits, topic permissions (RocketMQ PermName) and bad arguments
each raise a typed error before anything is written or any file is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.errors import (
    InvalidArgumentError,
    InvalidMessageError,
    InvalidTopicError,
    NoPermissionError,
    ReservedTopicError,
    TopicPermissionError,
    TransactionNotSupportedError,
)
from mqstore.formats.msgid import Host
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.messages import NOT_ALLOWED_SEND_TOPICS

CFG = StoreConfig(segment_bytes=256 * 1024, index_hash_slots=512, index_max_entries=2048)
LONG = "T" * 10_000


@pytest.fixture
def store(tmp_path: Path):
    with MessageStore(tmp_path, CFG) as s:
        yield s


def test_reserved_topics_are_rocketmqs_not_allowed_send_set() -> None:
    assert NOT_ALLOWED_SEND_TOPICS >= {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "RMQ_SYS_TOPIC_CONFIG_SYNC",
        "RMQ_SYS_TIMER_METRICS_SYNC",
    }
    assert "RMQ_SYS_TRACE_TOPIC" not in NOT_ALLOWED_SEND_TOPICS  # RocketMQ's clients send their traces there


@pytest.mark.parametrize("topic", sorted(NOT_ALLOWED_SEND_TOPICS))
def test_sends_to_reserved_topics_are_refused(store: MessageStore, topic: str) -> None:
    with pytest.raises(ReservedTopicError, match="forbidden"):
        store.append(MessageBatch(topics=topic, bodies=[b"x"], queue_ids=0))
    with pytest.raises(ReservedTopicError):  # one reserved topic among others refuses the whole batch
        store.append(MessageBatch(topics=["Ok", topic], bodies=[b"x", b"y"]))
    assert store.commitlog.wrote_offset == 0


@pytest.mark.parametrize("sysflag", [0x4, 0x8, 0xC])
def test_transaction_bits_are_refused(store: MessageStore, sysflag: int) -> None:
    with pytest.raises(TransactionNotSupportedError):
        store.append(MessageBatch(topics="T", bodies=[b"x"], sysflags=sysflag))
    with pytest.raises(TransactionNotSupportedError):
        store.append(MessageBatch(topics="T", bodies=[b"x", b"y"], sysflags=[0, sysflag]))
    assert store.commitlog.wrote_offset == 0


def test_a_read_only_topic_refuses_sends(store: MessageStore) -> None:
    store.update_topic("ReadOnly", perm=4)
    with pytest.raises(TopicPermissionError, match="not writable") as e:
        store.append(MessageBatch(topics="ReadOnly", bodies=[b"x"], queue_ids=0))
    assert isinstance(e.value, NoPermissionError) and e.value.perm == 4
    with pytest.raises(TopicPermissionError):  # a delayed message checks its real topic
        store.append(MessageBatch(topics="ReadOnly", bodies=[b"x"], properties={"DELAY": "1"}))
    assert store.commitlog.wrote_offset == 0
    assert store.pull("ReadOnly", 0, 0).records == []  # pulls are allowed


def test_a_write_only_topic_refuses_pulls(store: MessageStore) -> None:
    store.update_topic("WriteOnly", perm=2)
    store.append(MessageBatch(topics="WriteOnly", bodies=[b"x"], queue_ids=0))
    assert store.wait_dispatched()
    with pytest.raises(TopicPermissionError, match="not readable"):
        store.pull("WriteOnly", 0, 0)
    with pytest.raises(TopicPermissionError):
        store.pull_raw("WriteOnly", 0, 0)
    store.update_topic("WriteOnly", perm=6)
    assert [r.body for r in store.pull("WriteOnly", 0, 0).records] == [b"x"]


def test_perm_0_is_stored_and_refuses_both(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        assert s.update_topic("Closed", perm=0).perm == 0
    with MessageStore(tmp_path, CFG) as s:  # persisted as 0
        assert s.topics.get("Closed").perm == 0
        with pytest.raises(TopicPermissionError):
            s.append(MessageBatch(topics="Closed", bodies=[b"x"]))
        with pytest.raises(TopicPermissionError):
            s.pull("Closed", 0, 0)


@pytest.mark.parametrize(
    ("what", "batch", "error"),
    [
        ("empty property name", MessageBatch(topics="T", bodies=[b"x"], properties={"": "v"}), "empty name"),
        ("empty property value", MessageBatch(topics="T", bodies=[b"x"], properties={"k": ""}), "empty value"),
        (
            "empty value in a row",
            MessageBatch(topics="T", bodies=[b"x", b"y"], properties=[None, {"k": ""}]),
            "message 1",
        ),
        (
            "store-only property",
            MessageBatch(topics="T", bodies=[b"x"], properties={"SCHEDULE_SOURCE": "1:0"}),
            "store only",
        ),
        ("born port 99999", MessageBatch(topics="T", bodies=[b"x"], born_hosts=Host("10.0.0.1", 99999)), "0..65535"),
        ("born port -1", MessageBatch(topics="T", bodies=[b"x"], born_hosts=[Host("10.0.0.1", -1)]), "0..65535"),
        ("queue id 1.5", MessageBatch(topics="T", bodies=[b"x"], queue_ids=1.5), "integers"),
        ("queue id '1'", MessageBatch(topics="T", bodies=[b"x"], queue_ids="1"), "integers"),
        ("queue ids [0, 1.5]", MessageBatch(topics="T", bodies=[b"x", b"y"], queue_ids=[0, 1.5]), "integers"),
        ("queue id True", MessageBatch(topics="T", bodies=[b"x"], queue_ids=True), "integers"),
        ("queue id 70000", MessageBatch(topics="T", bodies=[b"x"], queue_ids=70_000), "outside"),
        ("topic of 10,000 characters", MessageBatch(topics=LONG, bodies=[b"x"]), "127"),
    ],
)
def test_bad_messages_are_refused_before_a_byte_is_written(store: MessageStore, what, batch, error) -> None:
    with pytest.raises(InvalidMessageError, match=error):
        store.append(batch)
    assert store.commitlog.wrote_offset == 0, what


@pytest.mark.parametrize(
    ("what", "call", "error"),
    [
        ("pull, long topic", lambda s: s.pull(LONG, 0, 0), InvalidTopicError),
        ("pull_raw, long topic", lambda s: s.pull_raw(LONG, 0, 0), InvalidTopicError),
        ("offset_at_time, long topic", lambda s: s.offset_at_time(LONG, 0, 0), InvalidTopicError),
        ("commit_offset, long topic", lambda s: s.commit_offset("g", LONG, 0, 0), InvalidTopicError),
        ("topic_status, long topic", lambda s: s.topic_status(LONG), InvalidTopicError),
        ("query_by_key, long topic", lambda s: s.query_by_key(LONG, "k"), InvalidTopicError),
        ("pull, topic with a slash", lambda s: s.pull("../x", 0, 0), InvalidTopicError),
        ("pull, queue -1", lambda s: s.pull("T", -1, 0), InvalidArgumentError),
        ("pull, queue 1.5", lambda s: s.pull("T", 1.5, 0), InvalidArgumentError),
        ("pull, queue '1'", lambda s: s.pull("T", "1", 0), InvalidArgumentError),
        ("pull, offset -1", lambda s: s.pull("T", 0, -1), InvalidArgumentError),
        ("pull_raw, offset -1", lambda s: s.pull_raw("T", 0, -1), InvalidArgumentError),
        ("pull, max_count 0", lambda s: s.pull("T", 0, 0, max_count=0), InvalidArgumentError),
        ("commit_offset, offset -1", lambda s: s.commit_offset("g", "T", 0, -1), InvalidArgumentError),
        ("read_queue_offset, queue -1", lambda s: s.read_queue_offset("T", -1, 0), InvalidArgumentError),
        ("query_by_key, max_num 0", lambda s: s.query_by_key("T", "k", max_num=0), InvalidArgumentError),
    ],
)
def test_bad_read_arguments_are_refused_before_a_file_is_touched(store: MessageStore, what, call, error) -> None:
    store.append(MessageBatch(topics="T", bodies=[b"x"], queue_ids=0))
    assert store.wait_dispatched()
    with pytest.raises(error):
        call(store)
    assert sorted(store.consume_queues.keys()) == [("T", 0)], what  # no queue looked up or made for it


def test_the_store_still_writes_and_delivers_what_it_owns(tmp_path: Path) -> None:
    """The checks are the producer's door only: the scheduler's own writes into the
    schedule topic (a DELAY message) and the store's internal append still work."""
    with MessageStore(tmp_path, CFG) as s:
        s.append(MessageBatch(topics="T", bodies=[b"later"], queue_ids=0, properties={"DELAY": "1"}))
        s.commitlog.append(MessageBatch(topics="RMQ_SYS_TRANS_HALF_TOPIC", bodies=[b"half"], queue_ids=0, sysflags=0x4))
        assert s.wait_dispatched()
        assert s.consume_queues.find("SCHEDULE_TOPIC_XXXX", 0).max_offset == 1
