"""The ``--ack-log`` file: every line is one acknowledgement that parses as JSON
(issue 14, item 10.2: page padding used to leave lines of only spaces), and no line
crosses a 4 KiB page boundary (what keeps it whole after a kill -9)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from mqstore.bench.acklog import PAGE, AckLog


def check_file(raw: bytes) -> list[dict]:
    """Every line parses, ends with a newline and lies inside one page."""
    assert raw == b"" or raw.endswith(b"\n")
    out, pos = [], 0
    for line in raw.splitlines(keepends=True):
        assert pos // PAGE == (pos + len(line) - 1) // PAGE, f"the line at byte {pos} crosses a page boundary"
        out.append(json.loads(line))  # a blank line would fail here
        pos += len(line)
    return out


def test_every_line_parses_and_stays_in_its_page(tmp_path: Path) -> None:
    """Writes of one line and of many, lines of every length, so pages are filled both
    inside a write (the chunk's last line padded) and across writes (the file's last
    line padded in place)."""
    rng = random.Random(7)
    path = tmp_path / "acks"
    log = AckLog(path)
    written: list[dict] = []
    n = 0
    pads_in_place = 0
    for k in range(600):
        lines = []
        for _ in range(rng.choice((1, 1, 2, 5, 40))):
            rec = {"i": n, "pad": "x" * rng.choice((0, 3, 50, 120, 900, 2000))}
            n += 1
            written.append(rec)
            lines.append(json.dumps(rec) + "\n")
        before = path.stat().st_size
        if before % PAGE and before % PAGE + len(lines[0]) > PAGE:
            pads_in_place += 1
        log.write_lines(lines)
        raw = path.read_bytes()
        assert raw.endswith(b"\n")  # whole lines after every write
        tail = raw[raw.rfind(b"\n", 0, before - 1) + 1 if before else 0 :]  # the line before it (maybe padded) on
        assert [json.loads(x) for x in tail.splitlines()][-len(lines) :] == written[-len(lines) :]
        if k % 100 == 0:
            assert check_file(raw) == written
    log.close()
    assert pads_in_place > 20, "the test did not pad a line of an earlier write"
    raw = path.read_bytes()
    assert check_file(raw) == written
    assert b"\n \n" not in raw and not raw.startswith(b" ")
    assert len(raw) > 50 * PAGE


def test_a_line_that_is_not_one_line_is_refused(tmp_path: Path) -> None:
    log = AckLog(tmp_path / "acks")
    for bad in ('{"a": 1}', '{"a": 1}\n{"b": 2}\n', "x" * PAGE + "\n"):
        with pytest.raises(ValueError):
            log.write_lines([bad])
    log.close()


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_bench_append_ack_log_lines_all_parse(tmp_path: Path) -> None:
    """The command as the user ran it: small batches from two producers, so most
    writes start inside a page begun by another write."""
    ack = tmp_path / "acks"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mqstore.cli.main",
            "bench",
            "append",
            "--store",
            str(tmp_path / "s"),
            "--messages",
            "3000",
            "--body-size",
            "16",
            "--batch",
            "7",
            "--producers",
            "2",
            "--segment-bytes",
            str(1 << 20),
            "--ack-log",
            str(ack),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    acks = check_file(ack.read_bytes())
    assert len(acks) == 3000
    assert all(set(a) == {"msg_id", "physical_offset", "topic", "queue_id", "queue_offset"} for a in acks)
    assert len({a["physical_offset"] for a in acks}) == 3000
