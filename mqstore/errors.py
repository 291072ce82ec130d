"""Every error mqstore raises on purpose.

Each class says who raises it, when, and what the caller should do. Callers that
serve a wire protocol map these classes to status codes in one table; nothing here
knows about gRPC or the CLI.
"""

from __future__ import annotations


class MqStoreError(Exception):
    """Base class: anything mqstore raises deliberately derives from it."""


class InvalidMessageError(MqStoreError, ValueError):
    """A message (or a batch) breaks a documented rule: bad topic name, body too
    large, properties too long, a queue id out of range.

    Raised by ``CommitLog.append`` before any byte is written, so the store is
    unchanged. The caller should fix the input; retrying the same batch fails again.
    Compare RocketMQ's MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED statuses.
    """


class InvalidTopicError(InvalidMessageError):
    """A topic name is empty, too long, or uses a character outside RocketMQ's
    set ``[%|a-zA-Z0-9_-]``. Such a name can never become a path outside the store."""


class MessageTooLargeError(InvalidMessageError):
    """A body exceeds ``max_message_bytes`` (4 MiB by default) or an encoded record
    exceeds the body limit plus 64 KiB."""


class PropertiesTooLongError(InvalidMessageError):
    """The encoded properties string is longer than 32,767 bytes (a signed short)."""


class TransactionNotSupportedError(InvalidMessageError):
    """A message sets the transaction bits of its sysflag (prepared 0x4, commit 0x8,
    rollback 0xC). The store has no transaction API yet: such messages would be
    acknowledged and never reach a consume queue. Raised by the client-facing append
    path (``MessageStore.append``, ``LogStore.append``) before anything is written;
    send without those bits."""


class DeliveryTimeError(InvalidMessageError):
    """A message's delivery time (TIMER_DELIVER_MS, or the RocketMQ port's
    delivery_timestamp) is not an integer of epoch ms from 0001-01-01 to at most 24 h
    ahead, or comes with a DELAY level too (message_rules.py). Raised by every producer
    door before anything is written; send a time in range."""


class MessageTypeError(InvalidMessageError):
    """A message's shape (a message group, a delivery time, a DELAY level) does not
    match its topic's message type (topics.json ``message.type``), as RocketMQ's proxy
    refuses it (message_rules.py). Send to a topic of the right type, or change the
    message."""


class InvalidArgumentError(MqStoreError, ValueError):
    """An argument of a read or admin call is out of its range or of the wrong type:
    a queue id that is not an integer in 0..max_queue_id, a negative queue offset, a
    count below 1. Raised by ``MessageStore`` before it touches a file; fix the call."""


class InvalidReceiptHandle(InvalidArgumentError):
    """A pop receipt handle cannot be used (RocketMQ's INVALID_RECEIPT_HANDLE 40013).

    ``reason`` says why: ``malformed`` (``ReceiptHandle.parse`` refused the text, or a
    field is out of range), ``forged`` (its tag is not one this shard made for the
    group and topic: guessed or altered fields, another group's, another shard's),
    ``stale`` (``PopState.change_invisible``: the message was acked, redelivered or
    had its invisible time changed since this handle was issued) or ``expired`` (its
    invisible time has passed).
    Nothing was changed. Retrying with the same handle fails again: the client should
    receive the message anew (a stale or expired one comes back when it is due)."""

    def __init__(self, message: str, *, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


class LimitExceededError(InvalidArgumentError):
    """A read asked for more than one call answers: over 10,000 messages in a pull,
    over 64 in a key query (RocketMQ's index limit). Ask for fewer and page on."""


class NoPermissionError(MqStoreError):
    """The call is not allowed on this topic (RocketMQ's NO_PERMISSION). Nothing was
    written or read. Subclasses say why; the caller should not retry as is."""


class ReservedTopicError(NoPermissionError, InvalidTopicError):
    """A client sent to a topic only the store writes: RocketMQ's TopicValidator
    not-allowed-send set (``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_TRANS_HALF_TOPIC``, ...;
    ``system_topics.NOT_ALLOWED_SEND_TOPICS``). Raised by the client-facing append path;
    the store's own writes (delayed messages into the schedule topic and back out)
    do not go through it."""


class TopicPermissionError(NoPermissionError):
    """The topic's config lacks the permission bit the call needs (RocketMQ PermName:
    READ 4 for pulls, WRITE 2 for sends). ``topic``, ``perm`` and ``needed`` say which.
    Change the topic's perm (update_topic) or use another topic."""

    def __init__(self, message: str, *, topic: str, perm: int, needed: int) -> None:
        super().__init__(message)
        self.topic, self.perm, self.needed = topic, perm, needed


class DecodeError(MqStoreError, ValueError):
    """Bytes that should hold a record, a msgId or a file name do not.

    Raised by the format layer with what was wrong and where. Readers of store
    files get an outcome enum instead where damage is expected (recovery)."""


class OffsetError(MqStoreError, ValueError):
    """A read asked for a commitlog offset where no record starts: below the oldest
    kept segment, at or past the write position, or inside a record. The caller
    should ask for an offset it got from the store (an append result, a queue unit)."""


class NotFoundError(OffsetError):
    """A query found nothing: no record at that msgId (never written, or deleted by
    retention), no message at that queue offset, no message with that key, a topic
    with no queues. The answer, not a fault: the caller may ask something else."""


class CorruptFileError(MqStoreError):
    """A store file breaks a documented invariant; the message names the file and
    byte offset. Raised by reads that land on damaged bytes and by open() for damage
    recovery must not repair on its own (a segment with the wrong size)."""


class StoreClosedError(MqStoreError):
    """The store was closed; no call but ``close()`` may follow. Open it again."""


class StoreLockedError(MqStoreError):
    """Another process holds the store's lock file. Stop that process first; two
    writers would corrupt the commitlog."""


class StoreNotWritableError(MqStoreError):
    """The store refuses writes: the disk is full (ENOSPC) or a flush failed.

    Raised by ``append`` before anything of the batch is acknowledged; what was
    acknowledged earlier stays intact and readable. ``cause`` names the reason:

        disk_full     ENOSPC/EDQUOT allocating a segment or writing; writes resume by
                      themselves once space is freed (retried at most once a second)
        flush_failed  an fdatasync/msync of the commitlog failed (EIO...): the batch
                      may not be durable; every later append fails until a restart
        read_only     EROFS (the file system went read-only); until a restart
        io_error      a write or allocation failed otherwise; until a restart

    ``MessageStore.unwritable_cause`` / ``CommitLog.unwritable_cause`` report the
    same state without an append."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class ConfigError(MqStoreError, ValueError):
    """A configuration value is out of range, or disagrees with the files on disk
    (for instance a segment size that differs from the existing segments)."""


class StoreTypeError(ConfigError):
    """A store is opened with a ``store_type`` (RocketMQ storeType) other than the one
    its consume queues were made with: a file per queue ("default") or one RocksDB
    ("defaultRocksDB"), told apart by what ``consumequeue/`` holds (store_type.py).
    Nothing was changed; open it with its own type (``--store-type``)."""


class IndexDisabledError(ConfigError):
    """A key query on a store whose message index is off (``message_index_enable``
    is False): nothing can answer it. Query by msgId or queue offset instead."""


class ReplicationError(MqStoreError):
    """Base of what a replica's rules refuse (mqstore.store.ha). Nothing was written:
    the replica's files are as before the call."""


class StaleEpochError(ReplicationError):
    """A master's epoch (or an epoch entry) is older than the replica's last epoch, or
    disagrees with the replica's entry for the same epoch (EpochCache.append,
    ReplicaFollower.append). Raised before anything is persisted. The sender is a
    deposed master: follow the master of the newest epoch instead."""

    def __init__(self, message: str, *, epoch: int, last_epoch: int) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.last_epoch = last_epoch


class ReplicaOffsetError(ReplicationError):
    """A replicated batch does not start at the replica's end (``expected``, the local
    write position; ``got``, the batch's offset), or a new epoch does not start there.
    Raised by ReplicaFollower.append before anything is written; the follower asks
    the master again from ``expected``."""

    def __init__(self, message: str, *, expected: int, got: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


class ReplicaBatchError(ReplicationError):
    """A replicated batch's bytes are not whole valid records at their offsets (a
    CRC, a length, a PHYSICALOFFSET, a record across a segment end, a BLANK that does
    not end its segment). Raised by ha.follower.check_batch before anything is
    written; the message says where. The stream or the master is broken: reconnect."""


class NoConsistentPointError(ReplicationError):
    """Two replicas' epoch files share no epoch with the same start offset
    (EpochCache.find_consistent_point), or the point lies below the replica's oldest
    segment: no prefix of the local log is known to match the master's. The replica
    must be rebuilt from nothing (an empty store follows from the master's oldest
    offset); RocketMQ refuses the same way."""


class InSyncReplicasNotEnoughError(ReplicationError):
    """A send is refused because the SyncStateSet holds fewer replicas (the master
    included) than ``min_in_sync`` (RocketMQ PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH).
    Raised by SyncStateSet.check_writable before anything is appended; the client
    may retry once followers have caught up."""

    def __init__(self, message: str, *, in_sync: int, min_in_sync: int) -> None:
        super().__init__(message)
        self.in_sync = in_sync
        self.min_in_sync = min_in_sync


__all__ = [
    "ConfigError",
    "CorruptFileError",
    "DecodeError",
    "DeliveryTimeError",
    "IndexDisabledError",
    "InvalidArgumentError",
    "InvalidMessageError",
    "InvalidReceiptHandle",
    "InSyncReplicasNotEnoughError",
    "InvalidTopicError",
    "LimitExceededError",
    "MessageTooLargeError",
    "MessageTypeError",
    "MqStoreError",
    "NoConsistentPointError",
    "NoPermissionError",
    "NotFoundError",
    "OffsetError",
    "PropertiesTooLongError",
    "ReplicaBatchError",
    "ReplicaOffsetError",
    "ReplicationError",
    "ReservedTopicError",
    "StaleEpochError",
    "StoreClosedError",
    "StoreLockedError",
    "StoreNotWritableError",
    "StoreTypeError",
    "TopicPermissionError",
    "TransactionNotSupportedError",
]
