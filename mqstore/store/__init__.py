"""The store core: plain Python, one process, no Ray and no gRPC."""

from mqstore.store.commitlog import COMMITLOG_DIR, CommitLog, CommitLogStats, ReadBatch
from mqstore.store.config import FlushMode, StoreConfig
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
    "FlushMode",
    "Message",
    "MessageBatch",
    "PutStatus",
    "ReadBatch",
    "RecoveryReport",
    "StoreConfig",
    "queue_dir",
]
