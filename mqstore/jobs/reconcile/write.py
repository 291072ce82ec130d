"""Reconcile's output: the findings dataset and summary.json (:func:`write_output`),
and the summary table printed at the end of a run (:func:`render_summary`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mqstore.jobs.reconcile.result import SEVERITY_RANK, ReconcileResult

FINDINGS_DIR = "findings"
SUMMARY_FILE = "summary.json"


def write_output(result: ReconcileResult, out_dir: Path) -> None:
    """``out_dir/findings/`` (a Parquet dataset: kind, severity, location, detail,
    file, position, commitlog_offset) and ``out_dir/summary.json``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fdir = out_dir / FINDINGS_DIR
    if fdir.exists():
        shutil.rmtree(fdir)
    fdir.mkdir(parents=True)
    rows = sorted(result.findings, key=lambda r: (-SEVERITY_RANK[r[1]], r[0], r[2]))
    files, positions = [], []
    for r in rows:
        loc = r[2]
        cut = max(loc.rfind("@"), loc.rfind("#"))
        if cut > 0 and loc[cut + 1 :].isdigit():
            files.append(loc[:cut])
            positions.append(int(loc[cut + 1 :]))
        else:
            files.append(loc)
            positions.append(None)
    table = pa.table(
        {
            "kind": pa.array([r[0] for r in rows], pa.string()),
            "severity": pa.array([r[1] for r in rows], pa.string()),
            "location": pa.array([r[2] for r in rows], pa.string()),
            "detail": pa.array([r[3] for r in rows], pa.string()),
            "file": pa.array(files, pa.string()),
            "position": pa.array(positions, pa.int64()),
            "commitlog_offset": pa.array([r[4] if r[4] >= 0 else None for r in rows], pa.int64()),
        }
    )
    pq.write_table(table, fdir / "part-00000.parquet")
    (fdir / "_SUCCESS").write_bytes(b"")
    tmp = out_dir / (SUMMARY_FILE + ".tmp")
    tmp.write_text(json.dumps(result.summary(), indent=2) + "\n")
    tmp.replace(out_dir / SUMMARY_FILE)


def render_summary(result: ReconcileResult) -> str:
    """The summary table printed at the end of a run."""
    c = result.counts
    mb_s = result.bytes / 1e6 / result.seconds if result.seconds > 0 else 0.0
    lines = [
        f"store      {result.store}",
        f"commitlog  {c['segments']:,} segments in {c['chunks']:,} chunks, {result.messages:,} records, {result.bytes:,} bytes"
        + (f", flushed to {result.flushed_offset:,}" if result.flushed_offset is not None else ""),
        f"queues     {c['queues']:,} queues, {c['units']:,} units",
        f"index      {c['index_files']:,} files, {c['index_entries']:,} entries ({c['index_keys_checked']:,} keys checked)",
        f"config     {c['consumer_offsets']:,} consumer offsets checked",
    ]
    if result.by_kind:
        width = max(len(k) for k in result.by_kind)
        lines.append("")
        lines.append(f"  {'severity':<8}  {'kind':<{width}}  {'count':>9}")
        order = sorted(result.by_kind, key=lambda k: (-SEVERITY_RANK[result.kind_severity[k]], k))
        for k in order:
            lines.append(f"  {result.kind_severity[k]:<8}  {k:<{width}}  {result.by_kind[k]:>9,}")
        lines.append("")
        shown: dict[str, int] = {}
        for kind, sev, loc, detail, _ in sorted(result.findings, key=lambda r: -SEVERITY_RANK[r[1]]):
            shown[kind] = shown.get(kind, 0) + 1
            if shown[kind] <= 3:
                lines.append(f"  {sev:<8} {kind:<26} {loc or '-':<44} {detail}")
    if result.repair:
        lines.append("")
        lines.append(f"repair     {result.repair.get('summary', '')}")
    verdict = "OK" if result.ok else "NOT OK"
    lines.append(
        f"{verdict}: {result.errors:,} errors, {result.by_severity.get('warning', 0):,} warnings in "
        f"{result.seconds:.2f} s ({mb_s:,.0f} MB/s)"
    )
    return "\n".join(lines)


__all__ = ["FINDINGS_DIR", "SUMMARY_FILE", "render_summary", "write_output"]
