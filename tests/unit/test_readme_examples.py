"""README.md's examples paste and run as written: no ``<...>`` placeholders in its
shell blocks (they pasted as shell errors), and the embedded Python example prints
its three results and nothing else (it printed 16 log lines among them)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parents[2] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_shell_blocks_have_no_placeholders() -> None:
    tour = next(b for b in blocks("bash") if "tour-data/s1" in b and "query-msg-by-id" in b)
    assert "$MSG_ID" in tour and "$UNIQ_KEY" in tour  # ids come from an earlier command's output
    for block in blocks("bash"):
        for line in block.splitlines():
            assert not re.search(r"<[^>\s|]+[^>]*>", line), f"a placeholder pastes as a shell error: {line}"


@pytest.mark.slow  # a Python process that opens a store: over 2 s on 2 cores
def test_the_embedded_example_prints_only_its_results(tmp_path: Path) -> None:
    example = next(b for b in blocks("python") if 'MessageStore("./tour-data/demo"' in b)
    p = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout
    assert lines[0].startswith("PutStatus.PUT_OK [") and lines[0].endswith("[0 1]")
    assert lines[1:] == ["[b'hello', b'world']", "[b'world', b'hello']"]
    assert p.stderr == ""  # warnings only, and there are none
