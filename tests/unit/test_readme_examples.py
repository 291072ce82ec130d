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


def small_tour(block: str, bin_dir: str) -> str:
    """The tour's lines with its sizes cut down (the commands and their order kept)."""
    script = block.replace("source .venv/bin/activate", f'export PATH="{bin_dir}:$PATH"')
    script = re.sub(r"--messages \d+", "--messages 2000 --segment-bytes 8388608", script)
    script = script.replace(
        "bench disk --store ./tour-data/s1", "bench disk --store ./tour-data/s1 --bytes 1048576 --rounds 1"
    )
    script = script.replace(
        "bench recover --store ./tour-data/s3", "bench recover --store ./tour-data/s3 --bytes 4194304"
    )
    script = script.replace("--lookups 10000", "--lookups 100")
    return "set -euo pipefail\n" + script


@pytest.mark.slow  # a dozen mqstore processes
@pytest.mark.crash  # bench recover kills its writer with SIGKILL
def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    """Every line of the tour, in order, with smaller sizes: each exits 0 (the
    placeholders failed as shell syntax; the ids now come from `print`'s JSON)."""
    tour = next(b for b in blocks("bash") if "tour-data/s1" in b and "query-msg-by-id" in b)
    script = small_tour(tour, str(Path(sys.executable).parent))
    p = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert '"msg_id": "7F00000100002A9F0000000000000000"' in p.stdout  # query-msg-by-id found the oldest record
