"""The fault-point seam: plan parsing, counting and firing."""

from __future__ import annotations

import errno

import pytest

from mqstore.store import faults


def test_parse_plans() -> None:
    rules = faults.parse("commitlog.sync=EIO@3, cq.write=kill@10,segment.create=ENOSPCx0")
    assert rules["commitlog.sync"] == faults.Rule("commitlog.sync", "EIO", 3, 1)
    assert rules["cq.write"] == faults.Rule("cq.write", "kill", 10, 1)
    assert rules["segment.create"] == faults.Rule("segment.create", "ENOSPC", 1, 0)


@pytest.mark.parametrize("spec", ["nopoint", "a=", "=EIO", "a=EWHAT", "a=EIO@x", "a=EIO@2xq"])
def test_bad_plans_name_the_rule(spec: str) -> None:
    with pytest.raises(ValueError, match="fault rule"):
        faults.parse(spec)


def test_hits_fire_on_the_chosen_counts() -> None:
    faults.install("p=EROFS@2x2")
    try:
        faults.hit("p")
        for _ in range(2):
            with pytest.raises(OSError) as e:
                faults.hit("p", "/some/file")
            assert e.value.errno == errno.EROFS and e.value.filename == "/some/file"
        faults.hit("p")
        faults.hit("q")
        assert faults.hits() == {"p": 4, "q": 1}
    finally:
        faults.install(None)
    faults.hit("p")  # nothing installed: nothing happens, nothing is counted
    assert faults.hits() == {}
