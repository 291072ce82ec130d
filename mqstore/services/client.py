"""A blocking Python client of the public API (FrontService), as the CLI uses it.

    with FrontClient("127.0.0.1:8080") as c:
        res = c.send("TopicTest", [b"hello", b"world"], tags="TagA", keys="order-1")
        print(res.msg_ids, res.queue_offsets)
        print([r.body for r in c.pull("TopicTest", 0, 0).records])

Errors arrive as ``grpc.RpcError`` with the server's status code and message.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import grpc

from mqstore.errors import MqStoreError
from mqstore.rpc.v1 import common_pb2, front_pb2, front_pb2_grpc
from mqstore.services.server import sync_channel


def columns(topics: str | Sequence[str], bodies: Sequence[bytes], *, queue_ids: int | Sequence[int] | None = None,
            tags: str | Sequence[str] | None = None, keys: str | Sequence[str] | None = None,
            unique_keys: Sequence[str] | None = None,
            properties: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None) -> common_pb2.MessageColumns:  # fmt: skip
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
        topics=col(topics), bodies=list(bodies), queue_ids=col(queue_ids), tags=[t or "" for t in col(tags)],
        keys=[k or "" for k in col(keys)], unique_keys=[u or "" for u in col(unique_keys)], properties=props,
    )  # fmt: skip


class FrontClient:
    """See the module docstring. ``timeout``: seconds per call. ``tls_ca``: the PEM
    certificates (bytes, or a file) to trust: the front serves TLS (``serve
    --tls-cert``); ``tls_server_name``: the name its certificate carries when it is
    not the endpoint's host."""

    def __init__(self, endpoint: str, *, timeout: float = 30.0, tls_ca: bytes | str | os.PathLike | None = None,
                 tls_server_name: str | None = None) -> None:  # fmt: skip
        self.endpoint = endpoint
        self.timeout = timeout
        if tls_ca is not None and not isinstance(tls_ca, bytes):
            tls_ca = Path(tls_ca).read_bytes()
        self._channel = sync_channel(endpoint, tls_ca=tls_ca, tls_server_name=tls_server_name)
        self.stub = front_pb2_grpc.FrontServiceStub(self._channel)

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

    def pull(self, topic: str, queue_id: int, offset: int, *, max_messages: int = 32, tags: str = "",
             raw: bool = False) -> front_pb2.PullResponse:  # fmt: skip
        return self.stub.Pull(front_pb2.PullRequest(topic=topic, queue_id=queue_id, offset=offset,
                                                    max_messages=max_messages, tag_expression=tags or "", raw=raw),
                              timeout=self.timeout)  # fmt: skip

    def query_by_msg_id(self, msg_id: str) -> list[common_pb2.Record]:
        return list(self.stub.QueryByMsgId(front_pb2.QueryByMsgIdRequest(msg_id=msg_id), timeout=self.timeout).records)

    def query_by_unique_key(self, topic: str, unique_key: str, *, max_num: int = 32) -> list[common_pb2.Record]:
        req = front_pb2.QueryByUniqueKeyRequest(topic=topic, unique_key=unique_key, max_num=max_num)
        return list(self.stub.QueryByUniqueKey(req, timeout=self.timeout).records)

    def query_by_key(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int = 0, max_num: int = 32) -> list[common_pb2.Record]:
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
        return list(self.stub.ConsumerProgress(front_pb2.ConsumerProgressRequest(group=group), timeout=self.timeout).rows)

    def update_topic(self, topic: str, *, read_queue_nums: int = 4, write_queue_nums: int = 4, perm: int = 6) -> common_pb2.TopicConfig:
        cfg = common_pb2.TopicConfig(topic=topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
                                     perm=perm)  # fmt: skip
        return self.stub.CreateOrUpdateTopic(front_pb2.CreateOrUpdateTopicRequest(config=cfg), timeout=self.timeout).config

    def topic_status(self, topic: str) -> list[common_pb2.QueueRange]:
        return list(self.stub.TopicStatus(front_pb2.TopicStatusRequest(topic=topic), timeout=self.timeout).queues)

    def store_status(self) -> list[front_pb2.ShardStatus]:
        return list(self.stub.StoreStatus(front_pb2.StoreStatusRequest(), timeout=self.timeout).shards)




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


__all__ = ["FrontClient", "RemoteCallError", "columns", "remote_errors"]
