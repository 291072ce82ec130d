"""CommitLog records as Arrow record batches, decoded in bulk (numpy, no per-record
Python objects on the common path).

Worker-side code of the ``mqstore`` Spark data source (mqstore.jobs.datasource), and
usable on its own::

    for batch in segment_batches(path, base_offset):   # pyarrow.RecordBatch
        ...

Records are found and validated by ``mqstore.formats.message.scan_records`` (the
store's own walk); each chunk of valid records becomes one batch whose columns are
gathered from the segment's bytes with numpy index arithmetic: fixed fields from
the record heads, variable ones (body, topic, properties, TAGS / KEYS / UNIQ_KEY)
by gathering byte ranges into one Arrow data buffer per column. Where the valid data
stops before the segment's end, the walk resumes at the next valid record (the
signature search verify and recovery use) so one damaged record does not hide the
rest of a segment; records with a bad body CRC are skipped when ``check_crc``.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from mqstore.formats.message import (
    ScanOutcome,
    decode_record,
    record_heads,
    scan_records,
)
from mqstore.formats.msgid import decode_host, offset_msg_id_prefix
from mqstore.formats.properties import locate_properties

BATCH_BYTES = 4 << 20  # commitlog bytes per record batch

SCHEMA = pa.schema(
    [
        ("physical_offset", pa.int64()),
        ("segment", pa.int64()),
        ("total_size", pa.int32()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("store_timestamp", pa.int64()),
        ("born_timestamp", pa.int64()),
        ("sysflag", pa.int32()),
        ("flag", pa.int32()),
        ("body_crc", pa.int32()),
        ("reconsume_times", pa.int32()),
        ("prepared_transaction_offset", pa.int64()),
        ("born_host", pa.string()),
        ("store_host", pa.string()),
        ("msg_id", pa.string()),
        ("tags", pa.string()),
        ("keys", pa.string()),
        ("unique_key", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
    ]
)

# The same schema as Spark DDL (the data source's schema()).
SPARK_DDL = (
    "physical_offset BIGINT, segment BIGINT, total_size INT, topic STRING, queue_id INT, queue_offset BIGINT, "
    "store_timestamp BIGINT, born_timestamp BIGINT, sysflag INT, flag INT, body_crc INT, reconsume_times INT, "
    "prepared_transaction_offset BIGINT, born_host STRING, store_host STRING, msg_id STRING, tags STRING, "
    "keys STRING, unique_key STRING, properties MAP<STRING, STRING>, body BINARY"
)

_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)
_SHIFTS = np.arange(60, -4, -4, dtype=np.uint64)  # 16 nibbles, most significant first


def gather(u8: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges ``[starts[i], starts[i] + lens[i])`` of ``u8`` back to back, and
    Arrow int32 offsets into the result (len(starts) + 1 of them)."""
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, np.uint8), offsets.astype(np.int32)
    src = np.repeat(starts - offsets[:-1], lens) + np.arange(total, dtype=np.int64)
    return u8[src], offsets.astype(np.int32)


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _var_array(typ: pa.DataType, u8: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """A string/binary column of byte ranges; a range with ``starts < 0`` is null."""
    valid = starts >= 0
    lens = np.where(valid, ends - starts, 0)
    data, offsets = gather(u8, np.where(valid, starts, 0), lens)
    return pa.Array.from_buffers(typ, len(starts), [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=int(len(valid) - np.count_nonzero(valid)))  # fmt: skip


def _properties_map(u8: np.ndarray, at: np.ndarray, lens: np.ndarray) -> pa.Array:
    """map<string, string> of each record's properties string (``name \\x01 value \\x02``
    entries; entries parse_properties would skip are left out, duplicates kept)."""
    n = len(at)
    packed, base = gather(u8, at, lens)
    base = base.astype(np.int64)
    rec_end = base[1:]
    base = base[:-1]
    ends = np.flatnonzero(packed == 2)
    seps = np.flatnonzero(packed == 1)
    has = lens > 0
    rec_of_end = np.searchsorted(base, ends, "right") - 1
    after = ends + 1
    opens = after < rec_end[rec_of_end] if len(ends) else np.zeros(0, bool)
    starts = np.concatenate([base[has], after[opens]])
    srec = np.concatenate([np.flatnonzero(has), rec_of_end[opens]])
    order = np.argsort(starts, kind="stable")
    starts, srec = starts[order], srec[order]
    entry_end = rec_end[srec].copy()
    if len(ends):
        k = np.searchsorted(ends, starts)
        cand = ends[np.minimum(k, len(ends) - 1)]
        inside = (k < len(ends)) & (cand < entry_end)
        entry_end[inside] = cand[inside]
    sep = np.full(len(starts), -1, np.int64)
    if len(seps):
        j = np.searchsorted(seps, starts)
        cand = seps[np.minimum(j, len(seps) - 1)]
        ok = (j < len(seps)) & (cand < entry_end)
        sep[ok] = cand[ok]
    valid = (sep > starts) & (sep < entry_end - 1)
    starts, sep, entry_end, srec = starts[valid], sep[valid], entry_end[valid], srec[valid]
    counts = np.bincount(srec, minlength=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    keys = _var_array(pa.string(), packed, starts, sep)
    values = _var_array(pa.string(), packed, sep + 1, entry_end)
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), keys, values)


def _hosts(raw: np.ndarray) -> pa.Array:
    """Host columns ("a.b.c.d:port") from the 8-byte host fields: each distinct host
    is formatted once."""
    uniq, inv = np.unique(raw, return_inverse=True)
    names = pa.array([str(decode_host(bytes(u))) for u in uniq.tolist()], pa.string())
    return names.take(pa.array(inv.ravel().astype(np.int32)))


def _msg_ids(store_hosts: np.ndarray, phys: np.ndarray) -> pa.Array:
    """Offset msgIds: the store host's 16 hex digits, then the offset's 16."""
    n = len(phys)
    uniq, inv = np.unique(store_hosts, return_inverse=True)
    prefixes = np.array([np.frombuffer(offset_msg_id_prefix(decode_host(bytes(u))).encode(), np.uint8) for u in uniq.tolist()])
    chars = np.empty((n, 32), np.uint8)
    chars[:, :16] = prefixes[inv.ravel()]
    chars[:, 16:] = _HEX[((phys.astype(np.uint64)[:, None] >> _SHIFTS) & np.uint64(0xF)).astype(np.intp)]
    offsets = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars.ravel())])


def records_batch(buf, base: int, positions: np.ndarray, sizes: np.ndarray, fields) -> pa.RecordBatch:
    """One record batch (SCHEMA) for validated records at ``positions`` of ``buf``
    (a segment starting at commitlog offset ``base``); ``fields`` from the scan."""
    n = len(positions)
    u8 = np.frombuffer(buf, np.uint8)
    try:
        head = record_heads(buf, positions)
        sysflag = head["sysflag"].astype(np.int64)
        v6 = np.flatnonzero(sysflag & 0x30)
        store_ts = fields.store_timestamps
        # body at: the 48-byte head to BORNTIMESTAMP, BORNHOST (8|20), STORETIMESTAMP,
        # STOREHOST (8|20), RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLEN
        body_at = positions + 72 + np.where(sysflag & 0x10, 20, 8) + np.where(sysflag & 0x20, 20, 8)
        body_len = head["body_len"].astype(np.int64)
        reconsume = head["reconsume_times"].astype(np.int32)
        prepared = head["prepared_transaction_offset"].astype(np.int64)
        ((ts, te), (ks, ke), (us, ue)) = locate_properties(buf, fields.properties_at, fields.properties_len,
                                                           (b"TAGS", b"KEYS", b"UNIQ_KEY"))  # fmt: skip
        topics = pa.array(fields.topics, pa.string()).take(pa.array(fields.topic_codes.astype(np.int32)))
        if v6.size:  # IPv6 hosts move the fields after BORNHOST: decode this (rare) batch record by record
            recs = [decode_record(buf, p, check_crc=False) for p in positions.tolist()]
            reconsume = np.array([r.reconsume_times for r in recs], np.int32)
            prepared = np.array([r.prepared_transaction_offset for r in recs], np.int64)
            body_len = np.array([len(r.body) for r in recs], np.int64)
            born = pa.array([str(r.born_host) for r in recs], pa.string())
            store = pa.array([str(r.store_host) for r in recs], pa.string())
            msg_ids = pa.array([r.msg_id for r in recs], pa.string())
        else:
            born, store = _hosts(head["born_host"]), _hosts(head["store_host"])
            msg_ids = _msg_ids(head["store_host"], positions + base)
        columns = [
            pa.array(positions + base, pa.int64()),
            pa.array(np.full(n, base, np.int64)),
            pa.array(sizes.astype(np.int32)),
            topics,
            pa.array(fields.queue_ids.astype(np.int32)),
            pa.array(fields.queue_offsets.astype(np.int64)),
            pa.array(store_ts.astype(np.int64)),
            pa.array(head["born_timestamp"].astype(np.int64)),
            pa.array(sysflag.astype(np.int32)),
            pa.array(head["flag"].astype(np.int32)),
            pa.array(head["body_crc"].astype(np.int32)),
            pa.array(reconsume),
            pa.array(prepared),
            born,
            store,
            msg_ids,
            _var_array(pa.string(), u8, ts, te),
            _var_array(pa.string(), u8, ks, ke),
            _var_array(pa.string(), u8, us, ue),
            _properties_map(u8, fields.properties_at, fields.properties_len),
            _var_array(pa.binary(), u8, body_at, body_at + body_len),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)
    finally:
        del u8


def _resume_after(mm, pos: int, base: int) -> int | None:
    """Where valid records resume after invalid bytes at ``pos`` (verify's search)."""
    from mqstore.store.verify.records import _first_nonzero, _resync

    if _first_nonzero(mm, pos, len(mm)) is None:
        return None
    return _resync(mm, pos, len(mm), base)


def scan_batches(mm, base: int, lo: int = 0, hi: int | None = None, *, check_crc: bool = False,
                 batch_bytes: int = BATCH_BYTES) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """Record batches of the valid records starting in ``[lo, hi)`` of one mapped
    segment (``lo`` must be a record start or 0)."""
    size = len(mm)
    hi = size if hi is None else min(hi, size)
    pos = lo
    while pos < hi:
        res = scan_records(mm, pos, size, check_crc=check_crc, max_bytes=min(batch_bytes, max(hi - pos, 1)),
                           base_offset=base, fields=True)  # fmt: skip
        if len(res.positions):
            keep = res.positions < hi
            if keep.all():
                yield records_batch(mm, base, res.positions, res.sizes, res.fields)
            else:
                k = int(np.count_nonzero(keep))
                f = res.fields
                sub = type(f)(*(getattr(f, name)[:k] if name != "topics" else f.topics for name in f._fields))
                yield records_batch(mm, base, res.positions[:k], res.sizes[:k], sub)
        if res.outcome is ScanOutcome.END_OF_SEGMENT:
            return
        if res.outcome is ScanOutcome.LIMIT and len(res.positions) and res.stop + 8 <= size:
            pos = res.stop
            continue
        if res.outcome is ScanOutcome.LIMIT and not len(res.positions):
            return
        nxt = _resume_after(mm, res.stop, base)  # INVALID: skip the bad bytes, as verify does
        if nxt is None or nxt <= res.stop:
            return
        pos = nxt


def segment_batches(path: str | Path, base: int, lo: int = 0, hi: int | None = None, *, check_crc: bool = False,
                    batch_bytes: int = BATCH_BYTES) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``scan_batches`` over the segment file at ``path`` (nothing if it is gone or
    empty: retention of a running store)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115  (closed below, after the map)
    except FileNotFoundError:
        return
    with fh:
        if Path(path).stat().st_size == 0:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if lo > 0:
                from mqstore.jobs.units import record_start_in

                start = record_start_in(mm, base, lo, hi if hi is not None else len(mm))
                if start is None:
                    return
                lo = start
            yield from scan_batches(mm, base, lo, hi, check_crc=check_crc, batch_bytes=batch_bytes)


__all__ = ["BATCH_BYTES", "SCHEMA", "SPARK_DDL", "gather", "records_batch", "scan_batches", "segment_batches"]
