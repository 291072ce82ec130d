from mqstore.rpc.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Resolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOLUTION_UNSPECIFIED: _ClassVar[Resolution]
    RESOLUTION_COMMIT: _ClassVar[Resolution]
    RESOLUTION_ROLLBACK: _ClassVar[Resolution]

class EndOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    END_OUTCOME_UNSPECIFIED: _ClassVar[EndOutcome]
    END_OUTCOME_ENDED: _ClassVar[EndOutcome]
    END_OUTCOME_ALREADY_ENDED: _ClassVar[EndOutcome]
    END_OUTCOME_LEFT_OPEN: _ClassVar[EndOutcome]
    END_OUTCOME_NO_TRANSACTION: _ClassVar[EndOutcome]
    END_OUTCOME_RECOVERING: _ClassVar[EndOutcome]
RESOLUTION_UNSPECIFIED: Resolution
RESOLUTION_COMMIT: Resolution
RESOLUTION_ROLLBACK: Resolution
END_OUTCOME_UNSPECIFIED: EndOutcome
END_OUTCOME_ENDED: EndOutcome
END_OUTCOME_ALREADY_ENDED: EndOutcome
END_OUTCOME_LEFT_OPEN: EndOutcome
END_OUTCOME_NO_TRANSACTION: EndOutcome
END_OUTCOME_RECOVERING: EndOutcome

class PrepareRequest(_message.Message):
    __slots__ = ("shards", "halves")
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    HALVES_FIELD_NUMBER: _ClassVar[int]
    shards: int
    halves: _common_pb2.MessageColumns
    def __init__(self, shards: _Optional[int] = ..., halves: _Optional[_Union[_common_pb2.MessageColumns, _Mapping]] = ...) -> None: ...

class PrepareResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.AppendResult
    def __init__(self, result: _Optional[_Union[_common_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class EndRequest(_message.Message):
    __slots__ = ("shards", "transaction_id", "topic", "message_id", "resolution", "source")
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    shards: int
    transaction_id: str
    topic: str
    message_id: str
    resolution: Resolution
    source: str
    def __init__(self, shards: _Optional[int] = ..., transaction_id: _Optional[str] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ..., resolution: _Optional[_Union[Resolution, str]] = ..., source: _Optional[str] = ...) -> None: ...

class EndResponse(_message.Message):
    __slots__ = ("outcome",)
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    outcome: EndOutcome
    def __init__(self, outcome: _Optional[_Union[EndOutcome, str]] = ...) -> None: ...

class FrontTopics(_message.Message):
    __slots__ = ("shards", "front", "topics")
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    FRONT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    shards: int
    front: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, shards: _Optional[int] = ..., front: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class CheckBack(_message.Message):
    __slots__ = ("topic", "transaction_id", "record", "check")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    topic: str
    transaction_id: str
    record: bytes
    check: int
    def __init__(self, topic: _Optional[str] = ..., transaction_id: _Optional[str] = ..., record: _Optional[bytes] = ..., check: _Optional[int] = ...) -> None: ...
