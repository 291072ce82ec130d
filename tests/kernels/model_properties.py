"""Plain-Python model of ``_scan.check_properties``: what one record's properties
string must be for the store to take it from a client (encoded_batch.py)."""

from __future__ import annotations

OK, NOT_UTF8, MALFORMED, RESERVED = 0, 1, 2, 3


def properties_problem(props: bytes, reserved: tuple[bytes, ...]) -> tuple[int, int]:
    """``(why, which)``: OK and -1, or why the string is refused (and which reserved name)."""
    why, which, _ = properties_marks(props, reserved, ())
    return why, which


def properties_marks(props: bytes, reserved: tuple[bytes, ...], markers: tuple[bytes, ...]) -> tuple[int, int, int]:
    """``(why, which, mark)``: as properties_problem, and bit m of ``mark`` set if a
    pair is named ``markers[m]`` (complete when the string is OK)."""
    mark = 0
    try:
        props.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8, -1, mark
    pairs = props.split(b"\x02")
    if pairs and pairs[-1] == b"":
        pairs.pop()  # the separator that ends the last pair
    for pair in pairs:
        name, sep, value = pair.partition(b"\x01")
        if not sep or not name or not value or b"\x01" in value:
            return MALFORMED, -1, mark
        if name in reserved:
            return RESERVED, reserved.index(name), mark
        for m, marker in enumerate(markers):
            if name == marker:
                mark |= 1 << m
    return OK, -1, mark


def model_check_properties(buf: bytes, at, length, reserved: tuple[bytes, ...]) -> tuple[int, int, int]:
    return model_check_properties_marks(buf, at, length, reserved, ())[0]


def model_check_properties_marks(buf: bytes, at, length, reserved, markers) -> tuple[tuple[int, int, int], list[int]]:
    """The kernel's answer, and each record's marks (meaningful when the answer is OK)."""
    marks = []
    for i, (a, n) in enumerate(zip(at, length)):
        why, which, mark = properties_marks(buf[a : a + n], reserved, markers)
        marks.append(mark)
        if why != OK:
            return (i, why, which), marks
    return (-1, OK, -1), marks
