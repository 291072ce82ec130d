"""The reference model of the append encoder: ``BatchEncoder.prepare`` and
``PreparedRecords`` as they were written in numpy and Python before the Cython kernel
(mqstore/kernels/_encode.pyx) took them over, kept here verbatim (only the imports
changed). tests/kernels/test_encode_kernel.py requires the kernel's records to equal
this model's byte for byte, and its errors to be the model's. Not used in production.

``model_records`` renders a prepared batch whole, as the CommitLog wrote it (one
render per host-family run, back to back).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mqstore.errors import InvalidMessageError, MessageTooLargeError, PropertiesTooLongError
from mqstore.formats.crc import CRC_MASK, crc32
from mqstore.formats.message import (
    BLANK_RECORD_BYTES,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TOPIC_BYTES_V1,
    SysFlag,
    advances_queue_offset,
    header_dtype,
    topic_field,
    topic_field_lengths,
)
from mqstore.formats.msgid import Host, encode_host
from mqstore.formats.names import check_topic
from mqstore.formats.properties import MAX_PROPERTIES_BYTES, serialize_properties
from mqstore.kernels._encode import distinct
from mqstore.store import record_batch
from mqstore.store.messages import MessageBatch


class PreparedRecords:
    """Records encoded up to the fields known only under the put lock.

    RocketMQ encodes a message before it takes the put lock and patches QUEUEOFFSET,
    PHYSICALOFFSET and STORETIMESTAMP afterwards; this class does the same for a whole
    batch with numpy, and patches QUEUEID too (automatic queues are picked under the
    lock). All records of one instance share the host families (IPv4 or
    IPv6 born host, IPv4 or IPv6 store host); callers split mixed batches into runs.
    ``topics`` holds each record's topic field (:func:`topic_field`); repeating the
    same object for every message of a topic costs nothing. ``topic_lens`` (the
    topics' byte lengths) may be given when the caller knows them already. A record
    whose topic is longer than 127 bytes gets MAGIC_V2 (its field has the 2-byte
    length), every other one MAGIC_V1, as RocketMQ 5 writes them.
    Not thread-safe: one caller (the CommitLog under its put lock) renders it.
    """

    def __init__(
        self,
        *,
        topics: Sequence[bytes],
        topic_lens: np.ndarray | None = None,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        flags: np.ndarray | int,
        sysflags: np.ndarray | int,
        born_timestamps: np.ndarray | int,
        born_hosts: Sequence[bytes] | bytes,
        store_host: bytes,
        reconsume_times: np.ndarray | int = 0,
        prepared_transaction_offsets: np.ndarray | int = 0,
    ) -> None:
        n = len(bodies)
        if not isinstance(born_hosts, bytes) and len(set(map(len, born_hosts))) > 1:
            raise ValueError("born hosts of one PreparedRecords must share an address family")
        born_v6 = len(born_hosts if isinstance(born_hosts, bytes) else born_hosts[0]) == 20 if n else False
        store_v6 = len(store_host) == 20
        dtype = header_dtype(born_v6, store_v6)
        self.body_lens = np.fromiter(map(len, bodies), np.int64, n)
        props_lens = np.fromiter(map(len, properties), np.int64, n)
        if topic_lens is None:
            topic_lens = topic_field_lengths(topics)
        topic_lens = np.asarray(topic_lens, np.int64)
        v2 = topic_lens > MAX_TOPIC_BYTES_V1
        any_v2 = bool(v2.any())
        self.props_lens = props_lens
        self.sizes = (
            dtype.itemsize + self.body_lens + (np.where(v2, 2, 1) if any_v2 else 1) + topic_lens + 2 + props_lens
        )
        head = np.empty(n, dtype)  # every field is set below or in render()
        head["total_size"] = self.sizes
        head["magic"] = np.where(v2, MAGIC_V2, MAGIC_V1) if any_v2 else MAGIC_V1
        head["body_crc"] = np.fromiter(map(crc32, bodies), np.int64, n) & CRC_MASK
        head["flag"] = flags
        v6_bits = (SysFlag.BORNHOST_V6 if born_v6 else 0) | (SysFlag.STOREHOST_V6 if store_v6 else 0)
        head["sysflag"] = (np.asarray(sysflags, np.int64) & ~0x30) | v6_bits
        head["born_timestamp"] = born_timestamps
        head["born_host"] = (
            np.void(born_hosts) if isinstance(born_hosts, bytes) else np.array(born_hosts, dtype["born_host"])
        )
        head["store_host"] = np.void(store_host)
        head["reconsume_times"] = reconsume_times
        head["prepared_transaction_offset"] = prepared_transaction_offsets
        head["body_len"] = self.body_lens
        self.head = head
        self._void = f"V{dtype.itemsize}"
        self.bodies = bodies
        self.topics = topics
        self.props_len_bytes = props_lens.astype(">u2").view("V2").tolist()
        self.properties = properties

    def __len__(self) -> int:
        return len(self.bodies)

    def render(
        self,
        lo: int,
        hi: int,
        *,
        physical_offsets: np.ndarray,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        store_timestamp: int,
        hold_first_size: bool = False,
    ) -> bytes:
        """The bytes of records ``lo:hi`` back to back, with the patched fields.

        With ``hold_first_size`` the first record's TOTALSIZE is left 0: the writer
        copies the bytes first and sets that size afterwards, so a crash mid-copy
        leaves a run whose first record ends the valid data, never a record with torn
        properties (which no CRC covers).
        """
        head = self.head[lo:hi]
        head["total_size"] = self.sizes[lo:hi]
        if hold_first_size:
            head["total_size"][0] = 0
        head["queue_id"] = queue_ids
        head["physical_offset"] = physical_offsets
        head["queue_offset"] = queue_offsets
        head["store_timestamp"] = store_timestamp
        pieces: list[bytes | None] = [None] * (5 * (hi - lo))
        pieces[0::5] = head.view(self._void).tolist()
        pieces[1::5] = self.bodies[lo:hi]
        pieces[2::5] = self.topics[lo:hi]
        pieces[3::5] = self.props_len_bytes[lo:hi]
        pieces[4::5] = self.properties[lo:hi]
        return b"".join(pieces)  # type: ignore[arg-type]


_DEFAULT_BORN_HOST = encode_host(Host("127.0.0.1", 0))


class PreparedBatch:
    """A batch validated and encoded outside the put lock: its records, less the
    fields only the put lock knows, and the columns the lock needs to assign them."""

    __slots__ = ("runs", "n", "topics", "topic_codes", "queue_ids", "advances", "unique_keys", "sizes")

    def __init__(self, runs, n, topics, topic_codes, queue_ids, advances, unique_keys, sizes):  # noqa: PLR0913
        self.runs: list[PreparedRecords] = runs
        self.n = n
        self.topics: list[str] = topics  # distinct topics of the batch
        self.topic_codes: np.ndarray = topic_codes  # index into topics, per message
        self.queue_ids: np.ndarray = queue_ids  # AUTO_QUEUE where the store picks
        self.advances: np.ndarray | None = advances  # None: every message takes a queue offset
        self.unique_keys: tuple[str, list[str]] = unique_keys  # (head, tails)
        self.sizes: np.ndarray = sizes


def _broadcast(value, n: int) -> list:
    if value is None or isinstance(value, (str, bytes, int, Host, dict)):
        return [value] * n
    if len(value) != n:
        raise InvalidMessageError(f"a column has {len(value)} values for {n} messages")
    return list(value)


def _int_column(value, n: int, name: str) -> np.ndarray | int:
    if isinstance(value, (int, np.integer)):
        return int(value)
    try:
        arr = np.asarray(value, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidMessageError(f"{name} must be integers: {e}") from e
    if arr.shape != (n,):
        raise InvalidMessageError(f"{name} has {arr.size} values for {n} messages")
    return arr


def _check_no_separators(what: str, values) -> None:
    joined = "".join(filter(None, values))
    if "\x01" in joined or "\x02" in joined:
        raise InvalidMessageError(f"{what} must not contain the property separators \\x01 or \\x02")


class BatchEncoder(record_batch.BatchEncoder):
    """The numpy encoder the kernel replaced: production's validation (queue ids,
    born times: inherited; topics as they were checked), its own encoding. Caveat, kept as it was:
    ``_unique_keys`` calls UniqKeyGenerator.reserve without the caller's lock."""

    def prepare(self, batch: MessageBatch) -> PreparedBatch:
        """Validate and encode a batch. Raises InvalidMessageError (or a subclass)
        for bad input; nothing is written anywhere."""
        bodies = batch.bodies
        n = len(bodies)
        if n == 0:
            return PreparedBatch(
                [], 0, [], np.zeros(0, np.int64), np.zeros(0, np.int64), None, ("", []), np.zeros(0, np.int64)
            )
        if isinstance(bodies, (bytes, str)):
            raise InvalidMessageError("bodies must be a sequence of bytes, one per message")
        topics, codes = self._topics(batch.topics, n)
        fields = [topic_field(t) for t in topics]
        topic_bytes = [fields[0]] * n if len(topics) == 1 else [fields[c] for c in codes.tolist()]
        topic_lens = topic_field_lengths(fields)[codes]  # a topic over 127 bytes is written as V2
        queue_ids = self._queue_ids(batch.queue_ids, n)
        uniq = self._unique_keys(batch.unique_keys, n)
        try:
            props = self._encode_properties(batch, n, uniq)
        except TypeError as e:
            raise InvalidMessageError(f"tags, keys, unique keys and properties must be strings: {e}") from e
        sysflags = _int_column(batch.sysflags, n, "sysflags")
        takes_offset = advances_queue_offset(sysflags)
        advances = None if takes_offset.all() else np.broadcast_to(takes_offset, (n,))
        born_ts = self._born_timestamps(batch.born_timestamps, n)
        columns = {
            "flags": _int_column(batch.flags, n, "flags"),
            "sysflags": sysflags,
            "born_timestamps": born_ts,
            "reconsume_times": _int_column(batch.reconsume_times, n, "reconsume_times"),
            "prepared_transaction_offsets": _int_column(
                batch.prepared_transaction_offsets, n, "prepared_transaction_offsets"
            ),
        }
        runs = []
        try:
            for lo, hi, born in self._host_runs(batch.born_hosts, n):
                part = {k: v if isinstance(v, int) else v[lo:hi] for k, v in columns.items()}
                runs.append(
                    PreparedRecords(
                        topics=topic_bytes[lo:hi],
                        topic_lens=topic_lens[lo:hi],
                        bodies=bodies[lo:hi],
                        properties=props[lo:hi],
                        born_hosts=born,
                        store_host=self._store_host,
                        **part,
                    )
                )
        except TypeError as e:
            raise InvalidMessageError(f"every body must be bytes: {e}") from e
        sizes = runs[0].sizes if len(runs) == 1 else np.concatenate([r.sizes for r in runs])
        self._check_sizes(runs, sizes)
        return PreparedBatch(runs, n, topics, codes, queue_ids, advances, uniq, sizes)

    def _topics(self, value: str | list[str], n: int) -> tuple[list[str], np.ndarray]:
        """Distinct topics (each validated once per encoder) and each message's index
        into them: production's before the topic table (topic_table.py) took it over."""
        if isinstance(value, str):
            topics, codes = [value], np.zeros(n, np.int64)
        else:
            if len(value) != n:
                raise InvalidMessageError(f"topics has {len(value)} values for {n} messages")
            codes = np.empty(n, np.int64)
            topics = distinct(value if type(value) is list else list(value), codes)
        known = self.__dict__.setdefault("_known_topics", set())
        for t in topics:
            if t not in known:
                check_topic(t)
                known.add(t)
        return topics, codes

    def _unique_keys(self, value, n: int) -> tuple[str, list[str]]:
        """UNIQ_KEYs as (head, tails): generated ones share a head; given ones have head ''."""
        if value is None:
            return self._uniq.reserve(n, now_ms=self._clock.now_ms())
        given = list(value)
        if len(given) != n:
            raise InvalidMessageError(f"unique_keys has {len(given)} values for {n} messages")
        if None in given:
            head, tails = self._uniq.reserve(n, now_ms=self._clock.now_ms())
            given = [u or head + t for u, t in zip(given, tails)]
        return "", given

    @staticmethod
    def _host_runs(value, n: int) -> list[tuple[int, int, bytes | list[bytes]]]:
        """Runs of consecutive messages whose born hosts share an address family."""
        try:
            if value is None:
                return [(0, n, _DEFAULT_BORN_HOST)]
            if isinstance(value, Host):
                return [(0, n, encode_host(value))]
            hosts = [encode_host(h) for h in _broadcast(value, n)]
        except (ValueError, TypeError) as e:
            raise InvalidMessageError(f"bad born host: {e}") from e
        runs, start = [], 0
        for i in range(1, n + 1):
            if i == n or len(hosts[i]) != len(hosts[start]):
                runs.append((start, i, hosts[start:i]))
                start = i
        return runs

    def _check_sizes(self, runs: list[PreparedRecords], sizes: np.ndarray) -> None:
        cfg = self.config
        limit = min(cfg.max_record_bytes, cfg.segment_bytes - BLANK_RECORD_BYTES)
        body_max = max(int(r.body_lens.max()) for r in runs)
        props_max = max(int(r.props_lens.max()) for r in runs)
        if body_max <= cfg.max_message_bytes and props_max <= MAX_PROPERTIES_BYTES and int(sizes.max()) <= limit:
            return
        body_lens = np.concatenate([r.body_lens for r in runs])
        props_lens = np.concatenate([r.props_lens for r in runs])
        if (body_lens > cfg.max_message_bytes).any():
            i = int(np.argmax(body_lens > cfg.max_message_bytes))
            raise MessageTooLargeError(
                f"message {i}: body of {int(body_lens[i])} bytes exceeds max_message_bytes {cfg.max_message_bytes}"
            )
        if (props_lens > MAX_PROPERTIES_BYTES).any():
            i = int(np.argmax(props_lens > MAX_PROPERTIES_BYTES))
            raise PropertiesTooLongError(
                f"message {i}: properties of {int(props_lens[i])} bytes exceed {MAX_PROPERTIES_BYTES}"
            )
        i = int(np.argmax(sizes > limit))
        raise MessageTooLargeError(f"message {i}: record of {int(sizes[i])} bytes exceeds the limit of {limit} bytes")

    def _encode_properties(self, batch: MessageBatch, n: int, uniq: tuple[str, list[str]]) -> list[bytes]:
        """Each message's properties bytes (TAGS, KEYS, UNIQ_KEY and the user's)."""
        tags = _broadcast(batch.tags, n)
        keys = _broadcast(batch.keys, n)
        head, tails = uniq
        if batch.properties is None and all(tags) and all(keys):
            # The common case in bulk: one join for the whole batch, one encode, one
            # split on NUL (checked absent from user text; UNIQ_KEY parts are hex).
            pieces: list[str | None] = [None] * (6 * n)
            pieces[0::6] = tags
            pieces[1::6] = ["\x02KEYS\x01"] * n
            pieces[2::6] = keys
            pieces[3::6] = [f"\x02UNIQ_KEY\x01{head}"] * n
            pieces[4::6] = tails
            pieces[5::6] = ["\x02\x00TAGS\x01"] * n
            big = ("TAGS\x01" + "".join(pieces)).encode()  # type: ignore[arg-type]
            user_text = "".join(tags) + "".join(keys) + "".join(tails)  # given unique keys are the user's too
            if "\x00" not in user_text and "\x01" not in user_text and "\x02" not in user_text:
                out = big.split(b"\x00")
                out.pop()
                return out
        _check_no_separators("tags", tags)
        _check_no_separators("keys", keys)
        _check_no_separators("unique keys", tails)
        user = _broadcast(batch.properties, n)
        out = []
        for t, k, u, p in zip(tags, keys, (head + t for t in tails), user):
            d = {}
            if p:
                _check_no_separators("property names and values", list(p.keys()) + list(p.values()))
                d.update(p)
            if t:
                d["TAGS"] = t
            if k:
                d["KEYS"] = k
            d["UNIQ_KEY"] = u
            out.append(serialize_properties(d).encode())
        return out


def model_records(
    prep: PreparedBatch, physical: np.ndarray, queue_ids: np.ndarray, queue_offsets: np.ndarray, store_ts: int
) -> bytes:
    """The batch's records back to back, with the fields the put lock assigns."""
    out, lo = [], 0
    for run in prep.runs:
        hi = lo + len(run)
        out.append(
            run.render(
                0,
                len(run),
                physical_offsets=physical[lo:hi],
                queue_ids=queue_ids[lo:hi],
                queue_offsets=queue_offsets[lo:hi],
                store_timestamp=store_ts,
            )
        )
        lo = hi
    return b"".join(out)
