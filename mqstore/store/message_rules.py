"""The message rules every producer door applies: own-API sends (SendBatch through
``LogStore.append``, SendEncoded through ``LogStore.append_encoded``, ``--store`` sends
through ``MessageStore.append``) and the RocketMQ port (convert.check_message, then
the same ``LogStore.append``). A message one door takes, every door takes, so nothing
one API writes can fail a consumer of the other.

    what                   rule (RocketMQ's, where it has one)
    TIMER_DELIVER_MS       epoch ms written as str(int) does (digits, an optional '-',
                           no leading zero), from 0001-01-01 to at most 24 h ahead of
                           the store's clock (the port's horizon; RocketMQ's timer
                           refuses a time past its own); not with a DELAY level
    TIMER_DELAY_SEC/_MS    refused: RocketMQ turns them into TIMER_DELIVER_MS, the
                           store does not (give TIMER_DELIVER_MS instead)
    DELAY                  a delay level: a decimal integer 0..2^31-1 (Java's int)
    __SHARDINGKEY          a FIFO message group: not blank, under 64 bytes, no
                           control characters (the port's ILLEGAL_MESSAGE_GROUP)
    born time              within protobuf Timestamp's range (0001-01-01 ..
                           9999-12-31), which every RocketMQ 5 consumer converts it to
    message type           a message with a group is FIFO, one with a delivery time
                           DELAY (both: refused), else NORMAL; a DELAY level counts as
                           NORMAL or DELAY (RocketMQ 4's delayTimeLevel). A topic takes
                           its own type (topics.json ``message.type``; no config or no
                           type: NORMAL), MIXED every type; TRANSACTION messages come
                           only from the RocketMQ port's transactional producers
    queue id               below the topic's write queue count (RocketMQ's send check);
                           a FIFO message sent to the automatic queue (-1) goes to its
                           group's queue, crc32(group) % write queues, as on the port

The columns are checked with numpy (born times, queue ids, kinds per topic); the
property values are read from the dicts a columnar batch already holds, or located in
an encoded batch's records by the compiled ``locate_properties`` and parsed with numpy
(``decimal_values``), so no door builds a Python object per message for these rules.
The store's own writers (delay deliveries, transactions, dead letters: DeliverDelayed)
do not come here. Errors are InvalidMessageError subclasses naming the message index.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Callable, Mapping

import numpy as np

from mqstore.errors import DeliveryTimeError, InvalidMessageError, MessageTypeError
from mqstore.formats.properties import DELAY, locate_properties
from mqstore.kernels._encode import distinct
from mqstore.store.messages import AUTO_QUEUE, MessageBatch
from mqstore.store.topic_configs import MessageType, TopicConfig

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # RocketMQ MessageConst.PROPERTY_TIMER_DELIVER_MS
SHARDING_KEY = "__SHARDINGKEY"  # MessageConst.PROPERTY_SHARDING_KEY: the FIFO message group
UNSUPPORTED_TIMER_PROPERTIES = ("TIMER_DELAY_SEC", "TIMER_DELAY_MS")
MAX_DELIVERY_AHEAD_MS = 24 * 3600 * 1000
MIN_TIME_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z, protobuf Timestamp's first
MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, its last
MAX_GROUP_BYTES = 64  # a group takes fewer (RocketMQ's proxy)
MAX_DELAY_LEVEL = (1 << 31) - 1

_DECIMAL = re.compile(r"0|-?[1-9][0-9]{0,15}")  # str(int); 16 digits hold every time in range
_MAX_DIGITS = 16
MARKERS = (b"TIMER_DELIVER_MS", b"__SHARDINGKEY")  # names the compiled property scan marks per record
_INTEGER = re.compile(r"-?[0-9]+")
_LEVEL = re.compile(r"0|[1-9][0-9]{0,9}")

# Message kinds, as bits: what a message is and what a topic type takes.
NORMAL, FIFO, DELAYED, LEVEL = 1, 2, 4, 8
_KIND_NAMES = {NORMAL: "NORMAL", FIFO: "FIFO", DELAYED: "DELAY", LEVEL: "DELAY-level"}
_TAKES = {
    MessageType.NORMAL: NORMAL | LEVEL,
    MessageType.FIFO: FIFO,
    MessageType.DELAY: DELAYED | LEVEL,
    MessageType.TRANSACTION: 0,
    MessageType.MIXED: NORMAL | FIFO | DELAYED | LEVEL,
}


# ------------------------------------------------------------------ one value


def delivery_time_problem(at_ms: int, now_ms: int) -> str | None:
    """Why a delivery time (epoch ms) is refused, or None."""
    if at_ms < MIN_TIME_MS:
        return f"delivery time {at_ms} ms is before 0001-01-01"
    if at_ms - now_ms > MAX_DELIVERY_AHEAD_MS:
        return f"delivery time {at_ms} ms is more than 24 h ahead (now {now_ms} ms)"
    return None


def parse_delivery_ms(text: str) -> int | None:
    """A TIMER_DELIVER_MS value as an integer, or None if it is not one written as
    ``str(int)`` writes it (at most 16 digits: every time in range fits)."""
    return int(text) if isinstance(text, str) and _DECIMAL.fullmatch(text) else None


def delivery_text_problem(text: str, now_ms: int) -> str | None:
    """Why a TIMER_DELIVER_MS value is refused, or None."""
    at = parse_delivery_ms(text)
    if at is not None:
        return delivery_time_problem(at, now_ms)
    if _INTEGER.fullmatch(text):  # digits, but too many (or leading zeros)
        return f"{TIMER_DELIVER_MS} {text[:40]} is not a delivery time: epoch ms from 0001-01-01 to 24 h ahead"
    return f"{TIMER_DELIVER_MS} {text[:40]!r} is not an integer of epoch ms"


def born_time_problem(born_ms: int) -> str | None:
    """Why a born time (epoch ms) is refused, or None."""
    if not MIN_TIME_MS <= born_ms <= MAX_TIME_MS:
        return f"born time {born_ms} ms is outside 0001-01-01..9999-12-31 (protobuf Timestamp's range)"
    return None


def group_problem(group: str) -> str | None:
    """Why a FIFO message group is refused, or None (blank means spaces only: the
    other blanks are control characters, refused as such)."""
    if not group.strip(" "):
        return f"message group {group!r} is blank"
    if len(group.encode()) >= MAX_GROUP_BYTES:
        return f"message group {group[:80]!r} is {len(group.encode())} bytes; a group takes under {MAX_GROUP_BYTES}"
    if any(ord(c) < 32 or ord(c) == 127 for c in group):
        return f"message group {group[:80]!r} has control characters"
    return None


def kind_of(props: Mapping[str, str] | None) -> int:
    """The kind of a message with these properties (NORMAL, FIFO, DELAYED, LEVEL; a
    group with a delivery time or a DELAY level gives two bits, which no topic takes)."""
    if not props:
        return NORMAL
    kind = (FIFO if SHARDING_KEY in props else 0) | (DELAYED if TIMER_DELIVER_MS in props else 0)
    if not kind & DELAYED and props.get(DELAY, "0") != "0":
        kind |= LEVEL
    return kind or NORMAL


def check_properties(i: int, props: Mapping[str, str], now_ms: int) -> int:
    """The rules on one message's properties (``i`` its index, for the error); its kind."""
    for name in UNSUPPORTED_TIMER_PROPERTIES:
        if name in props:
            raise DeliveryTimeError(
                f"message {i}: property {name} is not taken: give the delivery time as {TIMER_DELIVER_MS} (epoch ms)"
            )
    level = props.get(DELAY)
    if level is not None and (
        not isinstance(level, str) or not _LEVEL.fullmatch(level) or int(level) > MAX_DELAY_LEVEL
    ):
        raise InvalidMessageError(
            f"message {i}: DELAY {level!r} is not a delay level (an integer 0..{MAX_DELAY_LEVEL})"
        )
    deliver = props.get(TIMER_DELIVER_MS)
    if deliver is not None:
        why = delivery_text_problem(deliver, now_ms)
        if why is None and level not in (None, "0"):
            why = f"a message takes a DELAY level or a {TIMER_DELIVER_MS}, not both"
        if why is not None:
            raise DeliveryTimeError(f"message {i}: {why}")
    group = props.get(SHARDING_KEY)
    if group is not None:
        why = group_problem(group)
        if why is not None:
            raise InvalidMessageError(f"message {i}: {why}")
    return kind_of(props)


# ------------------------------------------------------------------ columns


def decimal_values(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``parse_delivery_ms`` over many values at once: the bytes ``buf[starts[i]:ends[i]]``
    (``buf`` a uint8 array) as int64 ``values`` and ``ok`` (False where the text is
    not one ``parse_delivery_ms`` takes); one numpy pass, no object per value."""
    m = len(starts)
    width = _MAX_DIGITS + 1
    lens = ends - starts
    col = np.arange(width)
    if m == 0 or len(buf) == 0:
        return np.zeros(m, np.int64), np.zeros(m, bool)
    raw = buf[np.minimum(starts[:, None] + col, len(buf) - 1)].astype(np.int64)
    neg = raw[:, 0] == ord("-")
    first = neg.astype(np.int64)
    digits = lens - first
    inside = (col >= first[:, None]) & (col < lens[:, None])
    is_digit = (raw >= ord("0")) & (raw <= ord("9"))
    lead = raw[np.arange(m), np.minimum(first, width - 1)]
    ok = (digits >= 1) & (digits <= _MAX_DIGITS) & np.all(~inside | is_digit, axis=1)
    ok &= ~((lead == ord("0")) & (neg | (digits > 1)))  # "-0", "007"
    power = np.clip(lens[:, None] - 1 - col, 0, _MAX_DIGITS - 1)
    values = np.where(inside, (raw - ord("0")) * (10**power), 0).sum(axis=1)
    return np.where(neg, -values, values), ok


def _born_column(value, n: int) -> np.ndarray | None:
    """Born times given (None where the store's clock stands in), as int64."""
    if value is None:
        return None
    try:
        arr = np.asarray(value, np.int64)
    except TypeError:  # None inside: the store's clock for those
        arr = np.asarray([0 if t is None else t for t in value], np.int64)
    except (ValueError, OverflowError) as e:
        raise InvalidMessageError(f"born_timestamps must be 64-bit integers: {e}") from None
    return np.broadcast_to(arr, (n,)) if arr.ndim == 0 else arr


def check_born_times(born: np.ndarray | None) -> None:
    if born is None or born.size == 0:
        return
    bad = (born < MIN_TIME_MS) | (born > MAX_TIME_MS)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidMessageError(f"message {i}: {born_time_problem(int(born[i]))}")


def takes_of(config: TopicConfig | None) -> int:
    """The message kinds a topic with this config takes (bits; no config: NORMAL)."""
    return _TAKES[MessageType.NORMAL if config is None else config.message_type]


def topic_ids_fine(
    columns: tuple[np.ndarray | np.int64, np.ndarray | np.int64], queue_ids: np.ndarray | None, kinds
) -> bool:
    """``check_topic_columns`` over a topic table's columns (topic_table.TopicTable.columns:
    each message's ``takes`` and ``write_limit``), vectorised: True if it would refuse
    nothing. False: the caller runs ``check_topic_columns`` for the error it raises."""
    takes, limits = columns
    kinds = np.asarray(kinds, np.int64)
    if ((kinds & ~takes) != 0).any() or (((kinds & FIFO) != 0) & ((kinds & (DELAYED | LEVEL)) != 0)).any():
        return False
    return queue_ids is None or not (queue_ids >= limits).any()


def check_topic_columns(
    topics: list[str],
    codes: np.ndarray | None,
    queue_ids: np.ndarray | None,
    kinds: np.ndarray | int,
    topic_of: Callable[[str], TopicConfig | None],
) -> None:
    """Each message's kind against its topic's type, its queue id below the topic's
    write queues (``codes[i]`` indexes ``topics``; None: one topic for all)."""
    configs = [topic_of(t) for t in topics]
    configured = any(c is not None for c in configs)
    kinds = np.atleast_1d(np.asarray(kinds, np.int64))
    if configured:
        takes = np.array([_TAKES[MessageType.NORMAL if c is None else c.message_type] for c in configs], np.int64)
        per_msg = np.atleast_1d(takes[0] if codes is None else takes[codes])
    else:  # no config: NORMAL, and any queue the store takes
        per_msg = _TAKES[MessageType.NORMAL]
    refused = ((kinds & ~per_msg) != 0) | (((kinds & FIFO) != 0) & ((kinds & (DELAYED | LEVEL)) != 0))
    if refused.any():
        i = int(np.argmax(refused))
        _refuse_kind(i, int(kinds[i if kinds.size > 1 else 0]), topics, codes, configs)
    if queue_ids is None or not configured or not (queue_ids > AUTO_QUEUE).any():
        return
    limits = np.array([1 << 62 if c is None else c.write_queue_nums for c in configs], np.int64)
    over = queue_ids >= (limits[0] if codes is None else limits[codes])
    if over.any():
        i = int(np.argmax(over)) if over.ndim else 0
        t = topics[0 if codes is None else int(codes[i])]
        c = configs[topics.index(t)]
        raise InvalidMessageError(
            f"message {i}: queue id {int(np.broadcast_to(queue_ids, over.shape).flat[i])} is past topic {t!r}'s {c.write_queue_nums} "
            f"write queue(s) (0..{c.write_queue_nums - 1}, or {AUTO_QUEUE}: automatic)"
        )


def _refuse_kind(i: int, kind: int, topics, codes, configs) -> None:
    c = 0 if codes is None else int(codes[i])
    t, config = topics[c], configs[c]
    if kind & FIFO and kind & (DELAYED | LEVEL):
        raise MessageTypeError(
            f"message {i}: a message carries a message group or a delivery time (or DELAY level), not both"
        )
    ttype = MessageType.NORMAL if config is None else config.message_type
    if ttype is MessageType.FIFO and kind != FIFO:
        raise MessageTypeError(
            f"message {i}: topic {t!r} takes FIFO messages: give each a message group ({SHARDING_KEY})"
        )
    if ttype is MessageType.TRANSACTION:
        raise MessageTypeError(
            f"message {i}: topic {t!r} takes TRANSACTION messages, which only the RocketMQ port's "
            f"transactional producers send"
        )
    raise MessageTypeError(
        f"message {i}: topic {t!r} takes {ttype.value} messages, not {_KIND_NAMES[kind]} ones "
        f"(a {SHARDING_KEY} makes a message FIFO, a {TIMER_DELIVER_MS} DELAY)"
    )


# ------------------------------------------------------------------ FIFO queues


def fifo_queue(group: str, write_queues: int) -> int:
    """The queue of a FIFO message group: crc32 of its UTF-8 over the write queues, as
    the RocketMQ port picks it (one group, one queue, so its order holds)."""
    return zlib.crc32(group.encode()) % max(write_queues, 1)


def pick_fifo_queues(queue_ids: np.ndarray, topics: list[str], props, write_queues_of: Callable[[str], int]) -> None:
    """Set in place, for each message with a message group and an automatic queue id,
    its group's queue (``fifo_queue``); ``topics`` and ``props`` per message (props a
    list of mappings or None). Costs one look per message that has properties."""
    for i, p in enumerate(props):
        if p and queue_ids[i] == AUTO_QUEUE and SHARDING_KEY in p:
            queue_ids[i] = fifo_queue(p[SHARDING_KEY], write_queues_of(topics[i]))


def with_fifo_queues(batch: MessageBatch, write_queues_of: Callable[[str], int]) -> MessageBatch:
    """``batch`` with its FIFO messages' automatic queue ids set to their group's queue
    (the batch itself if none has a group and an automatic queue)."""
    props = batch.properties
    if props is None or (batch.queue_ids is not None and not (np.asarray(batch.queue_ids) == AUTO_QUEUE).any()):
        return batch
    n = len(batch)
    rows = [props] * n if isinstance(props, Mapping) else props
    if not any(p and SHARDING_KEY in p for p in rows):
        return batch
    qids = np.broadcast_to(np.asarray(AUTO_QUEUE if batch.queue_ids is None else batch.queue_ids, np.int64), (n,))
    qids = qids.copy()
    topics = [batch.topics] * n if isinstance(batch.topics, str) else list(batch.topics)
    pick_fifo_queues(qids, topics, rows, write_queues_of)
    return dataclasses.replace(batch, queue_ids=qids)


# ------------------------------------------------------------------ the doors


def check_batch(
    batch: MessageBatch,
    topic_of: Callable[[str], TopicConfig | None],
    now_ms: int,
    *,
    columns: tuple[np.ndarray | np.int64, np.ndarray | np.int64] | None = None,
    plain: bool = False,
) -> None:
    """The rules on a columnar batch (SendBatch, ``MessageStore.append``, the
    RocketMQ port's sends); messages.check_client_batch has checked its columns' types.
    ``columns``: each message's topic columns from the store's topic table
    (TopicTable.columns), which spare a config lookup per topic when nothing is refused;
    ``plain``: the table says every topic takes NORMAL messages on any queue."""
    n = len(batch)
    props = batch.properties
    if n == 0 or (  # the usual producer batch: nothing to check per message
        props is None
        and batch.born_timestamps is None
        and (plain or (isinstance(batch.topics, str) and topic_of(batch.topics) is None))
    ):
        return
    if props is None:
        kinds: np.ndarray | int = NORMAL
    elif isinstance(props, Mapping):
        kinds = check_properties(0, props, now_ms) if props else NORMAL
    else:
        kinds = np.full(n, NORMAL, np.int64)
        for i, p in enumerate(props):
            if p:
                kinds[i] = check_properties(i, p, now_ms)
    check_born_times(_born_column(batch.born_timestamps, n))
    qids = None
    if batch.queue_ids is not None:
        qids = np.asarray(batch.queue_ids, np.int64)
        if not (qids > AUTO_QUEUE).any():
            qids = None
    if columns is not None and topic_ids_fine(columns, qids, kinds):
        return
    if isinstance(batch.topics, str):
        topics, codes = [batch.topics], None
    else:
        codes = np.empty(n, np.int64)
        topics = distinct(batch.topics if type(batch.topics) is list else list(batch.topics), codes)
    check_topic_columns(topics, codes, qids, kinds, topic_of)


def check_encoded(  # noqa: PLR0913
    data,
    props_at: np.ndarray,
    props_len: np.ndarray,
    marks: np.ndarray,
    topics: list[str],
    codes: np.ndarray,
    queue_ids: np.ndarray,
    topic_of: Callable[[str], TopicConfig | None],
    now_ms: int,
    *,
    columns: tuple[np.ndarray | np.int64, np.ndarray | np.int64] | None = None,
    plain: bool = False,
) -> None:
    """The rules on a batch a producer encoded (encoded_batch.py checked born times
    in its compiled head check, and refused DELAY and the other timer properties as
    reserved): delivery times and groups read in place from the records, kinds as a
    column. ``marks``: the scan's bits per record (MARKERS) say which records carry them.
    A FIFO record with an automatic queue id gets its group's queue in ``queue_ids``
    (the sender normally picks it: this costs one crc32 per such record). ``columns``
    and ``plain``: as check_batch's."""
    if not marks.any():  # the usual batch: no delivery time, no group
        if plain or (columns is not None and topic_ids_fine(columns, queue_ids, NORMAL)):
            return
        check_topic_columns(topics, codes if len(topics) > 1 else None, queue_ids, NORMAL, topic_of)
        return
    ((ds, de), (gs, ge)) = locate_properties(data, props_at, props_len, [TIMER_DELIVER_MS.encode(), b"__SHARDINGKEY"])
    buf = np.frombuffer(data, np.uint8)
    kinds = np.full(len(props_at), NORMAL, np.int64)
    has = np.flatnonzero(ds >= 0)
    if has.size:
        values, ok = decimal_values(buf, ds[has], de[has])
        ok &= (values >= MIN_TIME_MS) & (values - now_ms <= MAX_DELIVERY_AHEAD_MS)
        if not ok.all():
            k = int(np.argmax(~ok))
            i = int(has[k])
            why = delivery_text_problem(bytes(buf[ds[i] : de[i]]).decode(), now_ms)
            raise DeliveryTimeError(f"encoded record {i}: {why}; nothing was written")
        kinds[has] = DELAYED
    grouped = np.flatnonzero(gs >= 0)
    if grouped.size:
        _check_groups(buf, gs[grouped], ge[grouped], grouped)
        kinds[grouped] = np.where(kinds[grouped] == DELAYED, FIFO | DELAYED, FIFO)
    if columns is None or not topic_ids_fine(columns, queue_ids, kinds):
        check_topic_columns(topics, codes if len(topics) > 1 else None, queue_ids, kinds, topic_of)
    for i in grouped[queue_ids[grouped] == AUTO_QUEUE].tolist():
        config = topic_of(topics[int(codes[i])])  # a FIFO record's topic has one (check_topic_columns)
        queue_ids[i] = fifo_queue(bytes(buf[gs[i] : ge[i]]).decode(), config.write_queue_nums)


def _check_groups(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray) -> None:
    """``group_problem`` over located groups (UTF-8 was checked: a control character
    is one byte below 32 or 127, and a blank group all spaces)."""
    lens = ends - starts
    width = MAX_GROUP_BYTES
    col = np.arange(width)
    raw = buf[np.minimum(starts[:, None] + col, len(buf) - 1)]
    inside = col < lens[:, None]
    bad = lens >= MAX_GROUP_BYTES
    bad |= np.any(inside & ((raw < 32) | (raw == 127)), axis=1)
    bad |= np.all(~inside | (raw == ord(" ")), axis=1)
    if bad.any():
        k = int(np.argmax(bad))
        text = bytes(buf[starts[k] : ends[k]]).decode()
        raise InvalidMessageError(f"encoded record {int(rows[k])}: {group_problem(text)}; nothing was written")


__all__ = [
    "MARKERS",
    "MAX_DELIVERY_AHEAD_MS",
    "MAX_TIME_MS",
    "MIN_TIME_MS",
    "SHARDING_KEY",
    "TIMER_DELIVER_MS",
    "UNSUPPORTED_TIMER_PROPERTIES",
    "born_time_problem",
    "check_batch",
    "check_encoded",
    "check_topic_columns",
    "takes_of",
    "topic_ids_fine",
    "decimal_values",
    "fifo_queue",
    "pick_fifo_queues",
    "with_fifo_queues",
    "delivery_text_problem",
    "delivery_time_problem",
    "group_problem",
    "kind_of",
    "parse_delivery_ms",
]
