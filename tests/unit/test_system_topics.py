"""RocketMQ's system topics (store/system_topics.py): refused for clients' sends at
every door of the store, as RocketMQ's proxy refuses every call naming one, while the
store's own writes to them go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.errors import ReservedTopicError
from mqstore.store.message_store import MessageStore
from mqstore.store.messages import MessageBatch, check_send_topics
from mqstore.store.system_topics import SYSTEM_TOPICS, check_client_topics, is_system_topic
from tests.unit.test_inputs import CFG


def test_the_set_is_topicvalidators_and_its_prefix() -> None:
    assert SYSTEM_TOPICS >= {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
    assert is_system_topic("rmq_sys_wheel_timer") and is_system_topic("rmq_sys_SYNC_BROKER_MEMBER_b")
    # a consumer reads its group's dead letters; retry topics and look-alikes are ordinary
    for ordinary in ("%DLQ%g", "%RETRY%g", "tbw102", "RMQ_SYS", "Orders", "benchmarktest", "x_rmq_sys_"):
        assert not is_system_topic(ordinary), ordinary


@pytest.mark.parametrize("topic", ["TBW102", "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_x", "CHECKPOINT_TOPIC"])
def test_client_checks_name_the_topic(topic: str) -> None:
    with pytest.raises(ReservedTopicError, match=f"'{topic}'.*system topic"):
        check_client_topics(["Ok", topic])
    with pytest.raises(ReservedTopicError):
        check_send_topics({"Ok", topic})
    check_client_topics(["Ok", "%DLQ%g"])


@pytest.mark.parametrize("topic", ["TBW102", "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_x"])
def test_the_store_refuses_client_sends_and_keeps_its_own_writes(tmp_path: Path, topic: str) -> None:
    with MessageStore(tmp_path, CFG) as s:
        with pytest.raises(ReservedTopicError):
            s.append(MessageBatch(topics=topic, bodies=[b"x"], queue_ids=0))
        assert s.commitlog.wrote_offset == 0
        # the delay scheduler's topic still fills from an ordinary producer's DELAY message
        s.append(MessageBatch(topics="Ok", bodies=[b"later"], queue_ids=0, properties={"DELAY": "1"}))
        s.commitlog.append(MessageBatch(topics="RMQ_SYS_TRACE_TOPIC", bodies=[b"own"], queue_ids=0))  # internal append
        assert s.wait_dispatched()
        assert s.consume_queues.find("SCHEDULE_TOPIC_XXXX", 0).max_offset == 1
        assert s.consume_queues.find("RMQ_SYS_TRACE_TOPIC", 0).max_offset == 1
