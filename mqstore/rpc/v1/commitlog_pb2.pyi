from mqstore.rpc.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppendCall(_message.Message):
    __slots__ = ("id", "timeout_ms", "batch", "encoded", "delayed")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    id: int
    timeout_ms: int
    batch: AppendBatchRequest
    encoded: bytes
    delayed: AppendBatchRequest
    def __init__(self, id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., batch: _Optional[_Union[AppendBatchRequest, _Mapping]] = ..., encoded: _Optional[bytes] = ..., delayed: _Optional[_Union[AppendBatchRequest, _Mapping]] = ...) -> None: ...

class AppendStreamRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[AppendCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[AppendCall, _Mapping]]] = ...) -> None: ...

class AppendAnswer(_message.Message):
    __slots__ = ("id", "status", "batch", "encoded")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    id: int
    status: _common_pb2.CallStatus
    batch: AppendBatchResponse
    encoded: bytes
    def __init__(self, id: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.CallStatus, _Mapping]] = ..., batch: _Optional[_Union[AppendBatchResponse, _Mapping]] = ..., encoded: _Optional[bytes] = ...) -> None: ...

class AppendStreamResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[AppendAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[AppendAnswer, _Mapping]]] = ...) -> None: ...

class AppendBatchRequest(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _common_pb2.MessageColumns
    def __init__(self, messages: _Optional[_Union[_common_pb2.MessageColumns, _Mapping]] = ...) -> None: ...

class AppendBatchResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.AppendResult
    def __init__(self, result: _Optional[_Union[_common_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("offsets", "raw", "skip_missing", "sizes")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    SKIP_MISSING_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    raw: bool
    skip_missing: bool
    sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, offsets: _Optional[_Iterable[int]] = ..., raw: _Optional[bool] = ..., skip_missing: _Optional[bool] = ..., sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("offsets", "records", "raw_data", "raw_sizes")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RAW_DATA_FIELD_NUMBER: _ClassVar[int]
    RAW_SIZES_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.Record]
    raw_data: bytes
    raw_sizes: bytes
    def __init__(self, offsets: _Optional[_Iterable[int]] = ..., records: _Optional[_Iterable[_Union[_common_pb2.Record, _Mapping]]] = ..., raw_data: _Optional[bytes] = ..., raw_sizes: _Optional[bytes] = ...) -> None: ...

class ReadRangeRequest(_message.Message):
    __slots__ = ("offset", "max_bytes", "wait_ms", "dispatched_offset", "bounds_only", "min_bytes", "linger_ms")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BOUNDS_ONLY_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    LINGER_MS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    max_bytes: int
    wait_ms: int
    dispatched_offset: int
    bounds_only: bool
    min_bytes: int
    linger_ms: int
    def __init__(self, offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., wait_ms: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., bounds_only: _Optional[bool] = ..., min_bytes: _Optional[int] = ..., linger_ms: _Optional[int] = ...) -> None: ...

class TailRequest(_message.Message):
    __slots__ = ("start", "dispatched_offset", "credit")
    START_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    start: ReadRangeRequest
    dispatched_offset: int
    credit: int
    def __init__(self, start: _Optional[_Union[ReadRangeRequest, _Mapping]] = ..., dispatched_offset: _Optional[int] = ..., credit: _Optional[int] = ...) -> None: ...

class ReadRangeResponse(_message.Message):
    __slots__ = ("offset", "data", "record_count", "next_offset", "incarnation", "confirm_offset", "min_offset", "forced_deleted_to", "data_end", "vouch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FORCED_DELETED_TO_FIELD_NUMBER: _ClassVar[int]
    DATA_END_FIELD_NUMBER: _ClassVar[int]
    VOUCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    record_count: int
    next_offset: int
    incarnation: int
    confirm_offset: int
    min_offset: int
    forced_deleted_to: int
    data_end: int
    vouch: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., record_count: _Optional[int] = ..., next_offset: _Optional[int] = ..., incarnation: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., forced_deleted_to: _Optional[int] = ..., data_end: _Optional[int] = ..., vouch: _Optional[bytes] = ...) -> None: ...

class GetOffsetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetOffsetsResponse(_message.Message):
    __slots__ = ("min_offset", "wrote_offset", "flushed_offset", "confirm_offset", "dispatched_offset", "incarnation", "flush_mode", "writable", "unwritable_cause", "clean_shutdown", "recovery_seconds", "msg_id_prefix", "forced_deleted_to")
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WROTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    FLUSH_MODE_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    UNWRITABLE_CAUSE_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    FORCED_DELETED_TO_FIELD_NUMBER: _ClassVar[int]
    min_offset: int
    wrote_offset: int
    flushed_offset: int
    confirm_offset: int
    dispatched_offset: int
    incarnation: int
    flush_mode: str
    writable: bool
    unwritable_cause: str
    clean_shutdown: bool
    recovery_seconds: float
    msg_id_prefix: str
    forced_deleted_to: int
    def __init__(self, min_offset: _Optional[int] = ..., wrote_offset: _Optional[int] = ..., flushed_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., incarnation: _Optional[int] = ..., flush_mode: _Optional[str] = ..., writable: _Optional[bool] = ..., unwritable_cause: _Optional[str] = ..., clean_shutdown: _Optional[bool] = ..., recovery_seconds: _Optional[float] = ..., msg_id_prefix: _Optional[str] = ..., forced_deleted_to: _Optional[int] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("configs",)
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Histogram(_message.Message):
    __slots__ = ("bounds", "counts", "sum")
    BOUNDS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    SUM_FIELD_NUMBER: _ClassVar[int]
    bounds: _containers.RepeatedScalarFieldContainer[float]
    counts: _containers.RepeatedScalarFieldContainer[int]
    sum: float
    def __init__(self, bounds: _Optional[_Iterable[float]] = ..., counts: _Optional[_Iterable[int]] = ..., sum: _Optional[float] = ...) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("state", "error", "incarnation", "recovery_phase", "recovery_percent", "recovery_bytes_done", "recovery_bytes_total", "clean_shutdown", "recovery_seconds", "min_offset", "wrote_offset", "flushed_offset", "confirm_offset", "dispatched_offset", "writable", "unwritable_cause", "queue_count", "commitlog_bytes", "disk_free_bytes", "appended_messages", "appended_bytes", "append_failures", "append_seconds", "flush_seconds", "stopped_loops", "delay_delivered", "delay_skipped", "background_failures", "write_refusals", "forced_deleted_segments", "forced_deleted_bytes")
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_PHASE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_BYTES_DONE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WROTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    UNWRITABLE_CAUSE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    APPENDED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    APPENDED_BYTES_FIELD_NUMBER: _ClassVar[int]
    APPEND_FAILURES_FIELD_NUMBER: _ClassVar[int]
    APPEND_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FLUSH_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STOPPED_LOOPS_FIELD_NUMBER: _ClassVar[int]
    DELAY_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DELAY_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FAILURES_FIELD_NUMBER: _ClassVar[int]
    WRITE_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    FORCED_DELETED_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    FORCED_DELETED_BYTES_FIELD_NUMBER: _ClassVar[int]
    state: str
    error: str
    incarnation: int
    recovery_phase: str
    recovery_percent: float
    recovery_bytes_done: int
    recovery_bytes_total: int
    clean_shutdown: bool
    recovery_seconds: float
    min_offset: int
    wrote_offset: int
    flushed_offset: int
    confirm_offset: int
    dispatched_offset: int
    writable: bool
    unwritable_cause: str
    queue_count: int
    commitlog_bytes: int
    disk_free_bytes: int
    appended_messages: int
    appended_bytes: int
    append_failures: int
    append_seconds: Histogram
    flush_seconds: Histogram
    stopped_loops: _containers.RepeatedScalarFieldContainer[str]
    delay_delivered: int
    delay_skipped: int
    background_failures: int
    write_refusals: _common_pb2.WriteRefusals
    forced_deleted_segments: int
    forced_deleted_bytes: int
    def __init__(self, state: _Optional[str] = ..., error: _Optional[str] = ..., incarnation: _Optional[int] = ..., recovery_phase: _Optional[str] = ..., recovery_percent: _Optional[float] = ..., recovery_bytes_done: _Optional[int] = ..., recovery_bytes_total: _Optional[int] = ..., clean_shutdown: _Optional[bool] = ..., recovery_seconds: _Optional[float] = ..., min_offset: _Optional[int] = ..., wrote_offset: _Optional[int] = ..., flushed_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., writable: _Optional[bool] = ..., unwritable_cause: _Optional[str] = ..., queue_count: _Optional[int] = ..., commitlog_bytes: _Optional[int] = ..., disk_free_bytes: _Optional[int] = ..., appended_messages: _Optional[int] = ..., appended_bytes: _Optional[int] = ..., append_failures: _Optional[int] = ..., append_seconds: _Optional[_Union[Histogram, _Mapping]] = ..., flush_seconds: _Optional[_Union[Histogram, _Mapping]] = ..., stopped_loops: _Optional[_Iterable[str]] = ..., delay_delivered: _Optional[int] = ..., delay_skipped: _Optional[int] = ..., background_failures: _Optional[int] = ..., write_refusals: _Optional[_Union[_common_pb2.WriteRefusals, _Mapping]] = ..., forced_deleted_segments: _Optional[int] = ..., forced_deleted_bytes: _Optional[int] = ...) -> None: ...

class GetRecoveryRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetRecoveryResponse(_message.Message):
    __slots__ = ("incarnation", "clean_shutdown", "start_offset", "min_offset", "wrote_offset", "redispatch_from", "index_msg_timestamp", "queues")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WROTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REDISPATCH_FROM_FIELD_NUMBER: _ClassVar[int]
    INDEX_MSG_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    clean_shutdown: bool
    start_offset: int
    min_offset: int
    wrote_offset: int
    redispatch_from: int
    index_msg_timestamp: int
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.QueueRange]
    def __init__(self, incarnation: _Optional[int] = ..., clean_shutdown: _Optional[bool] = ..., start_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., wrote_offset: _Optional[int] = ..., redispatch_from: _Optional[int] = ..., index_msg_timestamp: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.QueueRange, _Mapping]]] = ...) -> None: ...

class CheckUnitsRequest(_message.Message):
    __slots__ = ("physical_offsets", "sizes", "queue_ids", "queue_offsets", "topics", "topic_codes", "tags_codes", "check_tags", "check_from", "deep_from")
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CODES_FIELD_NUMBER: _ClassVar[int]
    TAGS_CODES_FIELD_NUMBER: _ClassVar[int]
    CHECK_TAGS_FIELD_NUMBER: _ClassVar[int]
    CHECK_FROM_FIELD_NUMBER: _ClassVar[int]
    DEEP_FROM_FIELD_NUMBER: _ClassVar[int]
    physical_offsets: _containers.RepeatedScalarFieldContainer[int]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    topic_codes: _containers.RepeatedScalarFieldContainer[int]
    tags_codes: _containers.RepeatedScalarFieldContainer[int]
    check_tags: _containers.RepeatedScalarFieldContainer[bool]
    check_from: int
    deep_from: int
    def __init__(self, physical_offsets: _Optional[_Iterable[int]] = ..., sizes: _Optional[_Iterable[int]] = ..., queue_ids: _Optional[_Iterable[int]] = ..., queue_offsets: _Optional[_Iterable[int]] = ..., topics: _Optional[_Iterable[str]] = ..., topic_codes: _Optional[_Iterable[int]] = ..., tags_codes: _Optional[_Iterable[int]] = ..., check_tags: _Optional[_Iterable[bool]] = ..., check_from: _Optional[int] = ..., deep_from: _Optional[int] = ...) -> None: ...

class CheckUnitsResponse(_message.Message):
    __slots__ = ("ok",)
    OK_FIELD_NUMBER: _ClassVar[int]
    ok: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ok: _Optional[_Iterable[bool]] = ...) -> None: ...

class NoteDerivedRequest(_message.Message):
    __slots__ = ("kind", "durable_offset", "timestamp")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    kind: str
    durable_offset: int
    timestamp: int
    def __init__(self, kind: _Optional[str] = ..., durable_offset: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class NoteDerivedResponse(_message.Message):
    __slots__ = ("durable_offset",)
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    durable_offset: int
    def __init__(self, durable_offset: _Optional[int] = ...) -> None: ...

class AttachQueueEndsRequest(_message.Message):
    __slots__ = ("incarnation", "progress_offset", "queues")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    progress_offset: int
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.QueueRange]
    def __init__(self, incarnation: _Optional[int] = ..., progress_offset: _Optional[int] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.QueueRange, _Mapping]]] = ...) -> None: ...

class AttachQueueEndsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
