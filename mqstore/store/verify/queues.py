"""Verify's check of the consume queues against the commitlog's records.

Two sides, both in bulk with numpy:

* unit side (:func:`read_queues`): each queue's files are sane (named by offset,
  contiguous, the configured size) and its units, up to the first invalid one, point
  at a record that starts there, has that size, belongs to this (topic, queue id),
  carries the unit's queue offset, takes a queue offset at all (not a transaction
  half or rollback), and whose TAGS hash to the unit's tagsCode (not checked in
  SCHEDULE_TOPIC_XXXX, where tagsCode is the delivery time). Units that point below
  the commitlog's min offset were kept after retention and are fine.
* record side (:func:`check_records`): every record that takes a queue offset has
  its unit. A record past its queue's last unit is only "not dispatched yet" if the
  store will dispatch it when it next opens (at or after the resume offset the store
  computes, ``resume_offset``); below that nothing will ever build its unit.

    kind                    severity  meaning
    cq_unit_dangling        error     no record starts where the unit points
    cq_size_mismatch        error     the unit's size is not its record's
    cq_wrong_record         error     the record is another queue's or another queue offset's
    cq_tags_mismatch        error     tagsCode is not the record's TAGS hash
    cq_order                error     commitlog offsets do not increase from unit to unit
    cq_gap                  error     valid-looking units after an invalid one (the store cuts there)
    cq_unit_missing         error     a record has no unit and will not get one
    cq_file_name / _gap / _size      error   the store repairs or rebuilds the queue on open
    cq_not_dispatched       warning   records past the last unit that the next open dispatches
    cq_unit_beyond_end      warning   units past the commitlog's valid end (the store drops them)
    cq_torn_tail            warning   a partly written unit at the end (the store cuts it)
    queue_offset_sequence   error     records of one queue do not take consecutive queue offsets
    cq_stray_file / cq_empty_file    warning the store ignores or removes it
    cq_not_written          info      a running store's records past the last unit on disk (units in memory)
    cq_db_damaged           error     RocksDB (store type defaultRocksDB) reports a damaged block: the store
                                      rebuilds every queue at its next open once a read found it (repair does now)
    queue_ends_unreadable   warning   config/queueEnds.bin does not decode; the store ignores it (reads every queue)
    queue_ends_mismatch     error     after this clean close the store would take a queue's ends from
                                      config/queueEnds.bin (its files are older than the summary), and they
                                      are not the queue's (repair moves the file aside)
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mqstore.errors import CorruptFileError, InvalidTopicError
from mqstore.formats.consume_queue import (
    UNIT_DTYPE,
    UNIT_SIZE,
    decode_units,
    file_bytes_for,
    is_pre_blank,
)
from mqstore.formats.names import check_topic, file_name_to_offset
from mqstore.store import queue_ends
from mqstore.store.config import STORE_TYPE_ROCKSDB
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR
from mqstore.store.json_files import CONFIG_DIR
from mqstore.store.rocks_queues import queue_units
from mqstore.store.schedule import SCHEDULE_TOPIC
from mqstore.store.store_type import store_type_on_disk
from mqstore.store.verify.records import RecordTable
from mqstore.store.verify.report import Damage, Findings, QueueKey

MAX_QUEUE_ID = 65535


@dataclass
class QueueFiles:
    """One queue as read: ``units`` are the valid ones, the first at queue offset
    ``first_offset``; ``unreadable`` when the store would refuse to open it."""

    topic: str
    queue_id: int
    first_offset: int
    units: np.ndarray
    unreadable: bool = False

    @property
    def location(self) -> str:
        return f"{CONSUME_QUEUE_DIR}/{self.topic}/{self.queue_id}"

    @property
    def end_offset(self) -> int:
        """The queue's max offset: one past its last unit."""
        return self.first_offset + len(self.units)

    def last_end_below(self, limit: int) -> int:
        """offset + size of the last real unit that ends at or below ``limit`` (the
        store cuts the others when it opens), -1 if none: its resume candidate."""
        if self.unreadable or not len(self.units):
            return -1
        ends = self.units["commitlog_offset"].astype(np.int64) + self.units["size"].astype(np.int64)
        ok = np.flatnonzero(~is_pre_blank(self.units) & (ends <= limit))
        return int(ends[ok[-1]]) if ok.size else -1


def queue_dirs(store_dir: Path, findings: Findings, damage: Damage) -> list[tuple[str, int, Path]]:
    """(topic, queue id, directory) of every queue directory, sorted; names the store
    ignores (not a topic, not a queue id, not a directory) are reported as stray."""
    root = Path(store_dir) / CONSUME_QUEUE_DIR
    out: list[tuple[str, int, Path]] = []
    if not root.is_dir():
        return out
    for topic_dir in sorted(root.iterdir()):
        try:
            check_topic(topic_dir.name)
            if not topic_dir.is_dir():
                raise InvalidTopicError("not a directory")
        except InvalidTopicError:
            rel = f"{CONSUME_QUEUE_DIR}/{topic_dir.name}"
            findings.warning("cq_stray_file", rel, "not a topic directory; the store ignores it")
            damage.stray_files.append(rel)
            continue
        for qdir in sorted(topic_dir.iterdir()):
            if not (qdir.is_dir() and qdir.name.isdigit() and qdir.name.isascii() and int(qdir.name) <= MAX_QUEUE_ID):
                rel = f"{CONSUME_QUEUE_DIR}/{topic_dir.name}/{qdir.name}"
                findings.warning("cq_stray_file", rel, "not a queue directory; the store ignores it")
                damage.stray_files.append(rel)
                continue
            out.append((topic_dir.name, int(qdir.name), qdir))
    return out


def read_queues(
    store_dir: Path, file_bytes: int, table: RecordTable, findings: Findings, damage: Damage, *, running: bool
) -> dict[QueueKey, QueueFiles]:
    """Read every queue on disk and check its units (the unit side, see the module
    docstring). A store of type defaultRocksDB: every queue from its RocksDB, as its
    last flush left it (opened read-only)."""
    out: dict[QueueKey, QueueFiles] = {}
    if store_type_on_disk(store_dir) == STORE_TYPE_ROCKSDB:  # one RocksDB (rocks_queues.py): no files to check
        try:
            for topic, queue_id, first, values in queue_units(store_dir):
                units = np.empty(len(values), UNIT_DTYPE)
                for name in UNIT_DTYPE.names:
                    units[name] = values[name]
                q = out[(topic, queue_id)] = QueueFiles(topic, queue_id, first, units)
                _check_units(q, table, findings, damage, running=running)
        except CorruptFileError as e:  # every queue is rebuilt: none is checked further
            findings.error("cq_db_damaged", CONSUME_QUEUE_DIR, str(e))
            keys = np.unique(table.queue_keys[np.flatnonzero(table.advances)]).tolist()
            for topic, queue_id in [*out, *map(table.queue_of, keys)]:
                out[(topic, queue_id)] = QueueFiles(topic, queue_id, 0, np.empty(0, UNIT_DTYPE), unreadable=True)
                damage.bad_queues.add((topic, queue_id))
        return out
    fb = file_bytes_for(file_bytes)
    for topic, queue_id, qdir in queue_dirs(store_dir, findings, damage):
        q = read_queue(qdir, topic, queue_id, fb, findings, damage)
        if not q.unreadable:
            _check_units(q, table, findings, damage, running=running)
        out[(q.topic, q.queue_id)] = q
    return out


def read_queue(
    qdir: Path, topic: str, queue_id: int, file_bytes: int, findings: Findings, damage: Damage
) -> QueueFiles:
    """One queue's files in ``qdir`` (``file_bytes`` each, as file_bytes_for gives):
    names, sizes and contiguity checked, its units read up to the first invalid one
    as the store reads them, a torn or gapped tail reported. Unreadable files give
    a QueueFiles with ``unreadable`` set and no units."""
    loc = f"{CONSUME_QUEUE_DIR}/{topic}/{queue_id}"
    bases = []
    for p in qdir.iterdir():
        try:
            bases.append(file_name_to_offset(p.name))
        except ValueError:
            tmp = p.name.endswith(".tmp")
            what = (
                "an unfinished file; the store removes it on open"
                if tmp
                else "not a queue file name; the store ignores it"
            )
            findings.warning("cq_stray_file", f"{loc}/{p.name}", what)
            if not p.name.endswith(".tmp"):
                damage.stray_files.append(f"{loc}/{p.name}")
    bases.sort()
    paths = [qdir / f"{b:020d}" for b in bases]
    if paths and paths[-1].stat().st_size == 0:
        findings.warning("cq_empty_file", f"{loc}/{paths[-1].name}", "empty last file; the store removes it on open")
        bases.pop()
        paths.pop()
    problems = []
    for i, (base, path) in enumerate(zip(bases, paths)):
        if base % file_bytes:
            problems.append(
                ("cq_file_name", path, f"starts at byte {base}, not a multiple of the file size {file_bytes}")
            )
        if i and base != bases[i - 1] + file_bytes:
            problems.append(
                ("cq_file_gap", path, f"files are not contiguous: the one before starts at byte {bases[i - 1]}")
            )
        if (size := path.stat().st_size) != file_bytes:
            problems.append(("cq_file_size", path, f"{size} bytes, expected {file_bytes}"))
    for kind, path, detail in problems:
        findings.error(kind, f"{loc}/{path.name}", f"{detail}; the store repairs or rebuilds this queue when it opens")
    if problems:
        damage.bad_queues.add((topic, queue_id))
        return QueueFiles(topic, queue_id, 0, np.zeros(0, UNIT_DTYPE), unreadable=True)
    if not bases:
        return QueueFiles(topic, queue_id, 0, np.zeros(0, UNIT_DTYPE))
    data = b"".join([*(p.read_bytes() for p in paths[:-1]), _read_data(paths[-1])])
    units = decode_units(data)  # up to the first invalid unit, as the store reads them
    k = len(units)
    first = bases[0] // UNIT_SIZE
    if k * UNIT_SIZE < len(data):
        rest = np.frombuffer(data, np.uint8, len(data) - k * UNIT_SIZE, k * UNIT_SIZE)
        nz = np.flatnonzero(rest)
        if nz.size and nz[-1] >= UNIT_SIZE:
            findings.error(
                "cq_gap",
                f"{loc}#{first + k}",
                f"an invalid unit at queue offset {first + k} with units after it; "
                "the store cuts the queue there and loses them",
            )
            damage.bad_queues.add((topic, queue_id))
        elif nz.size:
            findings.warning(
                "cq_torn_tail", f"{loc}#{first + k}", "a partly written unit after the last; the store cuts it on open"
            )
    return QueueFiles(topic, queue_id, first, units.copy())


def _read_data(path: Path) -> bytes:
    """A queue file's bytes up to the end of its last data extent: past it the file is
    a hole (zeros), as the store's sparse files mostly are. A 6 MB last file holding
    a few units is one small read (reading 400,000 of them whole was most of a
    verify of 100,000 topics). Where the file system cannot say (no SEEK_DATA), the
    whole file."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size, end, pos = os.fstat(fd).st_size, 0, 0
        try:
            while pos < size:
                pos = os.lseek(fd, os.lseek(fd, pos, os.SEEK_DATA), os.SEEK_HOLE)
                end = pos
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no data at or past pos
                end = size
        f.seek(0)  # (the lseeks above moved the position)
        return f.read(min(end, size))


def _check_units(q: QueueFiles, table: RecordTable, findings: Findings, damage: Damage, *, running: bool) -> None:
    units, loc = q.units, q.location
    n = len(units)
    if not n:
        return
    qoffs = q.first_offset + np.arange(n)
    phys = units["commitlog_offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    tags = units["tags_code"].astype(np.int64)
    pre = is_pre_blank(units)
    bad = False
    real_at = np.flatnonzero(~pre)
    if real_at.size and pre[real_at[0] :].any():
        for i in np.flatnonzero(pre[real_at[0] :]).tolist():
            qo = int(qoffs[real_at[0] + i])
            findings.error("cq_wrong_record", f"{loc}#{qo}", f"a pre-blank unit at queue offset {qo}, after real units")
        bad = True
    if real_at.size > 1 and (np.diff(phys[real_at]) <= 0).any():
        i = int(real_at[1:][np.diff(phys[real_at]) <= 0][0])
        findings.error(
            "cq_order",
            f"{loc}#{int(qoffs[i])}",
            f"unit at queue offset {int(qoffs[i])} points at commitlog offset "
            f"{int(phys[i])}, not after the unit before it",
        )
        bad = True
    sel = real_at[phys[real_at] >= table.min_offset]
    nrec = len(table.phys)
    idx = np.minimum(np.searchsorted(table.phys, phys[sel]), max(nrec - 1, 0))
    found = (table.phys[idx] == phys[sel]) if nrec else np.zeros(len(sel), bool)
    beyond = ~found & (phys[sel] >= table.data_end)
    if beyond.any() and not running:
        first_beyond = int(qoffs[sel[beyond][0]])
        findings.warning(
            "cq_unit_beyond_end",
            f"{loc}#{first_beyond}",
            f"{int(beyond.sum())} units from queue offset "
            f"{first_beyond} point at or past the end of the commitlog's valid data ({table.data_end}); "
            "the store drops them on open",
        )
    for i in sel[~found & ~beyond].tolist():
        findings.error(
            "cq_unit_dangling",
            f"{loc}#{int(qoffs[i])}",
            f"unit at queue offset {int(qoffs[i])} points at commitlog offset {int(phys[i])}, where no record starts",
        )
        bad = True
    at, ri = sel[found], idx[found]
    key = table.queue_key(q.topic, q.queue_id)
    for i, r in zip(*_where(table.sizes[ri] != sizes[at], at, ri)):
        findings.error(
            "cq_size_mismatch",
            f"{loc}#{int(qoffs[i])}",
            f"unit at queue offset {int(qoffs[i])} says {int(sizes[i])} "
            f"bytes; the record at commitlog offset {int(phys[i])} has {int(table.sizes[r])}",
        )
        bad = True
    wrong = (
        (table.queue_keys[ri] != (-1 if key is None else key))
        | (table.queue_offsets[ri] != qoffs[at])
        | ~table.advances[ri]
    )
    for i, r in zip(*_where(wrong, at, ri)):
        topic, qid = table.queue_of(int(table.queue_keys[r]))
        what = (
            "takes no queue offset (a transaction half or rollback)"
            if not table.advances[r]
            else (f"belongs to {topic}:{qid} queue offset {int(table.queue_offsets[r])}")
        )
        findings.error(
            "cq_wrong_record",
            f"{loc}#{int(qoffs[i])}",
            f"unit at queue offset {int(qoffs[i])} points at the record "
            f"at commitlog offset {int(phys[i])}, which {what}",
        )
        bad = True
    if q.topic != SCHEDULE_TOPIC:
        for i, r in zip(*_where(table.tags_codes[ri] != tags[at], at, ri)):
            findings.error(
                "cq_tags_mismatch",
                f"{loc}#{int(qoffs[i])}",
                f"unit at queue offset {int(qoffs[i])} has tagsCode "
                f"{int(tags[i])}; its record's TAGS hash to {int(table.tags_codes[r])}",
            )
            bad = True
    if bad:
        damage.bad_queues.add((q.topic, q.queue_id))


def _where(mask: np.ndarray, at: np.ndarray, ri: np.ndarray) -> tuple[list[int], list[int]]:
    hits = np.flatnonzero(mask)
    return at[hits].tolist(), ri[hits].tolist()


def check_records(
    queues: dict[QueueKey, QueueFiles],
    table: RecordTable,
    findings: Findings,
    damage: Damage,
    *,
    resume_offset: int,
    running: bool,
) -> dict[QueueKey, int]:
    """The record side (see the module docstring). Returns each queue's max offset
    as the store will have it once it opened and dispatched: one past the queue's
    last unit or its last record, whichever is later."""
    max_offsets = {k: q.end_offset for k, q in queues.items()}
    takes = np.flatnonzero(table.advances)
    if not takes.size:
        return max_offsets
    keys = table.queue_keys[takes]
    order = np.argsort(keys, kind="stable")  # by queue, commitlog order within one
    uniq, starts = np.unique(keys[order], return_index=True)
    stops = np.append(starts[1:], len(order))
    for key, lo, hi in zip(uniq.tolist(), starts.tolist(), stops.tolist()):
        rec = takes[order[lo:hi]]
        qkey = table.queue_of(key)
        q = queues.get(qkey)
        if q is not None and q.unreadable:  # reported already; repair rebuilds it up to its last record
            max_offsets[qkey] = max(q.end_offset, int(table.queue_offsets[rec].max()) + 1)
            continue
        loc = q.location if q is not None else f"{CONSUME_QUEUE_DIR}/{qkey[0]}/{qkey[1]}"
        qo, ph = table.queue_offsets[rec], table.phys[rec]
        _check_sequence(qo, ph, loc, findings)
        first, end = (q.first_offset, q.end_offset) if q is not None else (0, 0)
        max_offsets[qkey] = max(end, int(qo.max()) + 1)
        inside = (qo >= first) & (qo < end)
        hole = np.zeros(len(rec), bool)
        if inside.any():
            hole[inside] = is_pre_blank(q.units[qo[inside] - first])
        hole |= qo < first
        for i in np.flatnonzero(hole).tolist():
            findings.error(
                "cq_unit_missing",
                f"{loc}#{int(qo[i])}",
                f"the record at commitlog offset {int(ph[i])} (queue offset "
                f"{int(qo[i])}) has no unit: the queue holds none there",
            )
        if hole.any():
            damage.bad_queues.add(qkey)
        after = np.flatnonzero(qo >= end)
        if not after.size:
            continue
        if running:
            findings.info(
                "cq_not_written",
                loc,
                f"{after.size} records past the last unit on disk (the running store may hold their units in memory)",
            )
            continue
        late = ph[after] >= resume_offset
        if late.any():
            damage.queues_not_dispatched = True
            findings.warning(
                "cq_not_dispatched",
                loc,
                f"{int(late.sum())} records from commitlog offset "
                f"{int(ph[after][late][0])} are not dispatched yet; the store dispatches them when it opens",
            )
        if not late.all():
            early = after[~late]
            findings.error(
                "cq_unit_missing",
                f"{loc}#{int(qo[early[0]])}",
                f"{early.size} records (queue offsets "
                f"{int(qo[early[0]])}..{int(qo[early[-1]])}, from commitlog offset {int(ph[early[0]])}) have no unit, "
                f"and the store will not dispatch them again (it resumes at {resume_offset})",
            )
            damage.bad_queues.add(qkey)
    return max_offsets


def _check_sequence(qo: np.ndarray, ph: np.ndarray, loc: str, findings: Findings) -> None:
    for i in np.flatnonzero(np.diff(qo) != 1).tolist():
        findings.error(
            "queue_offset_sequence",
            loc,
            f"the record at commitlog offset {int(ph[i + 1])} has queue offset "
            f"{int(qo[i + 1])}, but the one before it in this queue has {int(qo[i])}",
        )


__all__ = ["QueueFiles", "check_records", "queue_dirs", "read_queue", "read_queues"]


def check_queue_ends(
    store_dir: Path,
    file_bytes: int,
    queues: dict[QueueKey, QueueFiles],
    end: int,
    min_offset: int,
    findings: Findings,
    damage: Damage,
    *,
    clean: bool,
) -> None:
    """The summary of queue ends (queue_ends.py) against the queues as read. Only
    where the store's next open would trust it: after a clean close (``clean``: not
    running, no abort marker), written at the commitlog's end ``end`` with the
    queues corrected against its ``min_offset``, for a queue whose directory is older
    than the summary and whose files are all there, of the file size and older than
    it too. Elsewhere the store reads the queue itself, so a row that disagrees
    costs nothing."""
    rel = f"{CONFIG_DIR}/{queue_ends.QUEUE_ENDS_FILE}"
    try:
        ends = queue_ends.read(store_dir)
    except FileNotFoundError:
        return
    except (OSError, queue_ends.QueueEndsError) as e:
        findings.warning("queue_ends_unreadable", rel, f"{e}; the store ignores it and reads every queue when it opens")
        return
    fb = file_bytes_for(file_bytes)
    if not clean or ends.file_bytes != fb or ends.progress_offset != end or ends.cleaned_min != min_offset:
        return
    root = Path(store_dir) / CONSUME_QUEUE_DIR
    bad = 0
    r = ends.rows
    for (topic, qid), first, files, max_offset, max_phys in zip(
        ends.keys(),
        r["first_file"].tolist(),
        r["files"].tolist(),
        r["max_offset"].tolist(),
        r["max_physical_offset"].tolist(),
    ):
        q = queues.get((topic, qid))
        if q is None or q.unreadable:
            continue
        qdir = root / topic / str(qid)
        try:  # the open's test (ConsumeQueues._row_fits): directory and files older than the summary
            trusted = qdir.stat().st_mtime_ns < ends.mtime_ns
            for base in range(first, first + files * fb, fb):
                st = (qdir / f"{base:020d}").stat()
                trusted = trusted and st.st_size == fb and st.st_mtime_ns < ends.mtime_ns
        except OSError:
            trusted = False
        if not trusted:
            continue
        have = (q.first_offset * UNIT_SIZE, q.end_offset, q.last_end_below(1 << 62))
        if have != (first, max_offset, max_phys):
            bad += 1
            findings.error(
                "queue_ends_mismatch",
                f"{rel}#{topic}/{qid}",
                f"lists first file {first}, max offset {max_offset}, max physical offset {max_phys}; the queue's "
                f"files hold {have[0]}, {have[1]}, {have[2]}, and the store would open the queue as listed",
            )
    if bad:
        damage.queue_ends_bad = True
