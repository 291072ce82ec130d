"""``mqstore bench soak``: the long mixed load with actor kills (mqstore/bench/soak.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from mqstore.cli.target import AccessKeyOpt, SecretKeyOpt, server_address


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("soak")
    def bench_soak(
        server: Annotated[
            str,
            typer.Option(
                "--server",
                callback=server_address,
                help="HOST:PORT of the running `mqstore serve`'s front (serve it on a fixed --port, not 0: a killed "
                "front comes back on it).",
            ),
        ],
        store: Annotated[
            Path,
            typer.Option("--store", help="The deployment's store root (serve --store): verified after the load."),
        ],
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        serve_pid: Annotated[
            Optional[int],
            typer.Option(
                "--serve-pid",
                help="Pid of that `mqstore serve`: its actors are killed in turn, the RSS of every process "
                "under it sampled, and it is stopped (SIGTERM) before the verify. Without it: no kills, "
                "no RSS but the client's, and the running store is verified as it is.",
            ),
        ] = None,
        minutes: Annotated[float, typer.Option("--minutes", min=0.05, help="How long the load runs.")] = 20.0,
        kill_every: Annotated[
            float,
            typer.Option(
                "--kill-every",
                min=0,
                help="Minutes between kills (the first half an interval in; 20 and 4 kill at minutes 2, 6, 10, "
                "14 and 18); 0: none.",
            ),
        ] = 4.0,
        kill_order: Annotated[
            str,
            typer.Option("--kill-order", help="Actors killed in turn, comma-separated (of the shard --kill-shard)."),
        ] = "commitlog,dispatcher,consumequeue,index,front",
        kill_shard: Annotated[int, typer.Option("--kill-shard", min=0, help="Whose actors are killed.")] = 0,
        producers: Annotated[int, typer.Option("--producers", min=1, help="Producer threads.")] = 4,
        consumers: Annotated[
            int, typer.Option("--consumers", min=1, help="Consumer threads (sharing the queues).")
        ] = 4,
        rate: Annotated[
            int, typer.Option("--rate", min=0, help="Messages per second over all producers; 0: as fast as they go.")
        ] = 10_000,
        batch: Annotated[int, typer.Option("--batch", min=1, max=10_000, help="Messages per send.")] = 100,
        body_size: Annotated[int, typer.Option("--body-size", min=8, help="Body bytes per message.")] = 128,
        topics: Annotated[int, typer.Option("--topics", min=1, help="Topics BenchTopic0..N-1.")] = 1,
        queues: Annotated[int, typer.Option("--queues", min=1, max=1024, help="Queues per topic.")] = 4,
        query_rate: Annotated[
            float, typer.Option("--query-rate", min=0, help="Key queries per second; 0: none.")
        ] = 20.0,
        rss_every: Annotated[float, typer.Option("--rss-every", min=1, help="Seconds between RSS samples.")] = 30.0,
        ack_log: Annotated[
            Optional[Path],
            typer.Option(
                "--ack-log",
                help="Where the ack log goes (one JSON line per acknowledged message); default: a temporary "
                "file, removed when nothing was lost.",
            ),
        ] = None,
        out: Annotated[Optional[Path], typer.Option("--out", help="Also write the JSON summary to this file.")] = None,
        wire: Annotated[
            str, typer.Option("--wire", help="How producers send: encoded (send_encoded) or columns (send).")
        ] = "encoded",
    ) -> None:
        """Soak a running deployment: producers send (every acknowledgement in an ack log),
        consumers pull every queue, key queries run, and one actor is killed at a time
        (Ray restarts it); RSS of every process sampled. After the load, every
        acknowledged message must be found by the pulls and the store must verify clean.
        Prints a row per minute on stderr as it goes, then on stdout the table, the RSS
        per process and one JSON line (the summary, `ok` true if nothing was lost, the
        store verified clean and every killed actor came back). Exit 1 if not `ok`."""
        from mqstore.bench.soak import ROW_HEAD, Soak, format_row, rss_table, run_soak
        from mqstore.cli.main import _export_credentials

        _export_credentials(access_key, secret_key)

        s = Soak(
            server=server,
            store=store,
            serve_pid=serve_pid,
            minutes=minutes,
            kill_every=kill_every,
            kill_order=tuple(r.strip() for r in kill_order.split(",") if r.strip()),
            kill_shard=kill_shard,
            producers=producers,
            consumers=consumers,
            rate=rate,
            batch=batch,
            body_size=body_size,
            topics=topics,
            queues=queues,
            query_rate=query_rate,
            rss_every=rss_every,
            ack_log=ack_log,
            wire=wire,
        )
        print(ROW_HEAD, file=sys.stderr, flush=True)
        rows, summary = run_soak(s, progress=lambda r: print(format_row(r), file=sys.stderr, flush=True))
        print(ROW_HEAD)
        for r in rows:
            print(format_row(r))
        print()
        print(rss_table(summary))
        line = json.dumps(summary)
        if out is not None:
            out.write_text(line + "\n")
        print(line, flush=True)
        raise typer.Exit(0 if summary["ok"] else 1)


__all__ = ["register"]
