"""``mqstore verify`` and ``mqstore repair``: the store's health, for people and scripts.

The checking and repairing live in the store core (mqstore.store.verify,
mqstore.store.repair); this module only turns their reports into text or JSON and
exit statuses: 0 when the store is (or was made) healthy, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from mqstore.store.verify.report import Finding, VerifyReport


class ReportFormat(str, Enum):
    text = "text"
    json = "json"


class IndexKeysChoice(str, Enum):
    full = "full"
    sample = "sample"
    off = "off"


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def _finding_line(f: Finding) -> str:
    return f"  {f.severity.value:<8} {f.kind:<26} {f.location or '-':<44} {f.detail}"


def render_report(report: VerifyReport) -> str:
    """A verify report as a few lines for people: what was read, the findings, a verdict."""
    c = report.counts
    mb_s = report.bytes / 1e6 / report.seconds if report.seconds > 0 else 0.0
    lines = [
        f"store      {report.store}",
        f"commitlog  {_plural(c['segments'], 'segment')}, {_plural(report.messages, 'record')}, {report.bytes:,} bytes",
        f"queues     {_plural(c['queues'], 'queue')}, {_plural(c['units'], 'unit')}",
        (
            f"index      {_plural(c['index_files'], 'file')}, {_plural(c['index_entries'], 'entry', 'entries')} "
            f"({c['index_keys_checked']:,} keys checked)"
        ),
        f"config     {_plural(c['consumer_offsets'], 'consumer offset')} checked",
    ]
    lines += [_finding_line(f) for f in report.findings]
    verdict = "OK" if report.ok else "NOT OK"
    lines.append(
        f"{verdict}: {_plural(c['errors'], 'error')}, {_plural(c['warnings'], 'warning')} "
        f"in {report.seconds:.2f} s ({mb_s:,.0f} MB/s)"
    )
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("verify")
    def verify(
        store: Annotated[
            Path, typer.Option("--store", help="Store directory to check (read only: no lock, no writes).")
        ],
        fmt: Annotated[
            ReportFormat, typer.Option("--format", help="text (a summary for people) or json (one object).")
        ] = (ReportFormat.text),
        index_keys: Annotated[
            IndexKeysChoice,
            typer.Option(
                "--index-keys",
                help="Check that records' keys are in the index: full, sample (the first million records, "
                "then every 16th) or off.",
            ),
        ] = IndexKeysChoice.sample,
    ) -> None:
        """Check that the commitlog, consume queues, index files, checkpoint and config
        files agree; exit 0 if no finding is an error, 1 otherwise. Works on a running
        store (it reads what is on disk)."""
        from mqstore.store.verify import verify_store

        report = verify_store(store, index_keys=index_keys.value)
        if fmt is ReportFormat.json:
            print(json.dumps(report.to_json()), flush=True)
        else:
            print(render_report(report), flush=True)
            if not report.ok:
                print(f"see what repair would do: mqstore repair --store {store} --dry-run", flush=True)
        raise typer.Exit(0 if report.ok else 1)

    @app.command("repair")
    def repair(
        store: Annotated[Path, typer.Option("--store", help="Store directory to repair (it must not be running).")],
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Print what repair would do and change nothing.")
        ] = False,
        truncate_corrupt: Annotated[
            bool,
            typer.Option(
                "--truncate-corrupt",
                help="Cut the commitlog at a corrupt record even though valid records follow it "
                "(they are lost; the cut segments are copied aside first).",
            ),
        ] = False,
    ) -> None:
        """Cut torn commitlog tails and rebuild consume queues and index files from the
        commitlog where verify finds them wrong; moved files are kept in
        <store>/repair-<time>/. Exit 0 when the store verifies clean afterwards."""
        from mqstore.store.repair import repair_store

        result = repair_store(store, dry_run=dry_run, truncate_corrupt=truncate_corrupt)
        before = result.before
        print(f"found: {_plural(before.counts['errors'], 'error')}, {_plural(before.counts['warnings'], 'warning')}")
        for f in before.findings:
            print(_finding_line(f))
        if result.plan.refusals:
            sys.stdout.flush()
            for why in result.plan.refusals:
                print(f"mqstore: error: repair refused: {why}", file=sys.stderr)
            raise typer.Exit(1)
        if result.plan.nothing_to_do:
            print("nothing to repair")
            raise typer.Exit(0 if result.ok else 1)
        if result.dry_run:
            print("would (dry run, nothing changed):")
            print("\n".join(f"  - {s}" for s in result.plan.steps))
            raise typer.Exit(0)
        print("done:")
        print("\n".join(f"  - {s}" for s in result.done))
        if result.attic is not None:
            print(f"moved and copied files are kept in {result.attic} (delete it when you no longer need them)")
        print("after repair:")
        print(render_report(result.after))
        raise typer.Exit(0 if result.ok else 1)


__all__ = ["register", "render_report"]
