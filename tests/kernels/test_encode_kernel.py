"""Differential tests of the compiled append encoder (mqstore/kernels/_encode.pyx,
behind ``store.record_batch.BatchEncoder`` and ``formats.PreparedRecords``) against its
reference model (model_encode.py, the numpy encoder it replaced): for any batch (V1
and V2 topics, IPv4 and IPv6 hosts mixed, empty bodies, absent or empty tags and keys,
given and generated UNIQ_KEYs, many user properties naming TAGS/KEYS/UNIQ_KEY too,
non-ASCII text, separators, wrong types, sizes over the limits) both must produce the
same records byte for byte, or raise the same error. Bodies given in one buffer
(``messages.Bodies``, read in place by the kernel) must give exactly the records, or
the error, the model gives for the same bodies as a list."""

from __future__ import annotations

import dataclasses
import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mqstore.errors import InvalidMessageError
from mqstore.formats import Host, PreparedRecords, encode_host
from mqstore.formats.message import topic_field
from mqstore.formats.msgid import UniqKeyGenerator, build_offset_msg_id, offset_msg_id_prefix
from mqstore.kernels import _encode
from mqstore.store.config import StoreConfig
from mqstore.store.messages import Bodies, MessageBatch, Texts
from mqstore.store.record_batch import BatchEncoder
from tests.kernels.model_encode import BatchEncoder as ModelBatchEncoder
from tests.kernels.model_encode import PreparedRecords as ModelPreparedRecords
from tests.kernels.model_encode import model_records
from tests.tiers import examples
from tests.unit.test_formats_properties import INT32, INT64, any_topics, hosts, sysflags

CASES = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


class FixedClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return 0.0


def encoders(store_host: Host, now_ms: int, counter: int, **cfg) -> tuple[BatchEncoder, ModelBatchEncoder]:
    config = StoreConfig(store_host=store_host, **cfg)
    out = []
    for cls in (BatchEncoder, ModelBatchEncoder):
        enc = cls(config, FixedClock(now_ms))
        enc._uniq = UniqKeyGenerator(store_host, pid=4242, loader_hash=0xABCDEF01)
        enc._uniq._counter = counter
        out.append(enc)
    return out[0], out[1]


# Text as users send it: any UTF-8 (NUL included), sometimes a separator.
text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
clean_text = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=12)
maybe_text = st.one_of(st.none(), st.just(""), clean_text, clean_text, clean_text, text)
odd_values = st.sampled_from([5, 0, b"x", b""])  # not str: refused when truthy, absent when falsy
prop_names = st.one_of(clean_text.filter(bool), st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a"]), text)
prop_values = st.one_of(st.none(), clean_text, text)
user_props = st.one_of(st.none(), st.just({}), st.dictionaries(prop_names, prop_values, max_size=6))
many_props = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=8), clean_text.filter(bool), max_size=60)
bodies = st.one_of(st.binary(max_size=300), st.just(b""), st.binary(min_size=1000, max_size=3000))


@st.composite
def batches(draw: st.DrawFn) -> MessageBatch:
    n = draw(st.integers(1, 12))

    def column(values, scalar_ok: bool = True):
        if scalar_ok and draw(st.booleans()):
            return draw(values)
        return draw(st.lists(values, min_size=n, max_size=n))

    topics = column(any_topics)
    kinds = draw(st.sampled_from(["bytes", "bytes", "bytes", "bytearray", "memoryview"]))
    raw_bodies = draw(st.lists(bodies, min_size=n, max_size=n))
    body_col = {
        "bytes": list,
        "bytearray": lambda bs: [bytearray(b) for b in bs],
        "memoryview": lambda bs: [memoryview(b) for b in bs],
    }[kinds](raw_bodies)
    tags = column(st.one_of(maybe_text, odd_values) if draw(st.integers(0, 9)) == 0 else maybe_text)
    keys = column(st.one_of(maybe_text, odd_values) if draw(st.integers(0, 9)) == 0 else maybe_text)
    unique_keys = None
    if draw(st.integers(0, 3)) == 0:
        unique_keys = draw(st.lists(st.one_of(st.none(), clean_text, text), min_size=n, max_size=n))
    properties = None
    choice = draw(st.integers(0, 4))
    if choice == 1:
        properties = draw(user_props)
    elif choice == 2:
        properties = draw(st.lists(st.one_of(user_props, many_props), min_size=n, max_size=n))
    born_hosts = None
    choice = draw(st.integers(0, 2))
    if choice == 1:
        born_hosts = draw(hosts)
    elif choice == 2:
        born_hosts = draw(st.lists(hosts, min_size=n, max_size=n))
    return MessageBatch(
        topics=topics,
        bodies=body_col,
        queue_ids=column(st.integers(0, 7)),
        tags=tags,
        keys=keys,
        unique_keys=unique_keys,
        properties=properties,
        flags=column(INT32),
        sysflags=column(sysflags),
        born_timestamps=column(INT64) if draw(st.booleans()) else None,
        born_hosts=born_hosts,
        reconsume_times=column(INT32),
        prepared_transaction_offsets=column(INT64),
    )


@st.composite
def columnar(draw: st.DrawFn, batch: MessageBatch) -> MessageBatch:
    """``batch`` with its bodies in one buffer: bytes, bytearray, memoryview or numpy
    (rows when all bodies have one length), maybe with bytes before and after them."""
    raw = [bytes(b) for b in batch.bodies]
    lead = draw(st.binary(max_size=9)) if draw(st.booleans()) else b""
    tail = draw(st.binary(max_size=9)) if draw(st.booleans()) else b""
    joined = lead + b"".join(raw) + tail
    offsets = np.zeros(len(raw) + 1, np.int64)
    offsets[0] = len(lead)
    offsets[1:] = len(lead) + np.cumsum([len(b) for b in raw])
    kind = draw(st.sampled_from(["bytes", "bytearray", "memoryview", "numpy", "rows"]))
    if kind == "rows" and not lead and not tail and len({len(b) for b in raw}) == 1:
        data = np.frombuffer(joined, np.uint8).reshape(len(raw), -1).copy() if joined else np.zeros((len(raw), 0))
        data = data.astype(np.uint8)
    elif kind in ("numpy", "rows"):
        data = np.frombuffer(joined, np.uint8).copy()
    else:
        data = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview}[kind](joined)
    bodies = Bodies(data, offsets)
    assert list(bodies) == raw
    return dataclasses.replace(batch, bodies=bodies)


def outcome(enc, batch):
    try:
        return enc.prepare(batch), None
    except Exception as e:  # noqa: BLE001 - the error itself is compared
        return None, e


def assert_same_error(got: BaseException, want: BaseException) -> None:
    assert type(got) is type(want), (got, want)
    if isinstance(want, InvalidMessageError) and ("must be strings" in str(want) or "must be bytes" in str(want)):
        assert str(got).split(":")[0] == str(want).split(":")[0]  # Python's own TypeError text may differ
    elif not isinstance(want, UnicodeError):
        assert str(got) == str(want)


def check(
    batch: MessageBatch,
    store_host: Host,
    now_ms: int,
    counter: int,
    seed: int,
    model_batch: MessageBatch | None = None,
    **cfg,
) -> None:
    """The kernel's prepare of ``batch`` against the model's of ``model_batch`` (the
    same batch unless given: the list a columnar batch was made from)."""
    enc, model = encoders(store_host, now_ms, counter, **cfg)
    got, got_err = outcome(enc, batch)
    want, want_err = outcome(model, batch if model_batch is None else model_batch)
    if want_err is not None or got_err is not None:
        assert got_err is not None and want_err is not None, (got_err, want_err)
        assert_same_error(got_err, want_err)
        return
    assert got.n == want.n
    assert got.topics == want.topics
    assert got.topic_codes.tolist() == want.topic_codes.tolist()
    assert got.queue_ids.tolist() == want.queue_ids.tolist()
    assert (got.advances is None) == (want.advances is None)
    if want.advances is not None:
        assert got.advances.tolist() == want.advances.tolist()
    assert got.unique_keys == want.unique_keys
    assert got.sizes.dtype == np.int64 and got.sizes.tolist() == want.sizes.tolist()
    rng = np.random.default_rng(seed)
    n = want.n
    physical = int(rng.integers(0, 1 << 40)) + np.concatenate([[0], np.cumsum(want.sizes)[:-1]]).astype(np.int64)
    queue_ids = rng.integers(0, 1 << 16, n).astype(np.int64)
    queue_offsets = rng.integers(-(1 << 62), 1 << 62, n).astype(np.int64)
    store_ts = int(rng.integers(0, 1 << 62))
    expected = model_records(want, physical, queue_ids, queue_offsets, store_ts)
    got.records.patch(0, n, queue_ids, queue_offsets, physical, store_ts)
    a, b = got.records.span(0, n)
    assert (a, b) == (0, len(expected))
    assert bytes(got.records.data[a:b]) == expected
    enc.recycle(got)


@CASES
@given(batches(), hosts, st.integers(0, 1 << 45), st.integers(0, 0xFFFF), st.integers(0, 1 << 32))
def test_prepare_equals_the_model(batch: MessageBatch, store_host: Host, now_ms: int, counter: int, seed: int) -> None:
    check(batch, store_host, now_ms, counter, seed)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), hosts, st.integers(0, 1 << 32))
def test_limits_are_refused_as_the_model_refuses_them(batch: MessageBatch, store_host: Host, seed: int) -> None:
    check(batch, store_host, 1_700_000_000_000, 0, seed, max_message_bytes=200)


@CASES
@given(st.data(), batches(), hosts, st.integers(0, 1 << 45), st.integers(0, 0xFFFF), st.integers(0, 1 << 32))
def test_columnar_bodies_give_the_records_of_the_list(
    data: st.DataObject, batch: MessageBatch, store_host: Host, now_ms: int, counter: int, seed: int
) -> None:
    check(data.draw(columnar(batch)), store_host, now_ms, counter, seed, model_batch=batch)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), batches(), hosts, st.integers(0, 1 << 32))
def test_columnar_bodies_over_the_limits_are_refused_as_the_list(
    data: st.DataObject, batch: MessageBatch, store_host: Host, seed: int
) -> None:
    columns = data.draw(columnar(batch))
    check(columns, store_host, 1_700_000_000_000, 0, seed, model_batch=batch, max_message_bytes=200)


def packed_texts(draw: st.DrawFn, values) -> Texts | None:
    """A list of str / None as a Texts, its bytes maybe after a lead; None if the list
    holds other values (or text UTF-8 cannot carry)."""
    if not isinstance(values, list) or not all(v is None or isinstance(v, str) for v in values):
        return None
    try:
        raw = [v.encode() if v else b"" for v in values]
    except UnicodeEncodeError:
        return None
    lead = draw(st.binary(max_size=5))
    offsets = np.cumsum([len(lead), *map(len, raw)])
    return Texts(lead + b"".join(raw), offsets)


@CASES
@given(st.data(), batches(), hosts, st.integers(0, 1 << 32))
def test_text_columns_give_the_records_of_the_lists(
    data: st.DataObject, batch: MessageBatch, store_host: Host, seed: int
) -> None:
    tags, keys = packed_texts(data.draw, batch.tags), packed_texts(data.draw, batch.keys)
    assume(tags is not None or keys is not None)
    columns = dataclasses.replace(
        batch, tags=batch.tags if tags is None else tags, keys=batch.keys if keys is None else keys
    )
    check(columns, store_host, 1_700_000_000_000, 0, seed, model_batch=batch)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"ok\xff", "keys of message 1 is not well-formed UTF-8"),
        (b"ok\xed\xa0\x80", "keys of message 1 is not well-formed UTF-8"),  # a surrogate
        (b"oka\x02", "keys must not contain the property separators"),
    ],
)
def test_text_columns_that_are_not_clean_utf8_are_refused(data: bytes, match: str) -> None:
    enc, _ = encoders(Host("127.0.0.1", 10911), 1_700_000_000_000, 0)
    batch = MessageBatch(topics="T", bodies=[b"a", b"b"], keys=Texts(data, [0, 2, len(data)]))
    with pytest.raises(InvalidMessageError, match=match):
        enc.prepare(batch)


def test_buffers_are_reused_and_records_stay_equal() -> None:
    """The same encoder, batch after batch through its pool (a smaller batch after a
    bigger one reuses the bigger buffer: stale bytes past its end must not matter)."""
    enc, model = encoders(Host("10.0.0.1", 10911), 1_700_000_000_000, 65530)
    for i, n in enumerate([50, 3, 1000, 1, 20]):
        batch = MessageBatch(
            topics="T",
            bodies=[os.urandom(i * 7 % 200) for _ in range(n)],
            queue_ids=1,
            tags=[f"tag{j}" for j in range(n)],
            keys="k1 k2",
        )
        got, want = enc.prepare(batch), model.prepare(batch)
        phys = np.concatenate([[0], np.cumsum(want.sizes)[:-1]]).astype(np.int64)
        qids, qoffs = np.full(n, 1, np.int64), np.arange(n, dtype=np.int64)
        got.records.patch(0, n, qids, qoffs, phys, 5)
        a, b = got.records.span(0, n)
        assert bytes(got.records.data[a:b]) == model_records(want, phys, qids, qoffs, 5)
        enc.recycle(got)
    assert len(enc._pool) == 1


@CASES
@given(
    st.lists(st.tuples(any_topics, st.binary(max_size=200), st.binary(max_size=80), hosts), min_size=1, max_size=10),
    hosts,
    st.integers(0, 1 << 32),
    st.booleans(),
)
def test_prepared_records_equal_the_model(recs, store_host: Host, seed: int, hold: bool) -> None:
    """PreparedRecords (properties given whole), rendered in two slices, one host
    family per model instance (the model could not mix them)."""
    rng = np.random.default_rng(seed)
    n = len(recs)
    cols = {
        "flags": rng.integers(-(1 << 31), 1 << 31, n),
        "sysflags": rng.integers(0, 0x800, n) & ~0xC,
        "born_timestamps": rng.integers(-(1 << 62), 1 << 62, n),
        "reconsume_times": rng.integers(-(1 << 31), 1 << 31, n),
        "prepared_transaction_offsets": rng.integers(-(1 << 62), 1 << 62, n),
    }
    kw = dict(
        topics=[topic_field(r[0]) for r in recs],
        bodies=[r[1] for r in recs],
        properties=[r[2] for r in recs],
        born_hosts=[encode_host(r[3]) for r in recs],
        store_host=encode_host(store_host),
        **cols,
    )
    got = PreparedRecords(**kw)
    phys = rng.integers(0, 1 << 50, n)
    qids, qoffs, ts = rng.integers(0, 1 << 16, n), rng.integers(0, 1 << 62, n), int(rng.integers(0, 1 << 62))
    mid = int(rng.integers(0, n + 1))
    out = b"".join(
        got.render(a, b, physical_offsets=phys[a:b], queue_ids=qids[a:b], queue_offsets=qoffs[a:b], store_timestamp=ts)
        for a, b in ((0, mid), (mid, n))
    )
    want = []
    for i in range(n):
        one = {k: (v[i : i + 1] if isinstance(v, (list, np.ndarray)) else v) for k, v in kw.items()}
        m = ModelPreparedRecords(**one)
        want.append(
            m.render(
                0,
                1,
                physical_offsets=phys[i : i + 1],
                queue_ids=qids[i : i + 1],
                queue_offsets=qoffs[i : i + 1],
                store_timestamp=ts,
            )
        )
    assert out == b"".join(want)
    assert got.sizes.tolist() == [len(w) for w in want]
    if hold:
        held = got.render(
            0, n, physical_offsets=phys, queue_ids=qids, queue_offsets=qoffs, store_timestamp=ts, hold_first_size=True
        )
        assert held == bytes(4) + out[4:]


@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 65, 127, 128, 129, 1000, 1024, 4096, 65537])
def test_crc_equals_zlib(size: int) -> None:
    data = os.urandom(size)
    for start in (0, 1, 0xFFFFFFFF, 0x12345678):
        assert _encode.crc32(data, start) == zlib.crc32(data, start)
    for off in range(1, 9):  # unaligned starts
        assert _encode.crc32(memoryview(data)[off:]) == zlib.crc32(data[off:])


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=5000))
def test_crc_equals_zlib_on_any_bytes(data: bytes) -> None:
    assert _encode.crc32(data) == zlib.crc32(data)


@pytest.mark.parametrize(
    "batch",
    [
        MessageBatch(topics="T", bodies=[b"a", b"b"], tags=["x", "y\x01"]),
        MessageBatch(topics="T", bodies=[b"a", b"b"], keys=["k\x02", "y"], tags=["x", "y\x01"]),
        MessageBatch(topics="T", bodies=[b"a"], unique_keys=["u\x02"]),
        MessageBatch(topics="T", bodies=[b"a", b"b"], properties=[None, {"a\x01": "b"}]),
        MessageBatch(topics="T", bodies=[b"a", b"b"], properties={"a": "b\x02"}),
        MessageBatch(topics="T", bodies=[b"a", b"b"], tags=["x", 5]),
        MessageBatch(topics="T", bodies=[b"a", b"b"], properties=[{"a": 5}, None]),
        MessageBatch(topics="T", bodies=[b"a", "b"]),
        MessageBatch(topics="T", bodies=[b"a", 7]),
        MessageBatch(topics="T", bodies=[b"a"], properties={"p": "v" * 40000}),
        MessageBatch(topics="T", bodies=[b"a"], tags="t\x00a", keys="k\x00"),  # NUL is allowed
        MessageBatch(topics="%RETRY%" + "g" * 200, bodies=[b""], tags="", keys=""),
        MessageBatch(topics="T", bodies=[b"a", b"b"], born_hosts=[Host("::1", 1), Host("10.1.2.3", 2)]),
        MessageBatch(topics="T", bodies=[b"a"], properties={"TAGS": "user", "KEYS": None, "UNIQ_KEY": "x"}, keys="k"),
    ],
)
def test_named_cases_equal_the_model(batch: MessageBatch) -> None:
    check(batch, Host("fe80::1", 10911), 1_700_000_000_000, 7, 1)
    if all(isinstance(b, bytes) for b in batch.bodies):
        columns = dataclasses.replace(batch, bodies=Bodies.of(batch.bodies))
        check(columns, Host("fe80::1", 10911), 1_700_000_000_000, 7, 1, model_batch=batch)


def test_bodies_that_are_not_bytes_are_refused_as_the_list_refuses_them() -> None:
    """A Bodies cannot hold anything but bytes: making one of a str refuses it with
    the message the encoder gives a list holding one."""
    _, model = encoders(Host("10.0.0.1", 1), 1_700_000_000_000, 0)
    with pytest.raises(InvalidMessageError) as want:
        model.prepare(MessageBatch(topics="T", bodies=[b"a", "b"]))
    with pytest.raises(InvalidMessageError) as got:
        Bodies.of([b"a", "b"])
    assert str(got.value).split(":")[0] == str(want.value).split(":")[0]


@settings(max_examples=examples(100), deadline=None)
@given(hosts, st.lists(INT64, max_size=50))
def test_offset_msg_ids_equal_the_formula(host: Host, offsets: list[int]) -> None:
    got = _encode.offset_msg_ids(offset_msg_id_prefix(host), np.array(offsets, np.int64))
    assert got == [build_offset_msg_id(host, o) for o in offsets]


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.sampled_from(["T0", "T1", "%RETRY%g", "é", ""]) | st.text(max_size=5), max_size=200))
def test_distinct_topics_equal_a_dict(values: list[str]) -> None:
    """The batch's topics as a list of names: distinct ones in order of first
    appearance and each message's number, as ``dict.setdefault`` numbers them."""
    from mqstore.kernels._encode import distinct

    index: dict[str, int] = {}
    want = [index.setdefault(v, len(index)) for v in values]
    codes = np.empty(len(values), np.int64)
    assert distinct(values, codes) == list(index)
    assert codes.tolist() == want
