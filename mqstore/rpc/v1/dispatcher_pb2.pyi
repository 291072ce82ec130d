from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class DispatcherStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DispatcherStatusResponse(_message.Message):
    __slots__ = ("dispatched_offset", "confirm_offset", "lag_bytes", "dispatched_records", "batches", "running", "last_error", "incarnation", "resyncs", "index_behind", "index_offset", "index_error", "index_behind_since_ms", "index_stuck")
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RESYNCS_FIELD_NUMBER: _ClassVar[int]
    INDEX_BEHIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INDEX_ERROR_FIELD_NUMBER: _ClassVar[int]
    INDEX_BEHIND_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    INDEX_STUCK_FIELD_NUMBER: _ClassVar[int]
    dispatched_offset: int
    confirm_offset: int
    lag_bytes: int
    dispatched_records: int
    batches: int
    running: bool
    last_error: str
    incarnation: int
    resyncs: int
    index_behind: bool
    index_offset: int
    index_error: str
    index_behind_since_ms: int
    index_stuck: bool
    def __init__(self, dispatched_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., dispatched_records: _Optional[int] = ..., batches: _Optional[int] = ..., running: _Optional[bool] = ..., last_error: _Optional[str] = ..., incarnation: _Optional[int] = ..., resyncs: _Optional[int] = ..., index_behind: _Optional[bool] = ..., index_offset: _Optional[int] = ..., index_error: _Optional[str] = ..., index_behind_since_ms: _Optional[int] = ..., index_stuck: _Optional[bool] = ...) -> None: ...
