from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PutStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PUT_STATUS_UNSPECIFIED: _ClassVar[PutStatus]
    PUT_OK: _ClassVar[PutStatus]
    FLUSH_DISK_TIMEOUT: _ClassVar[PutStatus]
    SHARD_FAILED: _ClassVar[PutStatus]
    NOT_STORED: _ClassVar[PutStatus]
PUT_STATUS_UNSPECIFIED: PutStatus
PUT_OK: PutStatus
FLUSH_DISK_TIMEOUT: PutStatus
SHARD_FAILED: PutStatus
NOT_STORED: PutStatus

class Properties(_message.Message):
    __slots__ = ("entries",)
    class EntriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.ScalarMap[str, str]
    def __init__(self, entries: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MessageColumns(_message.Message):
    __slots__ = ("topics", "bodies", "queue_ids", "tags", "keys", "unique_keys", "properties", "flags", "born_timestamps", "born_hosts", "reconsume_times", "sysflags")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    BORN_HOSTS_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    SYSFLAGS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    tags: _containers.RepeatedScalarFieldContainer[str]
    keys: _containers.RepeatedScalarFieldContainer[str]
    unique_keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.RepeatedCompositeFieldContainer[Properties]
    flags: _containers.RepeatedScalarFieldContainer[int]
    born_timestamps: _containers.RepeatedScalarFieldContainer[int]
    born_hosts: _containers.RepeatedScalarFieldContainer[str]
    reconsume_times: _containers.RepeatedScalarFieldContainer[int]
    sysflags: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., bodies: _Optional[_Iterable[bytes]] = ..., queue_ids: _Optional[_Iterable[int]] = ..., tags: _Optional[_Iterable[str]] = ..., keys: _Optional[_Iterable[str]] = ..., unique_keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Iterable[_Union[Properties, _Mapping]]] = ..., flags: _Optional[_Iterable[int]] = ..., born_timestamps: _Optional[_Iterable[int]] = ..., born_hosts: _Optional[_Iterable[str]] = ..., reconsume_times: _Optional[_Iterable[int]] = ..., sysflags: _Optional[_Iterable[int]] = ...) -> None: ...

class AppendResult(_message.Message):
    __slots__ = ("statuses", "msg_ids", "physical_offsets", "sizes", "queue_ids", "queue_offsets", "unique_keys", "store_timestamps", "shards")
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    MSG_IDS_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEYS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedScalarFieldContainer[PutStatus]
    msg_ids: _containers.RepeatedScalarFieldContainer[str]
    physical_offsets: _containers.RepeatedScalarFieldContainer[int]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    unique_keys: _containers.RepeatedScalarFieldContainer[str]
    store_timestamps: _containers.RepeatedScalarFieldContainer[int]
    shards: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, statuses: _Optional[_Iterable[_Union[PutStatus, str]]] = ..., msg_ids: _Optional[_Iterable[str]] = ..., physical_offsets: _Optional[_Iterable[int]] = ..., sizes: _Optional[_Iterable[int]] = ..., queue_ids: _Optional[_Iterable[int]] = ..., queue_offsets: _Optional[_Iterable[int]] = ..., unique_keys: _Optional[_Iterable[str]] = ..., store_timestamps: _Optional[_Iterable[int]] = ..., shards: _Optional[_Iterable[int]] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("msg_id", "topic", "queue_id", "queue_offset", "physical_offset", "size", "body", "properties", "tags", "keys", "unique_key", "flag", "sysflag", "body_crc", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset", "shard")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    SYSFLAG_FIELD_NUMBER: _ClassVar[int]
    BODY_CRC_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    PREPARED_TRANSACTION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    properties: _containers.ScalarMap[str, str]
    tags: str
    keys: str
    unique_key: str
    flag: int
    sysflag: int
    body_crc: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    shard: int
    def __init__(self, msg_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., physical_offset: _Optional[int] = ..., size: _Optional[int] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., unique_key: _Optional[str] = ..., flag: _Optional[int] = ..., sysflag: _Optional[int] = ..., body_crc: _Optional[int] = ..., born_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., store_timestamp: _Optional[int] = ..., store_host: _Optional[str] = ..., reconsume_times: _Optional[int] = ..., prepared_transaction_offset: _Optional[int] = ..., shard: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm", "message_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: str
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., message_type: _Optional[str] = ...) -> None: ...

class QueueRange(_message.Message):
    __slots__ = ("topic", "queue_id", "min_offset", "max_offset", "last_physical_offset", "last_store_timestamp", "shard")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_physical_offset: int
    last_store_timestamp: int
    shard: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_physical_offset: _Optional[int] = ..., last_store_timestamp: _Optional[int] = ..., shard: _Optional[int] = ...) -> None: ...

class GroupOffset(_message.Message):
    __slots__ = ("topic", "queue_id", "broker_offset", "consumer_offset", "lag", "shard", "pop", "in_flight")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    shard: int
    pop: bool
    in_flight: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., lag: _Optional[int] = ..., shard: _Optional[int] = ..., pop: _Optional[bool] = ..., in_flight: _Optional[int] = ...) -> None: ...

class ConsumerLoss(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "from_offset", "to_offset", "messages", "forced", "at_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    FORCED_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    from_offset: int
    to_offset: int
    messages: int
    forced: bool
    at_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., messages: _Optional[int] = ..., forced: _Optional[bool] = ..., at_ms: _Optional[int] = ...) -> None: ...

class WriteRefusals(_message.Message):
    __slots__ = ("count", "since_ms", "cause", "reason")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    count: int
    since_ms: int
    cause: str
    reason: str
    def __init__(self, count: _Optional[int] = ..., since_ms: _Optional[int] = ..., cause: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class BuilderProgress(_message.Message):
    __slots__ = ("commitlog_incarnation", "progress_offset", "durable_offset", "state", "error", "stopped_loops", "stuck", "stuck_since_ms", "recovery_step", "recovery_done", "recovery_total", "consumer_losses")
    COMMITLOG_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STOPPED_LOOPS_FIELD_NUMBER: _ClassVar[int]
    STUCK_FIELD_NUMBER: _ClassVar[int]
    STUCK_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_STEP_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_DONE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_LOSSES_FIELD_NUMBER: _ClassVar[int]
    commitlog_incarnation: int
    progress_offset: int
    durable_offset: int
    state: str
    error: str
    stopped_loops: _containers.RepeatedScalarFieldContainer[str]
    stuck: str
    stuck_since_ms: int
    recovery_step: str
    recovery_done: int
    recovery_total: int
    consumer_losses: _containers.RepeatedCompositeFieldContainer[ConsumerLoss]
    def __init__(self, commitlog_incarnation: _Optional[int] = ..., progress_offset: _Optional[int] = ..., durable_offset: _Optional[int] = ..., state: _Optional[str] = ..., error: _Optional[str] = ..., stopped_loops: _Optional[_Iterable[str]] = ..., stuck: _Optional[str] = ..., stuck_since_ms: _Optional[int] = ..., recovery_step: _Optional[str] = ..., recovery_done: _Optional[int] = ..., recovery_total: _Optional[int] = ..., consumer_losses: _Optional[_Iterable[_Union[ConsumerLoss, _Mapping]]] = ...) -> None: ...

class EncodedBatch(_message.Message):
    __slots__ = ("records", "topics", "shard", "shards")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    topics: _containers.RepeatedScalarFieldContainer[str]
    shard: int
    shards: int
    def __init__(self, records: _Optional[bytes] = ..., topics: _Optional[_Iterable[str]] = ..., shard: _Optional[int] = ..., shards: _Optional[int] = ...) -> None: ...

class EncodedAppendResult(_message.Message):
    __slots__ = ("status", "physical_offsets", "queue_ids", "queue_offsets", "store_timestamp", "msg_id_prefix", "shard")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    status: PutStatus
    physical_offsets: bytes
    queue_ids: bytes
    queue_offsets: bytes
    store_timestamp: int
    msg_id_prefix: str
    shard: int
    def __init__(self, status: _Optional[_Union[PutStatus, str]] = ..., physical_offsets: _Optional[bytes] = ..., queue_ids: _Optional[bytes] = ..., queue_offsets: _Optional[bytes] = ..., store_timestamp: _Optional[int] = ..., msg_id_prefix: _Optional[str] = ..., shard: _Optional[int] = ...) -> None: ...

class CallStatus(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...
