"""The store core: plain Python, one process, no Ray and no gRPC."""

from mqstore.store.commitlog import COMMITLOG_DIR, CommitLog, CommitLogStats, ReadBatch
from mqstore.store.config import FlushMode, StoreConfig
from mqstore.store.config_files import ConsumerOffsets, DelayOffsets, TopicConfig, TopicConfigs, parse_delay_levels
from mqstore.store.consume_queue import ConsumeQueue, queue_dir
from mqstore.store.messages import AUTO_QUEUE, AppendedMessage, AppendResult, Message, MessageBatch, PutStatus
from mqstore.store.recovery import RecoveryReport

__all__ = [
    "AUTO_QUEUE",
    "COMMITLOG_DIR",
    "AppendResult",
    "AppendedMessage",
    "CommitLog",
    "CommitLogStats",
    "ConsumeQueue",
    "ConsumerOffsets",
    "DelayOffsets",
    "FlushMode",
    "Message",
    "MessageBatch",
    "PutStatus",
    "ReadBatch",
    "RecoveryReport",
    "StoreConfig",
    "TopicConfig",
    "TopicConfigs",
    "parse_delay_levels",
    "queue_dir",
]
