"""A msgId query over a store's files (MessageStore, ReadView and ``mqstore
query-msg-by-id --store``) answers one NOT_FOUND text whatever lies at the msgId's
offset: the inside of a record, a segment's end blank and the zeros after it, past the
write position, another store host (issue 25, item 1: errors name what the caller sent,
never bytes read from the store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqstore.cli.main import app
from mqstore.errors import NotFoundError
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.read_view import ReadView
from mqstore.store.reads import NO_MESSAGE

SEGMENT = 64 * 1024
CFG = StoreConfig(segment_bytes=SEGMENT, consume_queue_file_bytes=20 * 200)
SECRET = b"the secret body "


def probes(store: Path) -> tuple[str, dict[str, str]]:
    """A record's msgId and msgIds of offsets where none starts."""
    with MessageStore(store, CFG) as s:
        res = s.append(MessageBatch(topics="Secret", bodies=[SECRET * 300] * 20, queue_ids=0))
        assert s.wait_dispatched()
    rec = list(zip(res.physical_offsets, res.sizes, res.msg_ids))
    last_off, last_size, _ = [r for r in rec if r[0] < SEGMENT][-1]
    blank = last_off + last_size
    assert SEGMENT - blank > 64 and any(r[0] >= SEGMENT for r in rec)
    off, size, msg_id = rec[2]
    prefix = msg_id[:16]
    offsets = {
        "inside the header": off + 1,
        "at the magic code": off + 4,
        "in the body": off + size // 2,
        "the segment's blank": blank,
        "zeros after the blank": (blank + SEGMENT) // 2,
        "past the write position": max(o + n for o, n, _ in rec) + 100,
        "far past the end": 1 << 40,
    }
    out = {name: f"{prefix}{o:016X}" for name, o in offsets.items()}
    out["another store host"] = "0A0B0C0D00002A9F" + msg_id[16:]
    return msg_id, out


def test_every_miss_is_one_not_found(tmp_path: Path) -> None:
    store = tmp_path / "s"
    msg_id, missing = probes(store)
    with MessageStore(store, CFG, background_dispatch=False) as s, ReadView(store) as v:
        for reader in (s, v):
            assert reader.read_msg_id(msg_id).body.startswith(SECRET)
            for name, probe in missing.items():
                with pytest.raises(NotFoundError) as e:
                    reader.read_msg_id(probe)
                assert str(e.value) == NO_MESSAGE, (name, str(e.value))


def test_the_cli_prints_one_answer(tmp_path: Path) -> None:
    store = tmp_path / "s"
    _, missing = probes(store)
    errors = set()
    for probe in missing.values():
        r = CliRunner().invoke(app, ["query-msg-by-id", probe, "--store", str(store)])
        assert r.exit_code == 1 and r.stdout == ""
        # what main() prints as "mqstore: error: ..." (exit status 1)
        assert isinstance(r.exception, NotFoundError), r.exception
        errors.add(str(r.exception))
    assert errors == {NO_MESSAGE}
