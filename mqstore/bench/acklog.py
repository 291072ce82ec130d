"""The ``--ack-log`` file: one JSON line per acknowledged message, crash-safe.

A kill -9 can cut a write() that spans several pages between two pages (Linux checks
for fatal signals per page copied), but never one inside a single page. So every
write here stays within one 4 KiB page of the file, and no line crosses a page
boundary: when the next line would cross one, the line before it is padded with
spaces up to the boundary (``{"msg_id": ...}      \\n``: still one JSON object,
whitespace after a value is valid JSON). That line is the last of the chunk being
written, or, when the page was begun by an earlier write, the last line of the file,
rewritten in place with its padding (one ``pwrite`` inside that page: a kill leaves
it either as it was or padded). So every line of the file, at any moment, is one
acknowledgement that ``json.loads`` parses; there are no blank or filler lines.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PAGE = 4096


class AckLog:
    """Appends lines (each ending with a newline); thread-safe (producers share one file)."""

    def __init__(self, path: str | Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._pos = 0
        self._last = b""  # the file's last line, as written (padding it may be needed)
        self._lock = threading.Lock()

    def write_lines(self, lines: list[str]) -> None:
        data = [ln.encode() for ln in lines]
        for line in data:
            if len(line) > PAGE:
                raise ValueError("ack-log line longer than a page")
            if not line.endswith(b"\n") or b"\n" in line[:-1]:
                raise ValueError("an ack-log line is one line ending with a newline")
        with self._lock:
            chunk: list[bytes] = []
            used = self._pos % PAGE
            for line in data:
                if used + len(line) > PAGE:
                    if chunk:
                        chunk[-1] = chunk[-1][:-1] + b" " * (PAGE - used) + b"\n"
                        self._flush_chunk(chunk)
                    else:  # the page was begun by an earlier write: pad the file's last line
                        self._pad_last_line(PAGE - used)
                    chunk, used = [], 0
                chunk.append(line)
                used += len(line)
            self._flush_chunk(chunk)

    def _flush_chunk(self, chunk: list[bytes]) -> None:
        if chunk:
            self._pwrite(b"".join(chunk), self._pos)
            self._last = chunk[-1]

    def _pad_last_line(self, pad: int) -> None:
        """Rewrite the last line with ``pad`` spaces before its newline, so that it
        ends at the page boundary (it starts in this page: lines never cross one)."""
        start = self._pos - len(self._last)
        padded = self._last[:-1] + b" " * pad + b"\n"
        self._pos = start
        self._pwrite(padded, start)
        self._last = padded

    def _pwrite(self, buf: bytes, at: int) -> None:
        view = memoryview(buf)
        while view:
            n = os.pwrite(self._fd, view, at)
            view, at = view[n:], at + n
        self._pos = at

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


__all__ = ["AckLog"]
