"""The ``--ack-log`` file: one JSON line per acknowledged message, crash-safe.

A kill -9 can cut a write() that spans several pages between two pages (Linux checks
for fatal signals per page copied), but never one inside a single page. So every
write here stays within one 4 KiB page of the file: when the next line would cross a
page boundary, the last line of the chunk is padded with spaces (still valid JSON)
up to the boundary (or, when the page was begun by an earlier write, a line of
spaces fills it: readers skip blank lines). A kill at any moment leaves only whole lines.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PAGE = 4096


class AckLog:
    """Appends lines; thread-safe (producers share one file)."""

    def __init__(self, path: str | Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._pos = 0
        self._lock = threading.Lock()

    def write_lines(self, lines: list[str]) -> None:
        data = [ln.encode() for ln in lines]
        with self._lock:
            chunk: list[bytes] = []
            used = self._pos % PAGE
            for line in data:
                if len(line) > PAGE:
                    raise ValueError("ack-log line longer than a page")
                if used + len(line) > PAGE:
                    if chunk:
                        chunk[-1] = chunk[-1][:-1] + b" " * (PAGE - used) + b"\n"
                    else:  # the page was started by an earlier write: fill it with a blank line
                        chunk = [b" " * (PAGE - used - 1) + b"\n"]
                    self._flush_chunk(chunk)
                    chunk, used = [], 0
                chunk.append(line)
                used += len(line)
            self._flush_chunk(chunk)

    def _flush_chunk(self, chunk: list[bytes]) -> None:
        if chunk:
            buf = b"".join(chunk)
            os.write(self._fd, buf)
            self._pos += len(buf)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


__all__ = ["AckLog"]
