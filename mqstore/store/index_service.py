"""The message-key index of a store: RocketMQ IndexService over ``<store>/index/``.

Files (format in mqstore.formats.index_file):

    <store>/index/<yyyyMMddHHmmssSSS>   creation time in the local time zone, 17 digits

Every file has exactly ``index_file_size(hash_slots, max_entries)`` bytes (420,000,040 by
default), as RocketMQ reads it, zero-filled and mapped read/write (mapped_file.Segment:
created under ``.tmp`` and renamed). A new file is sparse: its blocks are allocated as
entries come (the header and slot table at once, 20 MB by default, the entries
``RESERVE_STEP_BYTES`` at a time, each step before a put writes into it), so a store
with less than 420 MB free still indexes, and a full disk is a StoreNotWritableError
(cause "disk_full") from ``put`` with nothing half-written, never a SIGBUS from a
write into a hole. ``du`` shows what is used, ``ls -l`` the full size. Files are ordered by name; the last one takes new entries
until it holds ``max_entries - 1``, then the next is created with the previous file's
end offset and end time (the first-entry quirk, spec 7.3). Entries are in commitlog
order across all files.

Two values leave the service:

    max_physical_offset   end_phy_offset of the last file (-1 without files): the
                          *start* of the last indexed record; entries with a smaller
                          commitlog offset are taken as indexed already
    resume_offset()       just past the last indexed record: where dispatch resumes
    index_msg_timestamp   the checkpoint's indexMsgTimestamp: the newest store time whose
                          entries are all durable (a full file flushed, or any flush);
                          the caller persists it

Behaviour follows RocketMQ IndexService and DefaultMessageStore.CommitLogDispatcherBuildIndex
(buildIndex, getAndCreateLastIndexFile, queryOffset, load, deleteExpiredFile), with these
differences, all on purpose:

* puts come in batches (IndexFileView.put_hashes); the next file is created when an entry
  needs it (RocketMQ: at the next dispatched message, keys or not);
* a (key hash, record) pair is indexed once: RocketMQ puts one entry per KEYS element
  and UNIQ_KEY, so ``KEYS "a a"`` (or a UNIQ_KEY also among the KEYS, or two keys whose
  hashes collide) gives it two entries for one record, and it skips only records
  *below* the last file's end_phy_offset, so the record *at* it is indexed again by
  every re-dispatch (a restart, a crash). Here ``put`` drops pairs repeated in a batch
  and pairs the files already hold for the record at end_phy_offset. Files stay
  byte-compatible (each is what putKey writes for the entries it holds);
* ``query`` counts messages: an offset is returned once and ``max_num`` counts distinct
  offsets (RocketMQ counts entries, so duplicates written by RocketMQ or by an older
  mqstore fill places in the answer);
* the writer flushes a file that became full itself before moving index_msg_timestamp
  (RocketMQ: a background thread), and ``close`` flushes every file (as 5.x does);
* ``flush`` moves index_msg_timestamp too (every entry put so far is durable then), and
  an abnormal load deletes only files that began after it; the last file may hold
  entries put after that flush, which the caller cuts with ``truncate`` (from the
  commitlog offset recovery starts at) and re-dispatch puts again. RocketMQ deletes the
  whole unflushed file, so after a crash it re-indexes everything that file held:
  gigabytes, on a store whose checkpoint is seconds old;
* a file whose size differs from the configured one is refused (RocketMQ maps it anyway),
  ``*.tmp`` leftovers are removed and names that are not 17 digits are ignored;
* a new name that would equal or sort before the last one (same millisecond, clock set
  back) becomes the last name plus 1 ms, so name order stays creation order;
* after an abnormal exit, slots of the last file that point at entries its header does
  not count (a put cut short between slots and header) are walked back to counted
  ones (IndexFileView.drop_uncounted), so the re-dispatched puts build true chains;
* ``truncate`` has no RocketMQ counterpart (RocketMQ leaves index entries that point past
  a cut commitlog, and then skips the re-written messages below the stale end offset).
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import structlog

from mqstore.errors import ConfigError, CorruptFileError, StoreClosedError
from mqstore.formats.index_file import (
    DEFAULT_HASH_SLOTS,
    DEFAULT_MAX_ENTRIES,
    INDEX_ENTRY_BYTES,
    INDEX_HEADER_BYTES,
    INDEX_SLOT_BYTES,
    IndexFileView,
    index_file_size,
)
from mqstore.kernels import _dispatch
from mqstore.store import faults
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.mapped_file import Segment, fsync_dir

if TYPE_CHECKING:
    from mqstore.store.dispatch import DispatchBatch, IndexEntries

log = structlog.get_logger(__name__)

INDEX_DIR = "index"
MAX_QUERY_RESULTS = 64  # RocketMQ maxMsgsNumBatch: the cap on one query's offsets
INDEX_NAME_DIGITS = 17
RESERVE_STEP_BYTES = 4 << 20  # blocks allocated ahead of the entries a put writes (209,715 entries)
_NAME_RE = re.compile(r"[0-9]{17}")
_LONG_MAX = (1 << 63) - 1
_INT_MAX = (1 << 31) - 1


def _repeated(hashes: np.ndarray, phys: np.ndarray, held: np.ndarray, end: int) -> np.ndarray:
    """Per entry: is its (key hash, offset) pair indexed already, in ``held`` (the
    hashes the files hold for the record at ``end``) or earlier in this batch?
    Entries in commitlog order are compared record by record in one compiled pass
    (mqstore/kernels/_dispatch.pyx); others, or a record with more than 64 entries,
    are sorted. Reference model: tests/kernels/model_index.py."""
    n = len(phys)
    dup = np.zeros(n, np.uint8)
    if n < 2 or _dispatch.repeated_in_order(np.ascontiguousarray(hashes), np.ascontiguousarray(phys), dup) == 0:
        dup = dup.view(bool)
    else:
        dup = _repeated_sorted(hashes, phys)
    if len(held):
        dup |= (phys == end) & np.isin(hashes, held)
    return dup


def _repeated_sorted(hashes: np.ndarray, phys: np.ndarray) -> np.ndarray:
    n = len(phys)
    dup = np.zeros(n, bool)
    step = np.diff(phys)
    if (step < 0).any():  # not in commitlog order: sort by both
        order = np.lexsort((np.arange(n), hashes, phys))
    elif step.all():
        return dup  # one entry per record
    else:  # records in order: (record number, hash) packed in one int64, a stable sort keeps put order
        record = np.concatenate(([0], np.cumsum(step != 0)))
        order = np.argsort((record << 31) | hashes, kind="stable")
    k_phys, k_hash = phys[order], hashes[order]
    same = (k_phys[1:] == k_phys[:-1]) & (k_hash[1:] == k_hash[:-1])
    dup[order[1:][same]] = True  # equal pairs are adjacent, the one put first stays
    return dup


def _put_point() -> None:
    faults.hit("index.put")  # entries and slots written, the header not yet: a put cut short


def index_file_name(ms: int) -> str:
    """The file name of an index file created at ``ms`` (epoch milliseconds), in the
    local time zone, as RocketMQ's UtilAll.timeMillisToHumanString."""
    dt = datetime.fromtimestamp(ms // 1000)
    return f"{dt:%Y%m%d%H%M%S}{ms % 1000:03d}"


def _name_after(name: str) -> str:
    """The name 1 ms after ``name`` (calendar arithmetic on the digits, no time zone)."""
    try:
        dt = datetime(
            int(name[:4]),
            int(name[4:6]),
            int(name[6:8]),
            int(name[8:10]),
            int(name[10:12]),
            int(name[12:14]),
            int(name[14:17]) * 1000,
        ) + timedelta(milliseconds=1)
    except ValueError:  # not a date (a file someone else named): keep the order at least
        return f"{int(name) + 1:0{INDEX_NAME_DIGITS}d}"
    return f"{dt:%Y%m%d%H%M%S}{dt.microsecond // 1000:03d}"


class _State(enum.Enum):
    NEW = "new"  # load() not called yet
    OPEN = "open"
    CLOSED = "closed"


@dataclass(eq=False)
class _File:
    name: str
    seg: Segment
    view: IndexFileView
    dirty: bool = False  # written since its last msync
    reserved: int = 0  # bytes [0, reserved) have their blocks (0 after an open: asked again, cheap if so)


@dataclass(frozen=True)
class IndexPutResult:
    """What ``put`` did with a batch: ``indexed + skipped`` is the batch size."""

    indexed: int
    skipped: int  # below the end offset at that point, or a (hash, offset) pair held already: re-dispatch, repeats
    created_files: tuple[str, ...]


@dataclass(frozen=True)
class IndexLoadReport:
    """The files ``load`` kept and the ones it deleted (abnormal exit, spec 7.5)."""

    files: tuple[str, ...]
    deleted_files: tuple[str, ...]


@dataclass(frozen=True)
class IndexTruncateReport:
    """What ``truncate`` changed; ``max_physical_offset`` is the value after it."""

    deleted_files: tuple[str, ...]
    truncated_file: str | None  # the file that kept some of its entries
    dropped_entries: int
    max_physical_offset: int


@dataclass(frozen=True)
class IndexStats:
    """A snapshot of the service.

    files: index files held; entries: entries in them (index_count - 1 each);
    index_msg_timestamp, max_physical_offset: as the properties of the same names."""

    files: int
    entries: int
    index_msg_timestamp: int
    max_physical_offset: int


class IndexService:
    """The index files of one store; see the module docstring for files and rules.

    Who calls what: ``load`` once, first (store startup, before recovery); recovery may
    then call ``truncate``. One writer, the dispatcher (reput loop), calls ``put`` (or
    ``dispatch``) and ``flush``; the cleaner calls ``delete_files_below``, serialised
    with the writer by an internal lock. ``query``, ``stats`` and the properties may be
    called from any thread at any time: a query sees each file before or after a put's
    entries for it, never half of them, and never a file being deleted. ``close`` once,
    last. The caller persists ``index_msg_timestamp`` in the checkpoint.
    """

    def __init__(
        self,
        store_dir: str | Path,
        *,
        hash_slots: int = DEFAULT_HASH_SLOTS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Clock | None = None,
        preallocate: bool = True,
    ) -> None:
        """Configure the service; nothing is read or created before ``load``.

        ``hash_slots`` and ``max_entries`` are not stored in the files: open a store
        with the values it was created with (a wrong size is refused at load). A file
        must hold an entry, so ``max_entries`` >= 2 (ConfigError otherwise).
        ``preallocate``: allocate each file's blocks before a put writes into them (see
        the module docstring); False leaves files sparse (a rebuild into a fresh
        directory, where a full disk may be a SIGBUS)."""
        if hash_slots <= 0 or max_entries < 2:
            raise ConfigError(f"index files need hash_slots >= 1 and max_entries >= 2, got {hash_slots}, {max_entries}")
        self.directory = Path(store_dir) / INDEX_DIR
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        self.file_bytes = index_file_size(hash_slots, max_entries)
        self._entries_at = INDEX_HEADER_BYTES + hash_slots * INDEX_SLOT_BYTES
        self._clock = clock or SystemClock()
        self._preallocate = preallocate
        self._log = log.bind(directory=str(self.directory))
        self._write_lock = threading.Lock()  # one mutator at a time: put, truncate, delete, flush, close
        self._lock = threading.Lock()  # the file list and the bytes of the files, against queries
        self._files: list[_File] = []  # replaced, never changed in place
        self._index_msg_timestamp = 0
        self._state = _State.NEW

    # ------------------------------------------------------------------ lifecycle

    def load(
        self, clean_shutdown: bool, index_msg_timestamp: int, *, repair: bool = False, read_only: bool = False
    ) -> IndexLoadReport:
        """Open the files (RocketMQ IndexService.load), oldest first.

        ``index_msg_timestamp`` is the checkpoint's value. After an abnormal exit
        (``clean_shutdown`` False) every file whose end_timestamp is above it is deleted:
        it was not flushed when full, usually the file being written. Every file must
        have ``file_bytes`` bytes: CorruptFileError names the first that does not, and
        nothing is deleted then.

        ``repair`` (the store's open; its layout file makes the geometry certain):
        instead of refusing, the first file of the wrong size, or whose header is not
        one putKey could have written (IndexFileView.damage, each file against the one
        before), is deleted with every later file, and so is a newest file whose
        entries or slots are damaged (checked in full up to 2M entries). The store
        then re-dispatches from the new last file's end, which rebuilds them.

        ``read_only`` (a query's view, store/read_view.py): nothing is created, removed
        or repaired; leftover ``.tmp`` files are passed over."""
        if read_only and (repair or not clean_shutdown):
            raise ValueError("a read-only load neither repairs nor deletes: clean_shutdown=True, repair=False")
        with self._write_lock:
            if self._state is not _State.NEW:
                raise RuntimeError(f"IndexService.load() runs once, on a new service (state {self._state.value})")
            if not read_only:
                self.directory.mkdir(parents=True, exist_ok=True)
            names = []
            for p in self.directory.iterdir() if self.directory.is_dir() else ():
                if p.name.endswith(".tmp"):
                    if not read_only:
                        self._log.warning("unfinished_file_removed", path=str(p))
                        p.unlink()
                elif _NAME_RE.fullmatch(p.name) and p.is_file():
                    names.append(p.name)
                else:
                    self._log.warning("stray_file_ignored", path=str(p))
            names.sort()
            damaged: list[str] = []
            for i, name in enumerate(names):
                size = (self.directory / name).stat().st_size
                if size != self.file_bytes:
                    if repair:
                        self._log.warning(
                            "index_file_damaged",
                            file=name,
                            reason=f"{size} bytes, expected {self.file_bytes}",
                            action="deleted with every later file; rebuilt from the commitlog",
                        )
                        damaged, names = names[i:], names[:i]
                        break
                    raise CorruptFileError(
                        f"{self.directory / name}: index file has {size} bytes, expected {self.file_bytes} "
                        f"({self.hash_slots} slots x {self.max_entries} entries); open the store with the "
                        "geometry it was created with"
                    )
            files: list[_File] = []
            deleted: list[str] = []
            try:
                prev_end = -1
                for i, name in enumerate(names):
                    seg = Segment.open(self.directory / name, 0, self.file_bytes)
                    f = _File(name, seg, IndexFileView(seg.mm, self.hash_slots, self.max_entries))
                    why = f.view.damage(prev_end_phy_offset=prev_end, deep=False) if repair else None
                    if why is not None:
                        self._log.warning(
                            "index_file_damaged",
                            file=name,
                            reason=why,
                            action="deleted with every later file; rebuilt from the commitlog",
                        )
                        seg.close()
                        damaged += names[i:]
                        break
                    begin_ts = f.view.header.begin_timestamp
                    if not clean_shutdown and (begin_ts > index_msg_timestamp or index_msg_timestamp <= 0):
                        # Nothing in it was ever flushed (files that began before the last
                        # flush stay; the caller truncates what followed that flush).
                        self._log.warning(
                            "unflushed_index_file_deleted",
                            file=name,
                            begin_timestamp=begin_ts,
                            index_msg_timestamp=index_msg_timestamp,
                        )
                        seg.delete()
                        deleted.append(name)
                        continue
                    files.append(f)
                    prev_end = f.view.header.end_phy_offset
            except BaseException:
                for f in files:
                    f.seg.close()
                raise
            if files and not clean_shutdown and (fixed := files[-1].view.drop_uncounted()):
                # A put cut short: its entries never counted, so the slots must not point at them.
                files[-1].seg.sync()
                self._log.warning(
                    "index_put_rolled_back", file=files[-1].name, slots=fixed, entries=files[-1].view.header.entries
                )
            while repair and files:
                prev_end = files[-2].view.header.end_phy_offset if len(files) > 1 else -1
                if (why := files[-1].view.damage(prev_end_phy_offset=prev_end)) is None:
                    break
                f = files.pop()
                self._log.warning(
                    "index_file_damaged", file=f.name, reason=why, action="deleted; rebuilt from the commitlog"
                )
                f.seg.close()
                damaged.append(f.name)
            for name in damaged:
                (self.directory / name).unlink(missing_ok=True)
            deleted += damaged
            if deleted:
                fsync_dir(self.directory)
            if damaged:  # what is left is durable; the next file to fill moves the timestamp again
                index_msg_timestamp = min(index_msg_timestamp, files[-1].view.header.end_timestamp if files else 0)
            with self._lock:
                self._files = files
                self._index_msg_timestamp = index_msg_timestamp
                self._state = _State.OPEN
            self._log.info("index_loaded", files=len(files), deleted_files=deleted)
            return IndexLoadReport(tuple(f.name for f in files), tuple(deleted))

    def flush(self) -> None:
        """Make every entry put so far durable (msync of the files written since the
        last flush) and move ``index_msg_timestamp`` to the newest entry's store time."""
        with self._write_lock:
            self._check_open()
            self._flush_dirty()
            if self._files and self._files[-1].view.header.entries:
                with self._lock:
                    self._index_msg_timestamp = max(
                        self._index_msg_timestamp, self._files[-1].view.header.end_timestamp
                    )

    def close(self) -> None:
        """Flush every file and unmap them (RocketMQ 5.x shutdown). Later calls raise
        StoreClosedError; closing twice is allowed."""
        with self._write_lock:
            if self._state is _State.CLOSED:
                return
            if self._state is _State.OPEN:
                self._flush_dirty()
            with self._lock:
                files, self._files = self._files, []
                self._state = _State.CLOSED
                for f in files:
                    f.seg.close()

    # ------------------------------------------------------------------ writes (the dispatcher)

    def put(self, entries: IndexEntries) -> IndexPutResult:
        """Index a batch of (key hash, commitlog offset, store time) in commitlog order
        (RocketMQ buildIndex for each key of each message, in that order).

        An entry whose offset is below the end offset of the moment (the last file's
        end_phy_offset, raised by each entry put) is skipped: it was indexed before a
        restart re-dispatched it. So is an entry whose (key hash, offset) pair the
        files already hold for the record *at* that offset (RocketMQ indexes that one
        again), or that comes earlier in the batch (``KEYS "a a"``): each pair once.
        When the last file is full the next one is created, started with the
        full file's end offset and end time; a file that becomes full is flushed and its
        end_timestamp becomes ``index_msg_timestamp``.

        ``entries`` is DispatchBatch.index_entries() or any triple of equal-length
        arrays; key hashes must be index key hashes (ValueError otherwise, before any
        file is touched). If a new file can not be created (StoreNotWritableError) the
        entries before it stay indexed: a retry of the batch skips them."""
        hashes, phys, times = (np.asarray(col, np.int64) for col in entries)
        if not hashes.ndim == phys.ndim == times.ndim == 1 or not len(hashes) == len(phys) == len(times):
            raise ValueError(
                f"index entries are three 1-D arrays of one length, got shapes {hashes.shape}, "
                f"{phys.shape}, {times.shape}"
            )
        if len(hashes) and (hashes.min() < 0 or hashes.max() > _INT_MAX):
            raise ValueError("key hashes must lie in [0, 2**31-1] (index_key_hash)")
        with self._write_lock:
            self._check_open()
            n = len(phys)
            if n == 0:
                return IndexPutResult(0, 0, ())
            files = self._files
            end0 = files[-1].view.header.end_phy_offset if files else 0
            floor = np.maximum.accumulate(np.concatenate(([end0], phys[:-1])))
            keep = phys >= floor
            keep &= ~_repeated(hashes, phys, self._hashes_at_end(end0), end0)
            skipped = n - int(np.count_nonzero(keep))
            if skipped:
                hashes, phys, times = hashes[keep], phys[keep], times[keep]
                self._log.info("index_entries_skipped", skipped=skipped, end_phy_offset=end0)
            created: list[str] = []
            done = 0
            while done < len(phys):
                f = self._writable_file(created)
                self._reserve(f, len(phys) - done)
                with self._lock:
                    k = f.view.put_hashes(hashes[done:], phys[done:], times[done:], before_header=_put_point)
                f.dirty = True
                done += k
                if f.view.is_full():
                    self._file_full(f)
                elif k == 0:  # put_hashes only refuses entries when the file is full
                    raise CorruptFileError(f"{f.seg.path}: index file took no entry but is not full")
            return IndexPutResult(done, skipped, tuple(created))

    def _hashes_at_end(self, end: int) -> np.ndarray:
        """Key hashes already indexed for the record at ``end`` (the last file's
        end_phy_offset): the newest entries pointing at it, in the last file and, when
        that holds nothing else (a file started after a full one), in the files before."""
        out: list[int] = []
        for f in reversed(self._files):
            h = f.view.header
            found = f.view.hashes_at_end(end)
            out += found
            if len(found) < h.entries:
                break
        return np.asarray(out, np.int64)

    def dispatch(self, batch: DispatchBatch, from_offset: int = 0, to_offset: int = 0) -> None:
        """DispatchSink: index the keys of a dispatched batch (rollbacks are not indexed)."""
        self.put(batch.index_entries())

    def _writable_file(self, created: list[str]) -> _File:
        """The last file if it has room, else a new one (getAndCreateLastIndexFile)."""
        files = self._files
        last = files[-1] if files else None
        if last is not None and not last.view.is_full():
            return last
        end_phy, end_ts = (last.view.header.end_phy_offset, last.view.header.end_timestamp) if last else (0, 0)
        if last is not None and self._index_msg_timestamp < end_ts:
            self._file_full(last)  # loaded full, the checkpoint not moved yet: RocketMQ flushes it now too
        name = index_file_name(self._clock.now_ms())
        if last is not None and name <= last.name:
            name = _name_after(last.name)
        seg = Segment.create(self.directory / name, 0, self.file_bytes, preallocate=False)  # sparse: grows as used
        reserved = min(self.file_bytes, self._entries_at + RESERVE_STEP_BYTES) if self._preallocate else 0
        try:
            seg.reserve(0, reserved)  # the header and slot table, which the first puts write anywhere
            view = IndexFileView.create(
                seg.mm, self.hash_slots, self.max_entries, end_phy_offset=end_phy, end_timestamp=end_ts
            )
        except BaseException:
            seg.delete()
            raise
        f = _File(name, seg, view, dirty=True, reserved=reserved)
        with self._lock:
            self._files = [*files, f]
        created.append(name)
        self._log.info("index_file_created", file=name, begin_phy_offset=end_phy, begin_timestamp=end_ts)
        return f

    def _reserve(self, f: _File, entries: int) -> None:
        """Allocate the blocks the next ``entries`` entries of ``f`` are written into
        (and RESERVE_STEP_BYTES more), unless they are already: StoreNotWritableError
        on a full disk, before anything is written."""
        if not self._preallocate:
            return
        count = max(f.view.header.index_count, 1)
        need = min(self.file_bytes, self._entries_at + (count + entries) * INDEX_ENTRY_BYTES)
        if need <= f.reserved:
            return
        upto = min(self.file_bytes, need + RESERVE_STEP_BYTES)
        f.seg.reserve(f.reserved, upto - f.reserved)
        f.reserved = upto

    def _file_full(self, f: _File) -> None:
        """A file became full: make it durable, then let the checkpoint move past it."""
        f.seg.sync()
        f.dirty = False
        h = f.view.header
        with self._lock:
            self._index_msg_timestamp = h.end_timestamp
        self._log.info(
            "index_file_full",
            file=f.name,
            entries=h.entries,
            end_phy_offset=h.end_phy_offset,
            end_timestamp=h.end_timestamp,
        )

    def _flush_dirty(self) -> None:
        for f in self._files:
            if f.dirty:
                f.seg.sync()
                f.dirty = False

    # ------------------------------------------------------------------ reads (any thread)

    def query(self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = _LONG_MAX) -> list[int]:
        """Commitlog offsets of messages indexed under ``topic#key`` and stored in
        [begin, end] (ms), newest first (RocketMQ IndexService.queryOffset), each
        offset once.

        At most min(max_num, 64) offsets: ``max_num`` counts distinct offsets, so
        duplicate entries (files written by RocketMQ, or by mqstore before it
        stopped writing them) never crowd other messages out. Files are searched newest to oldest, each only if
        its time range may hold matches; the search ends after a file that begins
        before ``begin``. Offsets are *hash* matches: the caller reads each message
        and compares its keys. Times are the index's reconstructed ones (seconds
        resolution, spec 7.4)."""
        max_num = min(max_num, MAX_QUERY_RESULTS)
        found: list[int] = []
        if max_num <= 0:
            return found
        index_key = f"{topic}#{key}"
        seen: set[int] = set()  # each offset once, and max_num counts offsets (RocketMQ: entries)
        with self._lock:
            self._check_open()
            for f in reversed(self._files):
                h = f.view.header
                fb, fe = h.begin_timestamp, h.end_timestamp
                if (begin < fb and end > fe) or fb <= begin <= fe or fb <= end <= fe:
                    found += f.view.select(index_key, max_num - len(found), begin, end, seen=seen)
                if fb < begin or len(found) >= max_num:
                    break
        return found

    @property
    def index_msg_timestamp(self) -> int:
        """The checkpoint's indexMsgTimestamp: end time of the last file that became
        full and was flushed (the value ``load`` got until then)."""
        with self._lock:
            return self._index_msg_timestamp

    @property
    def max_physical_offset(self) -> int:
        """end_phy_offset of the last file (-1 without files): entries below it are
        skipped by ``put`` as indexed already."""
        with self._lock:
            return self._files[-1].view.header.end_phy_offset if self._files else -1

    def resume_offset(self, record_size: Callable[[int], int | None] | None = None) -> int:
        """Where dispatch resumes for the index: just past the last indexed record,
        -1 if none was ever indexed. The files keep that record's *start* (the last
        file's end_phy_offset, RocketMQ's layout); ``record_size(offset)`` gives its
        length. The start itself is returned (the record is dispatched again; ``put``
        skips the keys the files hold for it) when the record's keys may not all be
        there: the last file is full or empty, so its keys may have spilled into a
        next file that a crash (or an abnormal load) took away; and without
        ``record_size``, or when it answers None (the record is gone)."""
        with self._lock:
            files = self._files
            if not files or not any(f.view.header.entries for f in files):
                return -1  # (an empty last file after full ones counts: the full ones have entries)
            last = files[-1].view
            start = last.header.end_phy_offset
            if last.is_full() or last.header.entries == 0:
                return start
        size = record_size(start) if record_size is not None else None
        return start + size if size is not None and size > 0 else start

    @property
    def files(self) -> list[str]:
        """Names of the index files, oldest first."""
        with self._lock:
            return [f.name for f in self._files]

    def stats(self) -> IndexStats:
        with self._lock:
            self._check_open()
            return IndexStats(
                files=len(self._files),
                entries=sum(f.view.header.entries for f in self._files),
                index_msg_timestamp=self._index_msg_timestamp,
                max_physical_offset=self._files[-1].view.header.end_phy_offset if self._files else -1,
            )

    # ------------------------------------------------------------------ recovery and cleaning

    def truncate(self, phys_offset: int) -> IndexTruncateReport:
        """Drop every entry pointing at or after ``phys_offset``: recovery cut the
        commitlog there, and re-dispatch will index what is written there again.

        From the last file backwards: a file without an entry below ``phys_offset``
        is deleted (that includes an empty last file); in the first other one, the
        entries from the first one at or after ``phys_offset`` on are cut in place
        (IndexFileView.truncate) and the file is flushed. Entries below the cut are
        all kept, so nothing has to be re-dispatched from before ``phys_offset``, and
        the end offset drops below it, so ``put`` takes the re-written messages instead
        of skipping them as indexed. Deleting a whole file would be safe only if
        re-dispatch started at that file's first entry; the dispatched offset (the consume
        queues' end) is usually far later.

        If anything changed, ``index_msg_timestamp`` is lowered to at most the new
        last file's end_timestamp: every file left is durable now, and the first entry
        put later lifts the last file above it, so after a crash it is treated as the
        unflushed file again."""
        with self._write_lock:
            self._check_open()
            deleted: list[str] = []
            truncated: _File | None = None
            dropped = 0
            files = list(self._files)
            while files:
                f = files[-1]
                h = f.view.header
                keep = f.view.entries_below(phys_offset)
                if keep == h.entries and (h.entries or h.end_phy_offset < phys_offset):
                    break  # an empty file counts as cut when it was started with an end at or past the cut
                held = h.entries
                dropped += held - keep
                if keep == 0:
                    files.pop()
                    deleted.append(f.name)
                    with self._lock:
                        self._files = list(files)
                        f.seg.delete()
                    continue
                with self._lock:
                    f.view.truncate(keep)
                f.seg.sync()
                f.dirty = False
                truncated = f
                break
            if deleted:
                fsync_dir(self.directory)
            with self._lock:
                if (deleted or truncated) and self._files:
                    new_end = self._files[-1].view.header.end_timestamp
                    self._index_msg_timestamp = min(self._index_msg_timestamp, new_end)
                max_phys = self._files[-1].view.header.end_phy_offset if self._files else -1
            if deleted or truncated:
                self._log.warning(
                    "index_truncated",
                    commitlog_offset=phys_offset,
                    deleted_files=deleted,
                    truncated_file=truncated and truncated.name,
                    dropped_entries=dropped,
                )
            return IndexTruncateReport(tuple(deleted), truncated and truncated.name, dropped, max_phys)

    def delete_files_below(self, commitlog_min_offset: int) -> tuple[str, ...]:
        """Delete the oldest files whose end_phy_offset is below ``commitlog_min_offset``
        (their messages are gone), stopping at the first that is not; never the last
        file (RocketMQ deleteExpiredFile). Returns the names deleted."""
        with self._write_lock:
            self._check_open()
            files = self._files
            n = 0
            while n < len(files) - 1 and files[n].view.header.end_phy_offset < commitlog_min_offset:
                n += 1
            if not n:
                return ()
            gone = files[:n]
            with self._lock:
                self._files = files[n:]
                for f in gone:
                    f.seg.delete()
            fsync_dir(self.directory)
            names = tuple(f.name for f in gone)
            self._log.info("expired_index_files_deleted", files=names, commitlog_min_offset=commitlog_min_offset)
            return names

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._state is _State.NEW:
            raise RuntimeError("IndexService.load() must run before the service is used")
        if self._state is _State.CLOSED:
            raise StoreClosedError(f"index service of {self.directory} is closed")


__all__ = [
    "INDEX_DIR",
    "MAX_QUERY_RESULTS",
    "RESERVE_STEP_BYTES",
    "IndexLoadReport",
    "IndexPutResult",
    "IndexService",
    "IndexStats",
    "IndexTruncateReport",
    "index_file_name",
]
