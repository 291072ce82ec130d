"""How commands show records: JSON lines (every field) or a table for people."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable

from mqstore.formats.message import MessageRecord


def record_dict(rec: MessageRecord) -> dict:
    """Every record field, the offset msgId, and the body as UTF-8 text when it
    decodes, else base64 (``body_encoding`` says which)."""
    try:
        body, encoding = rec.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(rec.body).decode(), "base64"
    return {
        "msg_id": rec.msg_id,
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "physical_offset": rec.physical_offset,
        "size": rec.total_size,
        "sysflag": rec.sysflag,
        "flag": rec.flag,
        "body_crc": rec.body_crc,
        "born_timestamp": rec.born_timestamp,
        "born_host": str(rec.born_host),
        "store_timestamp": rec.store_timestamp,
        "store_host": str(rec.store_host),
        "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset,
        "tags": rec.tags,
        "keys": rec.keys,
        "unique_key": rec.unique_key,
        "properties": dict(sorted(rec.properties.items())),  # one order whatever the source (a protobuf map has none)
        "body": body,
        "body_encoding": encoding,
    }


_TABLE_COLUMNS = ("msg_id", "topic", "queue_id", "queue_offset", "store_timestamp", "tags", "keys", "size")


def print_records(records: Iterable[MessageRecord], fmt: str = "json") -> int:
    """Write records to stdout; returns how many."""
    out = sys.stdout
    n = 0
    if fmt == "table":
        rows = [record_dict(r) for r in records]
        print_table([{c: row[c] for c in _TABLE_COLUMNS} for row in rows])
        return len(rows)
    for rec in records:
        out.write(json.dumps(record_dict(rec), ensure_ascii=False) + "\n")
        n += 1
    out.flush()
    return n


def print_table(rows: list[dict]) -> None:
    """A plain aligned table (no colours, pipe-friendly)."""
    if not rows:
        print("(none)")
        return
    cols = list(rows[0])
    cells = [[("" if r[c] is None else str(r[c])) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


__all__ = ["print_records", "print_table", "record_dict"]
