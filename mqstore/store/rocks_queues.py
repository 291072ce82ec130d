"""All consume queues of a store in one RocksDB (RocketMQ 5 ``storeType=defaultRocksDB``).

The option for very many queues: where the default layout keeps a directory and
files per queue (consume_queues.py), this keeps one RocksDB under
``<store>/consumequeue/`` (RocketMQ's directory, holding the database's files
instead of topic directories), a key per unit and the queues' min and max in the
column family ``offset`` (byte layouts: formats/rocks_queue.py). The rest of the
store sees the same interface as ``ConsumeQueues`` (``find`` gives a ``RocksQueue``
with ``ConsumeQueue``'s read side); ``store_type.open_consume_queues`` picks the class.

Writes: each dispatched chunk is one WriteBatch of its units; the state the
dispatcher checks units against (max offset, commitlog offset of the last unit)
lives in arrays by dense queue id, so no per-queue Python runs for units that
continue their queue. The offset table (each touched queue's min and max) and the
checkpoint entry are written from those arrays at each thorough flush, just before
the database is flushed.

Durability: RocksDB's WAL is off, as RocketMQ runs it. The commitlog is the
source of truth: a thorough flush (every 60 s, on close) flushes the memtables of
both column families to synced SST files before the builder reports its durable
offset, and a crash re-dispatches from that offset, as with the default layout's
write-behind. Acknowledged messages are durable in the commitlog, not here. What a
crash leaves is a prefix of the unit batches and the offset entries of the last
flush or an older one (units are flushed before the entries; ``atomic_flush`` keeps
the automatic flushes of both column families together), so the offset table never
names a unit the database lost; units past a queue's max are rewritten by the
re-dispatch. Recovery then cuts units pointing at or past the commitlog's recovered
end and moves min offsets up to the commitlog's min. A WAL would double the bytes
written for nothing the re-dispatch does not already give.

Limits: ``max_open_files`` bounds RocksDB's descriptors (one database per shard;
no maps), so ``ulimit -n 1024`` and ``vm.max_map_count`` hold at any number of
queues.

Who calls what: as ConsumeQueues (the dispatcher ``dispatch``, the flusher
``flush``, recovery ``load`` and ``recover``, readers ``find`` from any thread).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import structlog
from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from mqstore.errors import CorruptFileError, OffsetError, StoreClosedError
from mqstore.formats.consume_queue import UNIT_DTYPE, CqUnit
from mqstore.formats.message import advances_queue_offset
from mqstore.formats.rocks_queue import (
    CHECKPOINT_KEY,
    MAX,
    MIN,
    OFFSET_FAMILY,
    OFFSET_VALUE,
    PrefixTable,
    decode_values,
    encode_offset_values,
    encode_values,
    offset_key,
    parse_offset_entries,
    queue_prefix,
    unit_key,
    unit_keys,
)
from mqstore.store import faults
from mqstore.store.dispatch import DispatchBatch

log = structlog.get_logger(__name__)

CONSUME_QUEUE_DIR = "consumequeue"  # RocketMQ StorePathConfigHelper.getStorePathConsumeQueue: the same for both types
ROCKS_MARKER = "CURRENT"  # a RocksDB always has it; the default layout never has a file there
DAMAGED_MARKER = "MQSTORE_DAMAGED"  # left by a read that found damage: the next open rebuilds (RocksDB ignores it)
_MAX_OPEN_FILES = 256  # RocksDB's descriptors (SST files), well inside ulimit -n 1024
_READ_BATCH = 65_536  # units read per multi-get
_CLEAN_WINDOW = 4  # retention reads this many units of each queue from its min at once (``clean_below``)


def _options(max_open_files: int, *, create: bool) -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(create)
    opts.create_missing_column_families(create)
    opts.set_max_open_files(max_open_files)
    opts.set_atomic_flush(True)  # both column families flushed together: a crash leaves them agreeing
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(2)
    opts.set_write_buffer_size(64 << 20)
    return opts


def _is_damage(e: Exception) -> bool:
    """Whether RocksDB refused to open for damage (not for a lock held, a permission)."""
    text = str(e)
    return "Corruption" in text or "checksum mismatch" in text or "No such file or directory" in text


def _is_rocks_dir(path: Path) -> bool:
    return (path / ROCKS_MARKER).is_file()


class RocksQueue:
    """One queue of a RocksQueues: ConsumeQueue's read side and its retention step.
    A view (made on demand, holds no state): its offsets are the owner's arrays."""

    __slots__ = ("_owner", "_d", "topic", "queue_id")

    def __init__(self, owner: RocksQueues, dense: int) -> None:
        self._owner, self._d = owner, dense
        self.topic, self.queue_id = owner._names[dense]

    @property
    def min_offset(self) -> int:
        return int(self._owner._min[self._d])

    @property
    def max_offset(self) -> int:
        return int(self._owner._max[self._d])

    @property
    def max_physical_offset(self) -> int:
        """offset+size of the newest unit (-1 if none)."""
        last = self.last_unit()
        return -1 if last is None else last.commitlog_offset + last.size

    def read_units(self, queue_offset: int, max_count: int) -> np.ndarray:
        """As ConsumeQueue.read_units: up to ``max_count`` units from ``queue_offset``
        (UNIT_DTYPE); empty at or past max; OffsetError below min."""
        if max_count <= 0:
            raise ValueError(f"max_count must be > 0, got {max_count}")
        lo, hi = self.min_offset, self.max_offset
        if queue_offset < lo:
            raise OffsetError(
                f"queue offset {queue_offset} of {self.topic}-{self.queue_id} is below the min offset {lo}"
            )
        values = self._owner._values(self._d, queue_offset, min(hi, queue_offset + max_count))
        units = np.empty(len(values), UNIT_DTYPE)
        for name in UNIT_DTYPE.names:
            units[name] = values[name]
        return units

    def _unit(self, queue_offset: int) -> np.ndarray | None:
        v = self._owner._values(self._d, queue_offset, queue_offset + 1)
        return v[0] if len(v) else None

    def last_unit(self) -> CqUnit | None:
        hi = self.max_offset
        if hi <= self.min_offset or (v := self._unit(hi - 1)) is None:
            return None
        return CqUnit(hi - 1, int(v["commitlog_offset"]), int(v["size"]), int(v["tags_code"]))

    def offset_at_time(self, timestamp: int, store_time_of=None, *, commitlog_min_offset: int = 0) -> int:
        """The first queue offset whose message was stored at or after ``timestamp``
        (ms); ``max_offset`` if none is, ``min_offset`` if the first is. The store
        time is in each unit's value: a binary search of point reads, no commitlog
        read (``store_time_of`` is taken for ConsumeQueue's signature and not used)."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            v = self._unit(mid)
            if v is None:  # retention moved the min meanwhile
                return self.min_offset
            if int(v["commitlog_offset"]) < commitlog_min_offset or int(v["store_timestamp"]) < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def correct_min_offset(self, commitlog_min_offset: int) -> int:
        self._owner._correct_min(self._d, commitlog_min_offset)
        return self.min_offset

    def delete_files_below(self, commitlog_min_offset: int) -> list[str]:
        """Retention: the units pointing below ``commitlog_min_offset`` go (one
        delete_range) and the min offset moves up. Returns ``["<old>-<new>"]``, the
        queue offsets deleted, or [] (ConsumeQueue returns the files it deleted)."""
        old = self.min_offset
        new = self._owner._correct_min(self._d, commitlog_min_offset)
        return [f"{old}-{new}"] if new > old else []


class RocksQueues:
    """The store's consume queues in one RocksDB; a DispatchSink. See the module docstring."""

    uses_queue_ends = False  # the summary of queue ends (queue_ends.py) is the file layout's

    def __init__(
        self,
        store_dir: Path,
        *,
        max_open_files: int = _MAX_OPEN_FILES,
        read_only: bool = False,
        read_only_above: int | None = None,
    ) -> None:
        """``read_only`` (or ``read_only_above``, a query's view: read_view.py): the
        database is opened read-only, as its files are (what its last flush left)."""
        self._store_dir = Path(store_dir)
        self._path = self._store_dir / CONSUME_QUEUE_DIR
        self._read_only = read_only or read_only_above is not None
        self._lock = threading.Lock()
        self._db: Rdict | None = None
        self._cf = None
        self._cf_handle = None
        self._names: list[tuple[str, int]] = []  # (topic, queue id) by dense id
        self._prefixes = PrefixTable()  # each queue's unit-key prefix, by dense id
        self._topic_index: dict[str, int] = {}
        self._topic_names: list[str] = []
        self._dense: dict[int, int] = {}  # (topic index << 16 | queue id) -> dense id
        self._keys = np.zeros(0, np.int64)  # the same, sorted, for the dispatcher's lookups (rebuilt when stale)
        self._key_ids = np.zeros(0, np.int64)
        self._sorted_stale = False
        self._n = 0  # queues; the arrays below have room for more
        self._min = np.zeros(0, np.int64)
        self._max = np.zeros(0, np.int64)  # next queue offset
        self._last_phys = np.zeros(0, np.int64)  # commitlog offset of the last unit (-1: never had one)
        self._min_phys = np.zeros(0, np.int64)  # commitlog offset of the unit at the min offset (-1: none)
        self._dirty = np.zeros(0, bool)  # units put since the queue's offset entries were last written
        self._of_topic_id = np.zeros(0, np.int64)  # DispatchBatch.topic_ids -> topic index here (-1: not yet)
        self._checkpoint = -1  # commitlog end of the newest record dispatched
        self._closed = False
        self._write = WriteOptions()
        self._write.disable_wal = True
        # What ConsumeQueues offers and the rest of the store may read.
        self.pool = SimpleNamespace(peak_open=0, max_open=max_open_files)  # no per-queue descriptors here
        self.rebuild_from: int | None = None
        self.cleaned_min = -1
        self.summary_queues = 0
        self.changed_since_summary = 0
        self.made_ahead = 0
        self.last_dispatched_timestamp = 0
        if self._read_only and not _is_rocks_dir(self._path):
            return  # nothing dispatched yet: every queue is empty
        self._max_open_files = max_open_files
        if not self._read_only:
            self._path.mkdir(parents=True, exist_ok=True)
            if (self._path / DAMAGED_MARKER).exists():
                self._set_aside(f"a read found it damaged before ({DAMAGED_MARKER})")
                return
        try:
            self._open(max_open_files)
            self._load_offsets()
        except Exception as e:  # rocksdict raises plain Exception; only damage is handled here
            if not _is_damage(e):
                self._close_db()
                raise
            if self._read_only:
                self._close_db()
                raise self._damaged(e) from None
            self._set_aside(str(e))

    def _set_aside(self, why: str) -> None:
        """A database that cannot be opened or read (a torn, lost or rotten file) is
        moved aside, as the file layout discards a queue it cannot open, and an empty
        one takes its place: the dispatcher rebuilds every queue from the commitlog."""
        self._close_db()
        self._forget_queues()
        aside = self._path.with_name(f"{CONSUME_QUEUE_DIR}.damaged-{time.time_ns()}")
        os.rename(self._path, aside)
        log.warning("consume_queue_db_damaged", error=why, moved_to=str(aside), action="rebuilt from the commitlog")
        self._path.mkdir()
        self._open(self._max_open_files)
        self.rebuild_from = -1

    def _get(self, keys: list[bytes]) -> list:
        """Multi-get; a block RocksDB finds damaged (bit rot: a crash never tears its
        files) raises CorruptFileError, and a writable store leaves DAMAGED_MARKER so
        that its next open rebuilds the queues from the commitlog."""
        try:
            return self._check_open().get(keys)
        except StoreClosedError:
            raise
        except Exception as e:  # rocksdict raises plain Exception
            if not _is_damage(e):
                raise
            if not self._read_only:
                (self._path / DAMAGED_MARKER).touch()
            raise self._damaged(e) from None

    def _damaged(self, e: Exception) -> CorruptFileError:
        log.error("consume_queue_db_damaged", error=str(e), store=str(self._store_dir))
        fix = (
            "run: mqstore repair (it rebuilds them from the commitlog)"
            if self._read_only
            else "the store rebuilds them from the commitlog when it next opens (or run: mqstore repair)"
        )
        return CorruptFileError(f"the consume queues of {self._store_dir} (one RocksDB) are damaged: {e}. {fix}")

    def _open(self, max_open_files: int) -> None:
        opts = _options(max_open_files, create=not self._read_only)
        access = AccessType.read_only() if self._read_only else AccessType.read_write()
        self._db = Rdict(
            str(self._path),
            opts,
            column_families={OFFSET_FAMILY: _options(max_open_files, create=not self._read_only)},
            access_type=access,
        )
        self._cf = self._db.get_column_family(OFFSET_FAMILY)
        self._cf_handle = self._db.get_column_family_handle(OFFSET_FAMILY)

    def _close_db(self) -> None:
        if self._cf is not None:
            self._cf.close()  # RocksDB's lock goes only with the last reference to the database
        self._cf = self._cf_handle = None
        if self._db is not None:
            self._db.close()
        self._db = None

    def _forget_queues(self) -> None:
        """Every queue's state gone (the arrays too: dense ids are given again from 0)."""
        self._names, self._prefixes, self._dense, self._n = [], PrefixTable(), {}, 0
        self._topic_index, self._topic_names, self._sorted_stale = {}, [], True
        self._min = self._max = self._last_phys = self._min_phys = np.zeros(0, np.int64)
        self._dirty, self._of_topic_id = np.zeros(0, bool), np.zeros(0, np.int64)
        self._checkpoint = -1

    # ------------------------------------------------------------------ state

    def _load_offsets(self) -> None:
        """Every queue's min and max from the offset column family: one scan, the
        entries parsed with numpy (400,000 queues are 800,000 entries)."""
        keys, values = [], []
        for key, value in self._cf.items():
            keys.append(key)
            values.append(value)
        if CHECKPOINT_KEY in keys:  # (sorted keys: a binary search would do; one scan is cheap next to the rest)
            at = keys.index(CHECKPOINT_KEY)
            self._checkpoint = OFFSET_VALUE.unpack(values.pop(at))[0]
            keys.pop(at)
        if not keys:
            return
        entries = parse_offset_entries(keys, values)
        order = np.lexsort((entries.queue_ids, entries.topic_rank))
        topic_rank, qids = entries.topic_rank[order], entries.queue_ids[order]
        first = np.concatenate(([True], (topic_rank[1:] != topic_rank[:-1]) | (qids[1:] != qids[:-1])))
        queue_of = np.cumsum(first) - 1  # per entry (in ``order``): which queue of the sorted ones
        heads = np.flatnonzero(first)
        names = [entries.topics[r] for r in topic_rank[heads].tolist()]
        ids = self._add_queues(list(zip(names, qids[heads].tolist())))
        is_max, phys, qo = entries.is_max[order], entries.phys[order], entries.queue_offsets[order]
        mx = np.zeros(len(heads), np.int64)
        last = np.full(len(heads), -1, np.int64)
        mn = np.full(len(heads), -1, np.int64)
        mn_phys = np.full(len(heads), -1, np.int64)
        mx[queue_of[is_max]], last[queue_of[is_max]] = np.maximum(qo[is_max] + 1, 0), phys[is_max]
        mn[queue_of[~is_max]], mn_phys[queue_of[~is_max]] = qo[~is_max], phys[~is_max]
        self._max[ids] = mx
        self._min[ids] = np.where(mn >= 0, np.minimum(mn, mx), mx)
        self._last_phys[ids] = last
        self._min_phys[ids] = np.where(mn >= 0, mn_phys, -1)

    def _topic_id(self, topic: str) -> int:
        t = self._topic_index.get(topic)
        if t is None:
            t = self._topic_index[topic] = len(self._topic_names)
            self._topic_names.append(topic)
        return t

    def _dense_of(self, topic: str, queue_id: int) -> int:
        """Dense id of a queue, -1 if unknown."""
        t = self._topic_index.get(topic)
        return -1 if t is None else self._dense.get(t << 16 | queue_id, -1)

    def _add_queues(self, keys: list[tuple[str, int]]) -> np.ndarray:
        """Give each new (topic, queue id) a dense id. Arrays grow by doubling and the
        sorted key array the dispatcher looks up is rebuilt at its next chunk, so
        queues made one at a time (topic creation) cost no copy of every queue's state."""
        first, n = self._n, len(keys)
        if first + n > len(self._min):
            cap = max(first + n, 2 * len(self._min), 1024)
            for name, fill in (("_min", 0), ("_max", 0), ("_last_phys", -1), ("_min_phys", -1), ("_dirty", False)):
                grown = np.full(cap, fill, getattr(self, name).dtype)
                grown[:first] = getattr(self, name)[:first]
                setattr(self, name, grown)
        self._names.extend(keys)
        self._prefixes.add([queue_prefix(t, q) for t, q in keys])
        tid = self._topic_id
        self._dense.update(zip([tid(t) << 16 | q for t, q in keys], range(first, first + n)))
        self._n = first + n
        self._sorted_stale = True
        return np.arange(first, first + n, dtype=np.int64)

    def _topic_map(self, topics: list[str], topic_ids: np.ndarray | None) -> np.ndarray:
        """The topic index here of each of a batch's ``topics``: with the batch's
        process-wide topic ids, a gather from an array by id (no Python per topic once
        a topic is known)."""
        if topic_ids is None or not len(topic_ids):
            return np.fromiter((self._topic_id(t) for t in topics), np.int64, len(topics))
        known = self._of_topic_id
        if topic_ids.max() >= len(known):
            grown = np.full(max(int(topic_ids.max()) + 1, 2 * len(known)), -1, np.int64)
            grown[: len(known)] = known
            known = self._of_topic_id = grown
        tmap = known[topic_ids]
        for i in np.flatnonzero(tmap < 0).tolist():
            tmap[i] = known[topic_ids[i]] = self._topic_id(topics[i])
        return tmap

    def _dense_ids(
        self, topics: list[str], codes: np.ndarray, qids: np.ndarray, topic_ids: np.ndarray | None = None
    ) -> np.ndarray:
        """Dense id of each record's queue (new queues added): one sorted lookup."""
        tmap = self._topic_map(topics, topic_ids)
        k = tmap[codes] << 16 | qids.astype(np.int64)
        for _ in range(2):
            if self._sorted_stale:
                codes_all = np.fromiter(self._dense.keys(), np.int64, len(self._dense))
                ids_all = np.fromiter(self._dense.values(), np.int64, len(self._dense))
                order = np.argsort(codes_all)
                self._keys, self._key_ids = codes_all[order], ids_all[order]
                self._sorted_stale = False
            pos = np.minimum(np.searchsorted(self._keys, k), max(len(self._keys) - 1, 0))
            found = self._keys[pos] == k if len(self._keys) else np.zeros(len(k), bool)
            if found.all():
                return self._key_ids[pos]
            new = np.unique(k[~found])
            self._add_queues([(self._topic_names[int(v >> 16)], int(v & 0xFFFF)) for v in new.tolist()])
        raise AssertionError("queues added but not found")

    def _prefix(self, dense: int) -> bytes:
        return self._prefixes.rows[dense, : self._prefixes.lens[dense]].tobytes()

    def _check_open(self) -> Rdict:
        if self._closed:
            raise StoreClosedError(f"the consume queues of {self._store_dir} are closed")
        return self._db

    # ------------------------------------------------------------------ reads

    def _values(self, dense: int, lo: int, hi: int) -> np.ndarray:
        """Values (VALUE_DTYPE) of queue ``dense``'s units [lo, hi), stopping at the
        first missing one (retention deleted it meanwhile, or a gap)."""
        if hi <= lo or self._db is None:
            return decode_values([])
        prefix, out = self._prefix(dense), []
        for start in range(lo, hi, _READ_BATCH):
            got = self._get(unit_keys(prefix, start, min(hi, start + _READ_BATCH) - start))
            missing = next((i for i, v in enumerate(got) if v is None), -1)
            if missing >= 0:
                out.extend(got[:missing])
                break
            out.extend(got)
        return decode_values(out)

    def find(self, topic: str, queue_id: int) -> RocksQueue | None:
        with self._lock:
            d = self._dense_of(topic, queue_id)
        return RocksQueue(self, d) if d >= 0 else None

    def get(self, topic: str, queue_id: int, **_) -> RocksQueue:
        with self._lock:
            d = self._dense_of(topic, queue_id)
            if d < 0:
                d = int(self._add_queues([(topic, queue_id)])[0])
        return RocksQueue(self, d)

    def keys(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._names)

    def all(self) -> list[RocksQueue]:
        with self._lock:
            n = self._n
        return [RocksQueue(self, d) for d in range(n)]

    def count(self) -> int:
        return self._n

    def ends(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(zip(self._names, self._max[: self._n].tolist()))

    def max_physical_offset(self) -> int:
        """The commitlog end of the newest record dispatched (-1: none)."""
        return self._checkpoint

    def note_cleaned(self, commitlog_min: int) -> None:
        self.cleaned_min = max(self.cleaned_min, commitlog_min)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, batch: DispatchBatch, from_offset: int = 0, to_offset: int = 0) -> None:
        """Put the units of NOT_TYPE and COMMIT records, as one WriteBatch.

        Units whose record is at or before their queue's last unit are there already
        (a re-dispatch after a restart) and skipped; runs that continue their queue
        (the next queue offset, further in the commitlog) are checked with numpy by
        dense queue id; the rare others are sorted out unit by unit (repeats skipped,
        a gap taken with a warning, as RocketMQ's RocksDB queue takes it)."""
        take = advances_queue_offset(batch.sysflags)
        idx = np.flatnonzero(take) if not take.all() else np.arange(len(batch))
        if not len(idx):
            return
        newest = int(idx[-1])
        end = int(batch.physical_offsets[newest] + batch.sizes[newest])
        with self._lock:
            db = self._check_open()
            dense = self._dense_ids(
                batch.topics, batch.topic_codes[idx], batch.queue_ids[idx], getattr(batch, "topic_ids", None)
            )
            new = batch.physical_offsets[idx] > self._last_phys[dense]
            if not new.all():  # built already (a re-dispatch)
                idx, dense = idx[new], dense[new]
            if len(idx):
                order = np.argsort(dense, kind="stable")  # commitlog order within a queue
                sel, d = idx[order], dense[order]
                qo, phys = batch.queue_offsets[sel].astype(np.int64), batch.physical_offsets[sel].astype(np.int64)
                starts = np.flatnonzero(np.concatenate(([True], d[1:] != d[:-1])))
                follows = np.ones(len(sel), bool)
                follows[1:] = (qo[1:] == qo[:-1] + 1) & (phys[1:] > phys[:-1])
                run_d = d[starts]
                follows[starts] = (qo[starts] == self._max[run_d]) | (self._last_phys[run_d] < 0)
                if not follows.all():
                    keep = self._sort_out(
                        d, qo, phys, starts, np.flatnonzero(~np.logical_and.reduceat(follows, starts))
                    )
                    sel, d, qo, phys = sel[keep], d[keep], qo[keep], phys[keep]
                self._put(db, batch, sel, d, qo, phys, end)
        self.last_dispatched_timestamp = int(batch.store_timestamps[newest])

    def _sort_out(self, d, qo, phys, starts: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """Which units to keep of the ``runs`` (indexes into ``starts``) that do not
        simply continue their queue, unit by unit; the others are all kept."""
        keep = np.ones(len(d), bool)
        stops = np.append(starts[1:], len(d))
        for r in runs.tolist():
            q = int(d[starts[r]])
            nxt, last, fresh = int(self._max[q]), int(self._last_phys[q]), self._last_phys[q] < 0
            for row in range(int(starts[r]), int(stops[r])):
                o, p = int(qo[row]), int(phys[row])
                if (not fresh and o < nxt) or p <= last:
                    keep[row] = False  # there already
                    continue
                if not fresh and o > nxt:
                    topic, qid = self._names[q]
                    if int(self._min[q]) == int(self._max[q]) == nxt:
                        # nothing below the gap (retention took the queue's units, a crash the
                        # ones after): the queue starts at the unit taken, or pulls at its old
                        # min would find nothing there and never move on
                        self._min[q], self._min_phys[q] = o, p
                        self._dirty[q] = True
                        action = "taken as the queue's new min"
                    else:
                        action = "taken"
                    log.warning("consume_queue_gap", topic=topic, queue_id=qid, expected=nxt, got=o, action=action)
                nxt, last, fresh = o + 1, p, False
        return keep

    def _put(self, db: Rdict, batch: DispatchBatch, sel, d, qo, phys, end: int) -> None:
        """One WriteBatch of the units. Keys and values are built with numpy; what is
        left per unit is rocksdict's put (it has no put of many). The queues' offset
        entries and the checkpoint entry are written at the next thorough flush
        (``_write_offsets``): one entry per touched queue per chunk was half the writes
        at 10,000 topics round-robin, and between flushes the arrays here hold them."""
        self._checkpoint = max(self._checkpoint, end)
        if not len(sel):
            return
        wb = WriteBatch(raw_mode=True)
        put = wb.put
        values = encode_values(phys, batch.sizes[sel], batch.tags_codes[sel], batch.store_timestamps[sel])
        for k, v in zip(self._prefixes.unit_keys(d, qo), values):
            put(k, v)
        faults.hit("rocks.write")  # crash tests: a chunk's units not written (the re-dispatch must bring them)
        db.write(wb, self._write)
        last = np.append(np.flatnonzero(d[1:] != d[:-1]), len(d) - 1)
        run_d = d[last]
        fresh = np.flatnonzero(self._last_phys[run_d] < 0)
        if len(fresh):
            first = np.concatenate(([0], last[:-1] + 1))[fresh]
            self._min[run_d[fresh]] = qo[first]
            self._min_phys[run_d[fresh]] = phys[first]
        self._max[run_d] = qo[last] + 1
        self._last_phys[run_d] = phys[last]
        self._dirty[run_d] = True

    def _write_offsets(self) -> None:
        """The offset entries (min and max) of every queue with units put since they
        were last written, and the checkpoint entry, as one WriteBatch (before the
        database is flushed: they then never name a unit the flush does not hold)."""
        with self._lock:
            db = self._check_open()
            ids = np.flatnonzero(self._dirty[: self._n])
            self._dirty[ids] = False
            mx, last, mn, mn_phys = self._max[ids], self._last_phys[ids], self._min[ids], self._min_phys[ids]
            checkpoint = self._checkpoint
        wb = WriteBatch(raw_mode=True)
        put, cf = wb.put, self._cf_handle
        for k, v in zip(self._prefixes.offset_keys(ids, MAX), encode_offset_values(last, mx - 1)):
            put(k, v, cf)
        for k, v in zip(self._prefixes.offset_keys(ids, MIN), encode_offset_values(mn_phys, mn)):
            put(k, v, cf)
        put(CHECKPOINT_KEY, OFFSET_VALUE.pack(checkpoint, 0), cf)
        db.write(wb, self._write)

    def write_behind(self, *, everything: bool = True) -> int:
        """Nothing is buffered outside RocksDB's memtables."""
        return 0

    def flush(self, *, thorough: bool = True, progress: int | None = None) -> None:
        """With ``thorough``: the memtables of both column families to synced SST files
        (what a crash keeps: the builder reports its durable offset after this)."""
        if not thorough or self._db is None or self._read_only:
            return
        self._write_offsets()
        faults.hit("rocks.offsets_written")  # crash tests: entries in the memtable, nothing flushed
        self._db.flush(True)  # the units first: a crash between the two leaves older offset entries, never newer
        faults.hit("rocks.units_flushed")  # crash tests: units in SST files, their offset entries not
        self._cf.flush(True)

    # ------------------------------------------------------------------ retention and recovery

    def _unit_phys(self, dense: int, queue_offset: int) -> int:
        v = self._values(dense, queue_offset, queue_offset + 1)
        return int(v["commitlog_offset"][0]) if len(v) else -1

    def _first_at_or_after(self, dense: int, lo: int, hi: int, commitlog_offset: int) -> int:
        """The first queue offset in [lo, hi) whose unit points at or after
        ``commitlog_offset`` (units point ever further), else ``hi``: a binary search.
        A missing unit counts as below: units go only from a queue's bottom (retention,
        whose new min entry a crash can lose while its deletes were flushed)."""
        while lo < hi:
            mid = (lo + hi) // 2
            p = self._unit_phys(dense, mid)
            if p < commitlog_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _correct_min(self, dense: int, commitlog_min: int) -> int:
        """Move queue ``dense``'s min up to its first unit pointing at or after
        ``commitlog_min``; the units below go (one delete_range). Returns the min."""
        old, hi = int(self._min[dense]), int(self._max[dense])
        if old >= hi or self._min_phys[dense] >= commitlog_min or self._read_only:
            return old  # (the usual case, from the arrays: no read)
        if self._min_phys[dense] < 0 and self._unit_phys(dense, old) >= commitlog_min:
            return old
        new = self._first_at_or_after(dense, old, hi, commitlog_min)
        prefix = self._prefix(dense)
        topic, qid = self._names[dense]
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(unit_key(prefix, 0), unit_key(prefix, new))
        p = self._unit_phys(dense, new) if new < hi else -1
        wb.put(offset_key(topic, qid, MIN), OFFSET_VALUE.pack(p, new), self._cf_handle)
        with self._lock:
            db = self._check_open()
            db.write(wb, self._write)
            if new > self._min[dense]:
                self._min[dense], self._min_phys[dense] = new, p
        log.info("min_offset_corrected", topic=topic, queue_id=qid, min_offset=new, commitlog_min_offset=commitlog_min)
        return new

    def clean_below(self, commitlog_min: int, cq_files: dict, cq_mins: dict) -> None:
        """Retention for every queue at once (retention.clean_all_queues): the queues
        whose min unit points below ``commitlog_min`` (found in the arrays) have their
        first units read in one multi-get, a window of _CLEAN_WINDOW each, and their min
        moved to the first unit at or past it (a binary search only for a queue with
        more units below than the window); the units below go, one delete_range each,
        with the new min entries in one WriteBatch. Fills ``cq_files`` (the queue
        offsets deleted, as "old-new") and ``cq_mins`` as ConsumeQueue's cleaning does."""
        if self._read_only or self._db is None:
            return
        with self._lock:
            n = self._n
            ids = np.flatnonzero((self._max[:n] > self._min[:n]) & (self._min_phys[:n] < commitlog_min))
            lo, hi = self._min[ids].copy(), self._max[ids].copy()
        if not len(ids):
            return
        width = np.minimum(hi - lo, _CLEAN_WINDOW)
        starts = np.cumsum(width) - width
        offs = np.repeat(lo - starts, width) + np.arange(int(width.sum()))
        got = self._get(self._prefixes.unit_keys(np.repeat(ids, width), offs))
        present = np.fromiter((v is not None for v in got), bool, len(got))
        phys = np.full(len(got), -1, np.int64)
        if present.any():
            phys[present] = decode_values([v for v in got if v is not None])["commitlog_offset"]
        at_or_past = present & (phys >= commitlog_min)  # a missing unit was deleted below an older min
        hit = np.full(len(ids), -1, np.int64)
        hits = np.flatnonzero(at_or_past)
        queues, first = np.unique(np.searchsorted(starts, hits, side="right") - 1, return_index=True)
        hit[queues] = hits[first]  # each queue's first unit at or past the min
        new = np.where(hit >= 0, lo + hit - starts, np.where(width < hi - lo, -1, hi))
        new_phys = np.where(hit >= 0, phys[np.maximum(hit, 0)], -1)
        for k in np.flatnonzero(new < 0).tolist():  # more units below than the window
            d = int(ids[k])
            new[k] = self._first_at_or_after(d, int(lo[k]) + _CLEAN_WINDOW, int(hi[k]), commitlog_min)
            new_phys[k] = self._unit_phys(d, int(new[k])) if new[k] < hi[k] else -1
        moved = np.flatnonzero(new > lo)
        if not len(moved):
            return
        ids, lo, new, new_phys = ids[moved], lo[moved], new[moved], new_phys[moved]
        wb = WriteBatch(raw_mode=True)
        for a, b in zip(
            self._prefixes.unit_keys(ids, np.zeros(len(ids), np.int64)), self._prefixes.unit_keys(ids, new)
        ):
            wb.delete_range(a, b)
        for k, v in zip(self._prefixes.offset_keys(ids, MIN), encode_offset_values(new_phys, new)):
            wb.put(k, v, self._cf_handle)
        with self._lock:
            self._check_open().write(wb, self._write)
            up = new > self._min[ids]
            self._min[ids[up]], self._min_phys[ids[up]] = new[up], new_phys[up]
        for d, old, m in zip(ids.tolist(), lo.tolist(), new.tolist()):
            key = self._names[d]
            cq_files[key] = (f"{old}-{m}",)
            cq_mins[key] = (old, m)
        log.info("min_offsets_corrected", queues=len(ids), commitlog_min_offset=commitlog_min)

    def _truncate_dirty(self, dense: int, commitlog_end: int) -> None:
        """Drop queue ``dense``'s units pointing at or past ``commitlog_end``."""
        lo, hi = int(self._min[dense]), int(self._max[dense])
        cut = self._first_at_or_after(dense, 0 if lo == hi else lo, hi, commitlog_end)
        prefix = self._prefix(dense)
        topic, qid = self._names[dense]
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(unit_key(prefix, cut), unit_key(prefix, hi))
        last_phys = self._unit_phys(dense, cut - 1) if cut > lo else -1  # -1: no unit left, any may come next
        wb.put(offset_key(topic, qid, MAX), OFFSET_VALUE.pack(last_phys, cut - 1), self._cf_handle)
        self._check_open().write(wb, self._write)
        self._max[dense] = cut
        if cut <= lo:
            self._min[dense], self._min_phys[dense] = cut, -1
        self._last_phys[dense] = last_phys
        log.warning("dirty_units_truncated", topic=topic, queue_id=qid, commitlog_offset=commitlog_end, at=cut, was=hi)

    def load(self, *, repair: bool = False, ends=None, trusted: bool = False) -> None:
        """The queues were read at construction (the offset column family); nothing
        else to open."""

    def recover(self, commitlog, *, verify_tail: bool, check_from: int = 0, deep_from: int = 0) -> None:
        """After the open: units pointing at or past the commitlog's end are cut (a
        commitlog cut by its recovery), min offsets move up to the commitlog's min,
        and a queue with fewer units than the commitlog has records for it sets
        ``rebuild_from`` (units are never torn: a crash leaves whole batches, so
        there is no tail to check record by record; see the module docstring). A
        read that finds the database damaged sets it aside: every queue is rebuilt."""
        try:
            self._recover(commitlog, verify_tail=verify_tail)
        except CorruptFileError as e:
            self._set_aside(str(e))
            self.cleaned_min = commitlog.min_offset

    def _recover(self, commitlog, *, verify_tail: bool) -> None:
        wrote, cmin = commitlog.wrote_offset, commitlog.min_offset
        changed = False
        with self._lock:
            dirty = np.flatnonzero(self._last_phys[: self._n] >= wrote).tolist()
        for d in dirty:
            self._truncate_dirty(d, wrote)
            changed = True
        if self._checkpoint > wrote:
            self._checkpoint = wrote if wrote > 0 else -1
            self._check_open()
            self._cf.put(CHECKPOINT_KEY, OFFSET_VALUE.pack(self._checkpoint, 0), self._write)
            changed = True
        n = self._n
        below = (self._max[:n] > self._min[:n]) & (self._min_phys[:n] < cmin)  # (-1: not known, read)
        for d in np.flatnonzero(below).tolist():
            old = int(self._min[d])
            changed |= self._correct_min(d, cmin) != old
        expected = commitlog.recovery.queue_offsets
        for (topic, qid), want in expected.items():
            d = self._dense_of(topic, qid)
            have = int(self._max[d]) if d >= 0 else 0
            if have < want:
                cq = RocksQueue(self, d) if d >= 0 else None
                at = cq.max_physical_offset if cq is not None else -1
                if not verify_tail:
                    log.warning(
                        "consume_queue_short",
                        topic=topic,
                        queue_id=qid,
                        max_offset=have,
                        records_up_to=want,
                        action="rebuilt from the commitlog",
                    )
                self.rebuild_from = at if self.rebuild_from is None else min(self.rebuild_from, at)
        self.cleaned_min = cmin
        if changed:
            self.flush(thorough=True)

    # ------------------------------------------------------------------ queues made ahead, lifecycle

    def make_ahead(self, topic: str, queue_ids: Iterable[int], *, first_offset: int = 0) -> int:
        """Make ``topic``'s queues known now, empty (topic-status lists them, a pull
        answers NO_MESSAGE_IN_QUEUE), as RocketMQ lists every queue of a topic: a max
        entry of (-1, first_offset - 1). No file is made. Returns how many were new."""
        if self._read_only:
            return 0
        with self._lock:
            db = self._check_open()
            new = [(topic, q) for q in queue_ids if self._dense_of(topic, q) < 0]
            if not new:
                return 0
            ids = self._add_queues(new)
            self._min[ids] = self._max[ids] = first_offset
            wb = WriteBatch(raw_mode=True)
            for t, q in new:
                wb.put(offset_key(t, q, MAX), OFFSET_VALUE.pack(-1, first_offset - 1), self._cf_handle)
            db.write(wb, self._write)
        self.made_ahead += len(new)
        return len(new)

    def wait_made(self, timeout: float | None = None) -> bool:
        return True

    def close(self) -> None:
        """Write the offset entries and flush (as a thorough flush), then close the database."""
        with self._lock:
            if self._closed:
                return
        if self._db is not None and not self._read_only:
            self.flush(thorough=True)
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_db()


def queue_units(store_dir: str | Path, topic: str | None = None) -> Iterator[tuple[str, int, int, np.ndarray]]:
    """Read-only, for tools (reconcile, verify): each queue's units as it is on disk
    (what the database's last flush left), as (topic, queue id, min offset, units):
    ``units`` has VALUE_DTYPE (commitlog offset, size, tags code, store timestamp),
    unit ``i`` at queue offset ``min offset + i``. Every queue, or ``topic``'s. The
    database is opened read-only (next to a running store too) and closed at the end."""
    queues = RocksQueues(Path(store_dir), read_only=True)
    try:
        for t, q in queues.keys():
            if topic is not None and t != topic:
                continue
            d = queues._dense_of(t, q)
            lo = int(queues._min[d])
            yield t, q, lo, queues._values(d, lo, int(queues._max[d]))
    finally:
        queues.close()


__all__ = ["CONSUME_QUEUE_DIR", "ROCKS_MARKER", "RocksQueue", "RocksQueues", "queue_units"]
