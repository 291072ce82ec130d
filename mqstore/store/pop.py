"""Pop consumption state of one shard: per (group, topic, queue) a cursor and the
messages in flight, durable. RocketMQ 5's SimpleConsumer and PushConsumer consume by
"pop"; the pop rules (mqstore/store/pop_rules.py) decide what to hand out and
record it here. Plain Python: no Ray, no gRPC.

Vocabulary (one key = (group, topic, queue_id)):

    term        meaning
    cursor      the next queue offset never handed out; every offset below it is acked,
                in flight, or skipped (filtered out). Absent for a new key.
    in flight   an entry ``InFlight(offset, commitlog_offset, size, deadline_ms, attempt,
                generation)``: handed out (or held) and not finished yet. Always < cursor.
    deadline    when the entry becomes visible again (``deadline_ms``); due iff
                ``deadline_ms <= now_ms``
    attempt     how many times it was delivered; 0 = held, never delivered (a delay
                message kept until its delivery time)
    generation  +1 on each (re)delivery, hold and change of invisible time; a receipt
                handle carries the generation it was issued with
    current     a handle is current iff its generation, deadline and commitlog offset are
                the entry's; it is expired iff ``now_ms > handle.deadline_ms``

Files, all under ``<directory>/pop/`` (nothing is created elsewhere; opened, written,
synced and compacted by mqstore/store/pop_files.py):

    journal        one record per mutating call, appended, then fdatasynced (group commit)
    snapshot       the whole state as of journal record ``seq``
    snapshot.tmp   a snapshot being written; removed at open
    handle_secret  32 random bytes, mode 0600, made once (written as handle_secret.tmp,
                   fsynced, renamed): the key of the receipt handles' tags, so a handle
                   stays valid across restarts and only this shard can make one

Journal and snapshot bytes: mqstore/formats/pop_journal.py (a journal is a sequence of
records, each one delta of one (group, topic) with a seq and a CRC; a snapshot is a
header and one record per (group, topic)). Receipt handles: mqstore/formats/receipt_handle.py.

Applying a delta sets its cursors, puts its entries (replacing the entry at the same
offset), then removes its removals. A call's whole effect is one delta, so one record:
a torn record is the whole call or nothing. A snapshot is written as ``snapshot.tmp``,
fsynced, renamed, and the directory fsynced.

Compaction: once the journal reaches ``max(compact_bytes, snapshot size)`` bytes
(4 MiB by default; the snapshot size term keeps the rewrite cost per journal byte
under 2), the next mutating call writes a snapshot of everything and truncates the
journal to 0. Records written after it continue the seq numbering.

Recovery (at open): load the snapshot (any damage: CorruptFileError, it was renamed
into place whole), then read the journal from its start: records with ``seq <=``
the snapshot's are already in it and skipped (a crash between the snapshot's rename
and the journal's truncation leaves them); the others are applied in order. The first
record that is short, fails its CRC or does not continue the seq numbering (bytes of
an older journal behind a torn write) ends the journal: it and everything after it are
cut off (a torn tail is the normal result of a kill -9 or power cut mid-write). A
record that passes its CRC but skips seq numbers, or whose body is malformed, is not a
torn write: CorruptFileError.

Durability: a mutating call returns after its record is fdatasynced (``fsync=True``);
concurrent calls share fdatasyncs (the first waiter syncs everything written so far).
Reads wait the same way for the calls whose effect they show, so nothing a read
returns can be lost by a crash. With ``fsync=False`` a record reaches the OS page
cache before the call returns: a process crash loses nothing, a power cut may lose
the latest calls.

Fault points (mqstore/store/faults.py): ``pop.write`` (before a journal write),
``pop.write.torn`` (between the two halves of a journal record, only when armed),
``pop.sync`` (before a journal fdatasync), ``pop.snapshot.sync`` (before the
snapshot's fsync), ``pop.snapshot.rename`` (before its rename).
"""

from __future__ import annotations

import heapq
import operator
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import NamedTuple, TypeVar

import structlog

from mqstore.errors import (
    InvalidArgumentError,
    InvalidReceiptHandle,
    StoreClosedError,
)
from mqstore.formats.pop_journal import (
    InFlight,
    PopDelta,
)
from mqstore.formats.receipt_handle import HANDLE_VERSION, ReceiptHandle, authentic, signed
from mqstore.store.pop_files import (
    COMPACT_BYTES,
    JOURNAL_FILE,
    POP_DIR,
    SECRET_FILE,
    SNAPSHOT_FILE,
    SNAPSHOT_TMP,
    PopFiles,
    PopRecovery,
    replay_read_only,
)

log = structlog.get_logger(__name__)


_I32_MAX = (1 << 31) - 1
_I64_MAX = (1 << 63) - 1

_R = TypeVar("_R")


# ---------------------------------------------------------------------- value types


class Delivery(NamedTuple):
    """One message a :meth:`PopState.pop` hands out (or holds): a new one at or past
    the key's cursor, or a due one in flight. ``hold_until_ms`` set: keep it in flight
    undelivered until then (a delay message), attempt unchanged, no handle."""

    queue_id: int
    offset: int
    commitlog_offset: int
    size: int
    hold_until_ms: int | None = None


class AckOutcome(Enum):
    """What :meth:`PopState.ack` did with one handle (and the pop rules' answer to
    an ack, a change of invisible time or a dead letter by handle)."""

    OK = "ok"  # the handle was current: the message is finished for the group
    STALE = "stale"  # not current: acked, redelivered or changed since, unknown, or another shard
    EXPIRED = "expired"  # now_ms > handle.deadline_ms: refused (RocketMQ's proxy does the same)
    FORGED = "forged"  # its tag is not this shard's for the group and topic: not a handle it made
    MALFORMED = "malformed"  # not a receipt handle of this shard's at all (pop_rules; PopState never says it)


@dataclass(frozen=True, slots=True)
class PopKeyStatus:
    """One key's state, for status and debugging (:meth:`PopState.groups`)."""

    group: str
    topic: str
    queue_id: int
    cursor: int | None
    in_flight: int
    next_deadline_ms: int | None


@dataclass(frozen=True, slots=True)
class PopStats:
    """Sizes of the state: keys, entries in flight, journal and snapshot bytes, the
    last record's seq, and how many snapshots this process wrote."""

    keys: int
    in_flight: int
    journal_bytes: int
    snapshot_bytes: int
    seq: int
    snapshots_written: int


# ---------------------------------------------------------------------- one key in memory


class _Queue:
    """One key: cursor, entries by offset, and a heap of (deadline_ms, offset,
    generation) over them. The heap is lazy: an item whose generation is no longer
    the entry's (or whose entry is gone) is skipped and dropped when met, and the heap
    is rebuilt when such items outnumber the live ones."""

    __slots__ = ("cursor", "entries", "heap")

    def __init__(self) -> None:
        self.cursor: int | None = None
        self.entries: dict[int, InFlight] = {}
        self.heap: list[tuple[int, int, int]] = []

    def put(self, e: InFlight) -> None:
        self.entries[e.offset] = e
        heapq.heappush(self.heap, (e.deadline_ms, e.offset, e.generation))
        self._maybe_rebuild()

    def remove(self, offset: int) -> None:
        if self.entries.pop(offset, None) is not None:
            self._maybe_rebuild()

    def _maybe_rebuild(self) -> None:
        # why: an entry acked long before its deadline leaves its item deep in the heap
        if len(self.heap) > 2 * len(self.entries) + 64:
            self.heap = [(e.deadline_ms, e.offset, e.generation) for e in self.entries.values()]
            heapq.heapify(self.heap)

    def _live(self, item: tuple[int, int, int]) -> bool:
        e = self.entries.get(item[1])
        return e is not None and e.generation == item[2]

    def first_deadline(self) -> int | None:
        heap = self.heap
        while heap and not self._live(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now_ms: int, limit: int) -> list[InFlight]:
        """Up to ``limit`` entries with deadline <= now_ms, earliest first: O(k log n)."""
        heap, taken, out = self.heap, [], []
        while heap and len(out) < limit and heap[0][0] <= now_ms:
            item = heapq.heappop(heap)
            if self._live(item):
                taken.append(item)
                out.append(self.entries[item[1]])
        for item in taken:
            heapq.heappush(heap, item)
        return out


def _apply_delta(keys: dict[tuple[str, str], dict[int, _Queue]], d: PopDelta) -> None:
    """Apply a delta to ``keys`` (live calls and replay alike); never fails."""
    queues = keys.setdefault((d.group, d.topic), {})
    for q, c in d.cursors:
        qs = queues.get(q) or queues.setdefault(q, _Queue())
        qs.cursor = c
    for q, e in d.puts:
        qs = queues.get(q) or queues.setdefault(q, _Queue())
        qs.put(e)
    for q, off in d.removals:
        qs = queues.get(q)
        if qs is not None:
            qs.remove(off)
            if qs.cursor is None and not qs.entries:
                del queues[q]
    if not queues:
        del keys[(d.group, d.topic)]


def _current(e: InFlight | None, h: ReceiptHandle) -> bool:
    return (
        e is not None
        and e.generation == h.generation
        and e.deadline_ms == h.deadline_ms
        and e.commitlog_offset == h.commitlog_offset
    )


def _check_int(name: str, value: object, low: int = 0, high: int = _I64_MAX) -> int:
    """``value`` as an int (numpy integers welcome, bools not) if in low..high."""
    try:
        v = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        v = None
    if v is None or isinstance(value, bool) or not low <= v <= high:
        raise InvalidArgumentError(f"{name} must be an integer in {low}..{high}, got {value!r}")
    return v


def _check_name(kind: str, name: object) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"{kind} name must be a non-empty string, got {name!r}")
    try:
        n = len(name.encode())
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{kind} name {name!r} is not encodable as UTF-8") from None
    if n > 0xFFFF:
        raise InvalidArgumentError(f"{kind} name is {n} bytes long; at most 65535")


def _checked_delivery(d: object) -> Delivery:
    if not isinstance(d, Delivery):
        raise InvalidArgumentError(f"deliveries must be Delivery values, got {type(d).__name__}")
    return Delivery(
        _check_int("queue_id", d.queue_id, 0, _I32_MAX),
        _check_int("offset", d.offset),
        _check_int("commitlog_offset", d.commitlog_offset),
        _check_int("size", d.size, 0, _I32_MAX),
        None if d.hold_until_ms is None else _check_int("hold_until_ms", d.hold_until_ms),
    )


# ---------------------------------------------------------------------- the state


class PopState:
    """The durable pop state of one shard (see the module docstring).

    Thread-safe: any thread may call any method. One lock guards the state and the
    journal's appends; a second serialises fdatasyncs (group commit) and snapshots.
    One process at a time: the journal is flock'ed (StoreLockedError otherwise).

    Every mutating call (:meth:`pop`, :meth:`ack`, :meth:`change_invisible`,
    :meth:`drop`) is validated whole before anything changes (InvalidArgumentError,
    a ValueError, leaves the state as it was), then written as one journal record,
    applied, and made durable before it returns. A write failure raises
    StoreNotWritableError with the state unchanged; a failed fdatasync (the record's
    fate unknown) raises it too and makes every later mutating call fail with it until
    the state is opened again (reads keep answering from memory).

    Costs (measured on the 2-core development machine): memory ~320 bytes per entry in
    flight; a pop or ack of 32 messages ~0.5 ms with its fdatasync, concurrent calls
    sharing fdatasyncs; :meth:`due` and :meth:`next_deadline_ms` are O(log n) per
    entry looked at (a heap per key); :meth:`entry` is O(1), :meth:`blocked` and
    :meth:`in_flight` O(entries of the key); a snapshot (every ~4 MiB of journal, at
    least the snapshot's own size) holds the lock while it writes 44 bytes per entry
    (100k entries: 4.4 MB, 0.12 s); reopening replays ~4 MiB of journal at most
    (100k entries: ~0.4 s).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        shard: int = 0,
        fsync: bool = True,
        compact_bytes: int = COMPACT_BYTES,
    ) -> None:
        """Open (creating ``<directory>/pop/`` if needed) and recover; see
        :attr:`recovery` for what was found. ``compact_bytes``: the journal size
        that triggers a snapshot (tests use tiny ones)."""
        self.shard = _check_int("shard", shard, 0, _I32_MAX)
        compact_bytes = _check_int("compact_bytes", compact_bytes, 1)
        self._lock = threading.Lock()  # the state, the journal's end and seq
        self._keys: dict[tuple[str, str], dict[int, _Queue]] = {}
        self._files = PopFiles(
            Path(directory) / POP_DIR,
            lock=self._lock,
            apply=self._apply,
            snapshot_of=self._deltas,
            shard=self.shard,
            fsync=bool(fsync),
            compact_bytes=compact_bytes,
        )
        self.recovery = self._files.recovery
        log.info(
            "pop_state_opened",
            shard=self.shard,
            path=str(Path(directory) / POP_DIR),
            snapshot_seq=self.recovery.snapshot_seq,
            replayed=self.recovery.replayed,
            truncated_bytes=self.recovery.truncated_bytes,
            keys=sum(len(qs) for qs in self._keys.values()),
        )

    def _signed(self, group: str, topic: str, h: ReceiptHandle) -> ReceiptHandle:
        return signed(self._files.secret, group, topic, h)

    def _authentic(self, group: str, topic: str, h: ReceiptHandle) -> bool:
        """True iff this shard made ``h`` for (group, topic): its tag is ours (constant time)."""
        return authentic(self._files.secret, self.shard, group, topic, h)

    def _deltas(self) -> list[PopDelta]:
        """The whole state, a delta per (group, topic) (a snapshot's records; under the lock)."""
        out = []
        for (group, topic), queues in sorted(self._keys.items()):
            cursors = [(q, qs.cursor) for q, qs in sorted(queues.items()) if qs.cursor is not None]
            puts = [(q, e) for q, qs in sorted(queues.items()) for e in sorted(qs.entries.values())]
            out.append(PopDelta(group, topic, cursors, puts, []))
        return out

    # ------------------------------------------------------------------ applying

    def _apply(self, d: PopDelta) -> None:
        _apply_delta(self._keys, d)

    def _mutate(self, plan: Callable[[], tuple[_R, PopDelta | None]]) -> _R:
        """Run ``plan`` (validates and computes, changes nothing) under the lock, write
        its delta as one record, apply it, then wait until it is durable."""
        with self._lock:
            self._files.check_writable()
            result, delta = plan()
            if delta is None:
                seq = self._files.written_seq  # nothing changed; what we read must be durable
            else:
                seq = self._files.append(delta)
                self._apply(delta)
        self._files.wait_durable(seq)
        self._files.maybe_compact()
        return result

    def _read(self, fn: Callable[[], _R]) -> _R:
        with self._lock:
            if self._files.closed:
                raise StoreClosedError("the pop state is closed")
            result = fn()
            seq = self._files.written_seq
        self._files.wait_durable(seq, read=True)  # show nothing a crash could still undo
        return result

    # ------------------------------------------------------------------ reads

    def cursor(self, group: str, topic: str, queue_id: int) -> int | None:
        """The key's cursor: the next offset never handed out; None for a new key (the
        caller then starts at the queue's min offset)."""

        def read() -> int | None:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return None if qs is None else qs.cursor

        return self._read(read)

    def entry(self, group: str, topic: str, queue_id: int, offset: int) -> InFlight | None:
        """The entry in flight at ``offset`` of the key, or None (acked, skipped, never
        handed out): O(1), where :meth:`in_flight` lists the whole key."""

        def read() -> InFlight | None:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return None if qs is None else qs.entries.get(offset)

        return self._read(read)

    def in_flight(self, group: str, topic: str, queue_id: int) -> list[InFlight]:
        """The key's entries in flight, by offset."""

        def read() -> list[InFlight]:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return [] if qs is None else sorted(qs.entries.values())

        return self._read(read)

    def due(
        self, group: str, topic: str, queue_ids: Sequence[int], now_ms: int, limit: int
    ) -> list[tuple[int, InFlight]]:
        """Up to ``limit`` (queue_id, entry) of the given queues whose deadline is
        <= now_ms, earliest deadline first (then queue id, then offset)."""

        def read() -> list[tuple[int, InFlight]]:
            queues = self._keys.get((group, topic))
            if not queues or limit <= 0:
                return []
            out = []
            for q in dict.fromkeys(queue_ids):
                qs = queues.get(q)
                if qs is not None:
                    out.extend((q, e) for e in qs.due(now_ms, limit))
            out.sort(key=lambda qe: (qe[1].deadline_ms, qe[0], qe[1].offset))
            return out[:limit]

        return self._read(read)

    def blocked(self, group: str, topic: str, queue_id: int, now_ms: int) -> bool:
        """FIFO: True if an entry of the key is in flight and not due yet (nothing new
        may be handed out from the queue). O(entries of the key)."""

        def read() -> bool:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return qs is not None and any(e.deadline_ms > now_ms for e in qs.entries.values())

        return self._read(read)

    def delivered_in_flight(self, group: str, topic: str, queue_id: int) -> bool:
        """FIFO: True if a delivered entry (attempt >= 1) of the key is in flight, due or
        not: nothing new may be handed out from the queue until it is finished. A held
        entry (attempt 0, a delay message waiting for its time) does not count: it
        takes its place in the order when it is delivered, as RocketMQ's timer puts a
        delay message into its queue only at its delivery time. O(entries of the key)."""

        def read() -> bool:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return qs is not None and any(e.attempt > 0 for e in qs.entries.values())

        return self._read(read)

    def next_deadline_ms(self, group: str, topic: str, queue_ids: Sequence[int]) -> int | None:
        """The earliest deadline among the entries in flight in these queues (it may be
        past), or None: when a long poll should look again."""

        def read() -> int | None:
            queues = self._keys.get((group, topic), {})
            firsts = (queues[q].first_deadline() for q in dict.fromkeys(queue_ids) if q in queues)
            return min((d for d in firsts if d is not None), default=None)

        return self._read(read)

    def groups(self) -> list[PopKeyStatus]:
        """Every key with a cursor or entries in flight, sorted by (group, topic, queue)."""

        def read() -> list[PopKeyStatus]:
            return [
                PopKeyStatus(g, t, q, qs.cursor, len(qs.entries), qs.first_deadline())
                for (g, t), queues in sorted(self._keys.items())
                for q, qs in sorted(queues.items())
            ]

        return self._read(read)

    def stats(self) -> PopStats:
        """Sizes (see :class:`PopStats`)."""

        def read() -> PopStats:
            return PopStats(
                keys=sum(len(qs) for qs in self._keys.values()),
                in_flight=sum(len(q.entries) for qs in self._keys.values() for q in qs.values()),
                journal_bytes=self._files.journal_size,
                snapshot_bytes=self._files.snapshot_bytes,
                seq=self._files.written_seq,
                snapshots_written=self._files.snapshots_written,
            )

        return self._read(read)

    # ------------------------------------------------------------------ mutating calls

    def pop(
        self,
        group: str,
        topic: str,
        deliveries: Sequence[Delivery],
        *,
        cursors: Mapping[int, int],
        now_ms: int,
        invisible_ms: int,
    ) -> list[ReceiptHandle | None]:
        """Hand out (or hold) ``deliveries`` and move ``cursors``, as one durable step.

        Each delivery is either new (offset >= the key's cursor, or a new key): the
        key's cursor after this call (``cursors`` or the old one) must be past it; or
        an entry in flight that is due at ``now_ms``. It gets generation + 1 and:
        delivered: attempt + 1, deadline ``now_ms + invisible_ms``, a handle;
        held (``hold_until_ms`` set): attempt unchanged, deadline ``hold_until_ms``, None.
        Returns the handles aligned with ``deliveries``. A cursor never moves back.
        InvalidArgumentError (a ValueError) for any breach, with nothing changed."""
        _check_name("group", group)
        _check_name("topic", topic)
        now_ms = _check_int("now_ms", now_ms)
        invisible_ms = _check_int("invisible_ms", invisible_ms, 0, _I64_MAX - now_ms)
        moves = {_check_int("queue_id", q, 0, _I32_MAX): _check_int("cursor", c) for q, c in cursors.items()}
        deliveries = [_checked_delivery(d) for d in deliveries]

        def plan() -> tuple[list[ReceiptHandle | None], PopDelta | None]:
            queues = self._keys.get((group, topic), {})
            changed = []
            for q, c in moves.items():
                old = queues[q].cursor if q in queues else None
                if old is not None and c < old:
                    raise InvalidArgumentError(f"cursor of {group}/{topic}/{q} would move back from {old} to {c}")
                if c != old:
                    changed.append((q, c))
            handles: list[ReceiptHandle | None] = []
            puts: list[tuple[int, InFlight]] = []
            seen: set[tuple[int, int]] = set()
            for d in deliveries:
                q = d.queue_id
                if (q, d.offset) in seen:
                    raise InvalidArgumentError(f"offset {d.offset} of queue {q} is delivered twice in one pop")
                seen.add((q, d.offset))
                qs = queues.get(q)
                old_cursor = None if qs is None else qs.cursor
                if old_cursor is None or d.offset >= old_cursor:
                    new_cursor = moves.get(q, old_cursor)
                    if new_cursor is None or new_cursor <= d.offset:
                        raise InvalidArgumentError(
                            f"new offset {d.offset} of {group}/{topic}/{q} needs the cursor moved past it "
                            f"(cursor {old_cursor}, moved to {moves.get(q)})"
                        )
                    attempt, generation = 0, 0
                else:
                    e = qs.entries.get(d.offset) if qs is not None else None
                    if e is None:
                        raise InvalidArgumentError(
                            f"offset {d.offset} of {group}/{topic}/{q} is below the cursor {old_cursor} "
                            "and not in flight (acked or skipped)"
                        )
                    if e.deadline_ms > now_ms:
                        raise InvalidArgumentError(
                            f"offset {d.offset} of {group}/{topic}/{q} is in flight until {e.deadline_ms}, "
                            f"not due at {now_ms}"
                        )
                    attempt, generation = e.attempt, e.generation
                if d.hold_until_ms is not None:
                    entry = InFlight(d.offset, d.commitlog_offset, d.size, d.hold_until_ms, attempt, generation + 1)
                    handles.append(None)
                else:
                    entry = InFlight(
                        d.offset, d.commitlog_offset, d.size, now_ms + invisible_ms, attempt + 1, generation + 1
                    )
                    handles.append(
                        self._signed(
                            group,
                            topic,
                            ReceiptHandle(
                                self.shard, q, d.offset, entry.generation, now_ms, invisible_ms, d.commitlog_offset
                            ),
                        )
                    )
                puts.append((q, entry))
            if not changed and not puts:
                return handles, None
            return handles, PopDelta(group, topic, changed, puts, [])

        return self._mutate(plan)

    def ack(self, group: str, topic: str, handles: Sequence[ReceiptHandle], now_ms: int) -> list[AckOutcome]:
        """Finish the messages whose handles are current, as one durable step; an
        outcome per handle, in order: FORGED (its tag is not this shard's for the group
        and topic: checked first, so nothing about the entry shows), OK (removed),
        EXPIRED (``now_ms`` is past the handle's deadline: refused, the entry stays and
        comes back when due) or STALE (anything else: acked already, redelivered or
        changed since, unknown)."""
        _check_name("group", group)
        _check_name("topic", topic)
        now_ms = _check_int("now_ms", now_ms)
        handles = list(handles)
        for h in handles:
            if not isinstance(h, ReceiptHandle):
                raise InvalidArgumentError(f"handles must be ReceiptHandle values, got {type(h).__name__}")

        def plan() -> tuple[list[AckOutcome], PopDelta | None]:
            queues = self._keys.get((group, topic), {})
            outcomes, removals, gone = [], [], set()
            for h in handles:
                if not self._authentic(group, topic, h):
                    outcomes.append(AckOutcome.FORGED)
                    continue
                if now_ms > h.deadline_ms:
                    outcomes.append(AckOutcome.EXPIRED)
                    continue
                qs = queues.get(h.queue_id)
                e = qs.entries.get(h.offset) if qs is not None else None
                if h.shard != self.shard or (h.queue_id, h.offset) in gone or not _current(e, h):
                    outcomes.append(AckOutcome.STALE)
                    continue
                outcomes.append(AckOutcome.OK)
                gone.add((h.queue_id, h.offset))
                removals.append((h.queue_id, h.offset))
            return outcomes, (PopDelta(group, topic, [], [], removals) if removals else None)

        return self._mutate(plan)

    def change_invisible(
        self, group: str, topic: str, handle: ReceiptHandle, now_ms: int, invisible_ms: int
    ) -> ReceiptHandle:
        """Give a current handle's message a new deadline ``now_ms + invisible_ms``, as
        one durable step; returns the new handle (generation + 1, ``pop_ms = now_ms``,
        attempt unchanged), the old one is void. InvalidReceiptHandle (reason
        ``forged``, ``expired`` or ``stale``) if the handle is not usable, with nothing
        changed."""
        _check_name("group", group)
        _check_name("topic", topic)
        if not isinstance(handle, ReceiptHandle):
            raise InvalidArgumentError(f"handle must be a ReceiptHandle, got {type(handle).__name__}")
        now_ms = _check_int("now_ms", now_ms)
        invisible_ms = _check_int("invisible_ms", invisible_ms, 0, _I64_MAX - now_ms)
        h = handle

        def plan() -> tuple[ReceiptHandle, PopDelta]:
            if not self._authentic(group, topic, h):
                raise InvalidReceiptHandle(
                    f"receipt handle of {group}/{topic} was not made by shard {self.shard} for them", reason="forged"
                )
            if now_ms > h.deadline_ms:
                raise InvalidReceiptHandle(
                    f"receipt handle expired at {h.deadline_ms} (now {now_ms})", reason="expired"
                )
            qs = self._keys.get((group, topic), {}).get(h.queue_id)
            e = qs.entries.get(h.offset) if qs is not None else None
            if h.shard != self.shard or not _current(e, h):
                raise InvalidReceiptHandle(
                    f"receipt handle of {group}/{topic}/{h.queue_id} offset {h.offset} is stale "
                    "(acked, redelivered or changed since)",
                    reason="stale",
                )
            assert e is not None
            new = e._replace(deadline_ms=now_ms + invisible_ms, generation=e.generation + 1)
            out = self._signed(
                group,
                topic,
                ReceiptHandle(
                    self.shard, h.queue_id, h.offset, new.generation, now_ms, invisible_ms, e.commitlog_offset
                ),
            )
            return out, PopDelta(group, topic, [], [(h.queue_id, new)], [])

        return self._mutate(plan)

    def check(self, group: str, topic: str, handle: ReceiptHandle, now_ms: int) -> AckOutcome:
        """What :meth:`ack` would answer for ``handle`` alone, changing nothing: for a
        caller that finishes the message another way (to the DLQ, then :meth:`drop`)
        under the key's lock, so the answer still holds when it acts."""
        _check_name("group", group)
        _check_name("topic", topic)
        if not isinstance(handle, ReceiptHandle):
            raise InvalidArgumentError(f"handle must be a ReceiptHandle, got {type(handle).__name__}")
        now_ms = _check_int("now_ms", now_ms)

        def read() -> AckOutcome:
            if not self._authentic(group, topic, handle):
                return AckOutcome.FORGED
            if now_ms > handle.deadline_ms:
                return AckOutcome.EXPIRED
            qs = self._keys.get((group, topic), {}).get(handle.queue_id)
            e = qs.entries.get(handle.offset) if qs is not None else None
            return AckOutcome.OK if _current(e, handle) else AckOutcome.STALE

        return self._read(read)

    def drop(self, group: str, topic: str, queue_id: int, offsets: Iterable[int]) -> int:
        """Remove entries in flight without a handle check (after a message went to
        the DLQ, or when its record is gone), as one durable step; offsets not in
        flight are ignored. Returns how many were removed."""
        _check_name("group", group)
        _check_name("topic", topic)
        queue_id = _check_int("queue_id", queue_id, 0, _I32_MAX)
        wanted = [_check_int("offset", o) for o in offsets]

        def plan() -> tuple[int, PopDelta | None]:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            found = sorted({o for o in wanted if qs is not None and o in qs.entries})
            delta = PopDelta(group, topic, [], [], [(queue_id, o) for o in found]) if found else None
            return len(found), delta

        return self._mutate(plan)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Sync and release the journal; every later call raises StoreClosedError.
        Closing twice is harmless."""
        self._files.close()

    def __enter__(self) -> PopState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_keys(directory: str | os.PathLike[str]) -> list[PopKeyStatus]:
    """Every key of ``<directory>/pop/`` as its files hold them, read-only: no lock,
    nothing written, cut or created (``mqstore consumer-progress --store`` next to a
    running shard). Replays as opening does; the first record that is short, fails its
    CRC or breaks the seq order ends the journal (one being written at that moment).
    No state there: []. CorruptFileError for a damaged snapshot or record body."""
    keys: dict[tuple[str, str], dict[int, _Queue]] = {}
    replay_read_only(Path(directory) / POP_DIR, lambda d: _apply_delta(keys, d))
    return [
        PopKeyStatus(g, t, q, qs.cursor, len(qs.entries), qs.first_deadline())
        for (g, t), queues in sorted(keys.items())
        for q, qs in sorted(queues.items())
    ]


__all__ = [
    "COMPACT_BYTES",
    "HANDLE_VERSION",
    "JOURNAL_FILE",
    "POP_DIR",
    "SECRET_FILE",
    "SNAPSHOT_FILE",
    "SNAPSHOT_TMP",
    "AckOutcome",
    "Delivery",
    "InFlight",
    "PopKeyStatus",
    "PopRecovery",
    "PopState",
    "PopStats",
    "ReceiptHandle",
    "read_keys",
]
