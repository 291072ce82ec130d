"""A small file system a test fills with a file the store does not own.

As root (and where mounting is allowed) it is a real tmpfs of ``size`` bytes, so the
store's own probe (statvfs) sees every byte; elsewhere it is the test's directory
with a pretend capacity: ``writability.disk_used_ratio`` then answers, for paths
under it, the bytes its files occupy (st_blocks) over ``size``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mqstore.store import writability

MIB = 1 << 20


class SmallDisk:
    """``path`` is the file system's root; ``fill_to(ratio)`` grows (or shrinks) the
    foreign file until the used ratio is about ``ratio``; ``free()`` removes it."""

    def __init__(self, path: Path, size: int, *, real: bool) -> None:
        self.path, self.size, self.real = path, size, real
        self.foreign = path / "someone-elses-file"

    def used_ratio(self) -> float:
        return writability.disk_used_ratio(self.path)

    def fill_to(self, ratio: float) -> None:
        """Write or cut the foreign file so the disk is ``ratio`` used (within 1%)."""
        have = self.foreign.stat().st_size if self.foreign.exists() else 0
        others = self.used_ratio() * self.size - _occupied(self.foreign)
        want = max(0, int(ratio * self.size - others))
        with open(self.foreign, "ab") as f:
            if want < have:
                f.truncate(want)
            else:
                f.write(os.urandom(want - have))  # real blocks, not a sparse hole
            f.flush()
            os.fsync(f.fileno())
        assert abs(self.used_ratio() - ratio) < 0.02, (self.used_ratio(), ratio)

    def free(self) -> None:
        self.foreign.unlink(missing_ok=True)


def _occupied(path: Path) -> int:
    try:
        return path.stat().st_blocks * 512
    except FileNotFoundError:
        return 0


def _du(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            total += _occupied(Path(dirpath) / name)
    return total


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A 48 MiB file system (see the module docstring); the disk probe looks every time."""
    monkeypatch.setattr(writability, "DISK_PROBE_S", 0.0)
    size = 48 * MIB
    root = tmp_path / "disk"
    root.mkdir()
    mounted = False
    if os.geteuid() == 0:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)], capture_output=True)
        mounted = r.returncode == 0
    if not mounted:
        real = writability.disk_used_ratio

        def pretend(path) -> float:
            p = Path(path).resolve()
            if p == root or root in p.parents:
                return min(1.0, _du(root) / size)
            return real(path)

        monkeypatch.setattr(writability, "disk_used_ratio", pretend)
    try:
        yield SmallDisk(root, size, real=mounted)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(root)], capture_output=True)
