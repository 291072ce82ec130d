"""The reference model of the record scan: ``scan_records`` as it was written in numpy
and Python before the Cython kernel (mqstore/kernels/_scan.pyx) took it over, kept
here verbatim (only renamed to ``model_scan_records``). tests/kernels/test_scan_kernel.py
requires the kernel's results to equal this model's, field by field, on valid and
malformed buffers. Not used in production.
"""

from __future__ import annotations

import numpy as np

from mqstore.formats.crc import CRC_MASK, crc32
from mqstore.formats.message import (
    _I32,
    _SIZE_MAGIC,
    BLANK_MAGIC,
    BLANK_RECORD_BYTES,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_BYTES,
    NO_FIELDS,
    RecordFields,
    ScanOutcome,
    ScanResult,
    header_dtype,
)


class _Fields:
    """Big-endian ints at arbitrary byte offsets of one buffer, gathered in bulk.

    ``np.ndarray(..., strides=(1,))`` views the buffer as "the int starting at every
    byte", so reading a field of many records is a single fancy index."""

    def __init__(self, buf: bytes | memoryview) -> None:
        self._buf = buf
        self._n = len(buf)
        self._views: dict[str, np.ndarray] = {}

    def get(self, at: np.ndarray, fmt: str) -> np.ndarray:
        view = self._views.get(fmt)
        if view is None:
            width = np.dtype(fmt).itemsize
            view = np.ndarray((max(self._n - width + 1, 0),), dtype=fmt, buffer=self._buf, strides=(1,))
            self._views[fmt] = view
        return view[at].astype(np.int64)

    def heads(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(head, store_timestamp, body_len_at)`` of the records at ``at``: the
        fixed head in one pass (one copy of 88 bytes per record, not a gather per
        field); the two fields an IPv6 host moves are re-read for those records only.
        Every record at ``at`` must hold at least MIN_RECORD_BYTES."""
        dtype = header_dtype(False, False)
        view = self._views.get("head")
        if view is None:
            # no record fits a buffer shorter than a head: no view to take one from
            view = np.ndarray((max(self._n - dtype.itemsize + 1, 0),), dtype=dtype, buffer=self._buf, strides=(1,))
            self._views["head"] = view
        head = view[at]
        store_ts = head["store_timestamp"].astype(np.int64)
        body_len_at = at + (dtype.itemsize - 4)
        v6 = np.flatnonzero(head["sysflag"] & 0x30)
        if v6.size:
            sf = head["sysflag"][v6].astype(np.int64)
            born = np.where(sf & 0x10, 20, 8)
            store_ts[v6] = self.get(at[v6] + 48 + born, ">i8")
            body_len_at[v6] = at[v6] + 68 + born + np.where(sf & 0x20, 20, 8)
        return head, store_ts, body_len_at

    def release(self) -> None:
        self._views.clear()


def model_scan_records(
    buf: bytes | memoryview,
    start: int,
    end: int,
    *,
    check_crc: bool = True,
    max_records: int | None = None,
    max_bytes: int | None = None,
    base_offset: int | None = None,
    fields: bool = False,
) -> ScanResult:
    """Walk records from ``start`` up to ``end`` (the end of written data) and
    validate them in bulk.

    The walk follows TOTALSIZE (the only sequential part); magic, layout, lengths,
    positions and CRCs are then checked for all records at once. Stops at a BLANK
    record (END_OF_SEGMENT), at the first invalid record (INVALID: nothing from there
    on is trusted), or with LIMIT at ``end``, after ``max_records`` or before a record
    that would take the walk past ``start + max_bytes`` (one record at least). With
    ``base_offset`` (the buffer's commitlog offset) a record whose PHYSICALOFFSET field
    is not its own position is invalid too: stale bytes past a truncation never pass.
    With ``fields`` the result carries the valid records' RecordFields, gathered in
    the same passes.
    """
    positions = _walk(buf, start, end, max_records, max_bytes)
    pos_arr = np.array(positions, np.int64)
    n = len(positions)
    stop = positions[-1] + _SIZE_MAGIC.unpack_from(buf, positions[-1])[0] if n else start
    if n == 0:
        res = _scan_stop_without_records(buf, start, end, pos_arr)
        return res._replace(fields=NO_FIELDS) if fields else res
    f = _Fields(buf)
    try:
        return _validate(buf, f, pos_arr, positions, stop, end, check_crc, base_offset, fields)
    finally:
        f.release()


def _walk(buf, start: int, end: int, max_records: int | None, max_bytes: int | None) -> list[int]:
    """Record starts from ``start``, following TOTALSIZE; stops at an impossible size
    (zeros, garbage), a record running past ``end`` or a limit (the first record is
    taken even if it alone exceeds ``max_bytes``). Validation follows."""
    positions: list[int] = []
    append = positions.append
    unpack = _I32.unpack_from
    pos = start
    last = end - 8
    limit = end if max_bytes is None else min(end, start + max_bytes)
    # Two copies of the loop on purpose: the first (recovery's hot path) has no
    # record budget to count down, which is ~15% of its time per record.
    if max_records is None:
        while pos <= last:
            size = unpack(buf, pos)[0]
            nxt = pos + size
            if size < BLANK_RECORD_BYTES or nxt > limit:
                break
            append(pos)
            pos = nxt
    else:
        budget = max_records
        while pos <= last and budget:
            size = unpack(buf, pos)[0]
            nxt = pos + size
            if size < BLANK_RECORD_BYTES or nxt > limit:
                break
            append(pos)
            pos = nxt
            budget -= 1
    if not positions and limit < end and pos <= last:
        size = unpack(buf, pos)[0]
        if size >= BLANK_RECORD_BYTES and pos + size <= end:
            append(pos)
    return positions


def _scan_stop_without_records(buf, start: int, end: int, empty: np.ndarray) -> ScanResult:
    if start + 8 > end:
        return ScanResult(empty, empty.copy(), start, ScanOutcome.LIMIT, "")
    size, magic = _SIZE_MAGIC.unpack_from(buf, start)
    if magic == BLANK_MAGIC:
        return ScanResult(empty, empty.copy(), start, ScanOutcome.END_OF_SEGMENT, "")
    if magic in (MAGIC_V1, MAGIC_V2) and size >= MIN_RECORD_BYTES and start + size > end:
        reason = f"record at {start} of {size} bytes runs past the end of data {end}"
    elif magic in (MAGIC_V1, MAGIC_V2) and size >= MIN_RECORD_BYTES:
        return ScanResult(empty, empty.copy(), start, ScanOutcome.LIMIT, "")
    else:
        reason = f"no record at {start} (size {size}, magic {magic & 0xFFFFFFFF:#010x})"
    return ScanResult(empty, empty.copy(), start, ScanOutcome.INVALID, reason)


def _validate(
    buf,
    f: _Fields,
    pos_arr: np.ndarray,
    positions: list[int],
    stop: int,
    end: int,
    check_crc: bool,
    base_offset: int | None,
    want_fields: bool,
) -> ScanResult:
    n = len(positions)
    all_sizes = f.get(pos_arr, ">i4")
    all_magic = f.get(pos_arr + 4, ">i4")
    # Only whole message records are inspected further: cut at the first BLANK or bad head.
    head_bad = ((all_magic != MAGIC_V1) & (all_magic != MAGIC_V2)) | (all_sizes < MIN_RECORD_BYTES)
    first = np.flatnonzero(head_bad)
    k = int(first[0]) if first.size else n
    at, sizes, magic = pos_arr[:k], all_sizes[:k], all_magic[:k]
    rec_end = at + sizes
    head, store_ts, body_len_at = f.heads(at)
    bad = body_len_at + 4 > rec_end
    body_len_at = np.where(bad, at, body_len_at)
    body_len = f.get(body_len_at, ">i4")
    v2 = magic == MAGIC_V2
    topic_len_bytes = np.where(v2, 2, 1)  # the only difference between V1 and V2
    bad |= (body_len < 0) | (body_len_at + 4 + body_len + topic_len_bytes + 2 > rec_end)
    topic_len_at = np.where(bad, at, body_len_at + 4 + body_len)
    topic_len = np.where(v2, f.get(topic_len_at, ">i2"), f.get(topic_len_at, "i1"))
    props_len_at = topic_len_at + topic_len_bytes + topic_len
    bad |= (topic_len < 0) | (props_len_at + 2 > rec_end)
    props_len_at = np.where(bad, at, props_len_at)
    props_len = f.get(props_len_at, ">i2")
    bad |= (props_len < 0) | (props_len_at + 2 + props_len != rec_end)
    if base_offset is not None:
        bad |= head["physical_offset"] != at + base_offset
    reason = ""
    layout_bad = np.flatnonzero(bad)
    if layout_bad.size:
        k = int(layout_bad[0])
        reason = (
            f"record at {positions[k]} of {int(sizes[k])} bytes: its fields disagree with TOTALSIZE or its position"
        )
    if check_crc and k:
        stored = head["body_crc"][:k].astype(np.int64)
        starts = (body_len_at[:k] + 4).tolist()
        ends = (body_len_at[:k] + 4 + body_len[:k]).tolist()
        mv = memoryview(buf)
        try:
            actual = np.array([crc32(mv[a:b]) for a, b in zip(starts, ends)], np.int64) & CRC_MASK
        finally:
            mv.release()
        mismatch = np.flatnonzero((actual != stored) & (body_len[:k] > 0))
        if mismatch.size:
            k = int(mismatch[0])
            reason = f"record at {positions[k]}: body CRC mismatch"
    fields = None
    if want_fields:
        fields = (
            _fields_of(buf, f, head[:k], store_ts[:k], topic_len_at[:k] + topic_len_bytes[:k], topic_len[:k])
            if k
            else NO_FIELDS
        )
    if k < n:
        if reason:
            return ScanResult(pos_arr[:k], all_sizes[:k], positions[k], ScanOutcome.INVALID, reason, fields)
        tail = _scan_stop_without_records(buf, positions[k], end, pos_arr[:0])
        return ScanResult(pos_arr[:k], all_sizes[:k], positions[k], tail.outcome, tail.reason, fields)
    # The walk ended on its own: classify what lies at ``stop``.
    tail = _scan_stop_without_records(buf, stop, end, pos_arr[:0])
    return ScanResult(pos_arr, all_sizes, stop, tail.outcome, tail.reason, fields)


def _fields_of(
    buf, f: _Fields, head: np.ndarray, store_ts: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray
) -> RecordFields:
    """RecordFields from gathered heads and topic locations.

    Topics repeat, so each distinct topic is decoded once, numbered in order of first
    appearance. A topic of up to 16 bytes
    is identified exactly by its length and its first and last 8 bytes (two strided
    reads that end at the topic's end: >= 68 record bytes precede any topic, so a
    short topic is the low bytes of the 8 that end it); longer ones by whole rows.
    """
    n = len(head)
    tail8 = f.get(topic_at + topic_len - 8, ">u8").view(np.uint64)
    head8 = f.get(np.where(topic_len >= 8, topic_at, topic_at + topic_len - 8), ">u8").view(np.uint64)
    short = topic_len < 8
    low_mask = (np.uint64(1) << (np.minimum(topic_len, 7) * 8).astype(np.uint64)) - np.uint64(1)
    key = np.empty(n, [("len", "<i8"), ("a", "<u8"), ("b", "<u8")])
    key["len"] = topic_len
    key["a"] = np.where(short, tail8 & low_mask, head8)
    key["b"] = np.where(short, np.uint64(0), tail8)
    long_ = topic_len > 16
    if long_.any():  # disambiguate long topics by their full bytes
        key["len"][long_] += _long_topic_ids(buf, topic_at[long_], topic_len[long_]) << 8
    if (key == key[0]).all():  # the common case in a chunk: one topic
        first, codes = np.zeros(1, np.int64), np.zeros(n, np.int64)
    else:
        # Sort a 64-bit mix of the three fields (fast), then check it was exact:
        # every record must equal its group's first; on a collision use the full key.
        mix = (
            key["a"] * np.uint64(0x9E3779B97F4A7C15)
            ^ key["b"] * np.uint64(0xC2B2AE3D27D4EB4F)
            ^ key["len"].astype(np.uint64)
        )
        _, first, codes = np.unique(mix, return_index=True, return_inverse=True)
        codes = codes.ravel()
        if not (key[first[codes]] == key).all():
            _, first, codes = np.unique(key, return_index=True, return_inverse=True)
        # numbered in order of first appearance, as the kernel numbers them
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        first, codes = first[order], rank[codes.ravel()]
    with memoryview(buf) as mv:  # released at once: a segment's map cannot close while viewed
        topics = [
            bytes(mv[a : a + ln]).decode("utf-8", "replace")
            for a, ln in zip(topic_at[first].tolist(), topic_len[first].tolist(), strict=True)
        ]
    props_at = topic_at + topic_len + 2
    return RecordFields(
        head["queue_id"].astype(np.int64),
        head["queue_offset"].astype(np.int64),
        head["sysflag"].astype(np.int64),
        store_ts,
        codes.astype(np.int64).ravel(),
        topics,
        props_at,
        f.get(props_at - 2, ">i2"),
    )


def _long_topic_ids(buf, at: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """A distinct small integer per distinct topic byte string (chunked row compare)."""
    u8 = np.frombuffer(buf, np.uint8)
    width = int(lens.max())
    cols = np.arange(width)
    ids = np.empty(len(at), np.int64)
    index: dict[bytes, int] = {}
    for lo in range(0, len(at), _ROW_CHUNK):
        a, ln = at[lo : lo + _ROW_CHUNK], lens[lo : lo + _ROW_CHUNK]
        idx = np.minimum(a[:, None] + cols, len(u8) - 1)
        rows = np.where(cols < ln[:, None], u8[idx], 0).astype(np.uint8).view(f"V{width}").ravel()
        uniq, inv = np.unique(rows, return_inverse=True)
        local = np.array([index.setdefault(bytes(u), len(index)) for u in uniq.tolist()], np.int64)
        ids[lo : lo + len(a)] = local[inv.ravel()]
    del u8
    return ids


_ROW_CHUNK = 1 << 16
