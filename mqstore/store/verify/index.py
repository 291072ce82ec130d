"""Verify's check of the index files (``<store>/index/``) against the commitlog.

Per file, with the geometry the store was made with (layout file): the size is
``index_file_size``; the header agrees with the entries (index_count in range,
begin/end offsets of the first/last entry, hash_slot_count = entries that start a
chain); every chain is exactly what putKey builds (each entry's prev is the entry
before it in the same slot, each slot holds its newest entry), so every entry is
reachable by a query; entries are in commitlog order, also across files; each
entry points at a record start, or below the commitlog's min offset (retention).
Then the keys: the index entries the dispatcher makes for the sampled records
(``RecordTable.index_phys/index_hashes``, UNIQ_KEY and each KEYS element) are in
the files, for records the index covers (up to the last file's end offset; later
ones are indexed when the store next opens), and each (key hash, record) pair is in
one entry only (RocketMQ indexes the record at the end offset again after every
restart, and a repeated key twice; mqstore's IndexService puts each pair once).

    kind                   severity  meaning
    index_file_size        error     the store deletes it and rebuilds on open
    index_header           error     the header disagrees with the entries
    index_chain            error     a chain or slot is not what putKey builds: entries unreachable
    index_order            error     entries not in commitlog order
    index_entry_dangling   error     no record starts where the entry points
    index_key_missing      error     a record's key is not in the index
    index_entry_duplicate  error     one (key hash, record) pair in several entries: RocketMQ's
                                     queries count it again and again (max_num), so other
                                     messages drop out of answers; repair rebuilds the index
    index_entry_beyond_end warning   entries past the commitlog's valid end (the store drops them)
    index_stray_file       warning   the store ignores or removes it
    index_in_flux          info      the last file of a running store disagrees with itself (being written)
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mqstore.formats.index_file import INDEX_HEADER_BYTES, IndexFileView, IndexHeader, index_file_size
from mqstore.kernels import _verify
from mqstore.store.index_service import INDEX_DIR
from mqstore.store.verify.records import RecordTable
from mqstore.store.verify.report import Damage, Findings

_NAME = re.compile(r"[0-9]{17}")


@dataclass
class IndexSummary:
    files: int
    entries: int
    keys_checked: int


def index_files(store_dir: Path) -> list[Path] | None:
    """The index files, oldest first; None if the store has no index directory."""
    d = Path(store_dir) / INDEX_DIR
    if not d.is_dir():
        return None
    return sorted(p for p in d.iterdir() if _NAME.fullmatch(p.name) and p.is_file())


def index_end_offset(store_dir: Path) -> int | None:
    """What IndexService.max_physical_offset would be: the last file's
    end_phy_offset (-1 without files); None without an index directory."""
    files = index_files(store_dir)
    if files is None:
        return None
    if not files:
        return -1
    with files[-1].open("rb") as f:
        head = f.read(INDEX_HEADER_BYTES)
    return IndexHeader.decode(head).end_phy_offset if len(head) == INDEX_HEADER_BYTES else -1


def check_index(
    store_dir: Path,
    hash_slots: int,
    max_entries: int,
    table: RecordTable,
    findings: Findings,
    damage: Damage,
    *,
    running: bool,
) -> IndexSummary:
    """Check every index file and the sampled keys; see the module docstring."""
    d = Path(store_dir) / INDEX_DIR
    files = index_files(store_dir)
    if files is None:
        return IndexSummary(0, 0, 0)
    for p in sorted(d.iterdir()):
        if p not in files:
            tmp = p.name.endswith(".tmp")
            what = (
                "an unfinished file; the store removes it on open" if tmp else "not an index file; the store ignores it"
            )
            findings.warning("index_stray_file", f"{INDEX_DIR}/{p.name}", what)
            if not p.name.endswith(".tmp"):
                damage.stray_files.append(f"{INDEX_DIR}/{p.name}")
    size = index_file_size(hash_slots, max_entries)
    phys_parts, hash_parts = [], []
    last_phy = -1
    end_offset = -1
    for path in files:
        loc = f"{INDEX_DIR}/{path.name}"
        if (actual := path.stat().st_size) != size:
            findings.error(
                "index_file_size",
                loc,
                f"{actual} bytes, expected {size} ({hash_slots} slots x {max_entries} "
                "entries); the store deletes it and rebuilds the index when it opens",
            )
            damage.index_bad = True
            continue
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            in_flux = running and path == files[-1]  # a running store may be putting entries into it right now
            entries = check_header_and_chains(mm, loc, hash_slots, max_entries, findings, damage, in_flux=in_flux)
        if entries is None:
            continue
        phy = entries["phy_offset"].astype(np.int64)
        if len(phy):
            if phy[0] < last_phy:
                detail = f"its first entry points at {int(phy[0])}, before the previous file's last ({last_phy})"
                findings.error("index_order", loc, detail)
                damage.index_bad = True
            last_phy = int(phy[-1])
            end_offset = last_phy
        _check_targets(phy, loc, table, findings, damage, running=running)
        phys_parts.append(phy)
        hash_parts.append(entries["key_hash"].astype(np.int64))
    actual_phys = np.concatenate(phys_parts) if phys_parts else np.zeros(0, np.int64)
    actual_hash = np.concatenate(hash_parts) if hash_parts else np.zeros(0, np.int64)
    checked = _check_keys(actual_phys, actual_hash, end_offset, table, findings, damage)
    _check_duplicates(actual_phys, actual_hash, findings, damage)
    return IndexSummary(len(files), len(actual_phys), checked)


def _check_duplicates(phys: np.ndarray, hashes: np.ndarray, findings: Findings, damage: Damage) -> None:
    """Entries (of any files) that repeat a (record offset, key hash) pair: one
    finding per record, naming how many entries it has too many."""
    if len(phys) < 2:
        return
    if (np.diff(phys) >= 0).all():  # commitlog order (else index_order): one pass over each record's entries
        out = np.empty(len(phys), np.int64)
        dup_phys = out[: _verify.repeated_pairs(np.ascontiguousarray(phys), np.ascontiguousarray(hashes), out)]
    else:
        order = np.lexsort((hashes, phys))
        p, h = phys[order], hashes[order]
        dup_phys = p[1:][(p[1:] == p[:-1]) & (h[1:] == h[:-1])]
    if not dup_phys.size:
        return
    at, extra = np.unique(dup_phys, return_counts=True)
    for offset, n in zip(at.tolist(), extra.tolist()):
        findings.error(
            "index_entry_duplicate",
            INDEX_DIR,
            f"the record at commitlog offset {offset} is indexed {n} more "
            f"time(s) under a key it already has an entry for; RocketMQ's queries count each entry, "
            f"so other messages drop out of their answers",
        )
    damage.index_bad = True


def check_header_and_chains(
    mm: mmap.mmap,
    loc: str,
    hash_slots: int,
    max_entries: int,
    findings: Findings,
    damage: Damage,
    *,
    in_flux: bool = False,
) -> np.ndarray | None:
    """Header and chain checks of one index file mapped as ``mm`` (named ``loc`` in
    findings); its entries (None if unreadable). ``in_flux``: the file is being
    written, so disagreements are only info."""
    raw = IndexHeader.decode(mm[:INDEX_HEADER_BYTES])
    if not 0 <= raw.index_count <= max_entries:
        findings.error("index_header", loc, f"index_count {raw.index_count} is outside 0..{max_entries}")
        damage.index_bad = True
        return None
    view = IndexFileView(mm, hash_slots, max_entries)
    entries = view.entries()
    n = len(entries)
    problems = []
    if n and (raw.begin_phy_offset != entries["phy_offset"][0] or raw.end_phy_offset != entries["phy_offset"][-1]):
        detail = (
            f"begin/end offsets {raw.begin_phy_offset}/{raw.end_phy_offset} are not the first/last "
            f"entry's ({int(entries['phy_offset'][0])}/{int(entries['phy_offset'][-1])})"
        )
        problems.append(("index_header", detail))
    if n and raw.begin_timestamp > raw.end_timestamp:
        problems.append(("index_header", f"begin time {raw.begin_timestamp} is after end time {raw.end_timestamp}"))
    # The chains putKey builds: per slot, entries in put order, each pointing at the one before.
    (starts, negatives, drop, bad_prev, first, want_prev, bad_slots, slot, held, want_slot) = _verify.index_chains(
        mm, hash_slots, n
    )
    if drop >= 0:
        phy = entries["phy_offset"]
        problems.append(
            ("index_order", f"entry {drop + 1} points at {int(phy[drop])}, before entry {drop} ({int(phy[drop - 1])})")
        )
    if raw.hash_slot_count != starts:
        problems.append(("index_header", f"hash_slot_count {raw.hash_slot_count}, but {starts} entries start a chain"))
    if negatives:
        problems.append(("index_chain", f"{negatives} entries have a negative key hash"))
    if bad_prev:
        detail = (
            f"{bad_prev} entries link to the wrong previous entry (entry {first + 1}: prev "
            f"{int(entries['prev'][first])}, putKey would have written {want_prev})"
        )
        problems.append(("index_chain", detail))
    if bad_slots:
        detail = f"{bad_slots} slots do not hold their newest entry (slot {slot}: {held}, expected {want_slot})"
        problems.append(("index_chain", detail))
    for kind, detail in problems:
        if in_flux:
            findings.info("index_in_flux", loc, f"{detail} (the store is running and may be writing this file)")
        else:
            findings.error(kind, loc, detail)
    if problems and not in_flux:
        damage.index_bad = True
    return entries


def _check_targets(
    phy: np.ndarray, loc: str, table: RecordTable, findings: Findings, damage: Damage, *, running: bool
) -> None:
    sel = np.flatnonzero(phy >= table.min_offset)
    wanted = np.ascontiguousarray(phy[sel], np.int64)
    if len(wanted) > 1 and (np.diff(wanted) < 0).any():  # a damaged file (index_order): each looked up
        idx = np.minimum(np.searchsorted(table.phys, wanted), max(len(table.phys) - 1, 0))
        found = (table.phys[idx] == wanted) if len(table.phys) else np.zeros(len(sel), bool)
    else:  # commitlog order: one merge with the record starts
        found = np.zeros(len(sel), np.uint8)
        _verify.starts_found(np.ascontiguousarray(table.phys, np.int64), wanted, found)
        found = found.view(bool)
    beyond = ~found & (phy[sel] >= table.data_end)
    if beyond.any() and not running:
        findings.warning(
            "index_entry_beyond_end",
            loc,
            f"{int(beyond.sum())} entries point at or past the end of the "
            f"commitlog's valid data ({table.data_end}); the store drops them on open",
        )
    for i in sel[~found & ~beyond].tolist():
        detail = f"entry {i + 1} points at commitlog offset {int(phy[i])}, where no record starts"
        findings.error("index_entry_dangling", f"{loc}#{i + 1}", detail)
        damage.index_bad = True


def _check_keys(
    actual_phys: np.ndarray,
    actual_hash: np.ndarray,
    end_offset: int,
    table: RecordTable,
    findings: Findings,
    damage: Damage,
) -> int:
    """The expected (offset, key hash) pairs of records up to ``end_offset`` must
    all be among the files' entries. Returns how many were checked."""
    covered = (table.index_phys >= table.min_offset) & (table.index_phys <= end_offset)
    want_phys, want_hash = table.index_phys[covered], table.index_hashes[covered]
    if not len(want_phys):
        return 0
    # One merge in commitlog order (the entries are, unless the file is damaged: then
    # they are put in order first); an entry at no record start matches nothing.
    have_phys, have_hash = np.ascontiguousarray(actual_phys, np.int64), np.ascontiguousarray(actual_hash, np.int64)
    if len(have_phys) > 1 and (np.diff(have_phys) < 0).any():
        order = np.argsort(have_phys, kind="stable")
        have_phys, have_hash = have_phys[order], have_hash[order]
    want_phys, want_hash = np.ascontiguousarray(want_phys, np.int64), np.ascontiguousarray(want_hash, np.int64)
    if len(want_phys) > 1 and (np.diff(want_phys) < 0).any():
        order = np.argsort(want_phys, kind="stable")
        want_phys, want_hash = want_phys[order], want_hash[order]
    present = np.zeros(len(want_phys), np.uint8)
    _verify.keys_present(have_phys, have_hash, want_phys, want_hash, present)
    present = present.view(bool)
    missing = np.flatnonzero(~present)
    for i in missing.tolist():
        findings.error(
            "index_key_missing",
            f"{INDEX_DIR}",
            f"the record at commitlog offset {int(want_phys[i])} has a key "
            f"(hash {int(want_hash[i])}) that no index entry holds; a query by that key misses it",
        )
    if missing.size:
        damage.index_bad = True
    return len(want_phys)


__all__ = ["IndexSummary", "check_header_and_chains", "check_index", "index_end_offset", "index_files"]
