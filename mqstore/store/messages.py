"""What goes into an append and what comes out: columns, not objects per message.

``MessageBatch`` holds one column per field; a scalar stands for the same value in
every row, so a producer sending 1,000 messages to one topic passes the topic once.
Bodies are a sequence of bytes, or ``Bodies``: every body in one buffer with their
offsets, which the encoder reads in place (no bytes object per message).
``MessageBatch.of(messages)`` turns ``Message`` rows into columns for callers that
think in rows. ``AppendResult`` answers with columns too, and iterates as rows.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from mqstore.errors import InvalidMessageError, ReservedTopicError, TransactionNotSupportedError
from mqstore.formats.message import TRANSACTION_TYPE_MASK
from mqstore.formats.msgid import Host
from mqstore.formats.names import check_topic
from mqstore.formats.packed import Packed
from mqstore.formats.properties import SCHEDULE_SOURCE, unstorable_property
from mqstore.kernels import _encode
from mqstore.store.system_topics import NOT_ALLOWED_SEND_TOPICS, check_client_topics
from mqstore.store.topic_configs import PERM_WRITE, check_perm

if TYPE_CHECKING:
    from mqstore.store.topic_table import BatchTopics, TopicTable

AUTO_QUEUE = -1  # queue id meaning "pick one for me" (round robin per topic)
MAX_PORT = 65_535

# Properties only the store sets (a forged one would move the delay scheduler's progress).
STORE_ONLY_PROPERTIES = frozenset({SCHEDULE_SOURCE})


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


@dataclass(frozen=True, eq=False)
class Bodies(Packed):
    """A batch's bodies in one buffer: body ``i`` is ``data[offsets[i]:offsets[i + 1]]``.

    ``data`` is any C-contiguous buffer of single bytes (bytes, bytearray, memoryview,
    a numpy uint8 array of any shape, taken as its bytes in order); ``offsets`` holds
    ``n + 1`` integers, none decreasing, all within ``data`` (the first need not be 0).
    Checked here (InvalidMessageError). The encoder reads the bodies from ``data`` in
    place; as a sequence (``len``, indexing, iteration) a Bodies gives each body as
    bytes, so code that takes a list of bytes takes it too. The offsets are copied
    (read-only int64); ``data`` is not: it must not change until the append returns,
    and a bytearray cannot be resized while a Bodies holds it.

    >>> b = Bodies.of([b"hello", b"", b"world"])
    >>> len(b), b[0], list(b)
    (3, b'hello', [b'hello', b'', b'world'])
    >>> Bodies(b"abcdef", [0, 2, 6])[1]
    b'cdef'
    """

    def __post_init__(self) -> None:
        _check_packed(self, "Bodies")

    @classmethod
    def of(cls, bodies: Iterable[bytes]) -> Bodies:
        """The bodies joined into one buffer (each a bytes-like object)."""
        try:
            return super().of(bodies)
        except TypeError as e:
            raise InvalidMessageError(f"every body must be bytes: {e}") from e

    def __repr__(self) -> str:
        return f"Bodies({len(self)} bodies, {self.nbytes} bytes)"


@dataclass(frozen=True, eq=False)
class Texts(Packed):
    """A tags or keys column in one buffer of UTF-8: value ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``; an empty one is no value (as ``""`` or None
    in a list). ``data`` and ``offsets`` are checked as for ``Bodies``; the encoder
    reads the values in place and refuses the batch (InvalidMessageError) if one is
    not well-formed UTF-8 or holds a property separator. As a sequence it gives each
    value as a str, so code that takes a list of str takes it too.

    >>> t = Texts.of(["TagA", None, "TagB"])
    >>> len(t), t[0], list(t)
    (3, 'TagA', ['TagA', '', 'TagB'])
    """

    def __post_init__(self) -> None:
        _check_packed(self, "Texts")

    @classmethod
    def of(cls, texts: Iterable[str | None]) -> Texts:
        """The values (str, or None for no value) encoded into one buffer."""
        return super().of(t.encode() if t else b"" for t in texts)

    def _item(self, raw: bytes) -> str:
        return raw.decode()

    def __repr__(self) -> str:
        return f"Texts({len(self)} values, {self.nbytes} bytes)"


def _check_packed(packed: Packed, what: str) -> None:
    """A Bodies' or Texts' ``data`` and ``offsets`` checked (InvalidMessageError);
    sets ``buffer`` (``data`` as one dimension of bytes) and ``offsets`` (a read-only
    int64 copy)."""
    try:
        view = memoryview(packed.data)
    except TypeError:
        raise InvalidMessageError(
            f"{what}.data must be a buffer of bytes (bytes, bytearray, memoryview, numpy uint8), "
            f"got {type(packed.data).__name__}"
        ) from None
    if view.itemsize != 1 or not view.c_contiguous:
        raise InvalidMessageError(
            f"{what}.data must be a C-contiguous buffer of single bytes, got items of {view.itemsize} "
            f"bytes{'' if view.c_contiguous else ', not contiguous'}"
        )
    if view.nbytes == 0:  # (a zero in the shape cannot be cast)
        view = memoryview(b"")
    elif view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    object.__setattr__(packed, "offsets", _offsets(packed.offsets, view.nbytes, what))
    object.__setattr__(packed, "buffer", view)


def _offsets(value, nbytes: int, what: str) -> np.ndarray:
    """``Bodies.offsets`` (or ``Texts.offsets``) checked: a read-only int64 copy."""
    if isinstance(value, (str, bytes)) or value is None:
        raise InvalidMessageError(f"{what}.offsets must be integers, got {value!r}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise InvalidMessageError(f"{what}.offsets must be integers: {e}") from e
    if arr.size == 0:
        raise InvalidMessageError(f"{what}.offsets must hold n + 1 offsets for n values (at least one)")
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise InvalidMessageError(
            f"{what}.offsets must be one dimension of integers, n + 1 of them (value i is "
            f"data[offsets[i]:offsets[i + 1]]), got {arr.dtype} of shape {arr.shape}"
        )
    if arr.dtype.kind == "u" and int(arr.max()) > nbytes:
        raise InvalidMessageError(f"{what}.offsets: offset {int(arr.max())} is past the data's {nbytes} bytes")
    out = np.array(arr, np.int64)
    if out[0] < 0:
        raise InvalidMessageError(f"{what}.offsets: the first offset is negative ({int(out[0])})")
    down = out[1:] < out[:-1]
    if down.any():
        i = int(np.argmax(down))
        raise InvalidMessageError(
            f"{what}.offsets must not decrease: offset {i + 1} ({int(out[i + 1])}) is below offset {i} ({int(out[i])})"
        )
    if out[-1] > nbytes:
        raise InvalidMessageError(f"{what}.offsets: the last offset {int(out[-1])} is past the data's {nbytes} bytes")
    out.flags.writeable = False
    return out


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """Messages to append, one column per field (see the module docstring).

    ``bodies``: one bytes-like object per message, or a ``Bodies`` (every body in one
    buffer, read in place by the encoder: the cheaper way for large batches).
    ``keys`` holds the KEYS property: several keys separated by single spaces
    (RocketMQ's KEY_SEPARATOR), or a sequence of keys per message via ``Message``.
    """

    topics: str | Sequence[str]
    bodies: Sequence[bytes] | Bodies
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
            born_hosts=None
            if all(h is None for h in col["born_host"])
            else [h or Host("127.0.0.1", 0) for h in col["born_host"]],
            reconsume_times=list(col["reconsume_times"]),
            prepared_transaction_offsets=list(col["prepared_transaction_offset"]),
        )


def check_client_batch(
    batch: MessageBatch,
    *,
    max_queue_id: int,
    perm_of: Callable[[str], int | None] | None = None,
    table: TopicTable | None = None,
) -> BatchTopics | None:
    """What a producer may not send, checked before anything is written (the
    client-facing append of ``MessageStore`` and ``LogStore``; the store's own writes,
    delayed messages into SCHEDULE_TOPIC_XXXX and back out, do not come here):

    * topic names legal (InvalidTopicError), none in ``NOT_ALLOWED_SEND_TOPICS``
      (ReservedTopicError), each writable by its config (``perm_of(topic)``: the
      topic's perm, None without a config; TopicPermissionError);
    * no transaction bits in a sysflag (TransactionNotSupportedError);
    * queue ids integers in AUTO_QUEUE..``max_queue_id`` (1.5 or "1" are refused,
      not truncated or parsed);
    * properties the properties string can carry (no empty name or value), none the
      store reserves (SCHEDULE_SOURCE);
    * born host ports in 0..65535.

    Costs one pass over the columns that are given per message; scalars once. With
    ``table`` (the store's topic_table.TopicTable) the topic checks run only for a
    topic new to it or changed since, and the batch's topic ids are returned
    (TopicTable.sendable_ids: one per message, or one for all; None if the topics
    column is not one per message, which the encoder refuses)."""
    ids = None
    if table is None:
        check_send_topics({batch.topics} if isinstance(batch.topics, str) else set(batch.topics), perm_of)
    else:
        ids = table.sendable_ids(batch.topics, lambda names: check_send_topics(names, perm_of))
        if ids.ids is not None and len(ids.ids) != len(batch):
            ids = None
    check_no_transaction(_integers(batch.sysflags, "sysflags"))
    if batch.queue_ids is not None:
        check_queue_ids(_integers(batch.queue_ids, "queue_ids"), max_queue_id)
    _check_properties(batch.properties)
    _check_hosts(batch.born_hosts)
    return ids


def check_send_topics(topics: set[str], perm_of: Callable[[str], int | None] | None = None) -> None:
    """Producers' topics: legal names, none only the store writes, each writable by
    its config (``perm_of``; None: not checked)."""
    for t in topics:
        check_topic(t)
    reserved = sorted(topics & NOT_ALLOWED_SEND_TOPICS)
    if reserved:
        raise ReservedTopicError(
            f"sending to topic {reserved[0]!r} is forbidden: only the store writes it "
            f"(RocketMQ's not-allowed-send topics)"
        )
    check_client_topics(topics)  # the other system topics (TBW102, RMQ_SYS_TRACE_TOPIC, rmq_sys_*), as the proxy
    if perm_of is not None:
        for t in sorted(topics):
            check_perm(t, perm_of(t), PERM_WRITE)


def check_queue_ids(q: np.ndarray, max_queue_id: int) -> None:
    """Queue ids (a scalar or a column) in AUTO_QUEUE..``max_queue_id``."""
    bad = (q < AUTO_QUEUE) | (q > max_queue_id)
    if bad.any():
        i = int(np.argmax(bad)) if q.ndim else 0
        raise InvalidMessageError(
            f"message {i}: queue id {int(q.flat[i])} is outside 0..{max_queue_id} (or {AUTO_QUEUE}: automatic)"
        )


def check_no_transaction(flags: np.ndarray) -> None:
    """No sysflag (a scalar or a column) may set the transaction bits."""
    flags = np.asarray(flags, np.int64)
    if (flags & TRANSACTION_TYPE_MASK).any():
        i = int(np.argmax((flags & TRANSACTION_TYPE_MASK) != 0)) if flags.ndim else 0
        raise TransactionNotSupportedError(
            f"message {i}: sysflag {int(flags.flat[i])} sets the transaction bits "
            f"(0x{TRANSACTION_TYPE_MASK:X}); the store has no transaction API"
        )


def _integers(value, name: str) -> np.ndarray:
    """An integer scalar or column as an int64 array (0-d for a scalar); anything else
    (floats, strings, bools, None inside) is InvalidMessageError, never truncated."""
    if isinstance(value, (bool, np.bool_)):
        raise InvalidMessageError(f"{name} must be integers, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return np.asarray(value, np.int64)
    if isinstance(value, (str, bytes, float, np.floating)) or value is None:
        raise InvalidMessageError(f"{name} must be integers, got {value!r}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise InvalidMessageError(f"{name} must be integers: {e}") from e
    if arr.dtype.kind not in "iu" or arr.ndim != 1:  # floats, strings, bools, None, ints past 64 bits
        raise InvalidMessageError(f"{name} must be integers, one per message, got {arr.dtype} values")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise InvalidMessageError(f"{name} does not fit 64-bit integers")
    return arr.astype(np.int64, copy=False)


def _check_properties(props) -> None:
    if props is None:
        return
    rows = [props] if isinstance(props, Mapping) else props
    for i, p in enumerate(rows):
        if not p:
            continue
        if not isinstance(p, Mapping):
            raise InvalidMessageError(
                f"message {i}: properties must be a mapping of str to str, got {type(p).__name__}"
            )
        for k, v in p.items():
            why = unstorable_property(k, v)
            if why is None and k in STORE_ONLY_PROPERTIES:
                why = f"property {k!r} is set by the store only"
            if why is not None:
                raise InvalidMessageError(f"message {i}: {why}")


def _check_hosts(hosts) -> None:
    if hosts is None:
        return
    for h in {hosts} if isinstance(hosts, Host) else set(hosts):
        port = getattr(h, "port", None)
        if not isinstance(port, (int, np.integer)) or isinstance(port, bool) or not 0 <= port <= MAX_PORT:
            raise InvalidMessageError(f"born host {h!r}: the port must be an integer in 0..{MAX_PORT}")


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
    unique_key_parts: tuple[str, list[str]]  # UNIQ_KEY = head + tail per message
    msg_id_prefix: str  # hex of the store host; msgId = prefix + 16 hex digits of the offset

    def __len__(self) -> int:
        return len(self.physical_offsets)

    @property
    def unique_keys(self) -> list[str]:
        """Each message's UNIQ_KEY (given by the producer or generated by the store)."""
        head, tails = self.unique_key_parts
        return [head + t for t in tails] if head else list(tails)

    @property
    def msg_ids(self) -> list[str]:
        """Offset msgIds, computed on demand (most producers never ask)."""
        return _encode.offset_msg_ids(self.msg_id_prefix, np.asarray(self.physical_offsets, np.int64))

    @property
    def end_offset(self) -> int:
        """The commitlog offset just past the last record of the batch."""
        return int(self.physical_offsets[-1] + self.sizes[-1]) if len(self) else 0

    def __iter__(self) -> Iterator[AppendedMessage]:
        for row in zip(
            self.physical_offsets.tolist(),
            self.sizes.tolist(),
            self.queue_ids.tolist(),
            self.queue_offsets.tolist(),
            self.msg_ids,
            self.unique_keys,
        ):
            yield AppendedMessage(*row, self.store_timestamp, self.status)


__all__ = [
    "AUTO_QUEUE",
    "MAX_PORT",
    "NOT_ALLOWED_SEND_TOPICS",
    "STORE_ONLY_PROPERTIES",
    "AppendResult",
    "AppendedMessage",
    "Bodies",
    "Message",
    "MessageBatch",
    "PutStatus",
    "check_client_batch",
    "check_queue_ids",
    "check_no_transaction",
    "check_send_topics",
]
