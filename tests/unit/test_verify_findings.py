"""Findings collected apart and merged (verify's index checks run on a thread of their
own) read exactly as if they had been added in one sequence."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.store.verify.report import LISTED_PER_KIND, Findings, Severity
from tests.tiers import examples

ADDS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(list(Severity)), st.integers(0, 99)),
    max_size=3 * LISTED_PER_KIND + 10,
)


def collected(adds) -> Findings:
    f = Findings()
    for kind, severity, n in adds:
        f.add(kind, severity, f"loc{n}", f"detail {n}")
    return f


@settings(max_examples=examples(200), deadline=None)
@given(ADDS, ADDS)
def test_merge_equals_adding_in_sequence(first, second) -> None:
    merged = collected(first)
    merged.merge(collected(second))
    sequential = collected(first + second)
    assert merged.listed() == sequential.listed()
    assert merged.kinds() == sequential.kinds()
    assert all(merged.count(s) == sequential.count(s) for s in Severity)
