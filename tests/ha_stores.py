"""A replica's store with a stale tail from an older epoch, for the truncation tests
(tests/unit/test_ha_truncation.py, tests/integration/test_ha_truncation_crash.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mqstore.store import FlushMode, MessageBatch, StoreConfig
from mqstore.store.ha import EpochCache
from mqstore.store.message_store import MessageStore

SEG = 64 * 1024
TOPIC = "T"
QUEUES = 3


def config(store_type: str | None = None) -> StoreConfig:
    return StoreConfig(segment_bytes=SEG, flush_mode=FlushMode.SYNC, preallocate_segments=False, store_type=store_type)


@dataclass(frozen=True)
class StaleTail:
    """The store's log is [0, end); epoch 1 holds [0, point), epoch 2 (the stale
    tail, which the new master never had) [point, end)."""

    point: int
    end: int
    kept: bytes  # the log's bytes [0, point)
    per_queue: dict[int, int]  # records below the point per queue id
    stale_keys: list[str]  # keys only the stale tail's records carry


def batch(i: int, n: int = 12) -> MessageBatch:
    return MessageBatch(
        topics=TOPIC,
        bodies=[bytes([i % 251]) * 700] * n,
        queue_ids=i % QUEUES,
        keys=[f"k{i}-{j}" for j in range(n)],
    )


def build_stale_tail(
    store_dir: Path, *, kept_batches: int = 9, stale_batches: int = 11, store_type: str | None = None
) -> StaleTail:
    """Epoch 1's records, then epoch 2's (several segments of them), a consumer
    offset committed into the stale tail; the store is closed cleanly."""
    epochs = EpochCache(store_dir)
    epochs.append(1, 0)
    per_queue: dict[int, int] = {}
    with MessageStore(store_dir, config(store_type)) as s:
        for i in range(kept_batches):
            s.append(batch(i))
            per_queue[i % QUEUES] = per_queue.get(i % QUEUES, 0) + 12
        point = s.commitlog.wrote_offset
        epochs.append(2, point)
        for i in range(kept_batches, kept_batches + stale_batches):
            s.append(batch(i))
        s.commitlog.set_confirm_offset(s.commitlog.wrote_offset)  # (a master alone in its set)
        assert s.wait_dispatched(30)
        s.commit_offset("g", TOPIC, 0, s.consume_queues.find(TOPIC, 0).max_offset)  # into the stale tail
        end = s.commitlog.wrote_offset
        kept = b"".join(s.commitlog.read_log_bytes(o, SEG) for o in range(0, point, SEG))[:point]
    stale_keys = [f"k{i}-0" for i in range(kept_batches, kept_batches + stale_batches)]
    return StaleTail(point, end, kept, per_queue, stale_keys)


def check_truncated(store_dir: Path, tail: StaleTail, store_type: str | None = None) -> None:
    """The store ends at the point with everything below it, nothing of the stale tail."""
    with MessageStore(store_dir, config(store_type)) as s:
        assert not (store_dir / "truncation.json").exists()  # (an open finishes a pending cut)
        cl = s.commitlog
        assert cl.wrote_offset == tail.point, (cl.wrote_offset, tail.point, tail.end)
        got = b"".join(cl.read_log_bytes(o, SEG) for o in range(0, tail.point, SEG))
        assert got == tail.kept
        assert [(e.epoch, e.start_offset) for e in EpochCache(store_dir).entries] == [(1, 0)]
        for q in range(QUEUES):
            cq = s.consume_queues.find(TOPIC, q)
            assert (cq.max_offset if cq else 0) == tail.per_queue.get(q, 0), q
            assert cl.queue_offset(TOPIC, q) == tail.per_queue.get(q, 0)
        assert s.index.stats().max_physical_offset < tail.point
        for key in tail.stale_keys[:3]:
            assert all(r.physical_offset < tail.point for r in _by_key(s, key))
        assert s.fetch_offset("g", TOPIC, 0) <= tail.per_queue.get(0, 0)
        assert cl.checkpoint.confirm_phy_offset <= tail.point


def _by_key(s: MessageStore, key: str) -> list:
    from mqstore.errors import NotFoundError

    try:
        return s.query_by_key(TOPIC, key)
    except NotFoundError:
        return []
