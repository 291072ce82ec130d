"""What goes into an append and what comes out: columns, not objects per message.

``MessageBatch`` holds one column per field; a scalar stands for the same value in
every row, so a producer sending 1,000 messages to one topic passes the topic once.
``MessageBatch.of(messages)`` turns ``Message`` rows into columns for callers that
think in rows. ``AppendResult`` answers with columns too, and iterates as rows.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mqstore.formats.msgid import Host

AUTO_QUEUE = -1  # queue id meaning "pick one for me" (round robin per topic)


class Message(NamedTuple):
    """One message to append, as a row. Fields left None get defaults at append:
    queue id round robin over the topic's queues, a generated UNIQ_KEY, the store's
    clock as born time, 127.0.0.1:0 as born host."""

    topic: str
    body: bytes
    queue_id: int | None = None
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    unique_key: str | None = None
    properties: Mapping[str, str] | None = None
    flag: int = 0
    sysflag: int = 0
    born_timestamp: int | None = None
    born_host: Host | None = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


Column = Sequence | np.ndarray


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """Messages to append, one column per field (see the module docstring).

    ``keys`` holds the KEYS property: several keys separated by single spaces
    (RocketMQ's KEY_SEPARATOR), or a sequence of keys per message via ``Message``.
    """

    topics: str | Sequence[str]
    bodies: Sequence[bytes]
    queue_ids: int | Column | None = None
    tags: str | Sequence[str | None] | None = None
    keys: str | Sequence[str | None] | None = None
    unique_keys: Sequence[str | None] | None = None
    properties: Mapping[str, str] | Sequence[Mapping[str, str] | None] | None = None
    flags: int | Column = 0
    sysflags: int | Column = 0
    born_timestamps: int | Column | None = None
    born_hosts: Host | Sequence[Host] | None = None
    reconsume_times: int | Column = 0
    prepared_transaction_offsets: int | Column = 0

    def __len__(self) -> int:
        return len(self.bodies)

    @classmethod
    def of(cls, messages: Iterable[Message]) -> MessageBatch:
        rows = list(messages)
        if not rows:
            return cls(topics=[], bodies=[])
        cols = list(zip(*rows))
        f = Message._fields
        col = dict(zip(f, cols))
        keys = [k if k is None or isinstance(k, str) else " ".join(k) for k in col["keys"]]
        return cls(
            topics=list(col["topic"]),
            bodies=list(col["body"]),
            queue_ids=[AUTO_QUEUE if q is None else q for q in col["queue_id"]],
            tags=list(col["tags"]),
            keys=keys,
            unique_keys=list(col["unique_key"]),
            properties=list(col["properties"]),
            flags=list(col["flag"]),
            sysflags=list(col["sysflag"]),
            born_timestamps=None if all(t is None for t in col["born_timestamp"]) else list(col["born_timestamp"]),
            born_hosts=None if all(h is None for h in col["born_host"]) else [h or Host("127.0.0.1", 0) for h in col["born_host"]],
            reconsume_times=list(col["reconsume_times"]),
            prepared_transaction_offsets=list(col["prepared_transaction_offset"]),
        )


class PutStatus(enum.Enum):
    """Outcome of an append that wrote its records (errors raise instead)."""

    PUT_OK = "PUT_OK"
    # Sync flush: the fsync covering the batch did not finish within sync_flush_timeout_ms.
    # The records are written and normally survive, but were not proven durable.
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class AppendedMessage(NamedTuple):
    """One row of an AppendResult."""

    physical_offset: int
    size: int
    queue_id: int
    queue_offset: int
    msg_id: str
    unique_key: str
    store_timestamp: int
    status: PutStatus


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Per message: where it went and under which ids. ``status`` covers the batch."""

    status: PutStatus
    physical_offsets: np.ndarray
    sizes: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    store_timestamp: int
    unique_keys: list[str]
    msg_id_prefix: str  # hex of the store host; msgId = prefix + 16 hex digits of the offset

    def __len__(self) -> int:
        return len(self.physical_offsets)

    @property
    def msg_ids(self) -> list[str]:
        """Offset msgIds, computed on demand (most producers never ask)."""
        p = self.msg_id_prefix
        return [f"{p}{o:016X}" for o in self.physical_offsets.tolist()]

    @property
    def end_offset(self) -> int:
        """The commitlog offset just past the last record of the batch."""
        return int(self.physical_offsets[-1] + self.sizes[-1]) if len(self) else 0

    def __iter__(self) -> Iterator[AppendedMessage]:
        for row in zip(
            self.physical_offsets.tolist(), self.sizes.tolist(), self.queue_ids.tolist(),
            self.queue_offsets.tolist(), self.msg_ids, self.unique_keys,
        ):  # fmt: skip
            yield AppendedMessage(*row, self.store_timestamp, self.status)


__all__ = ["AUTO_QUEUE", "AppendResult", "AppendedMessage", "Message", "MessageBatch", "PutStatus"]
