"""Differential tests of the compiled dispatch extraction (mqstore/kernels/_dispatch.pyx,
behind ``locate_properties``, ``build_dispatch_batch`` and ``DispatchBatch.index_entries``)
against its reference models (model_dispatch.py, the numpy/Python code it replaced):
for well-formed and malformed properties strings (non-UTF-8 bytes, surrogates and
overlong forms, truncated sequences, empty names and values, separators at the ends
and doubled, repeated entries, huge key counts, delay-level records) every column and
every index entry must be equal, value for value."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.formats import message
from mqstore.formats.message import topic_names_of
from mqstore.formats.properties import locate_properties
from mqstore.store.commitlog import ScanChunk
from mqstore.store.dispatch import DispatchBatch, build_dispatch_batch
from mqstore.store.schedule import SCHEDULE_TOPIC
from tests.kernels.model_dispatch import model_build_dispatch_batch, model_index_entries, model_locate_properties
from tests.tiers import examples

CASES = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces values are made of: ASCII, spaces, separators, well-formed multi-byte UTF-8
# (2, 3 and 4 bytes: a surrogate pair in UTF-16), and byte sequences Python's strict
# decoder refuses (continuation bytes alone, overlong forms, encoded surrogates, above
# U+10FFFF, truncated sequences).
_PIECES = [
    b"a",
    b"Z",
    b"0",
    b"_",
    b"#",
    b" ",
    b"  ",
    b"\x01",
    b"\x02",
    "é".encode(),
    "中".encode(),
    "😀".encode(),
    "\uffff".encode(),
    b"\x80",
    b"\xbf",
    b"\xc0\xaf",
    b"\xc1\xbf",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",
    b"\xed\x9f\xbf",
    b"\xf0\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\xe4\xb8",
    b"\xf0\x9f\x98",
    b"\xc3",
    b"\xff",
]
values = st.lists(st.sampled_from(_PIECES), max_size=12).map(b"".join)
names = st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"TAG", b"KEYSX", b"", b"\xc3", b"K\x01"])


@st.composite
def properties(draw: st.DrawFn) -> bytes:
    """A properties string: entries ``name \\x01 value \\x02``, some malformed."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            parts.append(draw(values))  # no separator at all
        elif kind == 1:
            parts.append(draw(names))  # a name alone
        else:
            parts.append(draw(names) + b"\x01" + draw(values))
    s = b"\x02".join(parts)
    if parts and draw(st.booleans()):
        s += b"\x02"
    if draw(st.integers(0, 9)) == 0:
        s = b"\x02" + s
    return s


@st.composite
def chunks(draw: st.DrawFn) -> tuple[ScanChunk, list[int] | None]:
    """A scanned chunk as build_dispatch_batch reads it: properties strings at their
    places in one buffer, the other columns drawn freely."""
    props = draw(st.lists(properties(), max_size=25))
    n = len(props)
    buf = bytearray(draw(st.binary(max_size=5)))
    at, lens = [], []
    for p in props:
        buf += draw(st.binary(max_size=3))  # bytes between records: never read
        at.append(len(buf))
        lens.append(len(p))
        buf += p
    buf += draw(st.binary(max_size=3))
    topics = draw(
        st.lists(
            st.sampled_from(["T", "Topic_é", "中文", "t😀", SCHEDULE_TOPIC, "a#b"]), min_size=1, max_size=4, unique=True
        )
    )
    col = lambda lo, hi: np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), np.int64)  # noqa: E731
    codes = col(0, len(topics) - 1)
    sysflags = col(0, 0xF)
    fields = SimpleNamespace(
        properties_at=np.array(at, np.int64),
        properties_len=np.array(lens, np.int64),
        topics=topics,
        topic_codes=codes,
        queue_ids=col(0, 7),
        queue_offsets=col(0, 1000),
        sysflags=sysflags,
        store_timestamps=col(0, 1 << 42),
    )
    phys = np.cumsum(col(1, 100)) if n else np.zeros(0, np.int64)
    chunk = ScanChunk(phys, col(91, 500), fields, bytes(buf), 0)
    delays = draw(st.sampled_from([None, [1000, 5000, 10000]]))
    return chunk, delays


_COLUMNS = [
    f
    for f in DispatchBatch.__dataclass_fields__
    if f not in ("topics", "buffer", "topic_ids") and not f.startswith("_")
]


def assert_same_batch(got: DispatchBatch, want: DispatchBatch) -> None:
    assert got.topics == want.topics
    assert got.topic_ids is None or topic_names_of(got.topic_ids) == got.topics  # the model has no process-wide ids
    for name in _COLUMNS:
        g, w = np.asarray(getattr(got, name)), np.asarray(getattr(want, name))
        assert g.dtype == w.dtype == np.int64, name
        assert g.tolist() == w.tolist(), name
    we = model_index_entries(want)
    # build_dispatch_batch's own entries (one pass with the extraction), and those a copy
    # of the batch makes again from its columns (the entries kernel alone)
    for ge in (got.index_entries(), dataclasses.replace(got).index_entries()):
        for g, w, name in zip(ge, we, ge._fields):
            assert np.asarray(g).dtype == np.asarray(w).dtype == np.int64, name
            assert np.asarray(g).tolist() == np.asarray(w).tolist(), name


@CASES
@given(chunks())
def test_build_dispatch_batch_equals_the_model(case) -> None:
    chunk, delays = case
    want = model_build_dispatch_batch(chunk, delays)
    assert_same_batch(build_dispatch_batch(chunk, delays), want)
    # with the topics' process-wide ids, as a scan gives them (per-topic values kept by id)
    fields = SimpleNamespace(**vars(chunk.fields), topic_ids=_process_ids(chunk.fields.topics))
    got = build_dispatch_batch(dataclasses.replace(chunk, fields=fields), delays)
    assert got.topic_ids is not None
    assert_same_batch(got, want)


def _process_ids(topics: list[str]) -> np.ndarray:
    """The process-wide ids (formats.message) of these topics, as scan_records gives them."""
    raw = [t.encode() for t in topics]
    at = np.cumsum([0] + [len(r) for r in raw])[:-1].astype(np.int64)
    codes, ids = np.empty(len(raw), np.int64), np.empty(len(raw), np.int64)
    with message._TOPIC_IDS_LOCK:
        known = len(message._TOPIC_IDS)
        k = message._TOPIC_IDS.codes(
            b"".join(raw) + bytes(8), at, np.array([len(r) for r in raw], np.int64), codes, ids
        )
        message._name_new_topics(known)
    return ids[:k][codes]


@CASES
@given(chunks(), st.lists(names.filter(bool), max_size=5))
def test_locate_properties_equals_the_model(case, wanted) -> None:
    chunk, _ = case
    f = chunk.fields
    got = locate_properties(chunk.buffer, f.properties_at, f.properties_len, wanted)
    want = model_locate_properties(chunk.buffer, f.properties_at, f.properties_len, wanted)
    assert [(s.tolist(), e.tolist()) for s, e in got] == [(s.tolist(), e.tolist()) for s, e in want]


def _chunk_of(props: list[bytes], topic: str = "T", sysflag: int = 0) -> ScanChunk:
    buf, at = b"", []
    for p in props:
        at.append(len(buf))
        buf += p
    n = len(props)
    fields = SimpleNamespace(
        properties_at=np.array(at, np.int64),
        properties_len=np.array([len(p) for p in props], np.int64),
        topics=[topic],
        topic_codes=np.zeros(n, np.int64),
        queue_ids=np.zeros(n, np.int64),
        queue_offsets=np.arange(n, dtype=np.int64),
        sysflags=np.full(n, sysflag, np.int64),
        store_timestamps=np.arange(n, dtype=np.int64) + 1000,
    )
    return ScanChunk(np.arange(n, dtype=np.int64) * 200, np.full(n, 200, np.int64), fields, buf, 0)


@pytest.mark.parametrize(
    "keys",
    [
        b" ",
        b"  a  ",
        b" a",
        b"a ",
        b"a" * 30000,
        b"k " * 16000,  # 16,000 keys in one record
        b" " * 32000,
        "é 中 😀".encode(),
        b"\xff \x80 ok \xed\xa0\x80",
    ],
)
def test_keys_edge_cases_equal_the_model(keys: bytes) -> None:
    chunk = _chunk_of([b"KEYS\x01" + keys + b"\x02UNIQ_KEY\x01U\x02", b"KEYS\x01" + keys])
    assert_same_batch(build_dispatch_batch(chunk), model_build_dispatch_batch(chunk))


def test_many_records_many_keys_equal_the_model() -> None:
    from mqstore.store import dispatch

    dispatch._SCRATCH.__init__()  # small entry arrays: the pass stops, they grow, it goes on (several times)
    rng = np.random.default_rng(3)
    props = []
    for i in range(5000):
        keys = b" ".join(b"k%d" % k for k in rng.integers(0, 1 << 40, int(rng.integers(0, 40))))
        props.append(b"TAGS\x01Tag%d\x02KEYS\x01%s\x02UNIQ_KEY\x01%032X\x02" % (i % 16, keys, i))
    for sysflag in (0, 0x4, 0x8, 0xC):
        chunk = _chunk_of(props, "BenchTopic0", sysflag)
        assert_same_batch(build_dispatch_batch(chunk), model_build_dispatch_batch(chunk))


def test_properties_outside_the_buffer_are_refused() -> None:
    with pytest.raises(ValueError, match="outside the buffer"):
        locate_properties(b"TAGS\x01a", np.array([1]), np.array([7]), [b"TAGS"])
    chunk = _chunk_of([b"TAGS\x01a"])
    chunk.fields.properties_len[0] = 99
    with pytest.raises(ValueError, match="outside the buffer"):
        build_dispatch_batch(chunk)
