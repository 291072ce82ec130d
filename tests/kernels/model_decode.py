"""Reference models of the decode kernel (mqstore/kernels/_decode.pyx): the Python
and numpy decoders it replaced, kept here for the differential tests
(tests/kernels/test_decode_kernel.py).

* :func:`model_decode_records`: the pull's decode, one ``decode_record`` per record
  (the Python decoder of formats/message.py);
* :func:`model_records_batch`: the Spark data source's Arrow batch of validated
  records, gathered with numpy index arithmetic and pyarrow compute (mqstore/jobs/columns.py
  as it was).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mqstore.formats.message import MessageRecord, decode_record, record_fields, record_heads
from mqstore.formats.msgid import decode_host, offset_msg_id_prefix
from mqstore.jobs.columns import schema


def model_decode_record(buf, pos: int = 0, *, check_crc: bool = True) -> MessageRecord:
    """One record by formats.message.decode_record: the Python decoder, which production
    keeps for one record and for saying what is wrong with a record the kernel refuses
    (it uses no kernel, so it can be the model)."""
    return decode_record(buf, pos, check_crc=check_crc)


def model_decode_records(buf, positions, *, check_crc: bool = True) -> list[MessageRecord]:
    return [model_decode_record(buf, p, check_crc=check_crc) for p in np.asarray(positions).tolist()]


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


def model_records_batch(
    buf, base: int, positions: np.ndarray, sizes: np.ndarray, fields=None, *, properties: str = "map"
) -> pa.RecordBatch:
    """One record batch (``schema(properties)``) for validated records at
    ``positions`` of ``buf`` (a segment starting at commitlog offset ``base``);
    ``fields`` from the scan."""
    n = len(positions)
    fields = record_fields(buf, positions) if fields is None else fields
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
        recs = [model_decode_record(buf, p, check_crc=False) for p in positions.tolist()]
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


__all__ = ["model_decode_record", "model_decode_records", "model_records_batch"]
