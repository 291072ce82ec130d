"""``reconcile --repair``: rebuilt consume queues and index files, written into the
output directory, never into the store.

What reconcile found wrong decides what is rebuilt (the facts in its Damage):

* every consume queue with damage (a wrong, missing or dangling unit, bad files),
  from all of its records in the commitlog, written by the store core's
  ``ConsumeQueue.put_units`` (RocketMQ's file format and rules: pre-blanks before the
  first unit of a queue whose head was deleted by retention, and so on); not in a
  store of type defaultRocksDB (one database for all queues: ``repair.json`` says
  how the store rebuilds it);
* the whole index when any index file is damaged (entries are in commitlog order
  across files, so one bad file means rebuilding all), by the store core's
  ``IndexService`` from the entries the dispatcher makes; each file is named after
  the store time of its first entry, so a rebuild of the same log is the same;
* ``config/consumerOffset.json`` with the offsets past their queue's end set to it.

Queues are rebuilt in parallel: each chunk task walks its records (verify's walk)
and sends the units of the damaged queues to the task that writes that queue. The
index is written by one task walking the chunks in order (its files are a chain).

Layout of ``<output>/repair/``, the same as a store's, and ``swap.sh`` with the
commands that move the damaged files aside and copy the rebuilt ones in (run it
with the store stopped; see README.md, "Reconciliation with Spark")::

    consumequeue/<topic>/<queueId>/<offset>    index/<yyyyMMddHHmmssSSS>
    config/consumerOffset.json                 swap.sh   repair.json

Commitlog damage is not repaired here (the log is the source of truth): cutting a
torn or corrupt commitlog is ``mqstore repair``'s job, and what a rebuild made from
a damaged log contains is what that log holds.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from pathlib import Path

import numpy as np
import structlog

from mqstore.jobs.units import ChunkSpec, walk_table
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR
from mqstore.store.consumer_offsets import CONSUMER_OFFSET_FILE, TOPIC_GROUP_SEPARATOR
from mqstore.store.index_service import INDEX_DIR
from mqstore.store.json_files import CONFIG_DIR, write_config_json

log = structlog.get_logger(__name__)


class EntryClock:
    """The clock an IndexService names new files with: set to the store time of
    the first entry of the file about to be created."""

    def __init__(self) -> None:
        self.ms = 0

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return time.monotonic()


def queue_units_of_chunk(spec: ChunkSpec, wanted: set[tuple[str, int]]) -> list[tuple[tuple[str, int], tuple]]:
    """(queue, (queue offsets, commitlog offsets, sizes, tagsCodes)) for the records
    of the wanted queues in one chunk, in commitlog order."""
    table, _ = walk_table(spec)
    if table is None or not len(table.phys):
        return []
    keys = {table.queue_key(t, q): (t, q) for t, q in wanted if table.queue_key(t, q) is not None}
    if not keys:
        return []
    sel = np.flatnonzero(table.advances & np.isin(table.queue_keys, np.array(list(keys), np.int64)))
    out = []
    for key in np.unique(table.queue_keys[sel]).tolist():
        rows = sel[table.queue_keys[sel] == key]
        out.append(
            (keys[key], (table.queue_offsets[rows], table.phys[rows], table.sizes[rows], table.tags_codes[rows]))
        )
    return out


def write_queue(out_dir: str, file_bytes: int, queue: tuple[str, int], parts: list[tuple]) -> tuple[str, int, int]:
    """Write one queue's units (from every chunk) with the store core's ConsumeQueue."""
    from mqstore.store.consume_queue import ConsumeQueue

    topic, qid = queue
    qo = np.concatenate([p[0] for p in parts])
    phys = np.concatenate([p[1] for p in parts])
    order = np.argsort(phys, kind="stable")
    cq = ConsumeQueue(out_dir, topic, qid, file_bytes=file_bytes, preallocate=False)
    try:
        if len(order):
            cq.put_units(
                qo[order],
                phys[order],
                np.concatenate([p[2] for p in parts])[order],
                np.concatenate([p[3] for p in parts])[order],
            )
        cq.flush()
    finally:
        cq.close()
    return topic, qid, len(order)


def write_index(out_dir: str, chunks: list[ChunkSpec], hash_slots: int, max_entries: int) -> dict:
    """Rebuild every index file from the chunks, in commitlog order (one task)."""
    from mqstore.store.index_service import IndexService

    clock = EntryClock()
    svc = IndexService(out_dir, hash_slots=hash_slots, max_entries=max_entries, clock=clock, preallocate=False)
    svc.load(True, 0)
    per_file = max_entries - 1
    put = 0
    try:
        for spec in chunks:
            if spec.after_data:
                continue
            _, entries = walk_table(spec, with_entries=True)
            if entries is None:
                continue
            hashes, phys, ts = entries
            i = 0
            while i < len(phys):
                room = per_file - put % per_file
                j = min(len(phys), i + room)
                if put % per_file == 0:
                    clock.ms = int(ts[i])  # a new file starts with this entry: name it after its store time
                svc.put((hashes[i:j], phys[i:j], ts[i:j]))
                put += j - i
                i = j
        svc.flush()
        files = svc.files
    finally:
        svc.close()
    return {"entries": put, "files": list(files)}


def _clamped_offsets(state, damage) -> dict | None:
    """consumerOffset.json with the offsets past their queue's end set to the end."""
    cfg = state.configs.get(CONSUMER_OFFSET_FILE)
    if cfg is None or cfg.value is None or not damage.consumer_offsets_past_end:
        return None
    table, extra = cfg.value
    fixed = {
        (f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", qid): top
        for group, topic, qid, _off, top in damage.consumer_offsets_past_end
    }
    out = {}
    for key, queues in table.items():
        out[key] = {str(q): fixed.get((key, q), o) for q, o in sorted(queues.items())}
    return {**extra, "offsetTable": out}


def rebuild(spark, plan, result, out: Path, state) -> dict:
    """Write what ``result`` says is damaged into ``out`` (see the module
    docstring); returns what was written (also saved as ``out/repair.json``)."""
    damage = result.damage
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    sc = spark.sparkContext
    cfg, chunks = plan.cfg, plan.chunks
    queues = sorted(damage.bad_queues)
    summary: dict = {"dir": str(out), "queues": [], "index": None, "consumer_offsets": 0, "not_repaired": []}
    t0 = time.perf_counter()
    out_s = str(out)
    if queues and plan.rocks:
        summary["not_repaired"].append(
            f"{len(queues)} consume queues are damaged in a defaultRocksDB store (one database for every queue, "
            "not rebuilt here): with the store stopped, move consumequeue/ aside and open the store with "
            "--store-type defaultRocksDB; it dispatches the commitlog into a new database"
        )
    elif queues and chunks:
        wanted = set(queues)
        fb = cfg.consume_queue_file_bytes
        n = max(1, min(len(queues), sc.defaultParallelism * 2))
        index_of = {q: i for i, q in enumerate(queues)}
        written = (
            sc.parallelize(chunks, len(chunks))
            .flatMap(lambda spec: queue_units_of_chunk(spec, wanted))
            .groupByKey(n, lambda q: index_of[q])
            .map(lambda kv: write_queue(out_s, fb, kv[0], list(kv[1])))
            .collect()
        )
        done = {(t, q) for t, q, _ in written}
        for t, q in queues:  # damaged queues with no record at all: an empty directory says "remove it"
            if (t, q) not in done:
                (out / CONSUME_QUEUE_DIR / t / str(q)).mkdir(parents=True, exist_ok=True)
                written.append((t, q, 0))
        summary["queues"] = [{"topic": t, "queue_id": q, "units": n_} for t, q, n_ in sorted(written)]
        log.info(
            "reconcile_repair",
            rebuilt="consume_queues",
            queues=len(written),
            seconds=round(time.perf_counter() - t0, 2),
        )
    if damage.index_bad and chunks:
        slots, entries = cfg.index_hash_slots, cfg.index_max_entries
        summary["index"] = sc.parallelize([0], 1).map(lambda _: write_index(out_s, chunks, slots, entries)).collect()[0]
        log.info(
            "reconcile_repair",
            rebuilt="index",
            files=len(summary["index"]["files"]),
            seconds=round(time.perf_counter() - t0, 2),
        )
    offsets = _clamped_offsets(state, damage)
    if offsets is not None:
        write_config_json(out / CONFIG_DIR / CONSUMER_OFFSET_FILE, offsets)
        summary["consumer_offsets"] = len(damage.consumer_offsets_past_end)
    if damage.commitlog_cut is not None or damage.commitlog_unrepairable:
        summary["not_repaired"].append(
            "the commitlog is damaged: reconcile rebuilds derived files only; cut it with "
            "`mqstore repair` (--truncate-corrupt when valid records follow the damage)"
        )
    if damage.checkpoint_fix:
        summary["not_repaired"].append("the checkpoint is ahead of the data: `mqstore repair` lowers it")
    parts = []
    if summary["queues"]:
        parts.append(f"{len(summary['queues'])} consume queues")
    if summary["index"]:
        parts.append(f"{len(summary['index']['files'])} index files")
    if summary["consumer_offsets"]:
        parts.append(f"{summary['consumer_offsets']} consumer offsets")
    summary["summary"] = (
        f"rebuilt {', '.join(parts)} in {out}; swap them in with the store stopped: bash {out}/swap.sh"
        if parts
        else "nothing to rebuild"
    )
    (out / "swap.sh").write_text(swap_script(plan.store, out, summary))
    (out / "repair.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def swap_script(store: Path, out: Path, summary: dict) -> str:
    """A shell script that moves the damaged files of ``store`` aside (into
    ``<store>/reconcile-aside-<time>/``) and copies the rebuilt ones in."""
    s, o = shlex.quote(str(store.resolve())), shlex.quote(str(out.resolve()))
    lines = [
        "#!/usr/bin/env bash",
        "# Swap reconcile's rebuilt files into the store. Run it with the store STOPPED.",
        "set -euo pipefail",
        f"STORE={s}",
        f"REPAIR={o}",
        'if [ -e "$STORE/lock" ] && command -v flock >/dev/null && ! flock -n "$STORE/lock" true; then',
        '  echo "the store is running (its lock is held): stop it first" >&2; exit 1',
        "fi",
        'ASIDE="$STORE/reconcile-aside-$(date +%Y%m%d%H%M%S)"',
        'mkdir -p "$ASIDE"',
    ]
    for q in summary["queues"]:
        rel = shlex.quote(f"{CONSUME_QUEUE_DIR}/{q['topic']}/{q['queue_id']}")
        lines += [
            f'mkdir -p "$ASIDE/$(dirname {rel})" "$STORE/$(dirname {rel})"',
            f'if [ -e "$STORE/"{rel} ]; then mv "$STORE/"{rel} "$ASIDE/"{rel}; fi',
            f'cp -a "$REPAIR/"{rel} "$STORE/"{rel}',
        ]
    if summary["index"]:
        lines += [
            f'if [ -e "$STORE/{INDEX_DIR}" ]; then mv "$STORE/{INDEX_DIR}" "$ASIDE/{INDEX_DIR}"; fi',
            f'cp -a "$REPAIR/{INDEX_DIR}" "$STORE/{INDEX_DIR}"',
        ]
    if summary["consumer_offsets"]:
        rel = f"{CONFIG_DIR}/{CONSUMER_OFFSET_FILE}"
        lines += [
            f'mkdir -p "$ASIDE/{CONFIG_DIR}"',
            f'if [ -e "$STORE/{rel}" ]; then cp -a "$STORE/{rel}" "$ASIDE/{rel}"; fi',
            f'cp "$REPAIR/{rel}" "$STORE/{rel}"',
        ]
    lines.append('echo "swapped in; the replaced files are in $ASIDE"')
    return "\n".join(lines) + "\n"


__all__ = ["EntryClock", "queue_units_of_chunk", "rebuild", "swap_script", "write_index", "write_queue"]
