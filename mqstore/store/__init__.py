"""The store core: plain Python, one process, no Ray and no gRPC."""

from mqstore.store.commitlog import COMMITLOG_DIR, CommitLog, CommitLogStats, ReadBatch
from mqstore.store.config import FlushMode, StoreConfig
from mqstore.store.consume_queue import ConsumeQueue, queue_dir
from mqstore.store.consumer_offsets import ConsumerOffsets
from mqstore.store.delay_offsets import DelayOffsets, parse_delay_levels
from mqstore.store.messages import (
    AUTO_QUEUE,
    AppendedMessage,
    AppendResult,
    Bodies,
    Message,
    MessageBatch,
    PutStatus,
    Texts,
)
from mqstore.store.recovery import RecoveryReport
from mqstore.store.topic_configs import MessageType, TopicConfig, TopicConfigs

__all__ = [
    "AUTO_QUEUE",
    "COMMITLOG_DIR",
    "AppendResult",
    "AppendedMessage",
    "Bodies",
    "CommitLog",
    "CommitLogStats",
    "ConsumeQueue",
    "ConsumerOffsets",
    "DelayOffsets",
    "FlushMode",
    "Message",
    "MessageBatch",
    "MessageType",
    "PutStatus",
    "ReadBatch",
    "RecoveryReport",
    "StoreConfig",
    "Texts",
    "TopicConfig",
    "TopicConfigs",
    "parse_delay_levels",
    "queue_dir",
]
