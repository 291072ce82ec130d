from mqstore.rpc.v1 import common_pb2 as _common_pb2
from mqstore.rpc.v1 import front_pb2 as _front_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PopOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    POP_OK: _ClassVar[PopOutcome]
    POP_STALE: _ClassVar[PopOutcome]
    POP_EXPIRED: _ClassVar[PopOutcome]
    POP_MALFORMED: _ClassVar[PopOutcome]
POP_OK: PopOutcome
POP_STALE: PopOutcome
POP_EXPIRED: PopOutcome
POP_MALFORMED: PopOutcome

class PopCall(_message.Message):
    __slots__ = ("id", "timeout_ms", "ack", "change_invisible", "dead_letter")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CHANGE_INVISIBLE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    id: int
    timeout_ms: int
    ack: AckPopRequest
    change_invisible: ChangeInvisibleRequest
    dead_letter: PopToDeadLetterRequest
    def __init__(self, id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., ack: _Optional[_Union[AckPopRequest, _Mapping]] = ..., change_invisible: _Optional[_Union[ChangeInvisibleRequest, _Mapping]] = ..., dead_letter: _Optional[_Union[PopToDeadLetterRequest, _Mapping]] = ...) -> None: ...

class PopStreamRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[PopCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[PopCall, _Mapping]]] = ...) -> None: ...

class PopAnswer(_message.Message):
    __slots__ = ("id", "status", "ack", "change_invisible", "dead_letter")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CHANGE_INVISIBLE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    id: int
    status: _common_pb2.CallStatus
    ack: AckPopResponse
    change_invisible: ChangeInvisibleResponse
    dead_letter: PopToDeadLetterResponse
    def __init__(self, id: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.CallStatus, _Mapping]] = ..., ack: _Optional[_Union[AckPopResponse, _Mapping]] = ..., change_invisible: _Optional[_Union[ChangeInvisibleResponse, _Mapping]] = ..., dead_letter: _Optional[_Union[PopToDeadLetterResponse, _Mapping]] = ...) -> None: ...

class PopStreamResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[PopAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[PopAnswer, _Mapping]]] = ...) -> None: ...

class PopRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_ids", "max_messages", "invisible_ms", "wait_ms", "tag_expression", "fifo", "max_attempts", "dead_letter_queue_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    max_messages: int
    invisible_ms: int
    wait_ms: int
    tag_expression: str
    fifo: bool
    max_attempts: int
    dead_letter_queue_id: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_ids: _Optional[_Iterable[int]] = ..., max_messages: _Optional[int] = ..., invisible_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., tag_expression: _Optional[str] = ..., fifo: _Optional[bool] = ..., max_attempts: _Optional[int] = ..., dead_letter_queue_id: _Optional[int] = ...) -> None: ...

class PoppedMessage(_message.Message):
    __slots__ = ("queue_id", "queue_offset", "attempt", "receipt_handle", "size")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    queue_offset: int
    attempt: int
    receipt_handle: str
    size: int
    def __init__(self, queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., attempt: _Optional[int] = ..., receipt_handle: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class PopResponse(_message.Message):
    __slots__ = ("messages", "records", "dead_lettered", "set_aside")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    SET_ASIDE_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PoppedMessage]
    records: bytes
    dead_lettered: int
    set_aside: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, messages: _Optional[_Iterable[_Union[PoppedMessage, _Mapping]]] = ..., records: _Optional[bytes] = ..., dead_lettered: _Optional[int] = ..., set_aside: _Optional[_Iterable[str]] = ...) -> None: ...

class AckPopRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class AckPopResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedScalarFieldContainer[PopOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[PopOutcome, str]]] = ...) -> None: ...

class ChangeInvisibleRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle", "invisible_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    invisible_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_ms: _Optional[int] = ...) -> None: ...

class ChangeInvisibleResponse(_message.Message):
    __slots__ = ("outcome", "receipt_handle")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    outcome: PopOutcome
    receipt_handle: str
    def __init__(self, outcome: _Optional[_Union[PopOutcome, str]] = ..., receipt_handle: _Optional[str] = ...) -> None: ...

class PopToDeadLetterRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle", "dead_letter_queue_id", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    dead_letter_queue_id: int
    reason: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., dead_letter_queue_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class PopToDeadLetterResponse(_message.Message):
    __slots__ = ("outcome",)
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    outcome: PopOutcome
    def __init__(self, outcome: _Optional[_Union[PopOutcome, str]] = ...) -> None: ...

class PutUnitsRequest(_message.Message):
    __slots__ = ("topics", "topic_epoch", "topic_ids", "named_ids", "topic_codes", "queue_ids", "queue_offsets", "physical_offsets", "sizes", "tags_codes", "store_timestamps", "sysflags", "from_offset", "to_offset", "incarnation", "commitlog_min_offset", "forced_deleted_to", "seq", "to_offset_vouch")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_IDS_FIELD_NUMBER: _ClassVar[int]
    NAMED_IDS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CODES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    TAGS_CODES_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    SYSFLAGS_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FORCED_DELETED_TO_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_VOUCH_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    topic_epoch: int
    topic_ids: bytes
    named_ids: bytes
    topic_codes: bytes
    queue_ids: bytes
    queue_offsets: bytes
    physical_offsets: bytes
    sizes: bytes
    tags_codes: bytes
    store_timestamps: bytes
    sysflags: bytes
    from_offset: int
    to_offset: int
    incarnation: int
    commitlog_min_offset: int
    forced_deleted_to: int
    seq: int
    to_offset_vouch: bytes
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., topic_epoch: _Optional[int] = ..., topic_ids: _Optional[bytes] = ..., named_ids: _Optional[bytes] = ..., topic_codes: _Optional[bytes] = ..., queue_ids: _Optional[bytes] = ..., queue_offsets: _Optional[bytes] = ..., physical_offsets: _Optional[bytes] = ..., sizes: _Optional[bytes] = ..., tags_codes: _Optional[bytes] = ..., store_timestamps: _Optional[bytes] = ..., sysflags: _Optional[bytes] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., incarnation: _Optional[int] = ..., commitlog_min_offset: _Optional[int] = ..., forced_deleted_to: _Optional[int] = ..., seq: _Optional[int] = ..., to_offset_vouch: _Optional[bytes] = ...) -> None: ...

class PutUnitsResponse(_message.Message):
    __slots__ = ("progress_offset", "seq", "status")
    PROGRESS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    progress_offset: int
    seq: int
    status: _common_pb2.CallStatus
    def __init__(self, progress_offset: _Optional[int] = ..., seq: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.CallStatus, _Mapping]] = ...) -> None: ...

class GetProgressRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MakeQueuesRequest(_message.Message):
    __slots__ = ("topic", "queue_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., queue_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class MakeQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: int
    def __init__(self, queues: _Optional[int] = ...) -> None: ...

class GetUnitsRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_units")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_UNITS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_units: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_units: _Optional[int] = ...) -> None: ...

class GetUnitsResponse(_message.Message):
    __slots__ = ("first_offset", "physical_offsets", "sizes", "tags_codes", "min_offset", "max_offset", "exists")
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    TAGS_CODES_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    first_offset: int
    physical_offsets: _containers.RepeatedScalarFieldContainer[int]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    tags_codes: _containers.RepeatedScalarFieldContainer[int]
    min_offset: int
    max_offset: int
    exists: bool
    def __init__(self, first_offset: _Optional[int] = ..., physical_offsets: _Optional[_Iterable[int]] = ..., sizes: _Optional[_Iterable[int]] = ..., tags_codes: _Optional[_Iterable[int]] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., exists: _Optional[bool] = ...) -> None: ...

class MinMaxRequest(_message.Message):
    __slots__ = ("topic", "queue_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., queue_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class MinMaxResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.QueueRange]
    def __init__(self, queues: _Optional[_Iterable[_Union[_common_pb2.QueueRange, _Mapping]]] = ...) -> None: ...

class OffsetAtTimeRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class OffsetAtTimeResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class CommitOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CommitOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class FetchOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class GroupOffsetsRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[_common_pb2.GroupOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[_common_pb2.GroupOffset, _Mapping]]] = ...) -> None: ...
