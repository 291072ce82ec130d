"""Query commands, mirroring mqadmin (queryMsgById, ...), over a store directory
(``--store DIR``) or a running server (``--server HOST:PORT``, see ``mqstore serve``).

With ``--store`` the queries read the files as they are (store/read_view.py: no
lock, no recovery, nothing written; ``status`` and ``update-topic`` open the store
for writing); with ``--server`` each is one or two gRPC calls to the front. Records print as JSON lines with every field
(``--format table`` for people), the same either way.
"""

from __future__ import annotations

import json
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from mqstore.cli.render import print_records, print_table
from mqstore.cli.target import (
    AccessKeyOpt,
    SecretKeyOpt,
    ServerOpt,
    TlsCaOpt,
    check_target,
    open_store,
    open_view,
    remote,
)
from mqstore.errors import NotFoundError
from mqstore.store.reads import parse_tag_expression
from mqstore.store.topic_configs import MESSAGE_TYPE_ATTRIBUTE, MESSAGE_TYPES, parse_message_type

StoreArg = Annotated[Path | None, typer.Option("--store", help="Store directory (or --server).")]
TopicArg = Annotated[str, typer.Option("--topic", help="Topic name.")]
QueueArg = Annotated[int, typer.Option("--queue", min=0, max=65535, help="Queue id.")]


class Format(str, Enum):
    json = "json"
    table = "table"


FormatArg = Annotated[Format, typer.Option("--format", help="json (JSON lines, every field) or table.")]


def _records(found) -> list:
    from mqstore.services.common.convert import record_from_pb

    return [record_from_pb(r) for r in found]


def register(app: typer.Typer) -> None:
    @app.command("query-msg-by-id")
    def query_msg_by_id(
        msg_id: Annotated[str, typer.Argument(help="Offset msgId (32 or 56 hex digits).")],
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.json,
    ) -> None:
        """Print the message an offset msgId names (store host + commitlog offset)."""
        check_target(store, server)
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                print_records(_records(c.query_by_msg_id(msg_id)), fmt.value)
            return
        with open_view(store) as s:
            print_records([s.read_msg_id(msg_id)], fmt.value)

    @app.command("query-msg-by-unique-key")
    def query_msg_by_unique_key(
        topic: TopicArg,
        unique_key: Annotated[str, typer.Argument(help="UNIQ_KEY (the client message id).")],
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.json,
    ) -> None:
        """Print the messages of a topic with this UNIQ_KEY (through the index)."""
        check_target(store, server)
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                print_records(_records(c.query_by_unique_key(topic, unique_key)), fmt.value)
            return
        with open_view(store) as s:
            print_records(s.query_by_unique_key(topic, unique_key), fmt.value)

    @app.command("query-msg-by-key")
    def query_msg_by_key(
        topic: TopicArg,
        key: Annotated[str, typer.Argument(help="One of the message's KEYS.")],
        begin: Annotated[int, typer.Option("--begin", help="Earliest store time, ms since the epoch.")] = 0,
        end: Annotated[int, typer.Option("--end", help="Latest store time, ms since the epoch.")] = (1 << 63) - 1,
        max_count: Annotated[
            int, typer.Option("--max", min=1, max=64, help="At most this many (index limit 64).")
        ] = 32,
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.json,
    ) -> None:
        """Print the messages of a topic whose KEYS hold KEY, newest first (through the index)."""
        check_target(store, server)
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                print_records(
                    _records(c.query_by_key(topic, key, begin_ms=begin, end_ms=end, max_num=max_count)), fmt.value
                )
            return
        with open_view(store) as s:
            print_records(s.query_by_key(topic, key, begin=begin, end=end, max_num=max_count), fmt.value)

    @app.command("query-msg-by-offset")
    def query_msg_by_offset(
        topic: TopicArg,
        queue: QueueArg,
        offset: Annotated[int, typer.Option("--offset", min=0, help="Queue offset.")],
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.json,
    ) -> None:
        """Print the message at one queue offset of a topic's queue."""
        check_target(store, server)
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                print_records(_records(c.query_by_offset(topic, queue, offset)), fmt.value)
            return
        with open_view(store) as s:
            print_records([s.read_queue_offset(topic, queue, offset)], fmt.value)

    @app.command("pull")
    def pull(
        topic: TopicArg,
        queue: QueueArg,
        offset: Annotated[int, typer.Option("--offset", min=0, help="Queue offset to start at.")],
        max_count: Annotated[int, typer.Option("--max", min=1, max=10_000, help="At most this many messages.")] = 32,
        tags: Annotated[str | None, typer.Option("--tags", help="Tag expression, e.g. 'TagA || TagB'.")] = None,
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.json,
    ) -> None:
        """Pull messages of one queue from a queue offset, optionally filtered by tags;
        prints the messages, then (on stderr) the next offset to pull from."""
        check_target(store, server)
        wanted = parse_tag_expression(tags)  # a bad expression fails before anything is opened
        if server is not None:
            from mqstore.rpc.v1 import front_pb2

            with remote(server, tls_ca, access_key, secret_key) as c:
                res = c.pull(topic, queue, offset, max_messages=max_count, tags=tags or "")
                if res.status == front_pb2.NO_MESSAGE_IN_QUEUE:  # no such queue: is it one the topic has?
                    check_queue_known(topic, queue, *_server_queues(c, topic), server)
            print_records(_records(res.records), fmt.value)
            typer.echo(
                json.dumps(
                    {
                        "next_offset": res.next_offset,
                        "min_offset": res.min_offset,
                        "max_offset": res.max_offset,
                        "status": front_pb2.PullStatus.Name(res.status),
                    }
                ),
                err=True,
            )
            return
        with open_view(store) as s:
            res = s.pull(topic, queue, offset, max_count=max_count, tags=wanted)
            if res.status.name == "NO_MESSAGE_IN_QUEUE":  # no such queue: is it one the topic has?
                tc = s.topics.get(topic)
                check_queue_known(topic, queue, tc and tc.read_queue_nums, _view_queues(s, topic), store)
            print_records(res.records, fmt.value)
            typer.echo(
                json.dumps(
                    {
                        "next_offset": res.next_offset,
                        "min_offset": res.min_offset,
                        "max_offset": res.max_offset,
                        "status": res.status.name,
                    }
                ),
                err=True,
            )

    @app.command("consumer-progress")
    def consumer_progress(
        group: Annotated[str, typer.Option("--group", help="Consumer group.")],
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.table,
    ) -> None:
        """Per queue of a consumer group: broker offset, consumer offset and lag. A group
        that commits offsets shows them (kind "offset"); a RocketMQ 5 group, which
        receives and acks (pop), shows its pop cursor as the consumer offset and the
        messages it holds unacked (in_flight; kind "pop")."""
        check_target(store, server)
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                rows = [
                    progress_row(r.topic, r.queue_id, r.broker_offset, r.consumer_offset, r.lag, r.in_flight, pop=r.pop)
                    for r in c.consumer_progress(group)
                ]
        else:
            from mqstore.store.pop_progress import read_pop_progress

            with open_view(store) as s:

                def max_offset(topic: str, queue_id: int) -> int:
                    cq = s.consume_queues.find(topic, queue_id)
                    return cq.max_offset if cq is not None else 0

                rows = [
                    progress_row(r.topic, r.queue_id, r.broker_offset, r.consumer_offset, r.lag, 0, pop=False)
                    for r in s.consumer_progress(group)
                ]
                rows += [
                    progress_row(r.topic, r.queue_id, r.broker_offset, r.consumer_offset, r.lag, r.in_flight, pop=True)
                    for r in read_pop_progress(store, group, max_offset)
                ]
                rows.sort(key=lambda r: (r["topic"], r["queue_id"], r["kind"]))
        if not rows:
            raise ValueError(
                f"consumer group {group!r} has no committed offsets and has received nothing (pop) in {store or server}"
            )
        _print_rows(rows, fmt)

    @app.command("update-topic")
    def update_topic(
        topic: TopicArg,
        read_queue_nums: Annotated[
            int | None,
            typer.Option("--read-queue-nums", min=1, max=65536, help="Not given: kept (4 for a new topic)."),
        ] = None,
        write_queue_nums: Annotated[
            int | None,
            typer.Option("--write-queue-nums", min=1, max=65536, help="Not given: kept (4 for a new topic)."),
        ] = None,
        perm: Annotated[
            int | None,
            typer.Option("--perm", min=0, max=15, help="2 write, 4 read, 6 both. Not given: kept (6 for a new topic)."),
        ] = None,
        message_type: Annotated[
            str | None,
            typer.Option(
                "--message-type",
                metavar="{" + ",".join(MESSAGE_TYPES) + "}",
                help="The topic's message type (RocketMQ 5's message.type attribute): what RocketMQ 5 "
                "clients may send to it; MIXED accepts every type. Not given: the topic keeps its "
                "type (NORMAL for a new topic).",
            ),
        ] = None,
        create: Annotated[
            bool, typer.Option("--create", help="With --store: make a new store there if it holds none.")
        ] = False,
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
    ) -> None:
        """Create a topic's config or change what is given of it (config/topics.json; every
        shard's with --server): as RocketMQ's updateTopic, an option left out keeps the
        topic's value. Prints the config as one JSON object: the file's fields with
        --store; topicName, readQueueNums, writeQueueNums and perm with --server. Its
        attributes always carry the topic's message.type (NORMAL where the file has none)."""
        check_target(store, server)
        if message_type is not None:
            parse_message_type(message_type, topic)  # a bad name: exit 1 before anything is opened
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                tc = c.update_topic(
                    topic,
                    read_queue_nums=read_queue_nums,
                    write_queue_nums=write_queue_nums,
                    perm=perm,
                    message_type=message_type,
                )
            typer.echo(
                json.dumps(
                    {
                        "topicName": tc.topic,
                        "readQueueNums": tc.read_queue_nums,
                        "writeQueueNums": tc.write_queue_nums,
                        "perm": tc.perm,
                        "attributes": {MESSAGE_TYPE_ATTRIBUTE: tc.message_type},
                    }
                )
            )
            return
        with open_store(store, create=create) as s:
            tc = s.update_topic(
                topic,
                read_queue_nums=read_queue_nums,
                write_queue_nums=write_queue_nums,
                perm=perm,
                message_type=message_type,
            )
        out = tc.to_json()
        out["attributes"] = {**out["attributes"], MESSAGE_TYPE_ATTRIBUTE: tc.message_type.value}
        typer.echo(json.dumps(out))

    @app.command("status")
    def status(
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.table,
    ) -> None:
        """Every shard: state, whether appends are accepted (and why not), recovery
        progress, commitlog offsets (wrote, flushed, dispatched), dispatch lag, consume
        queues, store size and free disk, and with --server the Ray node each shard
        runs on. A shard that is down is a row saying UNAVAILABLE and what did not
        answer (the front answers within 2 s). With --store: that store's own status.
        Exits 1 if a shard is not serving, not writable, has a background loop stopped or
        a builder stuck (its writes fail, as on a full disk, or it is behind)."""
        check_target(store, server)
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                shards = c.store_status()
            if fmt is Format.table:
                print_table([shard_status_row(st) for st in shards])
                for st in shards:  # why writes are refused, in full
                    if st.write_refusals.reason:
                        typer.echo(f"shard {st.shard}: writes refused: {st.write_refusals.reason}")
                losses = [loss_row(st.shard, x) for st in shards for x in st.consumer_losses]
                if losses:
                    typer.echo("unread messages deleted by retention (per group and queue):")
                    print_table(losses)
            else:
                for st in shards:  # every field, numbers as numbers
                    typer.echo(json.dumps(_fields(st)))
            healthy = all(
                st.state == "SERVING"
                and st.writable
                and not st.stopped_loops
                and not st.queue_builder.stuck
                and not st.index_builder.stuck
                for st in shards
            )
        else:
            with open_store(store) as s:
                st = s.status()
            if fmt is Format.table:
                rec = st["last_recovery"]
                print_table(
                    [
                        {
                            "store": str(store),
                            "writable": "yes" if st["writable"] else f"NO ({st['unwritable_cause']})",
                            "refused": refused_text(**st["write_refusals"]),
                            "lost": sum(x["messages"] for x in st["consumer_losses"]) or "-",
                            "recovery": "clean" if rec["clean_shutdown"] else f"after a crash ({rec['seconds']} s)",
                            "wrote": st["wrote"],
                            "flushed": st["flushed"],
                            "queues": st["queues"],
                            "commitlog": human_bytes(st["wrote"] - st["min_offset"]),
                            "stuck": "; ".join(f"{k}: {b['error']}" for k, b in st.get("stuck", {}).items()) or "-",
                        }
                    ]
                )
            else:
                typer.echo(json.dumps(st))
            healthy = bool(st["writable"]) and not st.get("stopped_loops") and not st.get("stuck")
        if not healthy:
            raise typer.Exit(1)

    @app.command("topic-status")
    def topic_status(
        topic: TopicArg,
        store: StoreArg = None,
        server: ServerOpt = None,
        tls_ca: TlsCaOpt = None,
        access_key: AccessKeyOpt = None,
        secret_key: SecretKeyOpt = None,
        fmt: FormatArg = Format.table,
    ) -> None:
        """Min and max offset and the last store time of every queue of a topic."""
        check_target(store, server)
        if server is not None:
            with remote(server, tls_ca, access_key, secret_key) as c:
                rows = [
                    {
                        "topic": q.topic,
                        "queue_id": q.queue_id,
                        "min_offset": q.min_offset,
                        "max_offset": q.max_offset,
                        "last_store_timestamp": q.last_store_timestamp,
                    }
                    for q in c.topic_status(topic)
                ]
        else:
            with open_view(store) as s:
                rows = [
                    {
                        "topic": q.topic,
                        "queue_id": q.queue_id,
                        "min_offset": q.min_offset,
                        "max_offset": q.max_offset,
                        "last_store_timestamp": q.last_store_timestamp,
                    }
                    for q in s.topic_status(topic)
                ]
        if not rows:
            raise ValueError(f"topic {topic!r} has no queues in {store}")
        _print_rows(rows, fmt)


def progress_row(topic: str, queue_id: int, broker: int, consumer: int, lag: int, in_flight: int, *, pop: bool) -> dict:
    """One row of consumer-progress (the same for --store and --server)."""
    return {
        "topic": topic,
        "queue_id": queue_id,
        "broker_offset": broker,
        "consumer_offset": consumer,
        "lag": lag,
        "in_flight": in_flight,
        "kind": "pop" if pop else "offset",
    }


def check_queue_known(topic: str, queue: int, configured: int | None, holding: list[int], where) -> None:
    """NotFoundError unless ``topic`` has queue ``queue``: one of its configured queues
    (``configured``: how many; None without a config) or one that holds messages
    (``holding``). A queue it has but that is empty is no error (NO_MESSAGE_IN_QUEUE)."""
    if queue in holding or (configured is not None and queue < configured):
        return
    if configured is None and not holding:
        raise NotFoundError(f"topic {topic!r} does not exist in {where} (no config, no messages)")
    has = f"queues 0..{configured - 1}" if configured is not None else f"messages in queues {sorted(holding)}"
    raise NotFoundError(f"topic {topic!r} has no queue {queue} in {where} (it has {has})")


def _view_queues(view, topic: str) -> list[int]:
    try:
        return [q.queue_id for q in view.topic_status(topic)]
    except NotFoundError:
        return []


def _server_queues(c, topic: str) -> tuple[int | None, list[int]]:
    """(configured write queues or None, queues holding messages) over gRPC."""
    import grpc

    configured = c.route(refresh=True).write_queue_nums.get(topic)
    try:
        holding = [q.queue_id for q in c.topic_status(topic)]
    except grpc.RpcError as e:
        if e.code() is not grpc.StatusCode.NOT_FOUND:
            raise
        holding = []
    return configured, holding


def _fields(msg) -> dict:
    """A protobuf message as a dict, nested messages too, repeated fields as lists,
    numbers kept as numbers (json_format would print 64-bit integers as strings)."""

    def value(f, v):
        if f.is_repeated:
            return [_fields(x) if f.message_type is not None else x for x in v]
        return _fields(v) if f.message_type is not None else v

    return {f.name: value(f, getattr(msg, f.name)) for f in msg.DESCRIPTOR.fields}


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB' (negative: unknown, '-')."""
    if n < 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def shard_status_row(st) -> dict:
    """One shard of StoreStatus as a table row people read."""
    serving = st.state == "SERVING"
    if st.state == "RECOVERING":
        recovery = f"{st.recovery_phase} {st.recovery_percent:.0f}%"
    elif serving:
        recovery = "clean" if st.clean_shutdown else f"after a crash ({st.recovery_seconds:.1f} s)"
    else:
        recovery = "-"
    writable = ("yes" if st.writable else f"NO ({st.unwritable_cause or 'unknown'})") if serving else "-"
    w = st.write_refusals
    num = (lambda v: v) if serving else (lambda v: "-")  # noqa: E731
    return {
        "shard": st.shard,
        "state": st.state,
        "writable": writable,
        "refused": refused_text(w.count, w.since_ms, w.cause, w.reason) if serving else "-",
        "lost": _lost(st),
        "recovery": recovery,
        "wrote": num(st.wrote_offset),
        "flushed": num(st.flushed_offset),
        "dispatched": num(st.dispatched_offset),
        "dispatch_lag": human_bytes(max(0, st.confirm_offset - st.dispatched_offset)) if serving else "-",
        "queues": num(st.queue_count),
        "commitlog": human_bytes(st.commitlog_bytes) if serving else "-",
        "disk_free": human_bytes(st.disk_free_bytes) if serving else "-",
        "builders": "/".join(_builder(b) for b in (st.queue_builder, st.index_builder) if b.state) or "-",
        "node": st.node_id or "-",
        "endpoint": st.endpoint or "-",
        "error": st.error or "",
    }


def refused_text(count: int, since_ms: int, cause: str, reason: str) -> str:
    """Appends refused: how many since the process started, and since when if now."""
    if not since_ms:
        return str(count)
    since = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(since_ms / 1000))
    return f"{count} (refusing since {since}: {cause})"


def _lost(st) -> str:
    """Unread messages retention deleted, over every group and queue ("-": none)."""
    n = sum(x.messages for x in st.consumer_losses)
    if not n:
        return "-"
    groups = len({x.group for x in st.consumer_losses})
    return f"{n} msgs, {groups} group{'s' if groups > 1 else ''}"


def loss_row(shard: int, x) -> dict:
    """One ConsumerLoss as a table row."""
    return {
        "shard": shard,
        "group": x.group,
        "topic": x.topic,
        "queue": x.queue_id,
        "offsets": f"[{x.from_offset}, {x.to_offset})",
        "messages": x.messages,
        "forced": "yes" if x.forced else "no (expired)",
        "at": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(x.at_ms / 1000)),
    }


def _builder(b) -> str:
    """A builder's state, its error when it has one (the consume-queue builder first),
    why it is stuck (its writes fail, or it is behind) and what its recovery does."""
    out = b.state + (f" ({b.error[:60]})" if b.error and b.state != "SERVING" else "")
    if b.stuck:
        out += f" STUCK ({b.stuck[:80]})"
    if b.recovery_step and b.state != "SERVING":
        done = f" {b.recovery_done}/{b.recovery_total}" if b.recovery_total else ""
        out += f" [{b.recovery_step}{done}]"
    return out


def _print_rows(rows: list[dict], fmt: Format) -> None:
    if fmt is Format.table:
        print_table(rows)
    else:
        for r in rows:
            typer.echo(json.dumps(r))


__all__ = ["human_bytes", "register", "shard_status_row"]
