"""The reput loop: every record reaches the sinks once, in order, with the right columns."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mqstore.formats.javahash import tags_code
from mqstore.store import CommitLog, Message, MessageBatch, StoreConfig
from mqstore.store.dispatch import DispatchBatch, ReputLoop


class Collect:
    """A sink that keeps what it is given (a real sink for tests, not a stand-in)."""

    def __init__(self) -> None:
        self.batches: list[DispatchBatch] = []

    def dispatch(self, batch: DispatchBatch, from_offset: int, to_offset: int) -> None:
        assert len(batch) == 0 or (from_offset <= batch.physical_offsets[0] and batch.physical_offsets[-1] < to_offset)
        self.batches.append(batch)

    def rows(self) -> list[tuple]:
        out = []
        for b in self.batches:
            keys, unique_keys = b.keys, b.unique_keys  # each access decodes the whole batch: once, not per row
            for i in range(len(b)):
                out.append(
                    (
                        int(b.physical_offsets[i]),
                        b.topics[b.topic_codes[i]],
                        int(b.queue_ids[i]),
                        int(b.queue_offsets[i]),
                        int(b.tags_codes[i]),
                        keys[i],
                        unique_keys[i],
                    )
                )
        return out


def wait_dispatched_while_running(loop: ReputLoop, cl: CommitLog, timeout_s: float = 10.0) -> None:
    """Polls until the running loop's own thread has dispatched everything written:
    asserted before ``stop()``, whose final ``catch_up()`` would dispatch the rest
    synchronously and hide a thread that never ran."""
    deadline = time.monotonic() + timeout_s
    while loop.lag > 0:
        assert loop.running and loop.error is None, f"the loop stopped: {loop.error!r}"
        assert time.monotonic() < deadline, (
            f"the loop thread is at {loop.dispatched_offset} of {cl.wrote_offset} after {timeout_s} s"
        )
        time.sleep(0.005)


def test_dispatch_columns_match_the_records(tmp_path: Path) -> None:
    with CommitLog(tmp_path, StoreConfig(segment_bytes=64 * 1024)) as cl:
        for i in range(30):
            cl.append(
                MessageBatch.of(
                    [
                        Message(
                            f"T{j % 3}",
                            b"x" * (50 + i),
                            queue_id=j % 2,
                            tags=None if j == 4 else f"Tag{j}",
                            keys=None if j == 5 else [f"k{i}-{j}", "o"],
                        )
                        for j in range(12)
                    ]
                )
            )
        sink = Collect()
        loop = ReputLoop(cl, [sink], dispatched_offset=0, chunk_bytes=10_000)
        assert loop.catch_up() == 360
        assert loop.dispatched_offset == cl.wrote_offset and loop.lag == 0
        want = [
            (r.physical_offset, r.topic, r.queue_id, r.queue_offset, tags_code(r.tags), r.keys, r.unique_key)
            for r in cl.read_range(0, max_records=10**6).records
        ]
        assert sink.rows() == want
        assert len(sink.batches) > 3  # chunked, and across segment rollovers


def test_resume_from_an_offset_dispatches_the_rest_once(tmp_path: Path) -> None:
    with CommitLog(tmp_path, StoreConfig(segment_bytes=64 * 1024)) as cl:
        cl.append(MessageBatch(topics="T", bodies=[b"a" * 300] * 200, tags="A"))
        first = ReputLoop(cl, [Collect()], dispatched_offset=0, chunk_bytes=8000)
        first.run_once()
        first.run_once()
        resumed_at = first.dispatched_offset
        sink = Collect()
        ReputLoop(cl, [sink], dispatched_offset=resumed_at).catch_up()
        offsets = [r[0] for r in sink.rows()]
        assert offsets[0] == resumed_at and len(offsets) == 200 - first.dispatched_records


def test_background_loop_follows_appends(tmp_path: Path) -> None:
    with CommitLog(tmp_path) as cl:
        sink = Collect()
        loop = ReputLoop(cl, [sink], dispatched_offset=0)
        loop.start()
        try:
            for _ in range(50):
                cl.append(MessageBatch(topics="T", bodies=[b"m"] * 100, tags="A", keys="k"))
            wait_dispatched_while_running(loop, cl)
            rows = sink.rows()
            assert [r[3] for r in rows if r[2] == 0] == list(range(1250))
            assert len(rows) == 5000
        finally:
            loop.stop()
        assert loop.error is None and loop.dispatched_records == 5000  # stop() found nothing left to dispatch


def test_limit_holds_dispatch_back(tmp_path: Path) -> None:
    with CommitLog(tmp_path) as cl:
        res = cl.append(MessageBatch(topics="T", bodies=[b"m"] * 10))
        cut = int(res.physical_offsets[4])
        gate = {"limit": cut}
        sink = Collect()
        loop = ReputLoop(cl, [sink], dispatched_offset=0, limit=lambda: gate["limit"])
        loop.catch_up()
        assert len(sink.rows()) == 4 and loop.dispatched_offset == cut
        gate["limit"] = cl.wrote_offset
        loop.catch_up()
        assert len(sink.rows()) == 10


def test_thread_safety_smoke(tmp_path: Path) -> None:
    """Appends from two threads while the loop runs: every record once, per-queue order kept."""
    with CommitLog(tmp_path) as cl:
        sink = Collect()
        loop = ReputLoop(cl, [sink], dispatched_offset=0)
        loop.start()

        def produce(q: int) -> None:
            for _ in range(40):
                cl.append(MessageBatch(topics="T", bodies=[b"p"] * 50, queue_ids=q))

        ts = [threading.Thread(target=produce, args=(q,)) for q in (0, 1)]
        for t in ts:
            t.start()
        try:
            for t in ts:
                t.join()
            wait_dispatched_while_running(loop, cl)
            rows = sink.rows()
            for q in (0, 1):
                assert [r[3] for r in rows if r[2] == q] == list(range(2000))
        finally:
            loop.stop()
        assert loop.error is None and loop.dispatched_records == 4000  # stop() found nothing left to dispatch


def test_index_entries_follow_rocketmq_order_and_hashes(tmp_path: Path) -> None:
    from mqstore.formats.javahash import index_key_hash
    from mqstore.formats.properties import split_keys

    msgs = [
        Message("TopicTest", b"a", keys=["order-1", "order-2"]),
        Message("TopicTest", b"b", keys="  spaced   keys "),
        Message("T2", b"c", keys=["订单-中文", "😀emoji"]),  # non-ASCII: hashed from decoded text
        Message("T2", b"d"),  # UNIQ_KEY only
        Message("T2", b"e", keys="rolled", sysflag=0xC),  # rollback: not indexed
        Message("T2", b"f", keys="half", sysflag=0x4),  # prepared half: indexed
        Message("TopicTest", b"g", keys="aW_TRVQ"),  # hash MIN_VALUE -> 0
    ]
    with CommitLog(tmp_path) as cl:
        cl.append(MessageBatch.of(msgs))
        sink = Collect()
        ReputLoop(cl, [sink], dispatched_offset=0).catch_up()
        (batch,) = sink.batches
        got = batch.index_entries()
        want = []
        for r in cl.read_range(0).records:
            if r.sysflag & 0xC == 0xC:
                continue
            keys = ([r.unique_key] if r.unique_key else []) + split_keys(r.keys)
            want += [(index_key_hash(f"{r.topic}#{k}"), r.physical_offset, r.store_timestamp) for k in keys]
        assert list(zip(got.key_hashes.tolist(), got.physical_offsets.tolist(), got.store_timestamps.tolist())) == want
        assert index_key_hash("TopicTest#aW_TRVQ") == 0 and 0 in got.key_hashes.tolist()
