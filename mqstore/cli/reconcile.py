"""``mqstore reconcile``: the Spark reconciliation job from the command line.

The job itself is mqstore.jobs.reconcile; this module checks the arguments before
any JVM starts (a bad store or an unwritable output is one line on stderr and exit
1), starts a SparkSession on ``--master`` (local mode by default: nothing to install
beyond the project), prints the summary table and exits 1 when any finding is an
error, 0 otherwise. ``jobs/reconcile.py`` runs the same under ``spark-submit``.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Annotated

import structlog
import typer


def _ensure_progress_logs() -> None:
    """Progress events are logged at info: show them even when the CLI's log
    level is higher (the default, warning), keeping the chosen format."""
    import logging

    import structlog

    from mqstore.logging import configure_logging

    cfg = structlog.get_config()
    wrapper = cfg.get("wrapper_class")
    try:
        level = wrapper(None, [], {}).get_effective_level()  # a filtering bound logger class (mqstore.logging)
    except Exception:  # noqa: BLE001  (not configured by mqstore: leave it alone)
        return
    if level <= logging.INFO:
        return
    json_fmt = any(isinstance(p, structlog.processors.JSONRenderer) for p in cfg.get("processors", []))
    configure_logging(level="info", json=json_fmt)


def one_line(e: BaseException) -> str:
    """What an exception from Spark says, in one line: the last line of a Python
    worker's traceback (``AttributeError: ...``), the Java exception of a Py4J error
    (not "An error occurred while calling o42.collect"), else the first line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        tail = [ln for ln in lines if not ln.startswith(("File ", "^", "~", "at ", "SQLSTATE", "Traceback"))]
        return tail[-1] if tail else lines[-1]
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        return lines[1].lstrip(": ")
    return lines[0]


def run(
    store: Path,
    master: str | None,
    output: Path | None,
    repair: bool,
    chunk_mb: int,
    index_keys: str,
    fmt: str,
    progress: bool,
) -> int:
    """The command's body (also the spark-submit entry's): returns the exit status."""
    from mqstore.jobs.reconcile import (
        check_output_dir,
        check_store_dir,
        reconcile,
        render_summary,
    )

    check_store_dir(store)
    if repair and output is None:
        raise ValueError("--repair needs --output: rebuilt files are written there, never into the store")
    if output is not None:
        check_output_dir(output)
    if progress:
        _ensure_progress_logs()
    from mqstore.jobs.spark import session

    try:
        spark = session(master)
    except Exception as e:  # noqa: BLE001  (no Java, a master that cannot be reached, ...)
        print(
            f"mqstore: error: cannot start Spark on {master or 'the spark-submit master'}: {one_line(e)}",
            file=sys.stderr,
        )
        return 1
    try:
        result = reconcile(
            spark, store, output=output, repair=repair, chunk_bytes=chunk_mb << 20, index_keys=index_keys
        )
    except (OSError, ValueError, LookupError):
        raise  # the caller's one-line errors (an output that went away, ...)
    except Exception as e:  # noqa: BLE001  (a failed Spark job: its traceback is for --log-level debug)
        structlog.get_logger(__name__).debug("reconcile_failed", error=str(e))
        print(f"mqstore: error: the Spark job failed: {one_line(e)}", file=sys.stderr)
        return 1
    finally:
        if master is not None:
            spark.stop()
    if fmt == "json":
        print(json.dumps(result.summary()), flush=True)
    else:
        print(render_summary(result), flush=True)
        if output is not None:
            print(f"findings: {output}/findings (Parquet), summary: {output}/summary.json", flush=True)
    return 0 if result.ok else 1


def register(app: typer.Typer, *, spark_submit: bool = False) -> None:
    """Add the ``reconcile`` command to ``app``. ``spark_submit``: the command of the
    spark-submit entry (jobs/reconcile.py): the same options, the master is
    spark-submit's unless --master is given, and ``mqstore``'s --log-level and
    --log-format are options of the command itself."""
    if spark_submit:
        master_help = "Spark master (default: the one spark-submit was given), e.g. spark://HOST:PORT."
        master_default: str | None = None
    else:
        master_help = "Spark master: local[*] (default, in this process), local[N], spark://HOST:PORT, ..."
        master_default = "local[*]"

    def reconcile_cmd(
        store: Annotated[
            Path, typer.Option("--store", help="Store directory to reconcile (read only: no lock, no writes).")
        ],
        master: str | None = typer.Option(
            master_default, "--master", help=master_help
        ),  # (closure values: no Annotated)
        output: Annotated[
            Path | None,
            typer.Option(
                "--output", help="Directory for the findings (Parquet), summary.json and, with --repair, rebuilt files."
            ),
        ] = None,
        repair: Annotated[
            bool,
            typer.Option(
                "--repair",
                help="Write rebuilt consume queues and index files for what "
                "is damaged into --output/repair (never into the store).",
            ),
        ] = False,
        chunk_mb: Annotated[int, typer.Option("--chunk-mb", min=1, help="CommitLog MiB per Spark task.")] = 64,
        index_keys: Annotated[
            str,
            typer.Option(
                "--index-keys",
                help="full (every record's keys must be in the index), "
                "sample (the first million, then every 16th) or off.",
            ),
        ] = "full",
        fmt: Annotated[
            str, typer.Option("--format", help="text (a summary table) or json (summary.json's content).")
        ] = "text",
        progress: Annotated[
            bool, typer.Option("--progress/--no-progress", help="Log progress (structlog, stderr).")
        ] = True,
        log_level: str = typer.Option(
            "warning", "--log-level", help="debug, info, warning or error (logs go to stderr)."
        ),
        log_format: str = typer.Option("json", "--log-format", help="json or console."),
    ) -> None:
        """Check with Spark that the commitlog, consume queues, index files, checkpoint
        and consumer offsets agree, up to what the checkpoint counts as flushed; exit 0
        if no finding is an error, 1 otherwise."""
        if index_keys not in ("full", "sample", "off"):
            raise typer.BadParameter("--index-keys is full, sample or off")
        if fmt not in ("text", "json"):
            raise typer.BadParameter("--format is text or json")
        if spark_submit:  # (mqstore's own callback configures logging for the command line)
            from mqstore.logging import configure_logging

            configure_logging(level=log_level, json=log_format == "json")
        raise typer.Exit(run(store, master, output, repair, chunk_mb, index_keys, fmt, progress))

    if not spark_submit:  # `mqstore --log-level ... reconcile`: the log options are mqstore's, not the command's
        sig = inspect.signature(reconcile_cmd, eval_str=True)
        reconcile_cmd.__signature__ = sig.replace(
            parameters=[p for p in sig.parameters.values() if p.name not in ("log_level", "log_format")]
        )
    app.command("reconcile")(reconcile_cmd)


def entry_app() -> typer.Typer:
    """The spark-submit entry's command line (one command: reconcile's)."""
    app = typer.Typer(
        name="reconcile",
        help="mqstore reconcile under spark-submit.",
        pretty_exceptions_enable=False,
        add_completion=False,
        rich_markup_mode=None,  # plain help, as the root's (main.py)
    )
    register(app, spark_submit=True)
    return app


def main(argv: list[str] | None = None) -> None:
    """spark-submit entry (jobs/reconcile.py): every option of ``mqstore reconcile``
    (the master comes from spark-submit unless --master is given)."""
    try:
        entry_app()(args=argv, prog_name="reconcile")
    except (OSError, ValueError, LookupError) as e:
        print(f"mqstore: error: {e}", file=sys.stderr)
        sys.exit(1)


__all__ = ["entry_app", "main", "one_line", "register", "run"]
