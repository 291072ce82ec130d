"""``<store>/config/queueEnds.bin``: a summary of every consume queue's ends, written
at each thorough flush of the consume queues (every 60 s and on close), so that an
open need not read 80,000 queues to learn where each one ends. mqstore's own file;
RocketMQ has none (its open reads every queue).

What it is trusted for (ConsumeQueues.load / recover; QueueBuilder decides which):

* after a clean close: every queue it lists is taken as it says, without touching
  the queue's files (a queue is opened on first use). Checked first: the file
  decodes (magic, version, CRC), its file size is the store's, its progress is
  the commitlog's end (the last writer closed with everything dispatched), the
  commitlog's min offset is the one the queues were last corrected against, and
  every listed queue's directory exists (one listing per topic); a queue directory
  it does not list is read the usual way. Past 4,096 queues the open takes the
  listed queues of every topic on disk without a stat each, and checks a queue's
  files at its first use instead (ConsumeQueues.get; known_queues.py keeps the rows).
* after a crash: as a starting point. The units it counts were durable when it was
  written (the queues were synced before it). Used only when it is not older than
  the durable offset the next dispatch resumes from (``progress_offset >=
  redispatch_from``), so the re-dispatch writes every unit past a row again. Up to
  4,096 queues, units past them are read from each queue's last file and checked
  against the commitlog like any tail after a crash; past that the rows are kept
  unread and only queues holding data where the re-dispatch does not write are read
  (queue_tails.py; none after a process's death in the same boot).

Anything else (missing, truncated, garbage, another version, stale) and the queues
are read as before, one by one: the file never decides alone what a queue holds
beyond what its files say. ``mqstore verify`` compares it with the queues' files.

Written atomically after the queues it describes are durable: ``queueEnds.bin.tmp``
written and fsynced, renamed over ``queueEnds.bin``, the directory fsynced. Its mtime
is later than every change of a queue file or directory made before it (``write``
waits for the file system's clock, whose ticks are a few ms, to pass the moment it
was called), so "changed since the summary" is "mtime not before the summary's".

Layout (little-endian):

    offset  size   field
    0       4      magic b"MQQE"
    4       4      version (1)
    8       8      file_bytes: the consume-queue file size
    16      8      progress_offset: every record below this commitlog offset has its
                   units in the queues as listed
    24      8      cleaned_min: the commitlog min offset every queue's min offset was
                   corrected against
    32      8      written_ms: wall-clock time of the write (for people)
    40      4      topics: number of topic names
    44      4      queues: number of rows
    48      4      names_bytes: length of the names block
    52      n      names: the topic names, UTF-8, each followed by b"\\n"
    ...     44*q   rows, sorted by (topic, queue id):
                     u4 topic (index into the names), u2 queue id, u2 zero,
                     i8 first_file (start byte offset of the first file; the queue's
                        files are ``files`` contiguous ones from there),
                     u4 files, i8 min_offset, i8 max_offset (queue offsets, units),
                     i8 max_physical_offset (commitlog end of the last unit that is
                        not a pre-blank; -1 for none)
                   (packed: 4+2+2+8+4+8+8+8 = 44 bytes)
    end-4   4      CRC32 (zlib) of every byte before it
"""

from __future__ import annotations

import os
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mqstore.errors import InvalidTopicError
from mqstore.formats.names import check_topic
from mqstore.store import faults
from mqstore.store.json_files import CONFIG_DIR
from mqstore.store.mapped_file import fsync_dir, note_sync_failure

QUEUE_ENDS_FILE = "queueEnds.bin"
_LINUX_REALTIME_COARSE = 5  # clock_gettime's CLOCK_REALTIME_COARSE (Python names it on some builds only)
MAGIC = b"MQQE"
VERSION = 1
_HEAD = struct.Struct("<4sIqqqqIII")
ROW_DTYPE = np.dtype(
    [
        ("topic", "<u4"),
        ("queue_id", "<u2"),
        ("zero", "<u2"),
        ("first_file", "<i8"),
        ("files", "<u4"),
        ("min_offset", "<i8"),
        ("max_offset", "<i8"),
        ("max_physical_offset", "<i8"),
    ]
)
assert ROW_DTYPE.itemsize == 44


class QueueEndsError(ValueError):
    """The file is not a usable queue-ends summary (says why)."""


@dataclass(eq=False)
class QueueEnds:
    """The summary in memory: ``topics`` (names), ``rows`` (ROW_DTYPE, sorted by
    topic name then queue id) and the header fields."""

    file_bytes: int
    progress_offset: int
    cleaned_min: int
    topics: list[str]
    rows: np.ndarray
    written_ms: int = 0
    mtime_ns: int = 0  # the file's mtime when read (queue files changed later are not what it says)

    def __len__(self) -> int:
        return len(self.rows)

    def keys(self) -> list[tuple[str, int]]:
        names = self.topics
        return [(names[t], q) for t, q in zip(self.rows["topic"].tolist(), self.rows["queue_id"].tolist())]


def path_of(store_dir: str | Path) -> Path:
    return Path(store_dir) / CONFIG_DIR / QUEUE_ENDS_FILE


def encode(ends: QueueEnds) -> bytes:
    names = "".join(t + "\n" for t in ends.topics).encode("utf-8")
    head = _HEAD.pack(
        MAGIC,
        VERSION,
        ends.file_bytes,
        ends.progress_offset,
        ends.cleaned_min,
        ends.written_ms,
        len(ends.topics),
        len(ends.rows),
        len(names),
    )
    body = head + names + np.ascontiguousarray(ends.rows, ROW_DTYPE).tobytes()
    return body + struct.pack("<I", zlib.crc32(body))


def decode(data: bytes) -> QueueEnds:
    """QueueEndsError for anything but a whole, well-formed file of this version."""
    if len(data) < _HEAD.size + 4:
        raise QueueEndsError(f"{len(data)} bytes: shorter than a header")
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    magic, version, file_bytes, progress, cleaned_min, written_ms, n_topics, n_rows, n_names = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise QueueEndsError(f"magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise QueueEndsError(f"version {version}, this build reads {VERSION}")
    if zlib.crc32(body) != crc:
        raise QueueEndsError("CRC mismatch (truncated or damaged)")
    if len(body) != _HEAD.size + n_names + n_rows * ROW_DTYPE.itemsize:
        raise QueueEndsError(f"{len(data)} bytes do not hold {n_topics} topics and {n_rows} queues")
    try:
        names = body[_HEAD.size : _HEAD.size + n_names].decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise QueueEndsError(f"topic names are not UTF-8: {e}") from e
    if names[-1] != "" or len(names) != n_topics + 1:
        raise QueueEndsError("topic names block does not hold the counted names")
    names.pop()
    try:
        for t in names:
            check_topic(t)
    except InvalidTopicError as e:
        raise QueueEndsError(str(e)) from e
    if any(a >= b for a, b in zip(names, names[1:])):
        raise QueueEndsError("topic names are repeated or not sorted")
    rows = np.frombuffer(body, ROW_DTYPE, count=n_rows, offset=_HEAD.size + n_names).copy()
    if file_bytes <= 0 or file_bytes % 20:
        raise QueueEndsError(f"file size {file_bytes} is not a positive multiple of 20")
    if n_rows:
        files = rows["files"].astype(np.int64)
        wrote, first = rows["max_offset"] * 20, rows["first_file"]
        bad = (
            (rows["topic"] >= n_topics)
            | (files < 1)
            | (first < 0)
            | (first % file_bytes != 0)
            | (rows["min_offset"] * 20 < first)
            | (rows["min_offset"] > rows["max_offset"])
            | (wrote > first + files * file_bytes)
            | (wrote < first + (files - 1) * file_bytes)
            | (rows["max_physical_offset"] < -1)
        )
        if bad.any():
            raise QueueEndsError(f"row {int(np.argmax(bad))} is out of range")
        keys = rows["topic"].astype(np.int64) << 16 | rows["queue_id"]
        if (keys[1:] <= keys[:-1]).any():
            raise QueueEndsError("rows are repeated or not sorted")
    return QueueEnds(file_bytes, progress, cleaned_min, names, rows, written_ms)


def read(store_dir: str | Path) -> QueueEnds:
    """The store's summary (with its file's mtime); FileNotFoundError if there is
    none, QueueEndsError if it is unusable, OSError if it cannot be read."""
    with open(path_of(store_dir), "rb") as f:
        data = f.read()
        mtime_ns = os.fstat(f.fileno()).st_mtime_ns
    ends = decode(data)
    ends.mtime_ns = mtime_ns
    return ends


def _clock_past(t_ns: int) -> None:
    """Return once the clock file times are stamped from (the coarse one, which
    advances a tick of a few ms at a time) is past ``t_ns``."""
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", _LINUX_REALTIME_COARSE if sys.platform == "linux" else None)
    while (time.clock_gettime_ns(coarse) if coarse is not None else time.time_ns()) <= t_ns:
        time.sleep(0.001)


def write(store_dir: str | Path, ends: QueueEnds) -> None:
    """Replace the store's summary atomically (see the module docstring), stamped
    after every change made before the call. Fault point "queue_ends.write" (before
    the fsync of the temporary file)."""
    _clock_past(time.time_ns())
    path = path_of(store_dir)
    parent = path.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(parent.parent)
    tmp = path.with_name(path.name + ".tmp")
    data = encode(ends)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    faults.created(fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        faults.hit("queue_ends.write", tmp)
        os.fsync(fd)
    except OSError as e:
        note_sync_failure("queue_ends.write", tmp, e)
        os.close(fd)
        tmp.unlink(missing_ok=True)  # the previous summary stays
        raise
    os.close(fd)
    faults.synced(tmp)
    os.replace(tmp, path)
    fsync_dir(parent)


def remove(store_dir: str | Path) -> bool:
    """Delete the store's summary (tools that change queue files behind the store's
    back); True if there was one."""
    path = path_of(store_dir)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def build(
    rows: list[tuple[str, int, int, int, int, int, int]],
    *,
    file_bytes: int,
    progress_offset: int,
    cleaned_min: int,
) -> QueueEnds:
    """A summary from rows (topic, queue id, first_file, files, min_offset,
    max_offset, max_physical_offset), in any order."""
    rows = sorted(rows)
    topics = sorted({r[0] for r in rows})
    index = {t: i for i, t in enumerate(topics)}
    arr = np.zeros(len(rows), ROW_DTYPE)
    if rows:
        cols = list(zip(*rows))
        arr["topic"] = [index[t] for t in cols[0]]
        arr["queue_id"] = cols[1]
        arr["first_file"] = cols[2]
        arr["files"] = cols[3]
        arr["min_offset"] = cols[4]
        arr["max_offset"] = cols[5]
        arr["max_physical_offset"] = cols[6]
    return QueueEnds(file_bytes, progress_offset, cleaned_min, topics, arr, int(time.time() * 1000))


def build_with(
    known_topics: list[str],
    known_rows: np.ndarray,
    rows: list[tuple[str, int, int, int, int, int, int]],
    *,
    file_bytes: int,
    progress_offset: int,
    cleaned_min: int,
) -> QueueEnds:
    """``build`` for rows already in ROW_DTYPE arrays (``known_rows``, numbering
    ``known_topics``: the queues an open took from the last summary and nothing
    used since) plus ``rows`` as tuples (the queues in use): per-queue Python only
    for the tuples."""
    used = np.unique(known_rows["topic"]) if len(known_rows) else np.zeros(0, np.int64)
    used_names = [known_topics[t] for t in used.tolist()]
    topics = sorted(set(used_names).union(r[0] for r in rows))
    index = {t: i for i, t in enumerate(topics)}
    remap = np.zeros(len(known_topics), np.int64)
    remap[used] = [index[t] for t in used_names]
    live = np.zeros(len(rows), ROW_DTYPE)
    if rows:
        cols = list(zip(*rows))
        live["topic"] = [index[t] for t in cols[0]]
        for name, col in zip(("queue_id", "first_file", "files", "min_offset", "max_offset"), cols[1:6]):
            live[name] = col
        live["max_physical_offset"] = cols[6]
    moved = known_rows.copy()
    if len(moved):
        moved["topic"] = remap[moved["topic"]]
    arr = np.concatenate([moved, live])
    arr = arr[np.argsort(arr["topic"].astype(np.int64) << 16 | arr["queue_id"], kind="stable")]
    return QueueEnds(file_bytes, progress_offset, cleaned_min, topics, arr, int(time.time() * 1000))


__all__ = [
    "QUEUE_ENDS_FILE",
    "ROW_DTYPE",
    "QueueEnds",
    "QueueEndsError",
    "build",
    "build_with",
    "decode",
    "encode",
    "path_of",
    "read",
    "remove",
    "write",
]
