"""IndexFile: a hash index from message keys to commitlog offsets (RocketMQ IndexFile).

Big-endian and signed. Geometry (hash_slots, max_entries) is not stored in the file;
RocketMQ's defaults are 5,000,000 slots and 20,000,000 entries (420,000,040 bytes).

    offset                         size  field             meaning
    0                              8     begin_timestamp   store time (ms) of the first entry
    8                              8     end_timestamp     store time (ms) of the last entry
    16                             8     begin_phy_offset  commitlog offset of the first entry
    24                             8     end_phy_offset    commitlog offset (record *start*) of the last entry
    32                             4     hash_slot_count   slots that ever went from empty to used
    36                             4     index_count       next entry number: entries + 1 (0 read as 1)
    40 + s*4                       4     slot s            newest entry number in bucket s; 0 = empty
    40 + hash_slots*4 + n*20       20    entry n (n >= 1)  see below; entry 0 is never written

    entry   offset  size  field      meaning
            0       4     key_hash   index_key_hash(topic + "#" + key), >= 0
            4       8     phy_offset commitlog offset of the message
            12      4     time_diff  (store_timestamp - begin_timestamp) // 1000 in *seconds*,
                                     clamped to [0, 2**31-1]; 0 while begin_timestamp <= 0
            16      4     prev       previous entry number in the same bucket; 0 ends the chain

Invariants: slot = key_hash % hash_slots; a bucket is a singly linked chain, newest first.
A file is full when index_count >= max_entries, so it holds max_entries - 1 entries.
A slot or prev value <= 0 or > index_count means "none". Files have their full size
and read as zeros where nothing was written (RocketMQ pre-allocates them; mqstore
makes them sparse and allocates blocks as entries come, store/index_service.py);
bytes past entry index_count - 1 are never read.

Quirk kept for byte compatibility (spec 7.3): a file made after a full one starts with
begin = end = the previous file's (end_phy_offset, end_timestamp); the first entry's
time_diff is taken against that *old* begin_timestamp before begin is reset to the
entry's own time, so its reconstructed time is later than the real one.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mqstore.errors import DecodeError
from mqstore.formats.javahash import index_key_hash, java_string_hashes
from mqstore.kernels import _dispatch

INDEX_HEADER_BYTES = 40
INDEX_SLOT_BYTES = 4
INDEX_ENTRY_BYTES = 20
DEFAULT_HASH_SLOTS = 5_000_000
DEFAULT_MAX_ENTRIES = 20_000_000

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
assert _HEADER.size == INDEX_HEADER_BYTES
assert _SLOT.size == INDEX_SLOT_BYTES
assert _ENTRY.size == INDEX_ENTRY_BYTES

INDEX_ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])
assert INDEX_ENTRY_DTYPE.itemsize == INDEX_ENTRY_BYTES
if _dispatch.INDEX_FORMAT != (INDEX_HEADER_BYTES, INDEX_SLOT_BYTES, INDEX_ENTRY_BYTES):
    raise ImportError(
        f"mqstore.kernels._dispatch was built for another index format: rebuild it ({_dispatch.INDEX_FORMAT})"
    )

_INT_MAX = (1 << 31) - 1
_LONG_MAX = (1 << 63) - 1


def _wrap64(v: int) -> int:
    """Java long arithmetic: wrap to signed 64 bits."""
    return ((v + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


def index_file_size(hash_slots: int, max_entries: int) -> int:
    """Bytes of an index file with this geometry.

    >>> index_file_size(DEFAULT_HASH_SLOTS, DEFAULT_MAX_ENTRIES)
    420000040
    """
    if hash_slots <= 0 or max_entries <= 0:
        raise ValueError(f"hash_slots and max_entries must be > 0, got {hash_slots}, {max_entries}")
    return INDEX_HEADER_BYTES + hash_slots * INDEX_SLOT_BYTES + max_entries * INDEX_ENTRY_BYTES


@dataclass(frozen=True, kw_only=True)
class IndexHeader:
    """The 40-byte header; timestamps in ms, offsets in commitlog bytes.

    ``decode`` is lossless (a new, never-written file holds index_count 0);
    :attr:`entries` and :attr:`IndexFileView.header` read index_count <= 0 as 1, as
    RocketMQ's IndexHeader.load does. Defaults are a fresh in-memory Java header.
    """

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    @property
    def entries(self) -> int:
        """Entries held: index_count - 1, with index_count <= 0 read as 1."""
        return max(self.index_count, 1) - 1

    def encode(self) -> bytes:
        return _HEADER.pack(
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    @classmethod
    def decode(cls, raw: bytes | bytearray | memoryview) -> IndexHeader:
        if len(raw) < INDEX_HEADER_BYTES:
            raise DecodeError(f"an index header holds {INDEX_HEADER_BYTES} bytes, got {len(raw)}")
        bt, et, bp, ep, slots, count = _HEADER.unpack_from(raw, 0)
        return cls(
            begin_timestamp=bt,
            end_timestamp=et,
            begin_phy_offset=bp,
            end_phy_offset=ep,
            hash_slot_count=slots,
            index_count=count,
        )


def index_key_hashes(keys: Sequence[str]) -> np.ndarray:
    """index_key_hash of every key at once, as an int32 array.

    >>> index_key_hashes(["polygenelubricants", "TagA", ""]).tolist()
    [0, 2598919, 0]
    """
    hashes = np.abs(java_string_hashes(keys).astype(np.int32))  # int32: abs(MIN_VALUE) stays negative, as in Java
    hashes[hashes < 0] = 0
    return hashes


def _reset_slots(table: np.ndarray, dropped: np.ndarray, first: int) -> None:
    """Point every slot that names an entry numbered >= ``first`` at its newest entry
    below ``first`` (0 if none), when ``dropped`` holds entries ``first``, ``first`` + 1, ...
    (as many as are dropped) and the rest of the file is unchanged.

    Entries are appended in order and each one's prev is the entry before it in its
    slot, so a slot's newest entry left is the prev of its *oldest* dropped entry: one
    pass over the dropped entries, not a walk down each chain (which cost the longest
    chain times the slots changed: minutes for 300,000 entries of one key). A slot
    whose dropped entries are not there (uncounted ones a crash left unwritten, a
    corrupt chain) gets 0, as does a prev that is not an earlier entry."""
    stale = table >= first
    if not stale.any():
        return
    n_slots = len(table)
    slots = dropped["key_hash"].astype(np.int64) % n_slots
    used, oldest = np.unique(slots, return_index=True)  # first occurrence: the oldest dropped entry of each slot
    prev = dropped["prev"][oldest].astype(np.int64)
    prev[(prev <= 0) | (prev >= first)] = 0
    named = stale[used]  # only slots that point past the cut (the others never saw these entries)
    heads = np.zeros(n_slots, np.int32)
    heads[used[named]] = prev[named]
    table[stale] = heads[stale]


class IndexFileView:
    """One index file's bytes in a buffer the caller owns (bytearray or mmap).

    The view holds no state of its own: every call reads the header from the buffer
    and every put writes entry, slot and header through at once, as RocketMQ's
    IndexHeader setters do. A read-only buffer serves :meth:`select` and
    :meth:`header`. The view keeps no buffer export, so an mmap can be closed under it.

    One writer: whoever owns the current index file. ``select`` may run alongside a
    put and then sees the file before or after that entry.
    """

    __slots__ = ("_buf", "_entries_at", "_hash_slots", "_max_entries")

    def __init__(self, buf: bytearray | memoryview, hash_slots: int, max_entries: int) -> None:
        """Open an existing file (RocketMQ IndexFile + load())."""
        size = index_file_size(hash_slots, max_entries)
        if len(buf) < size:
            raise ValueError(
                f"an index file of {hash_slots} slots x {max_entries} entries needs {size} bytes, got {len(buf)}"
            )
        self._buf = buf
        self._hash_slots = hash_slots
        self._max_entries = max_entries
        self._entries_at = INDEX_HEADER_BYTES + hash_slots * INDEX_SLOT_BYTES

    @classmethod
    def create(
        cls,
        buf: bytearray | memoryview,
        hash_slots: int,
        max_entries: int,
        *,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
    ) -> IndexFileView:
        """Start a new file as RocketMQ's IndexFile constructor does.

        ``end_phy_offset`` / ``end_timestamp`` are the previous file's end values
        (0 for the first file); each that is > 0 becomes both begin and end in the
        header. Nothing else is written: index_count stays 0 on disk until the first
        put, exactly like an unflushed Java file. ``buf`` should be a new zero-filled
        file; the header and slot table are cleared here if they are not.
        """
        view = cls(buf, hash_slots, max_entries)
        slots = np.frombuffer(buf, np.int32, hash_slots, INDEX_HEADER_BYTES)
        if slots.any():
            slots[:] = 0
        del slots  # release the buffer export (an mmap refuses to close while one exists)
        begin_phy = end_phy_offset if end_phy_offset > 0 else 0
        begin_ts = end_timestamp if end_timestamp > 0 else 0
        _HEADER.pack_into(buf, 0, begin_ts, begin_ts, begin_phy, begin_phy, 0, 0)
        return view

    @property
    def hash_slots(self) -> int:
        return self._hash_slots

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def header(self) -> IndexHeader:
        """The header as RocketMQ loads it: index_count <= 0 is read as 1."""
        h = IndexHeader.decode(self._buf)
        return h if h.index_count > 0 else dataclasses.replace(h, index_count=1)

    def _index_count(self) -> int:
        count = _SLOT.unpack_from(self._buf, 36)[0]
        return count if count > 0 else 1

    def is_full(self) -> bool:
        """RocketMQ isWriteFull: index_count >= max_entries (max_entries - 1 entries)."""
        return self._index_count() >= self._max_entries

    def is_time_matched(self, begin: int, end: int) -> bool:
        """RocketMQ isTimeMatched: may [begin, end] hold entries of this file?"""
        h = self.header
        fb, fe = h.begin_timestamp, h.end_timestamp
        return (begin < fb and end > fe) or fb <= begin <= fe or fb <= end <= fe

    def put(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """RocketMQ putKey: index ``key`` (topic + "#" + key); False when the file is full."""
        return self._put_hashed([index_key_hash(key)], [phy_offset], [store_timestamp]) == 1

    def put_many(
        self,
        keys: Sequence[str],
        phy_offsets: Sequence[int] | np.ndarray,
        store_timestamps: Sequence[int] | np.ndarray,
    ) -> int:
        """put() each (key, offset, timestamp) in order; returns how many went in
        before the file was full (the rest belong in the next file)."""
        if not len(keys) == len(phy_offsets) == len(store_timestamps):
            raise ValueError(
                f"lengths differ: {len(keys)} keys, {len(phy_offsets)} offsets, {len(store_timestamps)} timestamps"
            )
        return self.put_hashes(index_key_hashes(keys), phy_offsets, store_timestamps)

    def put_hashes(
        self,
        key_hashes: np.ndarray | Sequence[int],
        phy_offsets: np.ndarray | Sequence[int],
        store_timestamps: np.ndarray | Sequence[int],
        *,
        before_header: Callable[[], object] | None = None,
    ) -> int:
        """putKey for many pre-hashed entries at once; returns how many went in before
        the file was full (the rest belong in the next file). ``before_header`` is
        called once the entries and slots are written, before the header that makes
        them count (a fault point for crash tests: IndexService passes one).

        The file ends up byte for byte as after calling the scalar putKey for each
        entry in order: one compiled pass (mqstore/kernels/_dispatch.pyx, without the
        GIL) does that, for the m entries that fit (numbers c .. c+m-1, c =
        index_count), and the header is written once after it. ``key_hashes`` are index
        key hashes (0 <= h <= 2**31-1, e.g. :func:`index_key_hashes` or
        DispatchBatch.index_entries()); offsets and timestamps are int64. Per entry:

        * prev: the slot table's value, read as 0 if <= 0 or > its own entry number
          (putKey checks against the index_count of the moment, which is that number);
        * time_diff: against the current begin_timestamp; in an empty file the first
          entry still uses the begin the file was created with (the quirk) and begin
          becomes the first entry's values for the rest;
        * hash_slot_count grows by the entries whose checked slot value was 0.

        Each entry is written before its slot, and the header last, so a
        concurrent ``select`` never follows a slot into unwritten entries; but one that
        read the old header and then a new slot value finds nothing for that key in
        this file (as with RocketMQ's putKey). Callers that query while writing hold a
        lock around both (IndexService does). Raises ValueError for ragged or non 1-D
        input or a hash outside [0, 2**31-1], before writing anything.

        >>> view = IndexFileView.create(bytearray(index_file_size(4, 8)), 4, 8)
        >>> view.put_hashes(np.array([1, 5, 2]), np.array([10, 20, 30]), np.array([1000, 2000, 3000]))
        3
        >>> view.entries()["prev"].tolist()  # 1 and 5 share slot 1
        [0, 1, 0]
        """
        hashes = np.asarray(key_hashes, np.int64)
        phys = np.asarray(phy_offsets, np.int64)
        times = np.asarray(store_timestamps, np.int64)
        if hashes.ndim != 1 or phys.ndim != 1 or times.ndim != 1:
            raise ValueError(f"entries are given as 1-D arrays, got shapes {hashes.shape}, {phys.shape}, {times.shape}")
        if not len(hashes) == len(phys) == len(times):
            raise ValueError(f"lengths differ: {len(hashes)} hashes, {len(phys)} offsets, {len(times)} timestamps")
        if len(hashes) and (hashes.min() < 0 or hashes.max() > _INT_MAX):
            raise ValueError("key hashes must lie in [0, 2**31-1] (index_key_hash)")
        buf = self._buf
        begin_ts, _, begin_phy, _, slot_count, count = _HEADER.unpack_from(buf, 0)
        if count <= 0:
            count = 1
        m = min(len(hashes), max(0, self._max_entries - count))
        if m == 0:
            return 0
        hashes, phys, times = (np.ascontiguousarray(a[:m]) for a in (hashes, phys, times))
        # One compiled pass (mqstore/kernels/_dispatch.pyx, without the GIL): each
        # entry, then its slot; reference model: tests/kernels/model_index.py.
        new_slots = _dispatch.index_put(buf, self._hash_slots, count, begin_ts, hashes, phys, times)
        if count <= 1:
            begin_ts, begin_phy = int(times[0]), int(phys[0])
        if before_header is not None:
            before_header()
        slot_count += new_slots
        _HEADER.pack_into(buf, 0, begin_ts, int(times[-1]), begin_phy, int(phys[-1]), slot_count, count + m)
        return m

    def _put_hashed(self, key_hashes: list[int], phy_offsets: list[int], store_timestamps: list[int]) -> int:
        buf, slots, max_entries, entries_at = self._buf, self._hash_slots, self._max_entries, self._entries_at
        begin_ts, _, begin_phy, _, slot_count, count = _HEADER.unpack_from(buf, 0)
        if count <= 0:
            count = 1
        done = 0
        for key_hash, phy_offset, store_ts in zip(key_hashes, phy_offsets, store_timestamps, strict=True):
            if count >= max_entries:
                break
            slot_at = INDEX_HEADER_BYTES + (key_hash % slots) * INDEX_SLOT_BYTES
            prev = _SLOT.unpack_from(buf, slot_at)[0]
            if prev <= 0 or prev > count:
                prev = 0
            # time_diff against the *current* begin_timestamp (the first-entry quirk).
            if begin_ts <= 0:
                time_diff = 0
            else:
                diff = _wrap64(store_ts - begin_ts)  # Java truncates toward zero; negatives clamp to 0 either way
                time_diff = 0 if diff < 0 else min(diff // 1000, _INT_MAX)
            _ENTRY.pack_into(buf, entries_at + count * INDEX_ENTRY_BYTES, key_hash, phy_offset, time_diff, prev)
            _SLOT.pack_into(buf, slot_at, count)
            if count <= 1:
                begin_phy, begin_ts = phy_offset, store_ts
            if prev == 0:
                slot_count += 1
            count += 1
            _HEADER.pack_into(buf, 0, begin_ts, store_ts, begin_phy, phy_offset, slot_count, count)
            done += 1
        return done

    def select(self, key: str, max_num: int, begin: int, end: int, *, seen: set[int] | None = None) -> list[int]:
        """RocketMQ selectPhyOffset: commitlog offsets of entries whose key *hash*
        equals ``key``'s and whose reconstructed time is in [begin, end], newest first,
        at most ``max_num``.

        Collisions are not resolved: the caller re-reads each message and compares
        keys. The walk stops at max_num, at a negative time_diff, at the chain's end
        (prev <= 0, > index_count, or pointing at itself) and after the first entry
        older than ``begin``. Java's max_num counts offsets already found in newer
        files; pass what is left. A corrupt chain with a cycle makes Java loop; this
        walk gives up after index_count steps.

        ``seen`` (not RocketMQ): count *messages*, not entries. An offset in ``seen``
        (found in a newer file, or earlier in this walk: the same record indexed
        twice) is passed over without counting towards ``max_num``; each offset
        returned is added to it. Java counts every matching entry, so a record
        indexed twice fills two of the ``max_num`` places.
        """
        buf = self._buf
        key_hash = index_key_hash(key)
        begin_ts = _HEADER.unpack_from(buf, 0)[0]
        count = self._index_count()
        n = _SLOT.unpack_from(buf, INDEX_HEADER_BYTES + (key_hash % self._hash_slots) * INDEX_SLOT_BYTES)[0]
        found: list[int] = []
        if n <= 0 or n > count or count <= 1:
            return found
        for _ in range(count):  # bounded: a valid chain is shorter than index_count
            if len(found) >= max_num or n >= self._max_entries:
                break  # Java: an entry past the file's end throws, and what was found is kept
            hash_read, phy_offset, time_diff, prev = _ENTRY.unpack_from(buf, self._entries_at + n * INDEX_ENTRY_BYTES)
            if time_diff < 0:
                break
            time_read = _wrap64(begin_ts + time_diff * 1000)
            if hash_read == key_hash and begin <= time_read <= end:
                if seen is None:
                    found.append(phy_offset)
                elif phy_offset not in seen:
                    seen.add(phy_offset)
                    found.append(phy_offset)
            if prev <= 0 or prev > count or prev == n or time_read < begin:
                break
            n = prev
        return found

    def damage(self, *, prev_end_phy_offset: int = -1, deep: bool = True, deep_limit: int = 1 << 21) -> str | None:
        """Why these bytes are not a file a sequence of putKey calls could have
        written, or None. ``prev_end_phy_offset``: the previous file's end offset
        (-1 for the first file); entries continue the commitlog order from there.

        Always (a few bytes): index_count in range, the header's begin/end offsets
        are the first/last entry's (a file with no entries starts at the previous
        file's end, the first-entry quirk), begin time <= end time, hash_slot_count
        <= entries. With ``deep`` and at most ``deep_limit`` entries, also every entry
        and slot, in O(entries + slots): offsets never decrease, key hashes >= 0,
        each entry's prev is the entry before it in its slot, each slot holds its
        newest entry (0 if none) and hash_slot_count counts the chain starts. Files
        with more entries get the cheap part of that on their newest ``deep_limit``
        entries (the end a crash or a torn write would damage)."""
        buf = self._buf
        h = IndexHeader.decode(buf)
        if not 0 <= h.index_count <= self._max_entries:
            return f"index_count {h.index_count} is outside 0..{self._max_entries}"
        n = h.entries
        if n == 0:  # begin = end = the previous file's end (any, for the oldest file left)
            want = h.begin_phy_offset if prev_end_phy_offset < 0 else prev_end_phy_offset
            if h.begin_phy_offset != want or h.end_phy_offset != want or h.begin_timestamp != h.end_timestamp:
                return f"an empty file's begin/end offsets {h.begin_phy_offset}/{h.end_phy_offset} are not {want}"
            return None
        first = _ENTRY.unpack_from(buf, self._entries_at + INDEX_ENTRY_BYTES)
        last = _ENTRY.unpack_from(buf, self._entries_at + n * INDEX_ENTRY_BYTES)
        if h.begin_phy_offset != first[1] or h.end_phy_offset != last[1]:
            return (
                f"begin/end offsets {h.begin_phy_offset}/{h.end_phy_offset} are not the first/last entry's "
                f"({first[1]}/{last[1]})"
            )
        if first[1] < prev_end_phy_offset:
            return f"the first entry points at {first[1]}, before the previous file's end {prev_end_phy_offset}"
        if h.begin_timestamp > h.end_timestamp:
            return f"begin time {h.begin_timestamp} is after end time {h.end_timestamp}"
        if not 0 < h.hash_slot_count <= n:
            return f"hash_slot_count {h.hash_slot_count} with {n} entries"
        if not deep:
            return None
        lo = max(1, n + 1 - deep_limit)
        e = np.frombuffer(buf, INDEX_ENTRY_DTYPE, n + 1 - lo, self._entries_at + lo * INDEX_ENTRY_BYTES)
        hashes, phys, prev = (
            e["key_hash"].astype(np.int64),
            e["phy_offset"].astype(np.int64),
            e["prev"].astype(np.int64),
        )
        del e
        numbers = np.arange(lo, n + 1)
        if (np.diff(phys) < 0).any():
            return "entry offsets decrease"
        if (hashes < 0).any():
            return "an entry has a negative key hash"
        if ((prev < 0) | (prev >= numbers)).any():
            return "an entry's prev is not an earlier entry"
        if lo > 1:
            return None  # too many entries for the chain check on every open
        slots = hashes % self._hash_slots
        linked = np.flatnonzero(prev > 0)
        if (slots[prev[linked] - 1] != slots[linked]).any():
            return "an entry's prev is in another slot"
        if (np.bincount(prev[linked], minlength=n + 1) > 1).any():
            return "an entry is the prev of two entries"
        roots, ordered = np.sort(slots[prev == 0]), np.sort(slots)  # (np.unique is far slower here)
        used = 1 + int(np.count_nonzero(np.diff(ordered)))
        if len(roots) != used or (np.diff(roots) == 0).any():
            return "a slot's entries do not form one chain"  # one chain start per slot used, and only one
        if h.hash_slot_count != len(roots):
            return f"hash_slot_count {h.hash_slot_count}, but {len(roots)} entries start a chain"
        head = np.ones(n + 1, bool)
        head[prev[linked]] = False
        heads = np.flatnonzero(head[1:]) + 1  # the entries no later one links to: each slot's newest
        nonzero = np.count_nonzero(np.frombuffer(buf, np.uint32, self._hash_slots, INDEX_HEADER_BYTES))
        held = np.frombuffer(buf, ">i4", self._hash_slots, INDEX_HEADER_BYTES)[slots[heads - 1]]
        if nonzero != used or (held != heads).any():
            return "slots do not hold their newest entry (or an unused slot is not 0)"
        return None

    def drop_uncounted(self) -> int:
        """Undo what a put cut short left in the slot table; returns the slots changed.

        put_hashes writes entries, then slots, then the header, so a crash between
        the last two leaves slots pointing at entries the header does not count
        (numbers >= index_count). putKey would then read such a slot as a chain head
        (one equal to index_count even as the new entry's own previous: a loop), and
        the next put's chains would not be the ones putKey builds. Each such slot gets
        its newest counted entry, or 0 (the uncounted entries were written before the
        slots, each pointing at the one before it in its slot: ``_reset_slots``), in
        time proportional to the uncounted entries. Not a RocketMQ operation (RocketMQ
        never repairs an index file)."""
        buf, n_slots, max_entries = self._buf, self._hash_slots, self._max_entries
        count = min(self._index_count(), max_entries)
        table = np.frombuffer(buf, ">i4", n_slots, INDEX_HEADER_BYTES)
        stale = int(np.count_nonzero(table >= count))
        if stale:
            top = min(int(table.max()), max_entries - 1)  # the newest uncounted entry a slot names
            at = self._entries_at + count * INDEX_ENTRY_BYTES
            entries = np.frombuffer(buf, INDEX_ENTRY_DTYPE, max(0, top + 1 - count), at)
            _reset_slots(table, entries, count)
            del entries
        del table  # release the buffer export
        return stale

    def hashes_at_end(self, phy_offset: int) -> list[int]:
        """Key hashes of the newest entries that point at ``phy_offset``, newest first
        (the walk back stops at the first entry pointing elsewhere): the keys of the
        last indexed record already in this file, when ``phy_offset`` is its offset."""
        count = min(self._index_count(), self._max_entries)
        out: list[int] = []
        n = count - 1
        while n >= 1:
            key_hash, phy, _, _ = _ENTRY.unpack_from(self._buf, self._entries_at + n * INDEX_ENTRY_BYTES)
            if phy != phy_offset:
                break
            out.append(key_hash)
            n -= 1
        return out

    def entries_below(self, phy_offset: int) -> int:
        """How many entries, oldest first, come before the first one whose commitlog
        offset is >= ``phy_offset`` (entries are in commitlog order, so these are the
        ones a cut of the commitlog at ``phy_offset`` leaves pointing at kept bytes)."""
        count = min(self._index_count(), self._max_entries)
        offsets = np.frombuffer(self._buf, INDEX_ENTRY_DTYPE, count - 1, self._entries_at + INDEX_ENTRY_BYTES)
        hits = np.flatnonzero(offsets["phy_offset"] >= phy_offset)
        return int(hits[0]) if hits.size else count - 1

    def truncate(self, keep: int) -> None:
        """Keep entries 1 .. ``keep`` and drop the rest, leaving the bytes a file that
        only ever received those entries would hold, except end_timestamp.

        Not a RocketMQ operation (RocketMQ never cuts an index file); used when the
        commitlog was cut. The header gets index_count ``keep + 1``, end_phy_offset of
        entry ``keep`` and hash_slot_count = kept entries with prev 0 (putKey counted
        exactly those). Each slot that points at a dropped entry gets its newest kept
        entry (0 if none), in time proportional to the entries dropped
        (``_reset_slots``). Dropped entries are zeroed. The
        exact store time of entry ``keep`` is not in the file: end_timestamp becomes
        its reconstructed time, begin_timestamp + time_diff * 1000 (seconds
        resolution), or begin_timestamp when ``keep`` is 1 (whose time_diff may carry
        the first-entry quirk). Written header first, then slots, then entries, so a
        concurrent ``select`` never follows a dropped entry.

        A file can not keep 0 entries (delete it instead): ValueError unless
        1 <= keep <= entries.
        """
        buf = self._buf
        count = min(self._index_count(), self._max_entries)
        if not 1 <= keep <= count - 1:
            raise ValueError(f"keep must be in 1..{count - 1} (the entries held), got {keep}")
        if keep == count - 1:
            return
        begin_ts, _, begin_phy, _, _, _ = _HEADER.unpack_from(buf, 0)
        entries = np.frombuffer(buf, INDEX_ENTRY_DTYPE, count, self._entries_at)
        prev = entries["prev"][: keep + 1]
        last_phy = int(entries["phy_offset"][keep])
        end_ts = begin_ts if keep == 1 else _wrap64(begin_ts + int(entries["time_diff"][keep]) * 1000)
        slot_count = int(np.count_nonzero(prev[1 : keep + 1] == 0))
        _HEADER.pack_into(buf, 0, begin_ts, end_ts, begin_phy, last_phy, slot_count, keep + 1)
        table = np.frombuffer(buf, ">i4", self._hash_slots, INDEX_HEADER_BYTES)
        _reset_slots(table, entries[keep + 1 :], keep + 1)
        entries[keep + 1 :] = 0
        del entries, table  # release the buffer exports

    def entries(self) -> np.ndarray:
        """Entries 1 .. index_count - 1 as an INDEX_ENTRY_DTYPE array (a copy), oldest first."""
        count = min(self._index_count(), self._max_entries)
        at = self._entries_at + INDEX_ENTRY_BYTES
        return np.frombuffer(self._buf, INDEX_ENTRY_DTYPE, count - 1, at).copy()


__all__ = [
    "DEFAULT_HASH_SLOTS",
    "DEFAULT_MAX_ENTRIES",
    "INDEX_ENTRY_BYTES",
    "INDEX_ENTRY_DTYPE",
    "INDEX_HEADER_BYTES",
    "INDEX_SLOT_BYTES",
    "IndexFileView",
    "IndexHeader",
    "index_file_size",
    "index_key_hashes",
]
