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
import pyarrow.compute as pc

from mqstore.formats.message import (
    ScanOutcome,
    decode_record,
    record_heads,
    scan_records,
)
from mqstore.formats.msgid import decode_host, offset_msg_id_prefix

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

_RAW_PROPERTIES = SCHEMA.set(SCHEMA.get_field_index("properties"), pa.field("properties", pa.string()))


def schema(properties: str = "map") -> pa.Schema:
    """The batches' schema: ``properties`` as map<string,string> ("map") or as the raw
    string ("string": name \x01 value \x02 ..., cheaper to produce)."""
    return SCHEMA if properties == "map" else _RAW_PROPERTIES


def spark_ddl(properties: str = "map") -> str:
    """The same schema as Spark DDL (the data source's schema())."""
    props = "MAP<STRING, STRING>" if properties == "map" else "STRING"
    return (
        "physical_offset BIGINT, segment BIGINT, total_size INT, topic STRING, queue_id INT, queue_offset BIGINT, "
        "store_timestamp BIGINT, born_timestamp BIGINT, sysflag INT, flag INT, body_crc INT, reconsume_times INT, "
        "prepared_transaction_offset BIGINT, born_host STRING, store_host STRING, msg_id STRING, tags STRING, "
        f"keys STRING, unique_key STRING, properties {props}, body BINARY"
    )


_HEX_PAIRS = np.array([[ord(c) for c in f"{i:02X}"] for i in range(256)], np.uint8)  # byte -> two hex digits


def joined(buf, starts: np.ndarray, ends: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The byte ranges ``[starts[i], ends[i])`` of ``buf`` back to back, and Arrow
    int32 offsets into the result (one slice copy each, then one join: faster than
    a numpy gather for ranges of tens of bytes and more)."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    data = b"".join(map(buf.__getitem__, map(slice, starts.tolist(), ends.tolist())))
    return data, offsets.astype(np.int32)


def _var_array(typ: pa.DataType, buf, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    data, offsets = joined(buf, starts, ends)
    return pa.Array.from_buffers(typ, len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _properties_map(props: pa.Array) -> pa.Array:
    """map<string, string> of the properties strings (``name \x01 value \x02``;
    entries parse_properties skips are left out, duplicate names kept in order)."""
    entries = pc.split_pattern(props, "\x02")
    flat = pc.list_flatten(entries)
    parent = pc.list_parent_indices(entries).to_numpy()
    pair = pc.split_pattern(flat, "\x01", max_splits=1)
    two = np.flatnonzero(pc.equal(pc.list_value_length(pair), 2).to_numpy(zero_copy_only=False))
    pair = pair.take(pa.array(two))
    name, value = pc.list_element(pair, 0), pc.list_element(pair, 1)
    ok = pc.and_(pc.greater(pc.binary_length(name), 0), pc.greater(pc.binary_length(value), 0))
    ok_np = ok.to_numpy(zero_copy_only=False)
    counts = np.bincount(parent[two[ok_np]], minlength=len(props))
    offsets = np.zeros(len(props) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    if not ok_np.all():
        name, value = name.filter(ok), value.filter(ok)
    return pa.MapArray.from_arrays(pa.array(offsets), name, value)


def _hosts(raw: np.ndarray) -> pa.Array:
    """Host columns ("a.b.c.d:port") from the 8-byte host fields: each distinct host
    is formatted once."""
    as_int = raw.view(np.uint64) if raw.dtype.itemsize == 8 else None
    if as_int is not None and len(as_int) and (as_int == as_int[0]).all():  # one host: the usual case
        return pa.array([str(decode_host(bytes(raw[0])))] * 1, pa.string()).take(pa.array(np.zeros(len(raw), np.int32)))
    uniq, inv = np.unique(raw, return_inverse=True)
    names = pa.array([str(decode_host(bytes(u))) for u in uniq.tolist()], pa.string())
    return names.take(pa.array(inv.ravel().astype(np.int32)))


def _msg_ids(store_hosts: np.ndarray, phys: np.ndarray) -> pa.Array:
    """Offset msgIds: the store host's 16 hex digits, then the offset's 16."""
    n = len(phys)
    uniq, inv = np.unique(store_hosts, return_inverse=True)
    prefixes = np.array(
        [np.frombuffer(offset_msg_id_prefix(decode_host(bytes(u))).encode(), np.uint8) for u in uniq.tolist()]
    )
    chars = np.empty((n, 32), np.uint8)
    chars[:, :16] = prefixes[inv.ravel()]
    chars[:, 16:] = _HEX_PAIRS[phys.astype(">u8").view(np.uint8).reshape(n, 8)].reshape(n, 16)
    offsets = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars.ravel())])


def records_batch(
    buf, base: int, positions: np.ndarray, sizes: np.ndarray, fields, *, properties: str = "map"
) -> pa.RecordBatch:
    """One record batch (``schema(properties)``) for validated records at
    ``positions`` of ``buf`` (a segment starting at commitlog offset ``base``);
    ``fields`` from the scan."""
    n = len(positions)
    head = record_heads(buf, positions)
    sysflag = head["sysflag"].astype(np.int64)
    v6 = np.flatnonzero(sysflag & 0x30)
    # body at: the 48-byte head to BORNTIMESTAMP, BORNHOST (8|20), STORETIMESTAMP,
    # STOREHOST (8|20), RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLEN
    body_at = positions + 72 + np.where(sysflag & 0x10, 20, 8) + np.where(sysflag & 0x20, 20, 8)
    body_len = head["body_len"].astype(np.int64)
    reconsume = head["reconsume_times"].astype(np.int32)
    prepared = head["prepared_transaction_offset"].astype(np.int64)
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
    props = _var_array(pa.string(), buf, fields.properties_at, fields.properties_at + fields.properties_len)
    try:
        props.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: decode as Java does (bad bytes become U+FFFD)
        props = pa.array(
            [bytes(v).decode("utf-8", "replace") for v in props.cast(pa.binary()).to_pylist()], pa.string()
        )
    props_map = _properties_map(props)  # parse_properties's rules: the last entry of a name wins
    topics = pa.array(fields.topics, pa.string()).take(pa.array(fields.topic_codes.astype(np.int32)))
    columns = [
        pa.array(positions + base, pa.int64()),
        pa.array(np.full(n, base, np.int64)),
        pa.array(sizes.astype(np.int32)),
        topics,
        pa.array(fields.queue_ids.astype(np.int32)),
        pa.array(fields.queue_offsets.astype(np.int64)),
        pa.array(fields.store_timestamps.astype(np.int64)),
        pa.array(head["born_timestamp"].astype(np.int64)),
        pa.array(sysflag.astype(np.int32)),
        pa.array(head["flag"].astype(np.int32)),
        pa.array(head["body_crc"].astype(np.int32)),
        pa.array(reconsume),
        pa.array(prepared),
        born,
        store,
        msg_ids,
        pc.map_lookup(props_map, pa.scalar("TAGS"), "last"),
        pc.map_lookup(props_map, pa.scalar("KEYS"), "last"),
        pc.map_lookup(props_map, pa.scalar("UNIQ_KEY"), "last"),
        props_map if properties == "map" else props,
        _var_array(pa.binary(), buf, body_at, body_at + body_len),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema(properties))


def _resume_after(mm, pos: int, base: int) -> int | None:
    """Where valid records resume after invalid bytes at ``pos`` (verify's search)."""
    from mqstore.store.verify.records import first_nonzero, resync

    if first_nonzero(mm, pos, len(mm)) is None:
        return None
    return resync(mm, pos, len(mm), base)


def scan_batches(
    mm,
    base: int,
    lo: int = 0,
    hi: int | None = None,
    *,
    check_crc: bool = False,
    batch_bytes: int = BATCH_BYTES,
    properties: str = "map",
) -> Iterator[pa.RecordBatch]:
    """Record batches of the valid records starting in ``[lo, hi)`` of one mapped
    segment (``lo`` must be a record start or 0)."""
    size = len(mm)
    hi = size if hi is None else min(hi, size)
    pos = lo
    while pos < hi:
        res = scan_records(
            mm,
            pos,
            size,
            check_crc=check_crc,
            max_bytes=min(batch_bytes, max(hi - pos, 1)),
            base_offset=base,
            fields=True,
        )
        if len(res.positions):
            keep = res.positions < hi
            if keep.all():
                yield records_batch(mm, base, res.positions, res.sizes, res.fields, properties=properties)
            else:
                k = int(np.count_nonzero(keep))
                f = res.fields
                sub = type(f)(*(getattr(f, name)[:k] if name != "topics" else f.topics for name in f._fields))
                yield records_batch(mm, base, res.positions[:k], res.sizes[:k], sub, properties=properties)
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


def segment_batches(
    path: str | Path,
    base: int,
    lo: int = 0,
    hi: int | None = None,
    *,
    check_crc: bool = False,
    batch_bytes: int = BATCH_BYTES,
    properties: str = "map",
) -> Iterator[pa.RecordBatch]:
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
            yield from scan_batches(
                mm, base, lo, hi, check_crc=check_crc, batch_bytes=batch_bytes, properties=properties
            )


__all__ = ["BATCH_BYTES", "SCHEMA", "joined", "records_batch", "scan_batches", "schema", "segment_batches", "spark_ddl"]
