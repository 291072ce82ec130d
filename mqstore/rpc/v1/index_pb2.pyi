from mqstore.rpc.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IndexProgressRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PutKeysRequest(_message.Message):
    __slots__ = ("key_hashes", "physical_offsets", "store_timestamps", "from_offset", "to_offset", "incarnation", "commitlog_min_offset", "seq", "to_offset_vouch")
    KEY_HASHES_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_VOUCH_FIELD_NUMBER: _ClassVar[int]
    key_hashes: bytes
    physical_offsets: bytes
    store_timestamps: bytes
    from_offset: int
    to_offset: int
    incarnation: int
    commitlog_min_offset: int
    seq: int
    to_offset_vouch: bytes
    def __init__(self, key_hashes: _Optional[bytes] = ..., physical_offsets: _Optional[bytes] = ..., store_timestamps: _Optional[bytes] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., incarnation: _Optional[int] = ..., commitlog_min_offset: _Optional[int] = ..., seq: _Optional[int] = ..., to_offset_vouch: _Optional[bytes] = ...) -> None: ...

class PutKeysResponse(_message.Message):
    __slots__ = ("indexed", "skipped", "progress_offset", "seq", "status")
    INDEXED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    indexed: int
    skipped: int
    progress_offset: int
    seq: int
    status: _common_pb2.CallStatus
    def __init__(self, indexed: _Optional[int] = ..., skipped: _Optional[int] = ..., progress_offset: _Optional[int] = ..., seq: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.CallStatus, _Mapping]] = ...) -> None: ...

class IndexQueryRequest(_message.Message):
    __slots__ = ("topic", "key", "begin_ms", "end_ms", "max_num")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BEGIN_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    begin_ms: int
    end_ms: int
    max_num: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., begin_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., max_num: _Optional[int] = ...) -> None: ...

class IndexQueryResponse(_message.Message):
    __slots__ = ("physical_offsets",)
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    physical_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, physical_offsets: _Optional[_Iterable[int]] = ...) -> None: ...
