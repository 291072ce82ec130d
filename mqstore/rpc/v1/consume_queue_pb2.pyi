from mqstore.rpc.v1 import common_pb2 as _common_pb2
from mqstore.rpc.v1 import front_pb2 as _front_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PutUnitsRequest(_message.Message):
    __slots__ = ("topics", "topic_codes", "queue_ids", "queue_offsets", "physical_offsets", "sizes", "tags_codes", "store_timestamps", "sysflags", "from_offset", "to_offset", "incarnation", "commitlog_min_offset", "forced_deleted_to")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
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
    topics: _containers.RepeatedScalarFieldContainer[str]
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
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., topic_codes: _Optional[bytes] = ..., queue_ids: _Optional[bytes] = ..., queue_offsets: _Optional[bytes] = ..., physical_offsets: _Optional[bytes] = ..., sizes: _Optional[bytes] = ..., tags_codes: _Optional[bytes] = ..., store_timestamps: _Optional[bytes] = ..., sysflags: _Optional[bytes] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., incarnation: _Optional[int] = ..., commitlog_min_offset: _Optional[int] = ..., forced_deleted_to: _Optional[int] = ...) -> None: ...

class PutUnitsResponse(_message.Message):
    __slots__ = ("progress_offset",)
    PROGRESS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    progress_offset: int
    def __init__(self, progress_offset: _Optional[int] = ...) -> None: ...

class GetProgressRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

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
