"""Reconcile's assembly, on the driver: the tasks' results put together, and the
checks that need the whole log: queue-offset sequences across chunks, units and
entries that point at no record (dangling, or past the end), records without a unit
(missing, or not dispatched yet), index order across files, checkpoint timestamps,
consumer offsets; then everything the checkpoint does not count as flushed is in
flight (see the package docstring)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mqstore.jobs.reconcile.planning import Plan
from mqstore.jobs.reconcile.result import Collector, ReconcileResult
from mqstore.jobs.units import ChunkResult
from mqstore.store.commitlog import COMMITLOG_DIR
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR
from mqstore.store.verify import resume_offset
from mqstore.store.verify.report import Damage
from mqstore.store.verify.state import check_checkpoint, check_configs

# Findings about the end of the valid data: past the flushed point they are in flight.
# Garbage (no record magic) is never an append in progress, so it stays damage.
_TAIL_KINDS = {"commitlog_torn_tail", "commitlog_tail_in_flux", "commitlog_crc"}


def assemble(p: Plan, state, derived_meta: list[tuple], results: list[ChunkResult], index_end: int) -> ReconcileResult:
    """The driver's part: checks that need the whole log, in-flight folding, totals.
    ``state`` is verify's read_state of the store, ``derived_meta`` the queue and
    index tasks' results, ``results`` the chunk tasks' in chunk order."""
    damage = p.pre_damage
    out = Collector()
    out.merge(p.pre)
    cp = state.checkpoint
    # ---- the commitlog as a whole
    data_end = max((r.data_end for r in results if r.data_end >= 0), default=p.min_offset)
    log_end = data_end
    for r in results:
        if r.closed:
            spec_base = next((c.base for c in p.chunks if c.number == r.number), None)
            if spec_base is not None:
                log_end = max(log_end, spec_base + p.cfg.segment_bytes)
    if cp is not None and cp.confirm_phy_offset > 0:
        flushed: int | None = cp.confirm_phy_offset
        flushed_how = "the checkpoint's confirm offset"
    elif cp is not None and cp.physic_msg_timestamp > 0:
        flushed = max((r.flushed_end for r in results), default=-1)
        flushed = None if flushed < 0 else flushed
        flushed_how = "the last record stored by the checkpoint's physic timestamp"
    else:
        flushed, flushed_how = None, ""
    limit = flushed if flushed is not None else 1 << 62
    cuts = [r.commitlog_cut for r in results if r.commitlog_cut is not None]
    tail_upgraded = False
    in_flight = {"bytes": 0, "records": 0, "findings": 0}
    for r in results:
        if r.unrepairable:
            damage.commitlog_unrepairable.extend(r.unrepairable)
    # the first cut that is damage (not in flight) is where recovery would cut
    for r in results:

        def keep(row, r=r):
            nonlocal tail_upgraded
            kind, _sev, loc, detail, off = row
            if off >= 0 and kind in _TAIL_KINDS and off >= limit and not _valid_after(results, r, off):
                in_flight["findings"] += 1
                return None
            if kind in ("commitlog_torn_tail", "commitlog_tail_in_flux") and flushed is not None and off < limit:
                tail_upgraded = True
                why = f"{detail}; {flushed_how} ({flushed}) counts these bytes as flushed: acknowledged data is lost"
                return ("commitlog_torn_tail", "error", loc, why, off)
            return row

        out.merge(r.findings, keep)
    real_cuts = [c for c in cuts if c < limit or any(r.data_start > c for r in results)]
    damage.commitlog_cut = min(real_cuts) if real_cuts else None
    if damage.commitlog_cut is not None:
        cut_chunk = next(r for r in results if r.commitlog_cut == damage.commitlog_cut)
        damage.records_after_cut = cut_chunk.records_after_cut + sum(
            r.records for r in results if r.number > cut_chunk.number and r.data_start >= 0
        )
        damage.newest_store_timestamp_below_cut = max(
            [r.newest_store_timestamp for r in results if r.number < cut_chunk.number] + [cut_chunk.newest_below_cut]
        )
    newest = max((r.newest_store_timestamp for r in results), default=0)
    damage.newest_store_timestamp = newest
    first_ts: dict[int, int] = {}
    for r in results:
        first_ts.update(r.first_store_timestamps)
    # in flight: valid records at or past the flushed point
    if flushed is not None and flushed < log_end:
        in_flight["bytes"] = log_end - flushed
    _chunk_boundaries(p, results, out)
    # ---- consume queues
    meta: dict[tuple[str, int], dict] = {}
    index_meta: list[dict] = []
    for kind, res in derived_meta:
        if kind == "queues":
            out.merge(res["findings"])
            meta.update(res["meta"])
            damage.bad_queues |= res["bad_queues"]
            damage.stray_files.extend(res["stray"])
        else:
            out.merge(res["findings"])
            index_meta.append(res)
            damage.index_bad |= bool(res.get("index_bad"))
    for r in results:
        damage.bad_queues |= r.bad_queues
        damage.index_bad |= r.index_bad
    queue_max = _sequences_and_max(results, meta, out)
    for key, m in meta.items():
        queue_max.setdefault(key, m["end"])
    fake_table = SimpleNamespace(min_offset=p.min_offset, data_end=data_end, first_store_timestamps=first_ts)
    fake_queues = {k: _QueueEnds(m) for k, m in meta.items()}
    resume = resume_offset(p.store, fake_table, fake_queues, damage, cp, clean=p.clean)
    _dangling_units(results, data_end, limit, p.running, out, damage, in_flight)
    in_flight["records"] += _unmatched_records(results, meta, resume, limit, p.running, out, damage)
    # ---- index
    _index_order(index_meta, out, damage)
    _dangling_entries(results, data_end, limit, p.running, out, damage, in_flight)
    _missing_keys(results, limit, out, damage, in_flight)
    # ---- checkpoint and consumer offsets (verify's checks)
    cp_findings = Collector()
    check_checkpoint(state, newest, cp_findings, damage)
    for row in cp_findings.rows:
        if row[0] == "checkpoint_ahead" and tail_upgraded:
            continue  # the torn tail counted as flushed says it already
        out.row(*row)
    if (
        flushed is not None
        and cp is not None
        and cp.confirm_phy_offset > log_end
        and not tail_upgraded
        and not p.running
    ):
        out.row(
            "checkpoint_ahead",
            "error",
            "checkpoint",
            f"confirm_phy_offset {cp.confirm_phy_offset} is past the end "
            f"of the commitlog's valid data ({log_end}): data it counts as flushed is gone",
        )
        damage.checkpoint_fix = True
    offsets_checked = check_configs(state, queue_max, out, damage)
    if in_flight["bytes"] > 0 or in_flight["findings"]:
        loc = _segment_location(p, flushed) if flushed is not None else "commitlog"
        out.row(
            "in_flight",
            "info",
            loc,
            f"{in_flight['bytes']:,} bytes past {flushed_how} ({flushed}) are still being "
            f"written or not yet flushed: not reconciled ({in_flight['records']:,} records without units, "
            f"{in_flight['findings']:,} findings about them set aside)",
            flushed if flushed is not None else -1,
        )
    messages = sum(r.records for r in results)
    data_bytes = sum(r.bytes for r in results)
    counts = {
        "segments": len(p.segments),
        "chunks": len(p.chunks),
        "records": messages,
        "corrupt_records": sum(r.corrupt for r in results),
        "queues": len(meta),
        "units": sum(m["real"] for m in meta.values()),
        "units_checked": sum(r.units_checked for r in results),
        "index_files": len(index_meta),
        "index_entries": sum(m.get("entries", 0) for m in index_meta),
        "index_keys_checked": sum(r.keys_checked for r in results),
        "consumer_offsets": offsets_checked,
        "data_end": data_end,
        "resume_offset": resume,
    }
    return ReconcileResult(
        p.store,
        out.rows,
        out.by_kind,
        out.by_severity,
        out.kind_severity,
        messages,
        data_bytes,
        0.0,
        counts,
        in_flight,
        flushed,
        damage,
    )


class _QueueEnds:
    """Stand-in for verify's QueueFiles in its resume_offset: the last real unit ends."""

    def __init__(self, meta: dict) -> None:
        self.ends = np.array(meta["tail_ends"], np.int64)
        self.more = meta["more_before_tail"]
        self.unreadable = meta["unreadable"]

    def last_end_below(self, limit: int) -> int:
        if self.unreadable or not len(self.ends):
            return -1
        ok = np.flatnonzero(self.ends <= limit)
        return int(self.ends[ok[-1]]) if ok.size else -1


def _valid_after(results: list[ChunkResult], r: ChunkResult, off: int) -> bool:
    """Valid records lie past ``off`` (so bytes there are not a tail in flight)."""
    return any(x.data_end > off and x.data_start > off for x in results if x.number >= r.number)


def _segment_location(p: Plan, offset: int) -> str:
    base = offset - offset % p.cfg.segment_bytes
    return f"{COMMITLOG_DIR}/{base:020d}@{offset - base}"


def _chunk_boundaries(p: Plan, results: list[ChunkResult], out: Collector) -> None:
    """Consecutive chunks of one segment must meet: where one walk ended the next
    one's first record starts (a signature found inside a record would break this)."""
    by_number = {r.number: r for r in results}
    for c in p.chunks:
        r, nxt = by_number.get(c.number), by_number.get(c.number + 1)
        if r is None or nxt is None or c.after_data or nxt.data_start < 0:
            continue
        if p.chunks[c.number + 1].base != c.base or r.closed or r.data_stopped is not None or r.data_start < 0:
            continue
        if r.walk_end != nxt.data_start:
            out.row(
                "commitlog_chunk_boundary",
                "warning",
                _segment_location(p, nxt.data_start),
                f"the walk of the chunk before ended at {r.walk_end}, but the next record signature is at "
                f"{nxt.data_start}: a record holds bytes that look like a record start",
                nxt.data_start,
            )


def _sequences_and_max(results: list[ChunkResult], meta: dict, out: Collector) -> dict[tuple[str, int], int]:
    """Queue offsets of one queue's records must follow each other across chunks
    too; returns each queue's max offset as the store will have it (verify's
    check_records: one past its last unit or its last record)."""
    last: dict[tuple[str, int], tuple[int, int]] = {}
    queue_max: dict[tuple[str, int], int] = {}
    for r in results:
        for q, phys, qo, prev in r.sequence:
            out.row(
                "queue_offset_sequence",
                "error",
                f"{CONSUME_QUEUE_DIR}/{q[0]}/{q[1]}",
                f"the record at commitlog "
                f"offset {phys} has queue offset {qo}, but the one before it in this queue has {prev}",
                phys,
            )
        for q, (fqo, fph, lqo, _lph, _n) in r.queues.items():
            if q in last and last[q][0] + 1 != fqo:
                out.row(
                    "queue_offset_sequence",
                    "error",
                    f"{CONSUME_QUEUE_DIR}/{q[0]}/{q[1]}",
                    f"the record at commitlog "
                    f"offset {fph} has queue offset {fqo}, but the one before it in this queue has {last[q][0]}",
                    fph,
                )
            last[q] = (lqo, _lph)
            queue_max[q] = max(queue_max.get(q, 0), lqo + 1)
    for q, m in meta.items():
        queue_max[q] = max(queue_max.get(q, 0), m["end"])
    return queue_max


def _dangling_units(
    results, data_end: int, limit: int, running: bool, out: Collector, damage: Damage, in_flight: dict
) -> None:
    beyond: dict[tuple[str, int], list[int]] = {}
    for r in results:
        for (topic, qid), (qoffs, phys) in r.unmatched_units.items():
            loc = f"{CONSUME_QUEUE_DIR}/{topic}/{qid}"
            past = phys >= data_end
            late = phys >= limit
            if late.any():
                in_flight["findings"] += int(late.sum())
            b = past & ~late
            if b.any():
                beyond.setdefault((topic, qid), []).extend(qoffs[b].tolist())
            for qo, ph in zip(qoffs[~past & ~late].tolist(), phys[~past & ~late].tolist()):
                out.row(
                    "cq_unit_dangling",
                    "error",
                    f"{loc}#{qo}",
                    f"unit at queue offset {qo} points at commitlog offset {ph}, where no record starts",
                    ph,
                )
                damage.bad_queues.add((topic, qid))
    if running:
        return
    for (topic, qid), qoffs in beyond.items():
        first = min(qoffs)
        out.row(
            "cq_unit_beyond_end",
            "warning",
            f"{CONSUME_QUEUE_DIR}/{topic}/{qid}#{first}",
            f"{len(qoffs)} units from "
            f"queue offset {first} point at or past the end of the commitlog's valid data ({data_end}); the store "
            "drops them on open",
        )


def _unmatched_records(
    results, meta: dict, resume: int, limit: int, running: bool, out: Collector, damage: Damage
) -> int:
    """verify's record side (queues.check_records) for the records no unit points
    at; returns how many of them are in flight."""
    per_queue: dict[tuple[str, int], list[tuple[np.ndarray, np.ndarray]]] = {}
    for r in results:
        for q, arrays in r.unmatched_records.items():
            per_queue.setdefault(q, []).append(arrays)
    flying = 0
    for q, parts in per_queue.items():
        qo = np.concatenate([a for a, _ in parts])
        ph = np.concatenate([b for _, b in parts])
        m = meta.get(q)
        if m is not None and m["unreadable"]:
            continue
        late_flight = ph >= limit
        flying += int(late_flight.sum())
        qo, ph = qo[~late_flight], ph[~late_flight]
        if not len(qo):
            continue
        loc = f"{CONSUME_QUEUE_DIR}/{q[0]}/{q[1]}"
        first, end = (m["first"], m["end"]) if m is not None else (0, 0)
        inside = (qo >= first) & (qo < end)
        pre = np.zeros(len(qo), bool)
        if m is not None:
            for a, b in m["pre_blank"]:
                pre |= (qo >= a) & (qo < b)
        hole = (qo < first) | (inside & pre)
        for i in np.flatnonzero(hole).tolist():
            out.row(
                "cq_unit_missing",
                "error",
                f"{loc}#{int(qo[i])}",
                f"the record at commitlog offset {int(ph[i])} "
                f"(queue offset {int(qo[i])}) has no unit: the queue holds none there",
                int(ph[i]),
            )
        if hole.any():
            damage.bad_queues.add(q)
        after = np.flatnonzero(qo >= end)
        if not after.size:
            continue
        if running:
            out.row(
                "cq_not_written",
                "info",
                loc,
                f"{after.size} records past the last unit on disk (the running store may hold their units in memory)",
            )
            continue
        late = ph[after] >= resume
        if late.any():
            damage.queues_not_dispatched = True
            out.row(
                "cq_not_dispatched",
                "warning",
                loc,
                f"{int(late.sum())} records from commitlog offset "
                f"{int(ph[after][late][0])} are not dispatched yet; the store dispatches them when it opens",
            )
        if not late.all():
            early = after[~late]
            out.row(
                "cq_unit_missing",
                "error",
                f"{loc}#{int(qo[early[0]])}",
                f"{early.size} records (queue offsets "
                f"{int(qo[early[0]])}..{int(qo[early[-1]])}, from commitlog offset {int(ph[early[0]])}) have no unit, "
                f"and the store will not dispatch them again (it resumes at {resume})",
                int(ph[early[0]]),
            )
            damage.bad_queues.add(q)
    return flying


def _index_order(index_meta: list[dict], out: Collector, damage: Damage) -> None:
    last_phy = -1
    for m in sorted(index_meta, key=lambda m: m["name"]):
        if m.get("entries"):
            if m["first"] < last_phy:
                out.row(
                    "index_order",
                    "error",
                    f"index/{m['name']}",
                    f"its first entry points at {m['first']}, before the previous file's last ({last_phy})",
                )
                damage.index_bad = True
            last_phy = m["last"]


def _dangling_entries(
    results, data_end: int, limit: int, running: bool, out: Collector, damage: Damage, in_flight: dict
) -> None:
    beyond: dict[str, int] = {}
    for r in results:
        for name, numbers, phys in r.unmatched_entries:
            past = phys >= data_end
            late = phys >= limit
            in_flight["findings"] += int(late.sum())
            b = past & ~late
            if b.any():
                beyond[name] = beyond.get(name, 0) + int(b.sum())
            for num, ph in zip(numbers[~past & ~late].tolist(), phys[~past & ~late].tolist()):
                out.row(
                    "index_entry_dangling",
                    "error",
                    f"index/{name}#{num}",
                    f"entry {num} points at commitlog offset {ph}, where no record starts",
                    ph,
                )
                damage.index_bad = True
    if running:
        return
    for name, n in sorted(beyond.items()):
        out.row(
            "index_entry_beyond_end",
            "warning",
            f"index/{name}",
            f"{n} entries point at or past the end of the "
            f"commitlog's valid data ({data_end}); the store drops them on open",
        )


def _missing_keys(results, limit: int, out: Collector, damage: Damage, in_flight: dict) -> None:
    for r in results:
        if not r.missing_keys:
            continue
        phys, hashes = r.missing_keys
        late = phys >= limit
        in_flight["findings"] += int(late.sum())
        for ph, h in zip(phys[~late].tolist(), hashes[~late].tolist()):
            out.row(
                "index_key_missing",
                "error",
                "index",
                f"the record at commitlog offset {ph} has a key (hash {h}) "
                "that no index entry holds; a query by that key misses it",
                ph,
            )
            damage.index_bad = True


__all__ = ["assemble"]
