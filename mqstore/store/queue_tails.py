"""After a crash: which queues the summary of queue ends lists may hold units the
re-dispatch will not write over, found with a few syscalls per queue and no read
of its units (ConsumeQueues.recover, past _CHECK_AT_OPEN_UP_TO queues).

Why a row needs no more than this. The summary's row of a queue (queue_ends.py) is
a point where the queue was durable and consistent: every record below the
summary's progress offset P has its unit in the rows, and the open accepts the
summary after a crash only if P is at or past the offset the re-dispatch starts
from. Units are a function of the commitlog (a record carries its topic, queue id
and queue offset), so the re-dispatch writes every unit of every record between P
and the commitlog's recovered end W at the same bytes it had before the crash,
over whatever the write-behind left there (torn or whole). What it never writes
over is a unit at or past the queue offset the commitlog's recovery walk saw last
for the queue (``expected``, RocketMQ's rebuilt queue-offset table): one for a
record past W, lost with the commitlog's tail (a dangling unit), or torn bytes.
So a queue needs its files read only if its files hold data from
``stop = max(row's max offset, expected)`` on; RocketMQ's recovery instead reads
every queue (ConsumeQueue.recover, truncateDirtyLogicFiles).

The check of one queue: open the file holding byte ``stop * 20``, read the rest of
that byte's page (units are written in order from a file's start, so data past
the page is allocated: lseek(SEEK_DATA) tells without a read), close. A queue
whose files do not fit its row (a listed file gone or of another size) is read
too. ``probe`` is the check of one queue in plain Python and os calls, and the
reference model of the compiled loop ``probe_rows`` runs over many
(mqstore/kernels/_probe.pyx: a few microseconds a queue instead of ~40 us of
Python, with the GIL released); no ConsumeQueue object either way.
"""

from __future__ import annotations

import errno
import os

import numpy as np

from mqstore.formats.consume_queue import UNIT_SIZE
from mqstore.kernels._probe import probe_queue_tails
from mqstore.store.known_queues import KnownQueues

_PAGE = 4096
CLEAN, DIRTY, UNFIT = 0, 1, 2


def stop_offsets(known: KnownQueues, rows: np.ndarray, expected: dict[tuple[str, int], int]) -> np.ndarray:
    """Per row number of ``rows`` (live rows of ``known``): the queue offset at which
    the re-dispatch stops writing the queue, max(the row's max offset, the recovery
    walk's next queue offset for it)."""
    stop = known.rows["max_offset"][rows].astype(np.int64)
    if expected and len(rows):
        keys = list(expected)
        found = known.find_many(keys)  # live rows only
        hit = found >= 0
        if hit.any():
            at = np.full(len(known.rows), -1, np.int64)
            at[rows] = np.arange(len(rows))
            pos = at[found[hit]]
            mine = pos >= 0
            want = np.fromiter(expected.values(), np.int64, len(keys))[hit][mine]
            np.maximum.at(stop, pos[mine], want)
    return stop


def probe(directory: str, stop_byte: int, listed_end: int, file_bytes: int) -> int:
    """CLEAN if the queue in ``directory`` holds no data from logical byte
    ``stop_byte`` on, DIRTY if it does, UNFIT if the file that should hold that byte
    is not there or not of ``file_bytes`` (``listed_end``: the end byte of the files
    the row lists; a file from there on may not exist, or be empty: made and not
    sized before the crash)."""
    base = stop_byte - stop_byte % file_bytes
    pos = stop_byte - base
    try:
        fd = os.open(f"{directory}/{base:020d}", os.O_RDONLY)
    except FileNotFoundError:
        return CLEAN if base >= listed_end else UNFIT
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size != file_bytes:
            return CLEAN if size == 0 and base >= listed_end else UNFIT
        page_end = min(-(-pos // _PAGE) * _PAGE, file_bytes)
        if pos < page_end and os.pread(fd, page_end - pos, pos).strip(b"\0"):
            return DIRTY
        if page_end < file_bytes:
            try:
                os.lseek(fd, page_end, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole follows
                    return CLEAN
                raise
            return DIRTY
        return CLEAN
    finally:
        os.close(fd)


def probe_rows(
    root: str, known: KnownQueues, rows: np.ndarray, stop: np.ndarray, file_bytes: int
) -> list[tuple[int, int]]:
    """``probe`` each row number of ``rows`` (queue directories under ``root``) at
    its ``stop`` offset, in one compiled loop without the GIL (the open's threads
    overlap their waits on the disk); returns (row number, DIRTY or UNFIT) of the
    queues to read. Raises the OSError ``probe`` would raise."""
    r = known.rows[rows]
    names = known.topics
    topics = [names[t] for t in r["topic"].tolist()]
    ends = r["first_file"].astype(np.int64) + r["files"].astype(np.int64) * file_bytes
    status = np.empty(len(rows), np.int32)
    probe_queue_tails(
        root,
        topics,
        np.ascontiguousarray(r["queue_id"], np.int32),
        np.ascontiguousarray(stop, np.int64) * UNIT_SIZE,
        ends,
        file_bytes,
        status,
    )
    failed = np.flatnonzero(status < 0)
    if len(failed):
        i = int(failed[0])
        code = -int(status[i])
        raise OSError(code, os.strerror(code), f"{root}/{topics[i]}/{int(r['queue_id'][i])}")
    hit = np.flatnonzero(status != CLEAN)
    return list(zip(rows[hit].tolist(), status[hit].tolist()))


__all__ = ["CLEAN", "DIRTY", "UNFIT", "probe", "probe_rows", "stop_offsets"]
