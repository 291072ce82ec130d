"""``mqstore serve`` (a deployment on Ray, serving the gRPC API) and ``mqstore send``
(append messages, to a store directory or to a server). The ``--store``/``--server``
plumbing they share with the other commands is in target.py."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from mqstore.cli.target import (
    AccessKeyOpt,
    SecretKeyOpt,
    ServerOpt,
    StoreTypeOpt,
    TlsCaOpt,
    check_target,
    open_store,
    remote,
)


class FlushChoice(str, Enum):
    async_ = "async"
    sync = "sync"


class Placement(str, Enum):
    node = "node"
    resource = "resource"


class FrontPlacement(str, Enum):
    node = "node"
    spread = "spread"


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        store: Annotated[
            Path, typer.Option("--store", help="Store root (shard i under DIR/shard-i when --shards > 1).")
        ] = Path("data"),
        host: Annotated[str, typer.Option("--host", help="Address every gRPC server listens on.")] = "127.0.0.1",
        port: Annotated[
            int, typer.Option("--port", min=0, max=65535, help="Port of the public API (the front).")
        ] = 8080,
        rocketmq_port: Annotated[
            int,
            typer.Option(
                "--rocketmq-port",
                min=0,
                max=65535,
                help="Port of RocketMQ 5's gRPC protocol (apache.rocketmq.v2) for the official RocketMQ clients; 0: not served.",
            ),
        ] = 8081,
        max_delivery_attempts: Annotated[
            int,
            typer.Option(
                "--max-delivery-attempts",
                min=1,
                max=1000,
                help="RocketMQ consumers: deliveries of a message before it goes to %DLQ%<group> (RocketMQ's 16 retries + 1).",
            ),
        ] = 17,
        max_client_sessions: Annotated[
            int | None,
            typer.Option(
                "--max-client-sessions",
                min=1,
                help="RocketMQ port: client sessions kept in all (default 20000); a new client past it is refused (42900).",
            ),
        ] = None,
        max_client_sessions_per_user: Annotated[
            int | None,
            typer.Option(
                "--max-client-sessions-per-user",
                min=1,
                help="RocketMQ port with --acl: client sessions one user may have (default 2000; past it: 42900).",
            ),
        ] = None,
        shards: Annotated[
            int, typer.Option("--shards", min=1, max=64, help="Store shards (pinned in DIR/mqstore-layout.json).")
        ] = 1,
        address: Annotated[
            str | None,
            typer.Option("--address", help="Join a running Ray cluster ('auto'); default: start a local one."),
        ] = None,
        flush: Annotated[
            FlushChoice, typer.Option("--flush", help="async: ack from page cache; sync: ack after group fsync.")
        ] = FlushChoice.sync,
        segment_bytes: Annotated[
            int, typer.Option("--segment-bytes", min=4096, help="CommitLog segment size (new stores).")
        ] = 1 << 30,
        namespace: Annotated[str, typer.Option("--namespace", help="Ray namespace of the actors.")] = "mqstore",
        log_level: Annotated[str, typer.Option("--actor-log-level", help="Log level inside the actors.")] = "info",
        metrics_port: Annotated[
            int,
            typer.Option(
                "--metrics-port",
                min=0,
                max=65535,
                help="Prometheus metrics of the front (http://HOST:PORT/metrics); 0: none. Keep it outside Ray's worker ports 10002-19999.",
            ),
        ] = 9464,
        tls_cert: Annotated[
            Path | None,
            typer.Option(
                "--tls-cert",
                dir_okay=False,
                help="PEM certificate chain: the front (public API) speaks TLS only. With --tls-key.",
            ),
        ] = None,
        tls_key: Annotated[
            Path | None, typer.Option("--tls-key", dir_okay=False, help="PEM private key of --tls-cert.")
        ] = None,
        placement: Annotated[
            Placement,
            typer.Option(
                "--placement",
                help="node: every shard on this machine; resource: shard i on the Ray node offering the custom resource mqstore_shard_i (its disk holds DIR/shard-i).",
            ),
        ] = Placement.node,
        fronts: Annotated[
            int,
            typer.Option(
                "--fronts",
                min=1,
                max=64,
                help="Front processes (1..64): they share --port and --rocketmq-port (SO_REUSEPORT; the kernel spreads"
                " connections), each has its own metrics port (--metrics-port + k); front 0 is the actor 'front',"
                " the others 'front-1'...",
            ),
        ] = 1,
        front_placement: Annotated[
            FrontPlacement,
            typer.Option(
                "--front-placement",
                help="node: every front on this machine; spread: over the Ray cluster's nodes (one per node as far as"
                " they go), each on its node's address, RocketMQ routes naming every front.",
            ),
        ] = FrontPlacement.node,
        acl: Annotated[
            Path | None,
            typer.Option(
                "--acl",
                dir_okay=False,
                help="Users and permissions of the front (JSON; see `mqstore acl --help`): every call must be signed by a user the file allows.",
            ),
        ] = None,
        allow_anonymous: Annotated[
            bool,
            typer.Option(
                "--allow-anonymous",
                help="Serve a --host that is not loopback without --acl: anyone who reaches it may send, read and change topics.",
            ),
        ] = False,
        clean_forcibly: Annotated[
            bool,
            typer.Option(
                "--clean-forcibly",
                help="With the disk over 85% used, delete the oldest commitlog segments although unexpired, unread messages"
                " included (RocketMQ cleanFileForciblyEnable); each group's losses are logged and shown by status."
                " Without it a disk over 90% refuses sends until it is below 85%.",
            ),
        ] = False,
        insecure_ray: Annotated[
            bool,
            typer.Option(
                "--insecure-ray",
                help="Join (--address) a Ray cluster that runs without token authentication: anyone who reaches its ports can run code as its user.",
            ),
        ] = False,
        store_type: StoreTypeOpt = None,
    ) -> None:
        """Serve the store over gRPC on Ray until Ctrl-C/SIGTERM: per shard a commitlog,
        a consume-queue builder, an index builder and a dispatcher actor, and --fronts
        fronts (mqstore's API on --port, RocketMQ 5's protocol on --rocketmq-port); prints one
        JSON line with the fronts' addresses once every shard has recovered,
        and closes every store cleanly on the way out."""
        from mqstore.services.startup.serve import serve as run
        from mqstore.store.config import FlushMode, StoreConfig

        cfg = StoreConfig(
            flush_mode=FlushMode(flush.value),
            segment_bytes=segment_bytes,
            clean_forcibly_enable=clean_forcibly,
            store_type=store_type,
        )
        # stdout carries the ready line only: what Ray forwards from the workers' stdout
        # (and anything else printed) goes to stderr.
        sys.stdout.flush()
        ready_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        run(
            store,
            host=host,
            port=port,
            rocketmq_port=rocketmq_port or None,
            max_delivery_attempts=max_delivery_attempts,
            **{
                k: v
                for k, v in (
                    ("max_sessions", max_client_sessions),
                    ("max_sessions_per_user", max_client_sessions_per_user),
                )
                if v is not None
            },
            shards=shards,
            address=address,
            config=cfg,
            namespace=namespace,
            log_level=log_level,
            placement=placement.value,
            fronts=fronts,
            front_placement=front_placement.value,
            metrics_port=metrics_port,
            tls_cert=tls_cert,
            tls_key=tls_key,
            acl=acl,
            allow_anonymous=allow_anonymous,
            insecure_ray=insecure_ray,
            ready_out=ready_out,
        )

    @app.command("send")
    def send(
        topic: Annotated[str, typer.Option("--topic", help="Topic name.")],
        bodies: Annotated[
            list[str] | None, typer.Argument(help="Message bodies (UTF-8); none: one per line of stdin.")
        ] = None,
        store: Annotated[
            Path | None, typer.Option("--store", help="Store directory (appends in this process).")
        ] = None,
        create: Annotated[
            bool, typer.Option("--create", help="With --store: make a new store there if it holds none.")
        ] = False,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        queue: Annotated[int, typer.Option("--queue", min=-1, max=65535, help="Queue id; -1: round robin.")] = -1,
        tags: Annotated[str | None, typer.Option("--tags", help="TAGS of every message.")] = None,
        keys: Annotated[str | None, typer.Option("--keys", help="KEYS of every message (space separated).")] = None,
        message_group: Annotated[
            str | None,
            typer.Option("--message-group", help="FIFO message group of every message (a FIFO topic needs one)."),
        ] = None,
        deliver_at_ms: Annotated[
            int | None,
            typer.Option(
                "--deliver-at-ms", help="Delivery time, epoch ms, at most 24 h ahead (a DELAY topic needs one)."
            ),
        ] = None,
        batch: Annotated[int, typer.Option("--batch", min=1, max=10_000, help="Messages per append call.")] = 1000,
        store_type: StoreTypeOpt = None,
    ) -> None:
        """Append messages; prints one JSON line per message (msg_id, queue, offsets, status).
        With --server and several shards a batch can be stored in part: a message whose
        shard failed is NOT_STORED (nothing written: send it again) or SHARD_FAILED (its
        shard's answer was lost: it may be stored), its line carries the shard's error,
        and the command exits 1."""
        check_target(store, server)
        texts = list(bodies) if bodies else [line.rstrip("\n") for line in sys.stdin]
        if not texts:
            raise ValueError("nothing to send: give bodies as arguments or lines on stdin")
        out = sys.stdout
        props = {"__SHARDINGKEY": message_group} if message_group is not None else {}
        if deliver_at_ms is not None:
            props["TIMER_DELIVER_MS"] = str(deliver_at_ms)  # the store's rules check both (message_rules.py)
        unstored = 0  # messages whose shard failed (a batch spanning shards, stored in part)
        with contextlib.ExitStack() as stack:
            if server is not None:
                from mqstore.rpc.v1 import common_pb2
                from mqstore.services.query.client import columns

                c = stack.enter_context(remote(server, tls_ca, access_key, secret_key))
            else:
                from mqstore.store.messages import MessageBatch

                s = stack.enter_context(open_store(store, create=create, store_type=store_type))
            for lo in range(0, len(texts), batch):
                chunk = [t.encode() for t in texts[lo : lo + batch]]
                errors: dict[int, str] = {}
                shard_of: list[int] = []
                if server is not None:
                    resp = c.send_columns(
                        columns(topic, chunk, queue_ids=queue, tags=tags, keys=keys, properties=props or None)
                    )
                    r = resp.result
                    errors = {e.shard: f"{e.code}: {e.message}" for e in resp.shard_errors}
                    shard_of = list(r.shards)
                    for e in resp.shard_errors:
                        print(
                            f"mqstore: shard {e.shard} did not store its part: {e.code}: {e.message}", file=sys.stderr
                        )
                    rows = zip(
                        r.msg_ids,
                        r.queue_ids,
                        r.queue_offsets,
                        r.physical_offsets,
                        (common_pb2.PutStatus.Name(x) for x in r.statuses),
                        r.unique_keys,
                    )
                else:
                    res = s.append(
                        MessageBatch(
                            topics=topic, bodies=chunk, queue_ids=queue, tags=tags, keys=keys, properties=props or None
                        )
                    )
                    rows = (
                        (m.msg_id, m.queue_id, m.queue_offset, m.physical_offset, m.status.value, m.unique_key)
                        for m in res
                    )
                for j, (msg_id, qid, qoff, phys, status, uniq) in enumerate(rows):
                    line = {
                        "msg_id": msg_id,
                        "topic": topic,
                        "queue_id": qid,
                        "queue_offset": qoff,
                        "physical_offset": phys,
                        "unique_key": uniq,
                        "status": status,
                    }
                    if status in ("NOT_STORED", "SHARD_FAILED"):
                        unstored += 1
                        line["shard"] = shard_of[j]
                        line["error"] = errors.get(shard_of[j], "")
                    out.write(json.dumps(line) + "\n")
        out.flush()
        if unstored:
            print(f"mqstore: {unstored} of {len(texts)} message(s) not stored (see their lines)", file=sys.stderr)
            raise typer.Exit(1)


__all__ = ["register"]
