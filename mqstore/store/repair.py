"""``repair``: make a store whole again from its commitlog, the one source of truth.

Usable without the CLI: ``repair_store("./data/s1", dry_run=True).plan.steps``.

What it does, in order (each step only when ``verify`` found a reason for it):

1. takes the store's lock (a running store is refused: StoreLockedError) and runs
   ``verify`` under it, so the plan rests on files nobody else changes;
2. cuts the commitlog where recovery would cut it (a torn or garbage tail, a
   corrupt record): the same ``SegmentQueue.truncate_after`` recovery uses. If
   valid records lie past the cut it refuses, unless ``truncate_corrupt``; then
   the segments it changes are first copied aside;
3. moves derived files that disagree with the commitlog aside: the bad queues'
   directories and the index (moving the index is what makes the store re-dispatch
   from the commitlog's min offset; see MessageStore._resume_offset; the rebuilt index
   holds each (key, record) pair once, so this also removes duplicate entries), or, in a store
   without an index, every queue; unusable config files and stray files too;
   restores a config file the store reads from ``.bak``; lowers checkpoint
   timestamps that are ahead of the data;
4. releases the lock and opens the store (``MessageStore``): recovery, then the
   dispatcher rebuilds what was moved; with the store open, consumer offsets past
   their queue's end are set to that end; the store closes, writing its files;
5. runs ``verify`` again and reports what it says.

Nothing is deleted: what is moved or copied goes to ``<store>/repair-<time>/`` (the
"attic"), to look at or delete later. Between steps 3 and 4 the lock is free for a
moment (MessageStore takes its own); a process that opens the store then gets the
same repair from its own recovery and dispatch, and this one stops with
StoreLockedError.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from mqstore.errors import StoreLockedError
from mqstore.formats.checkpoint import Checkpoint
from mqstore.store.checkpoint_file import write_checkpoint
from mqstore.store.commitlog import COMMITLOG_DIR
from mqstore.store.config import STORE_TYPE_ROCKSDB
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR
from mqstore.store.index_service import INDEX_DIR
from mqstore.store.json_files import BAK_SUFFIX, CONFIG_DIR
from mqstore.store.layout import layout_for_reading
from mqstore.store.lockfile import StoreLock, lock_holder
from mqstore.store.mapped_file import fsync_dir
from mqstore.store.message_store import MessageStore
from mqstore.store.queue_ends import QUEUE_ENDS_FILE
from mqstore.store.segments import SegmentQueue
from mqstore.store.store_type import store_type_on_disk
from mqstore.store.verify import VerifyReport, verify_store
from mqstore.store.verify.report import QueueKey, Severity

log = structlog.get_logger(__name__)

ATTIC_PREFIX = "repair-"


@dataclass
class RepairPlan:
    """What repair will do, from one verify report. ``steps`` say it for people;
    ``refusals`` say why it will not run (empty: it may)."""

    steps: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    cut_at: int | None = None
    copy_cut_segments: bool = False
    move_queues: list[QueueKey] = field(default_factory=list)
    move_all_queues: bool = False
    move_index: bool = False
    index_enabled: bool = True
    checkpoint: Checkpoint | None = None
    config_from_bak: list[str] = field(default_factory=list)
    config_aside: list[str] = field(default_factory=list)
    stray_files: list[str] = field(default_factory=list)
    consumer_offsets: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    open_store: bool = False

    @property
    def nothing_to_do(self) -> bool:
        return not self.open_store


@dataclass
class RepairResult:
    """``before``: the verify report the plan came from; ``after``: verify once
    repaired (None for a dry run or a refusal); ``done``: the steps carried out."""

    store: Path
    plan: RepairPlan
    before: VerifyReport
    after: VerifyReport | None
    done: list[str]
    attic: Path | None
    dry_run: bool

    @property
    def ok(self) -> bool:
        """Not refused, and: the store verifies clean after the repair (or needed
        none), or, for a dry run, the repair would run."""
        if self.plan.refusals:
            return False
        if self.dry_run:
            return True
        return self.before.ok if self.after is None else self.after.ok


def plan_repair(report: VerifyReport, *, truncate_corrupt: bool = False) -> RepairPlan:
    """The repair a verify report calls for; see the module docstring."""
    d, store, plan = report.damage, report.store, RepairPlan()
    plan.index_enabled = (store / INDEX_DIR).is_dir()
    for why in d.commitlog_unrepairable:
        plan.refusals.append(f"the commitlog is damaged in a way repair cannot fix ({why}); restore it from a copy")
    if any(f.kind == "layout_unreadable" for f in report.findings):
        plan.refusals.append("config/mqstore.json is unreadable; restore it (repair needs the store's file sizes)")
    if d.commitlog_cut is not None:
        plan.cut_at = d.commitlog_cut
        if d.records_after_cut:
            if not truncate_corrupt:
                plan.refusals.append(
                    f"the commitlog is corrupt at offset {d.commitlog_cut} and {d.records_after_cut} valid records follow; "
                    "cutting there (what recovery does) loses them. To cut anyway, run repair with --truncate-corrupt "
                    "(it copies the segments it changes aside first, so their bytes stay available)"
                )
            plan.copy_cut_segments = True
            plan.steps.append(
                f"copy the commitlog segments from offset {d.commitlog_cut} on aside, then cut the commitlog there, "
                f"losing the corrupt record and the {d.records_after_cut} valid records after it"
            )
        else:
            plan.steps.append(
                f"cut the commitlog at offset {d.commitlog_cut}, where its valid data ends (as recovery does)"
            )
    if d.bad_queues:
        rocks = store_type_on_disk(store) == STORE_TYPE_ROCKSDB  # one RocksDB holds every queue: it goes whole
        if plan.index_enabled and not rocks:
            plan.move_queues = sorted(d.bad_queues)
            plan.steps += [
                f"move {CONSUME_QUEUE_DIR}/{t}/{q} aside and rebuild it from the commitlog" for t, q in plan.move_queues
            ]
        elif (store / CONSUME_QUEUE_DIR).is_dir():
            plan.move_all_queues = True
            why = "its RocksDB holds every queue" if rocks else "no index to move"
            plan.steps.append(f"move {CONSUME_QUEUE_DIR}/ aside and rebuild every queue from the commitlog ({why})")
    if plan.index_enabled and (d.index_bad or plan.move_queues):
        plan.move_index = True
        why = (
            "it disagrees with the commitlog"
            if d.index_bad
            else "so that the store dispatches from the commitlog's start"
        )
        plan.steps.append(f"move {INDEX_DIR}/ aside and rebuild it from the commitlog ({why})")
    for name in d.config_unusable:
        plan.config_aside.append(name)
        plan.steps.append(
            f"move {CONFIG_DIR}/{name} and its {BAK_SUFFIX} aside: neither is readable; the store starts it empty"
        )
    for name in d.config_from_bak:
        plan.config_from_bak.append(name)
        plan.steps.append(f"move the unusable {CONFIG_DIR}/{name} aside and restore it from {name}{BAK_SUFFIX}")
    plan.stray_files = list(d.stray_files)
    plan.steps += [f"move the stray file {p} aside" for p in plan.stray_files]
    if d.queue_ends_bad:
        rel = f"{CONFIG_DIR}/{QUEUE_ENDS_FILE}"
        plan.stray_files.append(rel)
        plan.steps.append(
            f"move {rel} aside: it disagrees with the queues (the store reads every queue when it next opens "
            "and writes it anew when it closes)"
        )
    cp = d.checkpoint
    newest = d.newest_store_timestamp_below_cut if plan.cut_at is not None else d.newest_store_timestamp
    if cp is not None and max(cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) > newest:
        plan.checkpoint = dataclasses.replace(
            cp,
            physic_msg_timestamp=min(cp.physic_msg_timestamp, newest),
            logics_msg_timestamp=min(cp.logics_msg_timestamp, newest),
            index_msg_timestamp=min(cp.index_msg_timestamp, newest),
        )
        plan.steps.append(f"lower the checkpoint's timestamps to the newest kept record's store time ({newest})")
    plan.consumer_offsets = list(d.consumer_offsets_past_end)
    plan.steps += [
        f"set group {g!r}'s offset on {t}:{q} from {off} to the queue's max offset"
        for g, t, q, off, _ in plan.consumer_offsets
    ]
    if plan.cut_at is not None:
        plan.steps.append("set any consumer offset the cut leaves past its queue's end to that end")
    # Warnings are what the store fixes on its own when it opens (a torn tail, records to dispatch).
    plan.open_store = bool(plan.steps) or any(
        f.severity is not Severity.INFO or f.kind == "unclean_shutdown" for f in report.findings
    )
    if plan.open_store:
        plan.steps.append("open the store (recovery, then the dispatcher builds what is missing) and close it")
    return plan


def repair_store(store_dir: str | Path, *, dry_run: bool = False, truncate_corrupt: bool = False) -> RepairResult:
    """Repair the store at ``store_dir``; see the module docstring. A dry run only
    verifies and plans (it takes no lock and changes nothing). Raises
    StoreLockedError if the store is running, FileNotFoundError if there is none."""
    store = Path(store_dir)
    if not (store / COMMITLOG_DIR).is_dir():
        raise FileNotFoundError(f"no store at {store} (it has no {COMMITLOG_DIR}/ directory)")
    if dry_run:
        holder = lock_holder(store)
        if holder is not None:
            raise StoreLockedError(_running_message(store, holder))
        report = verify_store(store)
        return RepairResult(store, plan_repair(report, truncate_corrupt=truncate_corrupt), report, None, [], None, True)
    try:
        lock = StoreLock(store)
    except StoreLockedError:
        raise StoreLockedError(_running_message(store, lock_holder(store))) from None
    try:
        report = verify_store(store, locked_by_caller=True)
        plan = plan_repair(report, truncate_corrupt=truncate_corrupt)
        if plan.refusals or plan.nothing_to_do:
            return RepairResult(store, plan, report, None, [], None, False)
        attic = _attic(store)
        done = _before_open(store, plan, attic)
    finally:
        lock.release()
    done += _with_store_open(store, plan)
    after = verify_store(store)
    log.info(
        "store_repaired", store=str(store), ok=after.ok, steps=len(done), attic=str(attic) if attic.exists() else None
    )
    return RepairResult(store, plan, report, after, done, attic if attic.exists() else None, False)


def _running_message(store: Path, holder: int | None) -> str:
    who = f"process {holder}" if holder else "another process"
    return f"{store} is open in {who}; stop it before repairing (mqstore verify reads a running store)"


def _attic(store: Path) -> Path:
    name = ATTIC_PREFIX + time.strftime("%Y%m%d-%H%M%S")
    attic, n = store / name, 1
    while attic.exists():
        n += 1
        attic = store / f"{name}-{n}"
    return attic


def _move_aside(store: Path, rel: str, attic: Path) -> None:
    """Rename ``<store>/<rel>`` to ``<attic>/<rel>`` (same file system: instant)."""
    src, dst = store / rel, attic / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dst)
    fsync_dir(src.parent)
    fsync_dir(dst.parent)


def _before_open(store: Path, plan: RepairPlan, attic: Path) -> list[str]:
    """Step 3 of the module docstring, under the caller's lock."""
    done: list[str] = []
    if plan.cut_at is not None:
        cfg = layout_for_reading(store)
        if plan.copy_cut_segments:
            first = plan.cut_at - plan.cut_at % cfg.segment_bytes  # segments start at multiples of their size
            for p in sorted((store / COMMITLOG_DIR).iterdir()):
                if p.name.isdigit() and int(p.name) >= first:
                    (attic / COMMITLOG_DIR).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(p, attic / COMMITLOG_DIR / p.name)
            done.append(f"copied the commitlog segments from {first} on to {attic / COMMITLOG_DIR}")
        segments = SegmentQueue(store / COMMITLOG_DIR, cfg.segment_bytes, preallocate=cfg.preallocate_segments)
        segments.load()
        try:
            deleted = segments.truncate_after(plan.cut_at)
        finally:
            segments.close()
        gone = f" (deleted segments {', '.join(deleted)})" if deleted else ""
        done.append(f"cut the commitlog at offset {plan.cut_at}{gone}")
    for topic, qid in plan.move_queues:
        if (store / CONSUME_QUEUE_DIR / topic / str(qid)).exists():
            _move_aside(store, f"{CONSUME_QUEUE_DIR}/{topic}/{qid}", attic)
            done.append(f"moved {CONSUME_QUEUE_DIR}/{topic}/{qid} to {attic}")
    if plan.move_all_queues:
        _move_aside(store, CONSUME_QUEUE_DIR, attic)
        done.append(f"moved {CONSUME_QUEUE_DIR}/ to {attic}")
    if plan.move_index:
        _move_aside(store, INDEX_DIR, attic)
        done.append(f"moved {INDEX_DIR}/ to {attic}")
    for name in plan.config_aside:
        for rel in (f"{CONFIG_DIR}/{name}", f"{CONFIG_DIR}/{name}{BAK_SUFFIX}"):
            if (store / rel).exists():
                _move_aside(store, rel, attic)
        done.append(f"moved {CONFIG_DIR}/{name} to {attic}")
    for name in plan.config_from_bak:
        rel = f"{CONFIG_DIR}/{name}"
        if (store / rel).exists():
            _move_aside(store, rel, attic)
        _copy_durably(store / f"{rel}{BAK_SUFFIX}", store / rel)
        done.append(f"restored {rel} from its {BAK_SUFFIX}")
    for rel in plan.stray_files:
        if (store / rel).exists():
            _move_aside(store, rel, attic)
            done.append(f"moved the stray file {rel} to {attic}")
    if plan.checkpoint is not None:
        write_checkpoint(store, plan.checkpoint)
        done.append("lowered the checkpoint's timestamps to the data's newest store time")
    return done


def _copy_durably(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dst)
    fsync_dir(dst.parent)


def _with_store_open(store: Path, plan: RepairPlan) -> list[str]:
    """Step 4: open the store (recovery and dispatch), fix consumer offsets, close."""
    cfg = dataclasses.replace(layout_for_reading(store), message_index_enable=plan.index_enabled)
    done = []
    with MessageStore(store, cfg, background_dispatch=False) as s:
        rec = s.commitlog.recovery
        done.append(
            f"opened the store: recovery kept the commitlog up to offset {rec.wrote_offset}, the dispatcher "
            f"dispatched {s.dispatcher.dispatched_records} records (consume-queue units, index entries)"
        )
        done += [
            f"set group {g!r}'s offset on {t}:{q} from {old} to {new}"
            for g, t, q, old, new in s.clamped_consumer_offsets
        ]
        done += _clamp_consumer_offsets(s)
    done.append("closed the store")
    return done


def _clamp_consumer_offsets(s: MessageStore) -> list[str]:
    """Set every consumer offset past its queue's max offset (as the open store has
    it, after any cut) to that max, as a broker corrects an overflowing pull; the
    store persists them when it closes. Every group is looked at, not only the ones
    verify named: a cut of the commitlog shortens queues too."""
    done = []
    for group in s.consumer_offsets.groups():
        for (topic, qid), offset in sorted(s.consumer_offsets.offsets(group).items()):
            cq = s.consume_queues.find(topic, qid)
            top = cq.max_offset if cq is not None else 0
            if 0 <= offset <= top:
                continue
            new = max(0, min(offset, top))
            try:
                s.consumer_offsets.commit(group, topic, qid, new)
            except ValueError as e:  # a topic name the store would never have written
                done.append(f"left group {group!r}'s offset on {topic}:{qid} alone: {e}")
                continue
            done.append(f"set group {group!r}'s offset on {topic}:{qid} from {offset} to {new}")
    return done


__all__ = ["ATTIC_PREFIX", "RepairPlan", "RepairResult", "plan_repair", "repair_store"]
