"""mqstore.kernels._topics.TopicIds against its reference model (model_topics.py): any
sequence of adds, flag changes and lookups (names repeated as the same object or as
equal copies, unknown names, non-str values) gives the same ids, flags and misses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.message import topic_field
from mqstore.formats.names import topic_error
from mqstore.kernels._topics import TopicIds, legal_fields
from tests.kernels.model_topics import ModelTopicIds
from tests.tiers import examples

NAMES = ["A", "B", "%RETRY%g", "x" * 200, "", "T\u00e9"]
name = st.sampled_from(NAMES)
op = st.one_of(
    st.tuples(st.just("add"), name),
    st.tuples(st.just("set"), name, st.integers(0, 255)),
    st.tuples(st.just("clear"), name, st.integers(0, 255)),
    st.tuples(st.just("field"), name, st.binary(max_size=4)),
    st.tuples(
        st.just("lookup"),
        st.lists(name | st.just("Unknown") | st.just(7) | st.just(None), max_size=40),
        st.integers(0, 3),
        st.booleans(),
    ),
)

METHODS = {"set": "set_flags", "clear": "clear_flags", "field": "set_field"}


@settings(max_examples=examples(300), deadline=None)
@given(ops=st.lists(op, max_size=30))
def test_topic_ids_equal_the_model(ops) -> None:
    got, want = TopicIds(), ModelTopicIds()
    for o in ops:
        if o[0] == "add":
            assert got.add(o[1]) == want.add(o[1])
        elif o[0] == "lookup":
            _, values, need, copies = o
            if copies:  # equal names that are other objects: no shortcut by identity
                values = ["".join(list(v)) if isinstance(v, str) else v for v in values]
            a, b = np.empty(len(values), np.int64), np.empty(len(values), np.int64)
            ca, cb = np.zeros(1, np.uint8), np.zeros(1, np.uint8)
            assert got.lookup(values, a, need, ca) == want.lookup(values, b, need, cb)
            assert a.tolist() == b.tolist() and ca[0] == cb[0]
            for v in set(x for x in values if isinstance(x, str)):
                assert got.find(v, need) == want.find(v, need)
        else:
            tid = want.get(o[1])
            if tid < 0:  # an id not given out
                with pytest.raises(IndexError):
                    getattr(got, METHODS[o[0]])(len(got), o[2])
                continue
            getattr(got, METHODS[o[0]])(tid, o[2])
            getattr(want, METHODS[o[0]])(tid, o[2])
        assert len(got) == len(want)
        assert got.names == want.names and got.fields == want.fields
        assert [got.flags_of(i) for i in range(len(got))] == want.flags


def test_a_topic_field_is_set_once_and_never_replaced() -> None:
    """Two producers admitting the same new topic each bring its field; the second
    must not replace the first: a batch being encoded points into it (replacing it
    freed those bytes and wrote garbage topics into acknowledged records)."""
    ids = TopicIds()
    first, again = topic_field("T"), bytes(bytearray(topic_field("T")))
    ids.add_all(["T"], [first], 1)
    ids.add_all(["T"], [again], 1)
    ids.set_field(0, again)
    assert ids.fields[0] is first


def test_many_names_grow_the_flags() -> None:
    ids = TopicIds()
    names = [f"Topic{i}" for i in range(20_000)]
    for i, n in enumerate(names):
        assert ids.add(n) == i
        ids.set_flags(i, 1 + (i % 2))
    out = np.empty(len(names), np.int64)
    assert ids.lookup(names, out, 2) == 10_000
    assert out[1::2].tolist() == list(range(1, 20_000, 2)) and (out[::2] == -1).all()


legal_chars = st.sampled_from("%|_-aZz09")
any_name = st.one_of(
    st.text(legal_chars, max_size=260),
    st.builds(
        lambda p, t: p + t, st.sampled_from(["%RETRY%", "%DLQ%", "%RETRY", "%dlq%"]), st.text(legal_chars, max_size=260)
    ),
    st.text(max_size=20),  # any character: non-ASCII, separators, NUL
    st.just(""),
)


@settings(max_examples=examples(500), deadline=None)
@given(names=st.lists(any_name | st.just(None) | st.just(b"T"), max_size=8))
def test_legal_fields_equal_topic_error_and_topic_field(names) -> None:
    """legal_fields gives a name's topic field exactly when formats.names finds it legal."""
    want = [topic_field(t) if isinstance(t, str) and topic_error(t) is None else None for t in names]
    assert legal_fields(names) == want
