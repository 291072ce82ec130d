"""A blocking Python client of the public API (FrontService), as the CLI uses it.

    with FrontClient("127.0.0.1:8080") as c:
        res = c.send("TopicTest", [b"hello", b"world"], tags="TagA", keys="order-1")
        print(res.msg_ids, res.queue_offsets)
        print([r.body for r in c.pull("TopicTest", 0, 0).records])

Errors arrive as ``grpc.RpcError`` with the server's status code and message.

A front with an ACL (``serve --acl``) wants every call signed: give ``access_key``
and ``secret_key`` (default: the environment's MQSTORE_ACCESS_KEY and
MQSTORE_SECRET_KEY); each call then carries RocketMQ 5's ``authorization`` and
``x-mq-date-time`` headers, with a fresh date-time (services/acl.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import grpc

from mqstore.errors import MqStoreError
from mqstore.formats.message import MessageRecord, decode_records
from mqstore.formats.packed import RawRecords
from mqstore.rpc.v1 import common_pb2, front_pb2, front_pb2_grpc
from mqstore.services.common.headers import AddHeaders
from mqstore.services.common.server import sync_channel
from mqstore.services.query.acl import ENV_ACCESS_KEY, ENV_SECRET_KEY, auth_metadata
from mqstore.services.query.encoded_send import EncodedSender, EncodedSendResult
from mqstore.store.messages import MessageBatch


def columns(
    topics: str | Sequence[str],
    bodies: Sequence[bytes],
    *,
    queue_ids: int | Sequence[int] | None = None,
    tags: str | Sequence[str] | None = None,
    keys: str | Sequence[str] | None = None,
    unique_keys: Sequence[str] | None = None,
    properties: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None,
) -> common_pb2.MessageColumns:
    """MessageColumns from Python values (a scalar stands for every message)."""

    def col(v):
        if v is None:
            return []
        return [v] if isinstance(v, (str, int, bytes)) else list(v)

    props = []
    if isinstance(properties, Mapping):
        props = [common_pb2.Properties(entries=dict(properties))]
    elif properties is not None:
        props = [common_pb2.Properties(entries=dict(p or {})) for p in properties]
    return common_pb2.MessageColumns(
        topics=col(topics),
        bodies=list(bodies),
        queue_ids=col(queue_ids),
        tags=[t or "" for t in col(tags)],
        keys=[k or "" for k in col(keys)],
        unique_keys=[u or "" for u in col(unique_keys)],
        properties=props,
    )


class FrontClient:
    """See the module docstring. ``timeout``: seconds per call. ``tls_ca``: the PEM
    certificates (bytes, or a file) to trust: the front serves TLS (``serve
    --tls-cert``); ``tls_server_name``: the name its certificate carries when it is
    not the endpoint's host. ``access_key``/``secret_key``: sign every call as this
    user (None: from MQSTORE_ACCESS_KEY/MQSTORE_SECRET_KEY; neither: unsigned)."""

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 30.0,
        tls_ca: bytes | str | os.PathLike | None = None,
        tls_server_name: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        access_key = access_key or os.environ.get(ENV_ACCESS_KEY) or None
        secret_key = secret_key or os.environ.get(ENV_SECRET_KEY) or None
        if (access_key is None) != (secret_key is None):
            raise ValueError(
                f"give both an access key and a secret key, or neither ({ENV_ACCESS_KEY}, {ENV_SECRET_KEY})"
            )
        self.access_key = access_key
        if tls_ca is not None and not isinstance(tls_ca, bytes):
            tls_ca = Path(tls_ca).read_bytes()
        self._channel = sync_channel(endpoint, tls_ca=tls_ca, tls_server_name=tls_server_name)
        calls = (
            self._channel
            if access_key is None
            else grpc.intercept_channel(self._channel, AddHeaders(lambda: auth_metadata(access_key, secret_key)))
        )  # a fresh date-time per call
        self.stub = front_pb2_grpc.FrontServiceStub(calls)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> FrontClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, topics, bodies, **kw) -> common_pb2.AppendResult:
        return self.send_columns(columns(topics, bodies, **kw)).result

    def send_columns(self, cols: common_pb2.MessageColumns) -> front_pb2.SendBatchResponse:
        return self.stub.SendBatch(front_pb2.SendBatchRequest(messages=cols), timeout=self.timeout)

    @functools.cached_property
    def _sender(self) -> EncodedSender:
        """Made on first use: it keeps the route and one encoder per store host."""
        return EncodedSender(self.stub, timeout=self.timeout)

    def send_encoded(self, batch: MessageBatch) -> EncodedSendResult:
        """Send a batch encoded here, one buffer per shard (SendEncoded; see
        services/query/encoded_send.py): the fast path for producers. No DELAY
        property (delayed messages go through ``send``)."""
        return self._sender.send(batch)

    def route(self, *, refresh: bool = False) -> front_pb2.GetRouteResponse:
        """Shards, their msgId prefixes and the topics' write queues (GetRoute)."""
        return self._sender.route(refresh=refresh)

    def pull(
        self, topic: str, queue_id: int, offset: int, *, max_messages: int = 32, tags: str = "", raw: bool = False
    ) -> front_pb2.PullResponse:
        return self.stub.Pull(
            front_pb2.PullRequest(
                topic=topic,
                queue_id=queue_id,
                offset=offset,
                max_messages=max_messages,
                tag_expression=tags or "",
                raw=raw,
            ),
            timeout=self.timeout,
        )

    def query_by_msg_id(self, msg_id: str) -> list[common_pb2.Record]:
        return list(self.stub.QueryByMsgId(front_pb2.QueryByMsgIdRequest(msg_id=msg_id), timeout=self.timeout).records)

    def query_by_unique_key(self, topic: str, unique_key: str, *, max_num: int = 32) -> list[common_pb2.Record]:
        req = front_pb2.QueryByUniqueKeyRequest(topic=topic, unique_key=unique_key, max_num=max_num)
        return list(self.stub.QueryByUniqueKey(req, timeout=self.timeout).records)

    def query_by_key(
        self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int = 0, max_num: int = 32
    ) -> list[common_pb2.Record]:
        req = front_pb2.QueryByKeyRequest(topic=topic, key=key, begin_ms=begin_ms, end_ms=end_ms, max_num=max_num)
        return list(self.stub.QueryByKey(req, timeout=self.timeout).records)

    def query_by_offset(self, topic: str, queue_id: int, offset: int) -> list[common_pb2.Record]:
        req = front_pb2.QueryByOffsetRequest(topic=topic, queue_id=queue_id, offset=offset)
        return list(self.stub.QueryByOffset(req, timeout=self.timeout).records)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        req = front_pb2.GetOffsetByTimeRequest(topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms)
        return self.stub.GetOffsetByTime(req, timeout=self.timeout).offset

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        req = front_pb2.FrontCommitOffsetRequest(group=group, topic=topic, queue_id=queue_id, offset=offset)
        self.stub.CommitOffset(req, timeout=self.timeout)

    def fetch_offset(self, group: str, topic: str, queue_id: int) -> int:
        req = front_pb2.FrontFetchOffsetRequest(group=group, topic=topic, queue_id=queue_id)
        return self.stub.FetchOffset(req, timeout=self.timeout).offset

    def consumer_progress(self, group: str) -> list[common_pb2.GroupOffset]:
        return list(
            self.stub.ConsumerProgress(front_pb2.ConsumerProgressRequest(group=group), timeout=self.timeout).rows
        )

    def update_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        message_type: str | None = None,
    ) -> common_pb2.TopicConfig:
        """Create a topic's config or change what is given of it, on every shard; the
        answer is the topic's whole config. As RocketMQ's updateTopic, an argument left
        None keeps the topic's value (a new topic: 4 and 4 queues, perm 6, NORMAL).
        ``message_type``: NORMAL, FIFO, DELAY, TRANSACTION or MIXED; another name is
        INVALID_ARGUMENT."""
        given = {"read_queue_nums": read_queue_nums, "write_queue_nums": write_queue_nums, "perm": perm}
        cfg = common_pb2.TopicConfig(
            topic=topic, message_type=message_type or "", **{k: v for k, v in given.items() if v is not None}
        )
        return self.stub.CreateOrUpdateTopic(
            front_pb2.CreateOrUpdateTopicRequest(config=cfg), timeout=self.timeout
        ).config

    def topic_status(self, topic: str) -> list[common_pb2.QueueRange]:
        return list(self.stub.TopicStatus(front_pb2.TopicStatusRequest(topic=topic), timeout=self.timeout).queues)

    def store_status(self) -> list[front_pb2.ShardStatus]:
        return list(self.stub.StoreStatus(front_pb2.StoreStatusRequest(), timeout=self.timeout).shards)

    # ACL administration (an admin user; the front runs with --acl)

    def list_users(self) -> list[front_pb2.AclUser]:
        return list(self.stub.ListUsers(front_pb2.ListUsersRequest(), timeout=self.timeout).users)

    def add_user(
        self, access_key: str, secret_key: str, *, admin: bool = False, replace: bool = False
    ) -> front_pb2.AddUserResponse:
        req = front_pb2.AddUserRequest(access_key=access_key, secret_key=secret_key, admin=admin, replace=replace)
        return self.stub.AddUser(req, timeout=self.timeout)

    def remove_user(self, access_key: str) -> int:
        """Returns how many of the user's rules went with it."""
        return self.stub.RemoveUser(
            front_pb2.RemoveUserRequest(access_key=access_key), timeout=self.timeout
        ).rules_removed

    def list_rules(self, user: str = "") -> list[front_pb2.AclRule]:
        return list(self.stub.ListRules(front_pb2.ListRulesRequest(user=user), timeout=self.timeout).rules)

    def add_rule(
        self, user: str, resource: str, actions: Sequence[str], decision: str = "Allow"
    ) -> front_pb2.AddRuleResponse:
        rule = front_pb2.AclRule(user=user, resource=resource, actions=list(actions), decision=decision)
        return self.stub.AddRule(front_pb2.AddRuleRequest(rule=rule), timeout=self.timeout)

    def remove_rule(self, user: str, resource: str, decision: str = "") -> list[front_pb2.AclRule]:
        req = front_pb2.RemoveRuleRequest(user=user, resource=resource, decision=decision)
        return list(self.stub.RemoveRule(req, timeout=self.timeout).rules)


class RemoteCallError(MqStoreError):
    """A call to a server failed: ``code`` is the gRPC status code name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@contextlib.contextmanager
def remote_errors() -> Iterator[None]:
    """Turn grpc.RpcError into RemoteCallError (the CLI prints one line, exit 1)."""
    try:
        yield
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else None
        details = e.details() if hasattr(e, "details") else str(e)
        name = code.name if code is not None else "UNKNOWN"
        raise RemoteCallError(name, details or name) from None


def raw_records(answer: front_pb2.PullResponse) -> RawRecords:
    """The stored records of a raw pull's answer, in its one buffer (no object per
    record); ``list(...)`` gives each record's bytes."""
    return RawRecords.from_wire(answer.raw_data, answer.raw_sizes)


def decode_pulled(answer: front_pb2.PullResponse) -> list[MessageRecord]:
    """A raw pull's records decoded by the compiled decoder (CRC checked), as RocketMQ
    clients decode the records brokers ship them."""
    records = raw_records(answer)
    return decode_records(records.buffer, records.offsets[:-1])


__all__ = [
    "EncodedSendResult",
    "FrontClient",
    "RemoteCallError",
    "columns",
    "decode_pulled",
    "raw_records",
    "remote_errors",
]
