"""Query commands over a store directory, mirroring mqadmin (queryMsgById, ...).

Each opens the store (taking its lock, running recovery and catching the
dispatcher up), answers, and closes it. Records print as JSON lines with every
field (``--format table`` for people).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from mqstore.cli.render import print_records, print_table

StoreArg = Annotated[Path, typer.Option("--store", help="Store directory.")]
TopicArg = Annotated[str, typer.Option("--topic", help="Topic name.")]
QueueArg = Annotated[int, typer.Option("--queue", min=0, max=65535, help="Queue id.")]


class Format(str, Enum):
    json = "json"
    table = "table"


FormatArg = Annotated[Format, typer.Option("--format", help="json (JSON lines, every field) or table.")]


@contextlib.contextmanager
def open_store(store: Path, *, create: bool = False) -> Iterator:
    """The store at ``store``, opened for a query; a clear error if there is none."""
    from mqstore.store.message_store import MessageStore

    if not create and not (store / "commitlog").is_dir():
        raise FileNotFoundError(f"no store at {store} (it has no commitlog/ directory)")
    s = MessageStore(store, background_dispatch=False)
    try:
        yield s
    finally:
        s.close()


def parse_tag_expression(expr: str | None) -> set[str] | None:
    """RocketMQ's tag expression: ``TagA || TagB``; ``*`` or empty means every tag."""
    if expr is None or expr.strip() in ("", "*"):
        return None
    tags = {t.strip() for t in expr.split("||")}
    if "" in tags:
        raise ValueError(f"bad tag expression {expr!r}: use 'TagA || TagB'")
    return tags


def register(app: typer.Typer) -> None:
    @app.command("query-msg-by-id")
    def query_msg_by_id(store: StoreArg, msg_id: Annotated[str, typer.Argument(help="Offset msgId (32 or 56 hex digits).")],
                        fmt: FormatArg = Format.json) -> None:  # fmt: skip
        """Print the message an offset msgId names (store host + commitlog offset)."""
        with open_store(store) as s:
            print_records([s.read_msg_id(msg_id)], fmt.value)

    @app.command("query-msg-by-unique-key")
    def query_msg_by_unique_key(store: StoreArg, topic: TopicArg,
                                unique_key: Annotated[str, typer.Argument(help="UNIQ_KEY (the client message id).")],
                                fmt: FormatArg = Format.json) -> None:  # fmt: skip
        """Print the messages of a topic with this UNIQ_KEY (through the index)."""
        with open_store(store) as s:
            found = s.query_by_unique_key(topic, unique_key)
            if not found:
                raise LookupError(f"no message of {topic!r} has UNIQ_KEY {unique_key!r}")
            print_records(found, fmt.value)

    @app.command("query-msg-by-key")
    def query_msg_by_key(store: StoreArg, topic: TopicArg, key: Annotated[str, typer.Argument(help="One of the message's KEYS.")],
                         begin: Annotated[int, typer.Option("--begin", help="Earliest store time, ms since the epoch.")] = 0,
                         end: Annotated[int, typer.Option("--end", help="Latest store time, ms since the epoch.")] = (1 << 63) - 1,
                         max_count: Annotated[int, typer.Option("--max", min=1, max=64, help="At most this many (index limit 64).")] = 32,
                         fmt: FormatArg = Format.json) -> None:  # fmt: skip
        """Print the messages of a topic whose KEYS hold KEY, newest first (through the index)."""
        with open_store(store) as s:
            found = s.query_by_key(topic, key, begin=begin, end=end, max_num=max_count)
            if not found:
                raise LookupError(f"no message of {topic!r} has key {key!r} in that time range")
            print_records(found, fmt.value)

    @app.command("query-msg-by-offset")
    def query_msg_by_offset(store: StoreArg, topic: TopicArg, queue: QueueArg,
                            offset: Annotated[int, typer.Option("--offset", min=0, help="Queue offset.")],
                            fmt: FormatArg = Format.json) -> None:  # fmt: skip
        """Print the message at one queue offset of a topic's queue."""
        with open_store(store) as s:
            print_records([s.read_queue_offset(topic, queue, offset)], fmt.value)

    @app.command("pull")
    def pull(store: StoreArg, topic: TopicArg, queue: QueueArg,
             offset: Annotated[int, typer.Option("--offset", min=0, help="Queue offset to start at.")],
             max_count: Annotated[int, typer.Option("--max", min=1, max=100_000, help="At most this many messages.")] = 32,
             tags: Annotated[str | None, typer.Option("--tags", help="Tag expression, e.g. 'TagA || TagB'.")] = None,
             fmt: FormatArg = Format.json) -> None:  # fmt: skip
        """Pull messages of one queue from a queue offset, optionally filtered by tags;
        prints the messages, then (on stderr) the next offset to pull from."""
        wanted = parse_tag_expression(tags)
        with open_store(store) as s:
            res = s.pull(topic, queue, offset, max_count=max_count, tags=wanted)
            print_records(res.records, fmt.value)
            typer.echo(json.dumps({"next_offset": res.next_offset, "min_offset": res.min_offset,
                                   "max_offset": res.max_offset}), err=True)  # fmt: skip

    @app.command("consumer-progress")
    def consumer_progress(store: StoreArg, group: Annotated[str, typer.Option("--group", help="Consumer group.")],
                          fmt: FormatArg = Format.table) -> None:  # fmt: skip
        """Per queue of a consumer group: broker offset, consumer offset and lag."""
        with open_store(store) as s:
            rows = [r.__dict__ for r in s.consumer_progress(group)]
        if not rows:
            raise ValueError(f"consumer group {group!r} has no committed offsets in {store}")
        _print_rows(rows, fmt)

    @app.command("update-topic")
    def update_topic(store: StoreArg, topic: TopicArg,
                     read_queue_nums: Annotated[int, typer.Option("--read-queue-nums", min=1, max=65536)] = 4,
                     write_queue_nums: Annotated[int, typer.Option("--write-queue-nums", min=1, max=65536)] = 4,
                     perm: Annotated[int, typer.Option("--perm", min=0, max=15, help="2 write, 4 read, 6 both.")] = 6) -> None:  # fmt: skip
        """Create or change a topic's config (config/topics.json)."""
        with open_store(store, create=True) as s:
            tc = s.update_topic(topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm)
        typer.echo(json.dumps(tc.to_json()))

    @app.command("topic-status")
    def topic_status(store: StoreArg, topic: TopicArg, fmt: FormatArg = Format.table) -> None:
        """Min and max offset and the last store time of every queue of a topic."""
        with open_store(store) as s:
            rows = [q.__dict__ for q in s.topic_status(topic)]
        if not rows:
            raise ValueError(f"topic {topic!r} has no queues in {store}")
        _print_rows(rows, fmt)


def _print_rows(rows: list[dict], fmt: Format) -> None:
    if fmt is Format.table:
        print_table(rows)
    else:
        for r in rows:
            typer.echo(json.dumps(r))


__all__ = ["open_store", "parse_tag_expression", "register"]
