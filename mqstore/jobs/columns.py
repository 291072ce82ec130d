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

from mqstore.formats.message import ScanOutcome, decode_record, locate_records, scan_records
from mqstore.formats.msgid import decode_host
from mqstore.kernels import _decode

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


def _replaced(buf, at: np.ndarray, length: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Java's decoding of byte ranges that are not all UTF-8 (bad bytes become U+FFFD),
    re-encoded back to back: ``(data, at, length)`` (rare: a batch holding such text)."""
    with memoryview(buf) as mv:
        pieces = [
            bytes(mv[a : a + n]).decode("utf-8", "replace").encode()
            for a, n in zip(at.tolist(), length.tolist(), strict=True)
        ]
    new_len = np.fromiter(map(len, pieces), np.int64, len(pieces))
    return b"".join(pieces), np.cumsum(new_len) - new_len, new_len


def _var(typ: pa.DataType, n: int, offsets: np.ndarray, data: np.ndarray, used: int, valid=None) -> pa.Array:
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data[:used])])


def _hosts(slots: np.ndarray) -> pa.Array:
    """Host strings ("a.b.c.d:port", "[v6]:port") of the kernel's host slots (a length
    byte, then the bytes): each distinct host is formatted once."""
    n, width = slots.shape
    raw = slots.tobytes()
    if raw == raw[:width] * n:  # one host: the usual case
        text = str(_host(slots[0])).encode()
        offsets = np.arange(0, len(text) * (n + 1), len(text), dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text * n)])
    uniq, inv = np.unique(slots.view(f"V{width}").ravel(), return_inverse=True)
    rows = uniq.view(np.uint8).reshape(len(uniq), width)
    names = pa.array([str(_host(r)) for r in rows], pa.string())
    return names.take(pa.array(inv.ravel().astype(np.int32)))


def _host(slot: np.ndarray):
    return decode_host(bytes(slot[1 : 1 + int(slot[0])]))


def records_batch(
    buf, base: int, positions: np.ndarray, sizes: np.ndarray, *, properties: str = "map"
) -> pa.RecordBatch:
    """One record batch (``schema(properties)``) for validated records at
    ``positions`` of ``buf`` (a segment starting at commitlog offset ``base``).

    The kernel (mqstore/kernels/_decode.pyx) locates every field and fills the Arrow
    buffers of the variable-width columns in one pass each, without the GIL; fixed
    columns are the located ones cast. tests/kernels/model_decode.py holds the
    reference model."""
    n = len(positions)
    if not n:
        return pa.RecordBatch.from_pylist([], schema=schema(properties))
    positions = np.ascontiguousarray(positions, np.int64)
    cols, k = locate_records(buf, positions, check_crc=False)
    if k < n:
        decode_record(buf, int(positions[k]), check_crc=False)  # raises what is wrong with it
        raise AssertionError(f"the decode kernel refused the record at {int(positions[k])}")
    t_at, t_len = cols[_decode.COL_TOPIC_AT], cols[_decode.COL_TOPIC_LEN]
    p_at, p_len = cols[_decode.COL_PROPS_AT], cols[_decode.COL_PROPS_LEN]
    tsrc = psrc = buf
    bad = np.empty(n, np.uint8)
    if _decode.utf8_bad(buf, t_at, t_len, bad):
        tsrc, t_at, t_len = _replaced(buf, t_at, t_len)
    if _decode.utf8_bad(buf, p_at, p_len, bad):
        psrc, p_at, p_len = _replaced(buf, p_at, p_len)
    as_map = properties == "map"
    body_cap = int(cols[_decode.COL_BODY_LEN].sum()) + 1
    props_cap = int(p_len.sum()) + 1
    entries_cap = props_cap // 3 + n + 1
    offs = np.empty((7, n + 1), np.int32)
    body = np.empty(body_cap, np.uint8)
    topic = np.empty(int(t_len.sum()) + 1, np.uint8)
    props = np.empty(props_cap if not as_map else 1, np.uint8)
    special = np.empty((3, props_cap), np.uint8)
    entry_offs = np.empty(n + 1, np.int32)
    name_offs = np.empty(entries_cap, np.int32)
    names = np.empty(props_cap if as_map else 1, np.uint8)
    value_offs = np.empty(entries_cap, np.int32)
    values = np.empty(props_cap if as_map else 1, np.uint8)
    valid = np.empty((3, n), np.uint8)
    msg_ids = np.empty(56 * n + 1, np.uint8)
    hosts = np.empty((2, n, _decode.HOST_BYTES), np.uint8)
    nb, nt, npr, n_tag, n_key, n_uq, ne, nn, nv, nm = _decode.arrow_fill(
        buf,
        cols,
        tsrc,
        t_at,
        t_len,
        psrc,
        p_at,
        p_len,
        as_map,
        offs,
        body,
        topic,
        props,
        special,
        entry_offs,
        name_offs,
        names,
        value_offs,
        values,
        valid,
        msg_ids,
        hosts,
    )
    if as_map:
        props_col = pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(entry_offs)]),
            _var(pa.string(), ne, name_offs[: ne + 1], names, nn),
            _var(pa.string(), ne, value_offs[: ne + 1], values, nv),
        )
    else:
        props_col = _var(pa.string(), n, offs[2], props, npr)
    columns = [
        pa.array(positions + base, pa.int64()),
        pa.array(np.full(n, base, np.int64)),
        pa.array(sizes.astype(np.int32)),
        _var(pa.string(), n, offs[1], topic, nt),
        pa.array(cols[_decode.COL_QUEUE_ID].astype(np.int32)),
        pa.array(cols[_decode.COL_QUEUE_OFFSET]),
        pa.array(cols[_decode.COL_STORE_TIMESTAMP]),
        pa.array(cols[_decode.COL_BORN_TIMESTAMP]),
        pa.array(cols[_decode.COL_SYSFLAG].astype(np.int32)),
        pa.array(cols[_decode.COL_FLAG].astype(np.int32)),
        pa.array(cols[_decode.COL_BODY_CRC].astype(np.int32)),
        pa.array(cols[_decode.COL_RECONSUME_TIMES].astype(np.int32)),
        pa.array(cols[_decode.COL_PREPARED_TRANSACTION_OFFSET]),
        _hosts(hosts[0]),
        _hosts(hosts[1]),
        _var(pa.string(), n, offs[6], msg_ids, nm),
        _var(pa.string(), n, offs[3], special[0], n_tag, valid[0]),
        _var(pa.string(), n, offs[4], special[1], n_key, valid[1]),
        _var(pa.string(), n, offs[5], special[2], n_uq, valid[2]),
        props_col,
        _var(pa.binary(), n, offs[0], body, nb),
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
            mm, pos, size, check_crc=check_crc, max_bytes=min(batch_bytes, max(hi - pos, 1)), base_offset=base
        )
        if len(res.positions):
            k = int(np.searchsorted(res.positions, hi))  # the records that start before hi
            if k:
                yield records_batch(mm, base, res.positions[:k], res.sizes[:k], properties=properties)
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


__all__ = ["BATCH_BYTES", "SCHEMA", "records_batch", "scan_batches", "schema", "segment_batches", "spark_ddl"]
