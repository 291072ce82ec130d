"""The reference models of the dispatch extraction: ``locate_properties``,
``java_hash_of_ranges``, ``DispatchBatch.index_entries`` and ``build_dispatch_batch``
as they were written in numpy and Python before the Cython kernel
(mqstore/kernels/_dispatch.pyx) took them over, kept here verbatim (only renamed with a
``model_`` prefix, and calling each other's models). tests/kernels/test_dispatch_kernel.py
requires the kernel's results to equal these, column by column, on valid and
malformed properties. Not used in production.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mqstore.formats.javahash import java_string_hash, java_string_hashes
from mqstore.formats.message import TRANSACTION_TYPE_MASK
from mqstore.store.commitlog import ScanChunk
from mqstore.store.dispatch import DispatchBatch, IndexEntries
from mqstore.store.schedule import SCHEDULE_TOPIC, deliver_times

_DISPATCHED = (b"TAGS", b"KEYS", b"UNIQ_KEY")


def model_locate_properties(
    buf: bytes | memoryview, at: np.ndarray, lens: np.ndarray, names: Sequence[bytes]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Where the values of ``names`` lie in many properties strings at once.

    ``buf[at[i] : at[i] + lens[i]]`` is record i's properties string. For each name
    the result holds ``(starts, ends)``: the value's byte range in ``buf`` per record,
    -1 where the record has no such (valid) entry. Same rules as
    :func:`parse_properties` (entries end at \\x02, the value follows the first
    \\x01, empty names or values do not count, the last entry wins), found with numpy
    over all strings gathered into one array instead of a parse per record.
    """
    n = len(at)
    result = [(np.full(n, -1, np.int64), np.full(n, -1, np.int64)) for _ in names]
    total = int(lens.sum()) if n else 0
    if total == 0:
        return result
    # Gather every properties string into one compact array: record i's bytes start
    # at base[i] there; src maps a compact position back to the buffer.
    base = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=base[1:])
    src = np.repeat(at - base, lens) + np.arange(total)
    u8 = np.frombuffer(buf, np.uint8)
    packed = u8[src]
    del u8
    ends = np.flatnonzero(packed == 2)
    seps = np.flatnonzero(packed == 1)
    rec_of_end = np.searchsorted(base, ends, "right") - 1
    # Entry starts: each record's start, and the byte after each \x02 (unless that
    # is the next record's start or the end: a trailing \x02 opens no entry).
    after = ends + 1
    opens = after < base[rec_of_end] + lens[rec_of_end]
    starts = np.concatenate([base, after[opens]])
    srec = np.concatenate([np.arange(n), rec_of_end[opens]])
    order = np.argsort(starts, kind="stable")
    starts, srec = starts[order], srec[order]
    rec_end = base + lens
    k = np.searchsorted(ends, starts)  # the first \x02 at or after the entry start
    entry_end = rec_end[srec].copy()
    has = k < len(ends)
    if len(ends):
        cand = ends[np.minimum(k, len(ends) - 1)]
        has &= cand < rec_end[srec]
        entry_end[has] = cand[has]
    j = np.searchsorted(seps, starts)
    sep = np.full(len(starts), -1, np.int64)
    if len(seps):
        cand = seps[np.minimum(j, len(seps) - 1)]
        ok = (j < len(seps)) & (cand < entry_end)
        sep[ok] = cand[ok]
    valid = (sep > starts) & (sep < entry_end - 1)  # name and value both non-empty
    for (vs, ve), name in zip(result, names):
        size = len(name)
        cand = np.flatnonzero(valid & (sep - starts == size))
        if cand.size:
            rows = packed[starts[cand][:, None] + np.arange(size)]
            cand = cand[(rows == np.frombuffer(name, np.uint8)).all(axis=1)]
        if cand.size:
            recs = srec[cand]  # ascending: entries are in buffer order
            last = np.flatnonzero(np.append(recs[1:] != recs[:-1], True))  # the last entry wins
            shift = at[recs[last]] - base[recs[last]]  # compact -> buffer positions
            vs[recs[last]] = sep[cand[last]] + 1 + shift
            ve[recs[last]] = entry_end[cand[last]] + shift
    return result


def model_java_hash_of_ranges(
    buf: bytes | memoryview, starts: np.ndarray, ends: np.ndarray, *, prefix: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``java_string_hash(p_i + buf[starts[i]:ends[i]].decode())`` for many ranges,
    computed on the bytes: for ASCII text the UTF-16 code units are the bytes.

    ``prefix`` holds each range's prefix hash h(p_i) (e.g. of ``"topic#"``). Returns
    the hashes (int64 holding int32 values) and a mask of the ranges that are not
    ASCII: their hash here is meaningless and the caller hashes their decoded text.
    """
    n = len(starts)
    lens = ends - starts
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    # All ranges' bytes in one flat array; h = prefix * 31**len + sum(byte * 31**(bytes after it)),
    # summed per range with one cumulative sum (uint64 sums wrap, the low 32 bits stay exact).
    total = int(lens.sum())
    offs = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=offs[1:])
    u8 = np.frombuffer(buf, np.uint8)
    flat = u8[np.repeat(starts - offs, lens) + np.arange(total)].astype(np.uint32)
    del u8
    ends_flat = offs + lens
    after = np.repeat(ends_flat, lens) - 1 - np.arange(total)
    sums = np.zeros(total + 1, np.uint64)
    np.cumsum(flat * _pow31(int(lens.max()) + 1)[after], dtype=np.uint64, out=sums[1:])
    h = ((sums[ends_flat] - sums[offs]) & 0xFFFFFFFF).astype(np.uint32)
    if prefix is not None:
        h = h + prefix.astype(np.uint32) * _pow31(int(lens.max()) + 1)[lens]
    non_ascii = np.zeros(n, bool)
    high = np.flatnonzero(flat >= 0x80)
    if high.size:
        non_ascii[np.searchsorted(ends_flat, high, "right")] = True
    return h.view(np.int32).astype(np.int64), non_ascii


_POW31_CACHE = np.ones(1, np.uint32)


def _pow31(n: int) -> np.ndarray:
    """31**i mod 2**32 for i < n (uint32 products wrap)."""
    global _POW31_CACHE
    if len(_POW31_CACHE) < n:
        size = max(n, 2 * len(_POW31_CACHE))
        table = np.ones(size, np.uint32)
        table[1:] = np.cumprod(np.full(size - 1, 31, np.uint32), dtype=np.uint32)
        _POW31_CACHE = table
    return _POW31_CACHE


def model_index_entries(b: DispatchBatch) -> IndexEntries:
    indexed = (b.sysflags & TRANSACTION_TYPE_MASK) != 0xC  # prepared half messages are indexed, rollbacks not
    rec_parts, start_parts, end_parts, order_parts = [], [], [], []
    has_uniq = indexed & (b.uniq_at >= 0)
    u = np.flatnonzero(has_uniq)
    rec_parts.append(u)
    start_parts.append(b.uniq_at[u])
    end_parts.append(b.uniq_end[u])
    order_parts.append(np.zeros(len(u), np.int64))
    k = np.flatnonzero(indexed & (b.keys_at >= 0))
    if len(k):  # split KEYS at spaces, all records at once
        starts, ends = b.keys_at[k], b.keys_end[k]
        lens = ends - starts
        u8 = np.frombuffer(b.buffer, np.uint8)
        cols = np.arange(int(lens.max()))
        mat = u8[np.minimum(starts[:, None] + cols, len(u8) - 1)]
        del u8
        row, col = np.nonzero((mat == 0x20) & (cols < lens[:, None]))
        # Pieces: between consecutive separators (record start and end included).
        cut_rec = np.concatenate([np.arange(len(k)), row, np.arange(len(k))])
        cut_pos = np.concatenate([starts - 1, starts[row] + col, ends])
        order = np.lexsort((cut_pos, cut_rec))
        cut_rec, cut_pos = cut_rec[order], cut_pos[order]
        same = cut_rec[1:] == cut_rec[:-1]
        piece_start, piece_end, piece_rec = cut_pos[:-1][same] + 1, cut_pos[1:][same], cut_rec[:-1][same]
        keep = piece_end > piece_start  # empty elements ("a  b") are not keys
        piece_rec = piece_rec[keep]
        rec_parts.append(k[piece_rec])
        start_parts.append(piece_start[keep])
        end_parts.append(piece_end[keep])
        order_parts.append(1 + np.arange(len(piece_rec)))  # keeps KEYS order after the sort below
    rec = np.concatenate(rec_parts)
    starts, ends, within = np.concatenate(start_parts), np.concatenate(end_parts), np.concatenate(order_parts)
    sort = np.lexsort((within, rec))
    rec, starts, ends = rec[sort], starts[sort], ends[sort]
    prefixes = java_string_hashes([t + "#" for t in b.topics]).astype(np.uint32)
    hashes, non_ascii = model_java_hash_of_ranges(b.buffer, starts, ends, prefix=prefixes[b.topic_codes[rec]])
    for i in np.flatnonzero(non_ascii).tolist():
        text = b.buffer[int(starts[i]) : int(ends[i])].decode("utf-8", "replace")
        hashes[i] = java_string_hash(f"{b.topics[b.topic_codes[rec[i]]]}#{text}")
    key_hashes = np.where(hashes == -(1 << 31), 0, np.abs(hashes))  # RocketMQ: abs, MIN_VALUE -> 0
    return IndexEntries(key_hashes, b.physical_offsets[rec], b.store_timestamps[rec])


def model_build_dispatch_batch(chunk: ScanChunk, delays_ms: list[int] | None = None) -> DispatchBatch:
    """Columns for the sinks from one scanned chunk: TAGS, KEYS and UNIQ_KEY are
    located for all records at once; each distinct TAGS value is hashed once."""
    f, buf = chunk.fields, chunk.buffer
    (ts, te), (ks, ke), (us, ue) = model_locate_properties(buf, f.properties_at, f.properties_len, _DISPATCHED)
    has_tags = ts >= 0
    tags_codes, non_ascii = model_java_hash_of_ranges(buf, np.where(has_tags, ts, 0), np.where(has_tags, te, 0))
    for i in np.flatnonzero(non_ascii).tolist():
        tags_codes[i] = java_string_hash(buf[int(ts[i]) : int(te[i])].decode("utf-8", "replace"))
    if delays_ms is not None and SCHEDULE_TOPIC in f.topics:
        # Delay-level messages: the unit's tagsCode is the deliver time (RocketMQ).
        sched = np.flatnonzero(f.topic_codes == f.topics.index(SCHEDULE_TOPIC))
        ((ds, de),) = model_locate_properties(buf, f.properties_at[sched], f.properties_len[sched], [b"DELAY"])
        levels = np.array([_int_or_zero(buf[a:b]) if a >= 0 else 0 for a, b in zip(ds.tolist(), de.tolist())], np.int64)
        tags_codes[sched] = deliver_times(f.store_timestamps[sched], levels, delays_ms)

    return DispatchBatch(
        chunk.physical_offsets,
        chunk.sizes,
        f.topics,
        f.topic_codes,
        f.queue_ids,
        f.queue_offsets,
        f.sysflags,
        f.store_timestamps,
        tags_codes,
        buf,
        ks,
        ke,
        us,
        ue,
    )


def _int_or_zero(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        return 0
