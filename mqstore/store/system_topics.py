"""RocketMQ's system topics: the names clients may neither send to nor receive from.

RocketMQ's gRPC proxy refuses every call naming a system topic with ILLEGAL_TOPIC
("cannot access system topic", proxy GrpcValidator.validateTopic): a topic of
TopicValidator's SYSTEM_TOPIC_SET, one of the not-allowed-send set, or any name with
the ``rmq_sys_`` prefix (the broker's timer and sync topics). Retry and dead-letter
topics (``%RETRY%<group>``, ``%DLQ%<group>``) are not system topics: the proxy lets a
consumer read its group's DLQ, and so does this.

The store's own writes (delay scheduler, transactions, dead letters) do not pass
through these checks: they append "as given" (LogStore.deliver).
"""

from __future__ import annotations

from collections.abc import Iterable

from mqstore.errors import ReservedTopicError

# RocketMQ TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET (common/.../topic/TopicValidator.java,
# with the broker-sync topics newer releases add): the broker refuses producers' sends
# to these. Only the store writes them (SCHEDULE_TOPIC_XXXX: the delay scheduler).
# RMQ_SYS_TRACE_TOPIC is a system topic but not in the set: clients send traces there.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "RMQ_SYS_TOPIC_CONFIG_SYNC",
        "RMQ_SYS_CONSUMER_OFFSET_SYNC",
        "RMQ_SYS_DELAY_OFFSET_SYNC",
        "RMQ_SYS_SUBSCRIPTION_GROUP_SYNC",
        "RMQ_SYS_MESSAGE_MODE_SYNC",
        "RMQ_SYS_TIMER_METRICS_SYNC",
    }
)

# TopicValidator.SYSTEM_TOPIC_SET (common/.../topic/TopicValidator.java): the
# not-allowed-send set and the topics clients may send to but not name here.
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {
    "TBW102",  # AUTO_CREATE_TOPIC_KEY_TOPIC
    "BenchmarkTest",
    "RMQ_SYS_TRACE_TOPIC",
    "CHECKPOINT_TOPIC",  # RMQ_SYS_ROCKSDB_OFFSET_TOPIC
}
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # TopicValidator.SYSTEM_TOPIC_PREFIX (rmq_sys_wheel_timer, ...)


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic: in the set or with the ``rmq_sys_`` prefix (case
    matters, as in Java)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def check_client_topics(topics: Iterable[str], what: str = "sending to") -> None:
    """ReservedTopicError naming the first system topic among ``topics`` (sorted):
    clients may not send to or receive from one. ``what``: the action, for the message."""
    found = sorted(t for t in set(topics) if is_system_topic(t))
    if found:
        raise ReservedTopicError(
            f"{what} topic {found[0]!r} is forbidden: it is a system topic (RocketMQ's TopicValidator)"
        )


__all__ = ["NOT_ALLOWED_SEND_TOPICS", "SYSTEM_TOPICS", "SYSTEM_TOPIC_PREFIX", "check_client_topics", "is_system_topic"]
