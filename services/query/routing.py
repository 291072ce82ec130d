"""Which shard holds a topic queue, and the layout file that pins it.

A topic's queue ``q`` lives on shard ``(crc32(topic) + q) % shards`` with the same
queue id there (the rule itself: services/common/shard_rule.py, the one place it is
written). The rule needs no table per topic, but it depends on the shard count: ``serve`` writes ``<root>/mqstore-layout.json`` on the first start and
refuses to start a different count on the same root, so a queue never moves away
from its files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mqstore.errors import ConfigError
from mqstore.services.common import shard_rule
from mqstore.services.common.errors import Precondition
from mqstore.store.encoded_batch import EncodedBatch

LAYOUT_FILE = "mqstore-layout.json"
LAYOUT_VERSION = 1
STORE_PORT_BASE = 10911  # shard i records store host port 10911 + i: its msgIds name the shard


@dataclass(frozen=True)
class Router:
    """The shard rule (shard_rule.py) at a fixed shard count."""

    shards: int

    def shard_of(self, topic: str, queue_id: int) -> int:
        return shard_rule.shard_of(topic, queue_id, self.shards)


def check_routed(batch: EncodedBatch, shard: int, shards: int) -> None:
    """Every record of an encoded batch lives on ``shard`` of ``shards`` (Precondition
    otherwise: the client routed with a stale or wrong rule and should ask GetRoute)."""
    qids = batch.queue_ids
    if (qids < 0).any():
        i = int(np.argmax(qids < 0))
        raise Precondition(f"encoded record {i}: with {shards} shards the client picks each queue (GetRoute)")
    on = shard_rule.shards_by_code(batch.topics, batch.topic_codes, qids, shards)
    wrong = on != shard
    if wrong.any():
        i = int(np.argmax(wrong))
        topic = batch.topics[int(batch.topic_codes[i])]
        raise Precondition(
            f"encoded record {i}: queue {int(qids[i])} of {topic!r} lives on shard {int(on[i])}, not {shard}; "
            "ask GetRoute again"
        )


def shard_dir(root: Path, shard: int, shards: int) -> Path:
    """Shard ``i`` of a deployment: the root itself with one shard, ``root/shard-i`` with more."""
    return root if shards == 1 else root / f"shard-{shard}"


def pin_layout(root: Path, shards: int) -> dict:
    """Read ``<root>/mqstore-layout.json`` (ConfigError if it names another shard
    count) or write it on a first start; returns it."""
    path = root / LAYOUT_FILE
    root.mkdir(parents=True, exist_ok=True)
    if path.exists():
        layout = json.loads(path.read_text())
        if layout.get("shards") != shards:
            raise ConfigError(
                f"{root} was laid out for {layout.get('shards')} shard(s) ({path}); starting it with "
                f"{shards} would move queues away from their files"
            )
        return layout
    if shards > 1 and any((root / d).is_dir() for d in ("commitlog", "consumequeue")):
        raise ConfigError(f"{root} holds a single store; serve it with --shards 1")
    layout = {
        "version": LAYOUT_VERSION,
        "shards": shards,
        "rule": shard_rule.RULE,
        "shard_dirs": [str(shard_dir(Path("."), i, shards)) for i in range(shards)],
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(layout, indent=2) + "\n")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return layout


__all__ = ["LAYOUT_FILE", "STORE_PORT_BASE", "Router", "check_routed", "pin_layout", "shard_dir"]
