"""``reconcile``: verify a store with Spark, the work spread over CommitLog chunks.

The checks are verify's (mqstore.store.verify), imported, not copied; this package
plans the work, runs it as two Spark jobs and puts the pieces together::

    driver     checkpoint and config files first (they may only lag the data read
               after them), the layout, segment names, the list of queues and
               index files; the chunks (a segment, or the part of one whose records
               start in [lo, hi), chunk_bytes each; the last segment with data is
               chunked up to where its data seems to end)
    job 1      per group of consume queues: files and units (verify's reader); the
               real units, as columns, cut by the chunk they point into and
               shuffled to that chunk's task (no chunk task opens a queue file)
    job 2      per index file: header and chains (verify's checks); per chunk:
               verify's walk of the records (CRC, layout, torn tails,
               resynchronisation), then the join with its units (from the
               shuffle) and the index entries that point into it (a binary search
               per index file, the files chosen by their headers, sent as a
               broadcast): size, queue, queue offset, tagsCode, and the keys the
               dispatcher would index against the entries present
    driver     what needs the whole log: queue-offset sequences across chunks,
               units and entries that point at no record (dangling, or past the end),
               records without a unit (missing, or not dispatched yet), index order
               across files, checkpoint timestamps, consumer offsets; then
               everything the checkpoint does not count as flushed is in flight

Only what the checkpoint records as flushed is reconciled: its confirm offset (5.x
layout), or without one the end of the last record stored no later than its
physic timestamp. Bytes past that point are reported once, as ``in_flight`` (info),
never as damage; findings about them (a torn last record, units or keys not
written yet) are folded into it. A checkpoint that counts bytes as flushed which
are not valid data is damage: ``commitlog_torn_tail`` or ``checkpoint_ahead``.

Usable without the CLI::

    from mqstore.jobs.spark import session
    result = reconcile(session("local[2]"), "./data/s1", output="./out")
    result.errors, result.by_kind

The package, one module per step: planning.py (the driver's plan), run.py (the
two Spark jobs and :func:`reconcile`; the tasks' functions live there, and Spark's
workers unpickle them by that module's path), assemble.py (the driver's checks over
the whole log), write.py (findings dataset, summary), result.py (what a run found).
"""

from mqstore.jobs.reconcile.planning import (
    DEFAULT_CHUNK_BYTES,
    NotAStoreError,
    Plan,
    check_output_dir,
    check_store_dir,
    plan,
)
from mqstore.jobs.reconcile.result import ReconcileResult
from mqstore.jobs.reconcile.run import reconcile
from mqstore.jobs.reconcile.write import render_summary, write_output

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "NotAStoreError",
    "Plan",
    "ReconcileResult",
    "check_output_dir",
    "check_store_dir",
    "plan",
    "reconcile",
    "render_summary",
    "write_output",
]
