"""The compiled properties check (``_scan.check_properties``) held to its Python model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqstore.kernels import _scan
from tests.kernels.model_properties import model_check_properties, model_check_properties_marks, properties_problem

RESERVED = (b"DELAY", b"SCHEDULE_SOURCE")
# Bytes that make every case: letters, both separators, a reserved name's pieces, UTF-8 and not.
_PIECES = [b"a", b"K", b"\x01", b"\x02", b"DELAY", b"SCHEDULE_SOURCE", "é".encode(), b"\xff", b"\xc3", b"\xed\xa0\x80"]


def check(strings: list[bytes]) -> tuple[int, int, int]:
    buf = b"".join(strings)
    at = np.cumsum([0] + [len(s) for s in strings[:-1]], dtype=np.int64) if strings else np.zeros(0, np.int64)
    length = np.array([len(s) for s in strings], np.int64)
    got = _scan.check_properties(buf, at, length, RESERVED)
    assert got == model_check_properties(buf, at.tolist(), length.tolist(), RESERVED)
    return got


@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=12).map(b"".join), max_size=6))
def test_kernel_equals_model(strings: list[bytes]) -> None:
    check(strings)


MARKERS = (b"K", b"Ka", b"TIMER_DELIVER_MS")  # names the rules look for (message_rules.check_encoded)
_MARKED = [*_PIECES, b"Ka", b"TIMER_DELIVER_MS", b"TIMER_DELIVER_MSX"]


@given(st.lists(st.lists(st.sampled_from(_MARKED), max_size=12).map(b"".join), max_size=6))
def test_marks_equal_model(strings: list[bytes]) -> None:
    """Markers set their bits per record where the answer is OK; the answer is unchanged."""
    buf = b"".join(strings)
    at = np.cumsum([0] + [len(s) for s in strings[:-1]], dtype=np.int64) if strings else np.zeros(0, np.int64)
    length = np.array([len(s) for s in strings], np.int64)
    marks = np.full(len(strings), -1, np.int64)
    got = _scan.check_properties(buf, at, length, RESERVED, MARKERS, marks)
    want, want_marks = model_check_properties_marks(buf, at.tolist(), length.tolist(), RESERVED, MARKERS)
    assert got == want
    if got[0] == -1:
        assert marks.tolist() == want_marks


@pytest.mark.parametrize(
    ("props", "why"),
    [
        (b"", _scan.PROPS_OK),
        (b"TAGS\x01a\x02KEYS\x01k1 k2\x02", _scan.PROPS_OK),
        (b"TAGS\x01a", _scan.PROPS_OK),  # the last pair may end the string
        ("TAGS\x01été\x02".encode(), _scan.PROPS_OK),
        (b"TAGS\x01\xff\x02", _scan.PROPS_NOT_UTF8),
        (b"TAGS\x02", _scan.PROPS_MALFORMED),
        (b"\x01a\x02", _scan.PROPS_MALFORMED),
        (b"TAGS\x01\x02", _scan.PROPS_MALFORMED),
        (b"TAGS\x01a\x01b\x02", _scan.PROPS_MALFORMED),
        (b"TAGS\x01a\x02\x02", _scan.PROPS_MALFORMED),
        (b"TAGS\x01a\x02DELAY\x013\x02", _scan.PROPS_RESERVED),
        (b"DELAYED\x013\x02", _scan.PROPS_OK),
    ],
)
def test_examples(props: bytes, why: int) -> None:
    assert properties_problem(props, RESERVED)[0] == why
    i, got, which = check([b"A\x01b\x02", props])
    assert got == why and i == (-1 if why == _scan.PROPS_OK else 1)
    assert which == (0 if why == _scan.PROPS_RESERVED else -1)


def test_out_of_buffer_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="outside the buffer"):
        _scan.check_properties(b"abc", np.array([2], np.int64), np.array([5], np.int64), RESERVED)
