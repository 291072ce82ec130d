"""Batch helpers the dispatcher uses: vectorised Java hashes, one-property lookups."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.javahash import java_string_hash, java_string_hashes, tags_code, tags_codes
from mqstore.formats.properties import find_property, parse_properties, serialize_properties
from tests.tiers import examples

texts = st.text(st.characters(codec="utf-8"), max_size=40) | st.text(max_size=12)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(texts, max_size=30))
def test_vectorised_hash_equals_scalar(strings: list[str]) -> None:
    assert java_string_hashes(strings).tolist() == [java_string_hash(s) for s in strings]


def test_golden_hashes_in_one_call(golden: dict) -> None:
    vecs = golden["hashes"]
    assert java_string_hashes([v["s"] for v in vecs]).tolist() == [v["java_hashCode"] for v in vecs]
    assert tags_codes([v["s"] for v in vecs] + [None]).tolist() == [v["tagsCode"] for v in vecs] + [0]
    assert tags_codes(["TagA", None, ""]).tolist() == [tags_code("TagA"), 0, 0]


names = st.text(st.characters(exclude_characters="\x00\x01\x02", codec="utf-8"), min_size=1, max_size=8)
values = st.text(st.characters(exclude_characters="\x00\x02", codec="utf-8"), min_size=0, max_size=12)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(names, values), max_size=8), names)
def test_find_property_agrees_with_the_full_parse(pairs: list[tuple[str, str]], probe: str) -> None:
    raw = serialize_properties(pairs)
    parsed = parse_properties(raw)
    data = raw.encode()
    for name in {n for n, _ in pairs} | {probe}:
        got = find_property(data, name.encode())
        want = parsed.get(name)
        assert (got.decode() if got is not None else None) == want, (raw, name)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(names | st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY"]), values), max_size=6),
            st.binary(max_size=20),
        ),
        max_size=12,
    )
)
def test_locate_properties_agrees_with_the_full_parse(records) -> None:
    """Many properties strings, separated by arbitrary bytes (as bodies separate them)."""
    import numpy as np

    from mqstore.formats.properties import locate_properties

    buf, at, lens = b"", [], []
    for pairs, filler in records:
        raw = serialize_properties(pairs).encode()
        buf += filler
        at.append(len(buf))
        lens.append(len(raw))
        buf += raw
    wanted = [b"TAGS", b"KEYS", b"UNIQ_KEY"]
    got = locate_properties(buf, np.array(at, np.int64), np.array(lens, np.int64), wanted)
    for i, (pairs, _) in enumerate(records):
        parsed = parse_properties(serialize_properties(pairs))
        for name, (starts, ends) in zip(wanted, got):
            value = buf[starts[i] : ends[i]].decode() if starts[i] >= 0 else None
            assert value == parsed.get(name.decode()), (pairs, name)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(texts, texts), max_size=20))
def test_hash_of_byte_ranges_with_prefix(pairs: list[tuple[str, str]]) -> None:
    import numpy as np

    from mqstore.formats.javahash import java_hash_of_ranges

    buf, starts, ends = b"", [], []
    for _, text in pairs:
        raw = text.encode()
        starts.append(len(buf))
        buf += raw
        ends.append(len(buf))
    prefix = java_string_hashes([p for p, _ in pairs]).astype(np.uint32) if pairs else None
    got, non_ascii = java_hash_of_ranges(buf, np.array(starts, np.int64), np.array(ends, np.int64), prefix=prefix)
    for i, (p, text) in enumerate(pairs):
        assert bool(non_ascii[i]) == (not text.isascii())
        if text.isascii():
            assert got[i] == java_string_hash(p + text)
