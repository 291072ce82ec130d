from mqstore.rpc.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    FOUND: _ClassVar[PullStatus]
    NO_NEW_MESSAGE: _ClassVar[PullStatus]
    NO_MATCHED_MESSAGE: _ClassVar[PullStatus]
    OFFSET_TOO_SMALL: _ClassVar[PullStatus]
    OFFSET_OVERFLOW: _ClassVar[PullStatus]
    NO_MESSAGE_IN_QUEUE: _ClassVar[PullStatus]
PULL_STATUS_UNSPECIFIED: PullStatus
FOUND: PullStatus
NO_NEW_MESSAGE: PullStatus
NO_MATCHED_MESSAGE: PullStatus
OFFSET_TOO_SMALL: PullStatus
OFFSET_OVERFLOW: PullStatus
NO_MESSAGE_IN_QUEUE: PullStatus

class GetRouteRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetRouteResponse(_message.Message):
    __slots__ = ("shards", "write_queue_nums", "default_queue_nums", "msg_id_prefixes")
    class WriteQueueNumsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    shards: int
    write_queue_nums: _containers.ScalarMap[str, int]
    default_queue_nums: int
    msg_id_prefixes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, shards: _Optional[int] = ..., write_queue_nums: _Optional[_Mapping[str, int]] = ..., default_queue_nums: _Optional[int] = ..., msg_id_prefixes: _Optional[_Iterable[str]] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _common_pb2.MessageColumns
    def __init__(self, messages: _Optional[_Union[_common_pb2.MessageColumns, _Mapping]] = ...) -> None: ...

class ShardError(_message.Message):
    __slots__ = ("shard", "code", "message")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    shard: int
    code: str
    message: str
    def __init__(self, shard: _Optional[int] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class SendBatchResponse(_message.Message):
    __slots__ = ("result", "shard_errors")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SHARD_ERRORS_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.AppendResult
    shard_errors: _containers.RepeatedCompositeFieldContainer[ShardError]
    def __init__(self, result: _Optional[_Union[_common_pb2.AppendResult, _Mapping]] = ..., shard_errors: _Optional[_Iterable[_Union[ShardError, _Mapping]]] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_messages", "tag_expression", "raw")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    tag_expression: str
    raw: bool
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., tag_expression: _Optional[str] = ..., raw: _Optional[bool] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("status", "records", "raw_data", "raw_sizes", "next_offset", "min_offset", "max_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RAW_DATA_FIELD_NUMBER: _ClassVar[int]
    RAW_SIZES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.Record]
    raw_data: bytes
    raw_sizes: bytes
    next_offset: int
    min_offset: int
    max_offset: int
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., records: _Optional[_Iterable[_Union[_common_pb2.Record, _Mapping]]] = ..., raw_data: _Optional[bytes] = ..., raw_sizes: _Optional[bytes] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class QueryByMsgIdRequest(_message.Message):
    __slots__ = ("msg_id",)
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    def __init__(self, msg_id: _Optional[str] = ...) -> None: ...

class QueryByUniqueKeyRequest(_message.Message):
    __slots__ = ("topic", "unique_key", "max_num")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    unique_key: str
    max_num: int
    def __init__(self, topic: _Optional[str] = ..., unique_key: _Optional[str] = ..., max_num: _Optional[int] = ...) -> None: ...

class QueryByKeyRequest(_message.Message):
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

class QueryByOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.Record]
    def __init__(self, records: _Optional[_Iterable[_Union[_common_pb2.Record, _Mapping]]] = ...) -> None: ...

class GetOffsetByTimeRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class GetOffsetByTimeResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class FrontCommitOffsetRequest(_message.Message):
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

class FrontCommitOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FrontFetchOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class FrontFetchOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class ConsumerProgressRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class ConsumerProgressResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[_common_pb2.GroupOffset]
    def __init__(self, rows: _Optional[_Iterable[_Union[_common_pb2.GroupOffset, _Mapping]]] = ...) -> None: ...

class CreateOrUpdateTopicRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class CreateOrUpdateTopicResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class TopicStatusRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class TopicStatusResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.QueueRange]
    def __init__(self, queues: _Optional[_Iterable[_Union[_common_pb2.QueueRange, _Mapping]]] = ...) -> None: ...

class StoreStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShardStatus(_message.Message):
    __slots__ = ("shard", "endpoint", "state", "min_offset", "wrote_offset", "flushed_offset", "confirm_offset", "dispatched_offset", "writable", "unwritable_cause", "reput_offset", "dispatch_lag_bytes", "error", "recovery_phase", "recovery_percent", "queue_count", "commitlog_bytes", "disk_free_bytes", "clean_shutdown", "recovery_seconds", "incarnation", "appended_messages", "queue_builder", "index_builder", "stopped_loops", "node_id", "write_refusals", "consumer_losses", "forced_deleted_segments", "forced_deleted_bytes")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WROTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    UNWRITABLE_CAUSE_FIELD_NUMBER: _ClassVar[int]
    REPUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_PHASE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    APPENDED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_BUILDER_FIELD_NUMBER: _ClassVar[int]
    INDEX_BUILDER_FIELD_NUMBER: _ClassVar[int]
    STOPPED_LOOPS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WRITE_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_LOSSES_FIELD_NUMBER: _ClassVar[int]
    FORCED_DELETED_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    FORCED_DELETED_BYTES_FIELD_NUMBER: _ClassVar[int]
    shard: int
    endpoint: str
    state: str
    min_offset: int
    wrote_offset: int
    flushed_offset: int
    confirm_offset: int
    dispatched_offset: int
    writable: bool
    unwritable_cause: str
    reput_offset: int
    dispatch_lag_bytes: int
    error: str
    recovery_phase: str
    recovery_percent: float
    queue_count: int
    commitlog_bytes: int
    disk_free_bytes: int
    clean_shutdown: bool
    recovery_seconds: float
    incarnation: int
    appended_messages: int
    queue_builder: _common_pb2.BuilderProgress
    index_builder: _common_pb2.BuilderProgress
    stopped_loops: _containers.RepeatedScalarFieldContainer[str]
    node_id: str
    write_refusals: _common_pb2.WriteRefusals
    consumer_losses: _containers.RepeatedCompositeFieldContainer[_common_pb2.ConsumerLoss]
    forced_deleted_segments: int
    forced_deleted_bytes: int
    def __init__(self, shard: _Optional[int] = ..., endpoint: _Optional[str] = ..., state: _Optional[str] = ..., min_offset: _Optional[int] = ..., wrote_offset: _Optional[int] = ..., flushed_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., writable: _Optional[bool] = ..., unwritable_cause: _Optional[str] = ..., reput_offset: _Optional[int] = ..., dispatch_lag_bytes: _Optional[int] = ..., error: _Optional[str] = ..., recovery_phase: _Optional[str] = ..., recovery_percent: _Optional[float] = ..., queue_count: _Optional[int] = ..., commitlog_bytes: _Optional[int] = ..., disk_free_bytes: _Optional[int] = ..., clean_shutdown: _Optional[bool] = ..., recovery_seconds: _Optional[float] = ..., incarnation: _Optional[int] = ..., appended_messages: _Optional[int] = ..., queue_builder: _Optional[_Union[_common_pb2.BuilderProgress, _Mapping]] = ..., index_builder: _Optional[_Union[_common_pb2.BuilderProgress, _Mapping]] = ..., stopped_loops: _Optional[_Iterable[str]] = ..., node_id: _Optional[str] = ..., write_refusals: _Optional[_Union[_common_pb2.WriteRefusals, _Mapping]] = ..., consumer_losses: _Optional[_Iterable[_Union[_common_pb2.ConsumerLoss, _Mapping]]] = ..., forced_deleted_segments: _Optional[int] = ..., forced_deleted_bytes: _Optional[int] = ...) -> None: ...

class StoreStatusResponse(_message.Message):
    __slots__ = ("shards",)
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    shards: _containers.RepeatedCompositeFieldContainer[ShardStatus]
    def __init__(self, shards: _Optional[_Iterable[_Union[ShardStatus, _Mapping]]] = ...) -> None: ...

class AclUser(_message.Message):
    __slots__ = ("access_key", "admin")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    admin: bool
    def __init__(self, access_key: _Optional[str] = ..., admin: _Optional[bool] = ...) -> None: ...

class AclRule(_message.Message):
    __slots__ = ("user", "resource", "actions", "decision")
    USER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    user: str
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: str
    def __init__(self, user: _Optional[str] = ..., resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[str] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[AclUser]
    def __init__(self, users: _Optional[_Iterable[_Union[AclUser, _Mapping]]] = ...) -> None: ...

class AddUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "admin", "replace")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    admin: bool
    replace: bool
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., admin: _Optional[bool] = ..., replace: _Optional[bool] = ...) -> None: ...

class AddUserResponse(_message.Message):
    __slots__ = ("user", "replaced")
    USER_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    user: AclUser
    replaced: bool
    def __init__(self, user: _Optional[_Union[AclUser, _Mapping]] = ..., replaced: _Optional[bool] = ...) -> None: ...

class RemoveUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class RemoveUserResponse(_message.Message):
    __slots__ = ("rules_removed",)
    RULES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    rules_removed: int
    def __init__(self, rules_removed: _Optional[int] = ...) -> None: ...

class ListRulesRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class ListRulesResponse(_message.Message):
    __slots__ = ("rules",)
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[AclRule]
    def __init__(self, rules: _Optional[_Iterable[_Union[AclRule, _Mapping]]] = ...) -> None: ...

class AddRuleRequest(_message.Message):
    __slots__ = ("rule",)
    RULE_FIELD_NUMBER: _ClassVar[int]
    rule: AclRule
    def __init__(self, rule: _Optional[_Union[AclRule, _Mapping]] = ...) -> None: ...

class AddRuleResponse(_message.Message):
    __slots__ = ("rule", "replaced")
    RULE_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    rule: AclRule
    replaced: bool
    def __init__(self, rule: _Optional[_Union[AclRule, _Mapping]] = ..., replaced: _Optional[bool] = ...) -> None: ...

class RemoveRuleRequest(_message.Message):
    __slots__ = ("user", "resource", "decision")
    USER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    user: str
    resource: str
    decision: str
    def __init__(self, user: _Optional[str] = ..., resource: _Optional[str] = ..., decision: _Optional[str] = ...) -> None: ...

class RemoveRuleResponse(_message.Message):
    __slots__ = ("rules",)
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[AclRule]
    def __init__(self, rules: _Optional[_Iterable[_Union[AclRule, _Mapping]]] = ...) -> None: ...
