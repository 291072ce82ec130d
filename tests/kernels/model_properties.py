"""Plain-Python model of ``_scan.check_properties``: what one record's properties
string must be for the store to take it from a client (encoded_batch.py)."""

from __future__ import annotations

OK, NOT_UTF8, MALFORMED, RESERVED = 0, 1, 2, 3


def properties_problem(props: bytes, reserved: tuple[bytes, ...]) -> tuple[int, int]:
    """``(why, which)``: OK and -1, or why the string is refused (and which reserved name)."""
    try:
        props.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8, -1
    pairs = props.split(b"\x02")
    if pairs and pairs[-1] == b"":
        pairs.pop()  # the separator that ends the last pair
    for pair in pairs:
        name, sep, value = pair.partition(b"\x01")
        if not sep or not name or not value or b"\x01" in value:
            return MALFORMED, -1
        if name in reserved:
            return RESERVED, reserved.index(name)
    return OK, -1


def model_check_properties(buf: bytes, at, length, reserved: tuple[bytes, ...]) -> tuple[int, int, int]:
    for i, (a, n) in enumerate(zip(at, length)):
        why, which = properties_problem(buf[a : a + n], reserved)
        if why != OK:
            return i, why, which
    return -1, OK, -1
