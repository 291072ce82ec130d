"""Differential tests of the compiled record decode (mqstore/kernels/_decode.pyx, behind
``formats.message.decode_records``, ``CommitLog.read_many`` and the data source's
``jobs.columns.records_batch``) against its reference models (model_decode.py, the
Python decoder and the numpy/pyarrow batch builder it replaced): the same records or
the same error for valid and malformed buffers (truncated records, bad magic, wrong
lengths, bad CRC, text that is not UTF-8), and equal Arrow batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.errors import DecodeError
from mqstore.formats.message import decode_records
from mqstore.jobs.columns import records_batch
from tests.kernels.model_decode import model_decode_records, model_records_batch
from tests.kernels.test_scan_kernel import layout, mixed_batch, mutated
from tests.tiers import examples
from tests.unit.test_formats_properties import Batch, batches

CASES = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(fn, *args, **kw):
    """What ``fn`` returns, or the message of the DecodeError it raises."""
    try:
        return fn(*args, **kw)
    except DecodeError as e:
        return ("DecodeError", str(e))


@CASES
@given(mutated(), st.data())
def test_decode_records_equals_model(case: tuple[bytes, int, Batch], data: st.DataObject) -> None:
    buf, lead, b = case
    starts = [lead + p for p in b.rel_positions]
    positions = data.draw(
        st.one_of(
            st.just(starts),
            st.lists(st.sampled_from(starts) | st.integers(-2, len(buf) + 2), max_size=12),
        ),
        "positions",
    )
    check_crc = data.draw(st.booleans(), "check_crc")
    view = data.draw(st.sampled_from([bytes, bytearray, memoryview]), "buffer type")
    pos = np.array(positions, np.int64)
    want = outcome(model_decode_records, view(buf), pos, check_crc=check_crc)
    got = outcome(decode_records, view(buf), pos, check_crc=check_crc)
    assert got == want


def test_every_field_of_every_record_off_by_a_little() -> None:
    """Each length, size and magic field of each record of a mixed batch (V1 and V2,
    IPv4 and IPv6) changed to nearby and extreme values: the same records or error."""
    b = mixed_batch()
    for at in b.rel_positions:
        f = layout(b.data, at)
        for name, width in [("total_size", 4), ("magic", 4), ("body_len", 4), ("sysflag", 4)] + [
            ("topic_len", 1 if f["v1"] else 2),
            ("props_len", 2),
        ]:
            pos = f[name]
            old = int.from_bytes(b.data[pos : pos + width], "big", signed=True)
            lo, hi = -(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1
            for new in {old - 2, old - 1, old + 1, old + 2, lo, hi, 0}:
                if new == old or not lo <= new <= hi:
                    continue
                buf = bytearray(b.data)
                buf[pos : pos + width] = new.to_bytes(width, "big", signed=True)
                positions = np.array(b.rel_positions, np.int64)
                for check_crc in (False, True):
                    want = outcome(model_decode_records, bytes(buf), positions, check_crc=check_crc)
                    assert outcome(decode_records, bytes(buf), positions, check_crc=check_crc) == want


def not_utf8(b: Batch, seed: int) -> bytes:
    """The batch with bytes of some topics and properties made invalid UTF-8 (0xFF, a
    lone continuation byte, a cut sequence); lengths and CRCs stay valid."""
    buf = bytearray(b.data)
    rng = np.random.default_rng(seed)
    for at in b.rel_positions:
        f = layout(bytes(buf), at)
        tlb = 1 if f["v1"] else 2
        spans = [(f["topic_len"] + tlb, f["props_len"]), (f["props_len"] + 2, f["end"])]
        for lo, hi in spans:
            if hi > lo and rng.random() < 0.6:
                buf[int(rng.integers(lo, hi))] = int(rng.choice([0xFF, 0x80, 0xC3, 0xE2, 0xF0, 0xED]))
    return bytes(buf)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(["map", "string"]), st.integers(0, 2**32 - 1), st.booleans())
def test_records_batch_equals_model(b: Batch, properties: str, seed: int, spoil: bool) -> None:
    data = not_utf8(b, seed) if spoil else b.data
    buf = data + bytes(64)
    positions = np.array(b.rel_positions, np.int64)
    sizes = np.array(b.sizes, np.int64)
    want = model_records_batch(buf, b.base, positions, sizes, properties=properties)
    got = records_batch(buf, b.base, positions, sizes, properties=properties)
    assert got.schema == want.schema
    for name in want.schema.names:
        assert got.column(name).equals(want.column(name)), name
    if not spoil:  # and the pull's records carry the same values
        recs = decode_records(buf, positions)
        assert got.column("body").to_pylist() == [r.body for r in recs]
        assert got.column("msg_id").to_pylist() == [r.msg_id for r in recs]


def test_records_batch_of_a_mixed_batch_equals_model() -> None:
    b = mixed_batch()
    positions = np.array(b.rel_positions, np.int64)
    sizes = np.array(b.sizes, np.int64)
    for properties in ("map", "string"):
        for data in (b.data, not_utf8(b, 7)):
            want = model_records_batch(data, b.base, positions, sizes, properties=properties)
            got = records_batch(data, b.base, positions, sizes, properties=properties)
            assert got.equals(want)


def test_records_batch_of_a_record_it_cannot_read_says_why() -> None:
    b = mixed_batch()
    buf = bytearray(b.data)
    buf[b.rel_positions[2] + 4] ^= 1  # a bad magic
    with pytest.raises(DecodeError, match="unknown magic"):
        records_batch(bytes(buf), b.base, np.array(b.rel_positions, np.int64), np.array(b.sizes, np.int64))


def test_an_empty_batch() -> None:
    assert decode_records(b"", np.array([], np.int64)) == []
    empty = records_batch(b"", 0, np.array([], np.int64), np.array([], np.int64))
    assert empty.num_rows == 0 and isinstance(empty, pa.RecordBatch)
