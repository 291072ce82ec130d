"""``mqstore bench rocketmq``: the official RocketMQ 5 Python client against the RocketMQ
port (mqstore/bench/rocketmq_bench.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from mqstore.cli.target import AccessKeyOpt, SecretKeyOpt, rocketmq_address


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("rocketmq")
    def bench_rocketmq(
        server: Annotated[
            str,
            typer.Option(
                "--server",
                callback=rocketmq_address,
                help="HOST:PORT of the RocketMQ 5 port (`mqstore serve --rocketmq-port`, the ready line's "
                '"rocketmq"), not the front\'s own API port.',
            ),
        ],
        producers: Annotated[
            int, typer.Option("--producers", min=1, max=64, help="Producer processes (one client each).")
        ] = 1,
        consumers: Annotated[
            int,
            typer.Option("--consumers", min=1, max=64, help="SimpleConsumer processes, all of one group."),
        ] = 1,
        messages: Annotated[
            int, typer.Option("--messages", min=1, help="Messages sent in all, split between the producers.")
        ] = 10_000,
        body_size: Annotated[
            int, typer.Option("--body-size", min=1, max=4 << 20, help="Body bytes per message.")
        ] = 128,
        topic: Annotated[
            Optional[str],
            typer.Option(
                "--topic",
                help="Topic to send to and receive from (default: a new one per run, BenchRocketMQ_<run>). "
                "Messages this run did not send are acked and counted as foreign.",
            ),
        ] = None,
        group: Annotated[
            Optional[str],
            typer.Option(
                "--group", help="The consumers' group (default: a new one per run, BenchRocketMQGroup_<run>)."
            ),
        ] = None,
        batch: Annotated[
            int, typer.Option("--batch", min=1, max=32, help="Messages per receive(batch, invisible) call.")
        ] = 32,
        invisible: Annotated[
            int,
            typer.Option(
                "--invisible", min=1, max=43_200, help="Seconds a received message stays invisible before its ack."
            ),
        ] = 30,
        await_s: Annotated[
            int, typer.Option("--await", min=1, max=30, help="Seconds a receive long-polls when nothing is there.")
        ] = 2,
        idle_timeout: Annotated[
            float,
            typer.Option(
                "--idle-timeout",
                min=1,
                help="Seconds without a newly consumed message after which the receive phase gives up "
                "(then the missing are reported and the exit status is 1).",
            ),
        ] = 30.0,
        request_timeout: Annotated[
            int, typer.Option("--request-timeout", min=1, max=300, help="The clients' request timeout in seconds.")
        ] = 5,
        serve_pid: Annotated[
            Optional[list[int]],
            typer.Option(
                "--serve-pid",
                help="Pid of the `mqstore serve` (or of a process running a LocalStack) behind --server; "
                "repeat for several. The result then gives every process's CPU per message in each phase "
                "(server_cpu_us_per_msg) and the goal check front_below_client. Needs --shard-dir.",
            ),
        ] = None,
        shard_dir: Annotated[
            Optional[list[Path]],
            typer.Option(
                "--shard-dir", help="With --serve-pid: the served store's shard directories (serve's ready line)."
            ),
        ] = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
    ) -> None:
        """Drive the RocketMQ port with the official RocketMQ 5 Python client, each client in
        a process of its own. Send phase: the producers Producer.send (synchronous, one
        message per call) --messages in all. Receive phase: the consumers receive and ack
        until every message sent was acked once (distinct message ids; duplicates
        reported). Progress on stderr; one JSON line on stdout: send_msgs_per_s,
        receive_msgs_per_s, producer_/consumer_cpu_us_per_msg (each client process's own
        CPU, client_cpu_us_per_msg per process), with --serve-pid the server's processes'
        CPU per message per phase (server_cpu_us_per_msg), goal (the front's and the
        clients' CPU per message per phase) and front_below_client. Exit 1 if a message
        was not sent or not consumed."""
        from mqstore.bench.rocketmq_bench import RocketMQBench, RocketMQBenchError, parse_server, run_rocketmq_bench

        parse_server(server)
        if topic is not None and not re.fullmatch(r"[%a-zA-Z0-9_-]{1,127}", topic):
            raise RocketMQBenchError(
                f"--topic must match [%a-zA-Z0-9_-]{{1,127}} (the Python client's rule), got {topic!r}"
            )
        if group is not None and not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,120}", group):
            raise RocketMQBenchError(f"--group must match [%|a-zA-Z0-9_-]{{1,120}}, got {group!r}")
        if serve_pid and not shard_dir:
            raise RocketMQBenchError("--serve-pid needs --shard-dir (serve's ready line lists them)")
        if shard_dir and not serve_pid:
            raise RocketMQBenchError("--shard-dir goes with --serve-pid")
        b = RocketMQBench(
            server=server,
            producers=producers,
            consumers=consumers,
            messages=messages,
            body_size=body_size,
            topic=topic,
            group=group,
            batch=batch,
            invisible_s=invisible,
            await_s=await_s,
            request_timeout_s=request_timeout,
            idle_timeout_s=idle_timeout,
            serve_pids=tuple(serve_pid or ()),
            shard_dirs=tuple(shard_dir or ()),
            access_key=access_key,
            secret_key=secret_key,
        )
        result = run_rocketmq_bench(b, progress=lambda m: print(f"bench rocketmq: {m}", file=sys.stderr, flush=True))
        print(json.dumps(result), flush=True)
        if not result["ok"]:
            print(
                f"mqstore: error: {result['sent']:,} of {result['messages']:,} sent, "
                f"{result['missing']:,} not consumed ({result['first_error'] or 'no client error'})",
                file=sys.stderr,
            )
            raise typer.Exit(1)


__all__ = ["register"]
