"""``mqstore``: the command line. Every command and option has help (``--help``).

Errors a user can cause (bad flags, a locked store, bad input) end with a one-line
message on stderr and exit status 1; usage errors exit with 2. Results go to stdout,
structured logs to stderr.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from mqstore.cli.target import AccessKeyOpt, SecretKeyOpt, StoreTypeOpt, server_address
from mqstore.errors import MqStoreError
from mqstore.logging import configure_logging

app = typer.Typer(
    name="mqstore",
    help="mqstore: a RocketMQ byte-compatible message store (CommitLog, ConsumeQueue, IndexFile).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain help and usage errors: one line per error, and flags (--create) shown as flags,
    # where the boxed help labels every flag <bool> as if it took a value.
    rich_markup_mode=None,
)
bench_app = typer.Typer(
    help="Benchmarks that print one JSON line of figures.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(bench_app, name="bench")


class FlushChoice(str, Enum):
    async_ = "async"
    sync = "sync"


StoreOpt = Annotated[Path, typer.Option("--store", help="Store directory (created if missing).")]


def _export_credentials(access_key: str | None, secret_key: str | None) -> None:
    """The bench's clients (threads of this process) take credentials from the
    environment, as FrontClient does by default."""
    import os

    for name, value in (("MQSTORE_ACCESS_KEY", access_key), ("MQSTORE_SECRET_KEY", secret_key)):
        if value:
            os.environ[name] = value


def version_line() -> str:
    """``mqstore 0.1.0 (compiled core: loaded, <the extensions> from <their directory>)``."""
    from mqstore import __version__
    from mqstore.kernels import core_status

    return f"mqstore {__version__} (compiled core: {core_status()})"


def _print_version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version and whether the compiled core is loaded, then exit.",
        ),
    ] = False,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error (logs go to stderr).")
    ] = "warning",
    log_format: Annotated[str, typer.Option("--log-format", help="json or console.")] = "json",
) -> None:
    """mqstore: a RocketMQ byte-compatible message store."""
    # cache=False: a command run in-process (tests, embedding) leaves no logger pinned to its level
    configure_logging(level=log_level, json=log_format == "json", cache=False)


ServePidOpt = Annotated[
    Optional[int],
    typer.Option(
        "--serve-pid",
        help="With --server: pid of that `mqstore serve`; the result then gives each of its processes' CPU "
        "per message (cpu_us_per_msg). Needs --shard-dir.",
    ),
]
ShardDirOpt = Annotated[
    Optional[list[Path]],
    typer.Option("--shard-dir", help="With --serve-pid: the served store's shard directories (serve's ready line)."),
]


def _cpu_of(serve_pid: int | None, shard_dirs: list[Path] | None) -> tuple[int, list[Path]] | None:
    if serve_pid is None:
        return None
    if not shard_dirs:
        raise typer.BadParameter("--serve-pid needs --shard-dir (serve's ready line lists them)")
    return serve_pid, list(shard_dirs)


@bench_app.command("append")
def bench_append(
    store: Annotated[
        Optional[Path], typer.Option("--store", help="Store directory (created if missing); or --server.")
    ] = None,
    server: Annotated[
        Optional[str],
        typer.Option(
            "--server", callback=server_address, help="HOST:PORT of a running `mqstore serve`: send through it instead."
        ),
    ] = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
    messages: Annotated[int, typer.Option("--messages", min=0, help="How many messages to append.")] = 1_000_000,
    body_size: Annotated[int, typer.Option("--body-size", min=0, help="Body bytes per message.")] = 128,
    topics: Annotated[int, typer.Option("--topics", min=1, help="Spread messages over this many topics.")] = 1,
    queues: Annotated[int, typer.Option("--queues", min=1, max=65536, help="Queues per topic.")] = 4,
    flush: Annotated[
        FlushChoice, typer.Option("--flush", help="async: ack from page cache; sync: ack after group fsync.")
    ] = FlushChoice.async_,
    producers: Annotated[int, typer.Option("--producers", min=1, help="Producer threads.")] = 1,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Messages per append call.")] = 1000,
    segment_bytes: Annotated[
        int, typer.Option("--segment-bytes", min=4096, help="CommitLog segment size in bytes.")
    ] = 1 << 30,
    ack_log: Annotated[
        Optional[Path], typer.Option("--ack-log", help="Write one JSON line per acknowledged message here.")
    ] = None,
    no_dispatch: Annotated[
        bool, typer.Option("--no-dispatch", help="CommitLog only: no dispatcher, consume queues or index.")
    ] = False,
    index_hash_slots: Annotated[
        int, typer.Option("--index-hash-slots", min=1, help="Hash slots per index file.")
    ] = 5_000_000,
    index_max_entries: Annotated[
        int, typer.Option("--index-max-entries", min=2, help="Entries per index file.")
    ] = 20_000_000,
    wire: Annotated[
        str,
        typer.Option(
            "--wire",
            help="With --server: encoded (the client encodes each batch, SendEncoded) or columns (SendBatch).",
        ),
    ] = "encoded",
    serve_pid: ServePidOpt = None,
    shard_dir: ShardDirOpt = None,
    probe_lag: Annotated[
        bool,
        typer.Option(
            "--probe-lag",
            help="With --server: meanwhile measure the dispatch lag (a probe message every 50 ms, pulled until "
            "readable; dispatch_lag_p50_ms/p99_ms/max_ms).",
        ),
    ] = False,
    shape: Annotated[
        str,
        typer.Option(
            "--shape",
            help="round-robin: message i to topic i % topics (a batch touches up to --batch topics); per-topic: "
            "each batch to one topic (batch k to topic k % topics, message i to queue i % queues), as producers "
            "on their own topics send.",
        ),
    ] = "round-robin",
    passes: Annotated[
        int,
        typer.Option(
            "--passes",
            min=1,
            help="Send the same messages this many times to the same store, one pass after the other. Pass 1 is "
            "cold (queues are made as their first message comes), the next ones warm (every queue they touch is "
            "already known to the store). "
            "The top-level fields are pass 1's; 'passes' lists each pass's.",
        ),
    ] = 1,
    store_type: StoreTypeOpt = None,
) -> None:
    """Append a deterministic workload (TAGS, two KEYS and a UNIQ_KEY per message) and
    print one JSON line: messages, bytes, seconds, msgs_per_s, mb_per_s, p50_ms, p99_ms,
    memory (rss_mb_before/after, rss_anon_kb_per_queue over queues_touched), ...
    With --server the batches go through the server's front (flush, segment and index
    options are the server's; --ack-log and --no-dispatch do not apply)."""
    from mqstore.bench.workload import SHAPES

    if shape not in SHAPES:
        raise typer.BadParameter(f"--shape is {' or '.join(SHAPES)}, got {shape!r}")
    from mqstore.cli.target import check_target

    check_target(store, server)
    if server is not None:
        from mqstore.bench.remote import WIRES, run_remote_append

        if wire not in WIRES:
            raise typer.BadParameter(f"--wire is {' or '.join(WIRES)}, got {wire!r}")
        _export_credentials(access_key, secret_key)
        print(
            json.dumps(
                run_remote_append(
                    server,
                    messages=messages,
                    body_size=body_size,
                    topics=topics,
                    queues=queues,
                    producers=producers,
                    batch=min(batch, 10_000),
                    wire=wire,
                    cpu_of=_cpu_of(serve_pid, shard_dir),
                    probe_lag=probe_lag,
                    shape=shape,
                    passes=passes,
                )
            ),
            flush=True,
        )
        return
    from mqstore.bench.append import AppendBench, run_append_bench
    from mqstore.store.config import FlushMode

    result = run_append_bench(
        AppendBench(
            store=store,
            messages=messages,
            body_size=body_size,
            topics=topics,
            queues=queues,
            flush=FlushMode(flush.value),
            producers=producers,
            batch=batch,
            segment_bytes=segment_bytes,
            ack_log=ack_log,
            dispatch=not no_dispatch,
            index_hash_slots=index_hash_slots,
            index_max_entries=index_max_entries,
            shape=shape,
            passes=passes,
            store_type=store_type,
        )
    )
    print(json.dumps(result), flush=True)


@bench_app.command("consume")
def bench_consume(
    store: Annotated[Optional[Path], typer.Option("--store", help="Store directory; or --server.")] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Messages per pull.")] = 1000,
    server: Annotated[
        Optional[str],
        typer.Option(
            "--server", callback=server_address, help="HOST:PORT of a running `mqstore serve`: pull through it."
        ),
    ] = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
    topics: Annotated[
        int, typer.Option("--topics", min=1, help="With --server: pull BenchTopic0..N-1 (bench append's topics).")
    ] = 1,
    consumers: Annotated[
        int,
        typer.Option(
            "--consumers",
            min=1,
            help="With --server: consumer threads sharing the queues (each pulls its queues in turn).",
        ),
    ] = 1,
    wait_dispatch: Annotated[
        float,
        typer.Option(
            "--wait-dispatch",
            min=0,
            help="With --server: first wait up to this many seconds for every shard to dispatch what it wrote (0: pull what is dispatched now).",
        ),
    ] = 60.0,
    serve_pid: ServePidOpt = None,
    shard_dir: ShardDirOpt = None,
) -> None:
    """Pull every queue of the store to its end (encoded records, as a broker serves
    them); last line JSON with messages, seconds, msgs_per_s (with --server also
    client_cpu_s, dispatch_wait_s, dispatch_caught_up)."""
    from mqstore.cli.target import check_target

    check_target(store, server)
    if server is not None:
        from mqstore.bench.remote import run_remote_consume

        _export_credentials(access_key, secret_key)
        print(
            json.dumps(
                run_remote_consume(
                    server,
                    topics=topics,
                    batch=min(batch, 10_000),
                    wait_dispatch=wait_dispatch,
                    consumers=consumers,
                    cpu_of=_cpu_of(serve_pid, shard_dir),
                )
            ),
            flush=True,
        )
        return
    from mqstore.bench.consume import run_consume_bench

    print(json.dumps(run_consume_bench(store, batch=batch)), flush=True)


@bench_app.command("query")
def bench_query(
    store: StoreOpt,
    lookups: Annotated[int, typer.Option("--lookups", min=1, help="How many random key lookups.")] = 10_000,
) -> None:
    """Random lookups of keys the store holds, through the index; last line JSON with
    lookups, found, p50_us, p99_us."""
    from mqstore.bench.consume import run_query_bench

    print(json.dumps(run_query_bench(store, lookups=lookups)), flush=True)


@bench_app.command("disk")
def bench_disk(
    store: StoreOpt,
    total_bytes: Annotated[int, typer.Option("--bytes", min=1, help="Raw bytes to write.")] = 1 << 30,
    chunk_bytes: Annotated[int, typer.Option("--chunk-bytes", min=1, help="Bytes per write() call.")] = 1 << 20,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Repeat and report the median round.")] = 3,
) -> None:
    """Write and fdatasync raw bytes in the store directory (no encoding) and print
    one JSON line with mb_per_s (median of the rounds): the yardstick for append figures."""
    from mqstore.bench.disk import run_disk_bench

    print(
        json.dumps(run_disk_bench(store, total_bytes=total_bytes, chunk_bytes=chunk_bytes, rounds=rounds)), flush=True
    )


@bench_app.command("recover")
def bench_recover(
    store: StoreOpt,
    total_bytes: Annotated[int, typer.Option("--bytes", min=1, help="CommitLog bytes to write before the kill.")] = 1
    << 30,
    body_size: Annotated[int, typer.Option("--body-size", min=0, help="Body bytes per message.")] = 1024,
    before_checkpoint: Annotated[
        int,
        typer.Option(
            "--before-checkpoint",
            min=0,
            help="Write a whole store (consume queues, index) with this many bytes covered by its checkpoint first; --bytes more follow before the kill, and the next open is timed.",
        ),
    ] = 0,
) -> None:
    """Write a commitlog in a child process, kill -9 it, then time the abnormal
    recovery (CRC checked) and print one JSON line with gb_per_s. With
    --before-checkpoint: time the open of a whole store whose checkpoint covers all
    but the last --bytes (open_seconds should follow those bytes only)."""
    from mqstore.bench.recover import run_recover_bench, run_reopen_after_checkpoint_bench

    if before_checkpoint:
        result = run_reopen_after_checkpoint_bench(
            store, before_bytes=before_checkpoint, after_bytes=total_bytes, body_size=body_size
        )
    else:
        result = run_recover_bench(store, total_bytes=total_bytes, body_size=body_size)
    print(json.dumps(result), flush=True)


@bench_app.command("reopen")
def bench_reopen(
    store: Annotated[Path, typer.Option("--store", help="An existing store (closed, or left by kill -9).")],
    sample: Annotated[
        int, typer.Option("--sample", min=0, help="Queues whose every unit is checked against its record.")
    ] = 1000,
    delete_segments: Annotated[
        int,
        typer.Option("--delete-segments", min=0, help="Let retention delete up to this many of the oldest segments."),
    ] = 0,
) -> None:
    """Open a store (recovery, consume-queue load, catch-up dispatch), check a sample of
    queues against the commitlog, optionally run retention, and print one JSON line:
    open_seconds, queues, mismatches, open files, maps, RSS, ..."""
    from mqstore.bench.reopen import ReopenBench, run_reopen_bench

    print(
        json.dumps(run_reopen_bench(ReopenBench(store=store, sample=sample, delete_segments=delete_segments))),
        flush=True,
    )


@bench_app.command("retention")
def bench_retention(
    store: Annotated[Path, typer.Option("--store", help="An empty directory for the store.")],
    segment_bytes: Annotated[int, typer.Option("--segment-bytes", min=1 << 20, help="CommitLog segment size.")] = 64
    << 20,
    fill_segments: Annotated[
        int,
        typer.Option("--fill-segments", min=2, help="Segments written before the timed rounds (all but the last go)."),
    ] = 12,
    round_messages: Annotated[
        int, typer.Option("--round-messages", min=1000, help="Messages in the idle round.")
    ] = 300_000,
) -> None:
    """Time appends with retention idle, then while it deletes old segments (and the
    consume-queue and index files behind them); print one JSON line with p99_idle_ms,
    p99_deleting_ms and p99_ratio."""
    from mqstore.bench.retention import RetentionBench, run_retention_bench

    b = RetentionBench(
        store=store, segment_bytes=segment_bytes, fill_segments=fill_segments, round_messages=round_messages
    )
    print(json.dumps(run_retention_bench(b)), flush=True)


@app.command("print")
def print_records(
    store: Annotated[Path, typer.Option("--store", help="Store directory to read (not modified, no lock taken).")],
    offset: Annotated[
        Optional[int],
        typer.Option("--offset", min=0, help="Commitlog offset of the first record (default: the oldest)."),
    ] = None,
    count: Annotated[int, typer.Option("--count", min=1, help="How many records to print at most.")] = 10,
) -> None:
    """Print decoded records as JSON lines (like mqadmin printMsg), read-only."""
    import itertools

    from mqstore.cli.render import print_records
    from mqstore.store.reader import CommitLogReader

    print_records(itertools.islice(CommitLogReader(store).records(offset), count))


from mqstore.cli import acl as _acl  # noqa: E402  (registers the acl group)
from mqstore.cli import bench_rocketmq as _bench_rocketmq  # noqa: E402  (registers bench rocketmq)
from mqstore.cli import maintenance as _maintenance  # noqa: E402  (registers verify and repair)
from mqstore.cli import queries as _queries  # noqa: E402  (registers the query commands)
from mqstore.cli import reconcile as _reconcile  # noqa: E402  (registers reconcile)
from mqstore.cli import remote as _remote  # noqa: E402  (registers serve and send)
from mqstore.cli import soak as _soak  # noqa: E402  (registers bench soak)

_queries.register(app)
_maintenance.register(app)
_remote.register(app)
_reconcile.register(app)
_acl.register(app)
_soak.register(bench_app)
_bench_rocketmq.register(bench_app)


def main() -> None:
    """Console entry point: run the app, turning expected errors into a message and exit 1."""
    try:
        app()
    except (MqStoreError, OSError, ValueError, LookupError) as e:
        print(f"mqstore: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
