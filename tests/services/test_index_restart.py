"""The served index counts messages (over gRPC, no Ray): repeated KEYS fill one
place each in max_num, and neither a clean restart of the whole deployment nor a
restart of the index builder alone indexes a record again: the index files hold
each (key hash, record) pair once afterwards."""

from __future__ import annotations

import mmap
import threading
from collections import Counter
from pathlib import Path

from mqstore.formats import IndexFileView
from mqstore.rpc.v1 import commitlog_pb2, common_pb2, index_pb2
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store.index_service import INDEX_DIR
from tests.services.helpers import small_config, wait_dispatched
from tests.services.test_shard_services import Parts


def duplicate_entries(store: Path, cfg) -> int:
    pairs: Counter[tuple[int, int]] = Counter()
    for p in sorted((store / INDEX_DIR).iterdir()):
        with p.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            e = IndexFileView(mm, cfg.index_hash_slots, cfg.index_max_entries).entries()
            pairs.update(zip(e["phy_offset"].tolist(), e["key_hash"].tolist()))
    return sum(n - 1 for n in pairs.values())


def test_repeated_keys_fill_one_place_of_max_num(tmp_path: Path) -> None:
    """KEYS "self self self" on 3 messages: max_num 3 answers all 3 (the front asks
    the Index service for max_num offsets; they must be 3 messages, not 3 entries)."""
    cfg = small_config()
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        c.send("Self", [b"m0", b"m1", b"m2"], queue_ids=0, keys="self self self")
        wait_dispatched(c)
        assert [r.body for r in c.query_by_key("Self", "self", max_num=3)] == [b"m2", b"m1", b"m0"]
    assert duplicate_entries(tmp_path, cfg) == 0


def test_a_clean_restart_indexes_nothing_again(tmp_path: Path) -> None:
    """Two messages with one UNIQ_KEY; after clean restarts of the whole deployment
    the unique-key query with max_num 2 still answers both."""
    cfg = small_config()
    with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        c.send("Uniq", [b"first", b"second"], queue_ids=0, unique_keys=["U1", "U1"], keys="k")
        wait_dispatched(c)
        assert [r.body for r in c.query_by_unique_key("Uniq", "U1", max_num=2)] == [b"second", b"first"]
    for _ in range(2):  # the last indexed record ("second") is not indexed again
        with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
            assert st.wait_ready(30)
            wait_dispatched(c)
            assert [r.body for r in c.query_by_unique_key("Uniq", "U1", max_num=2)] == [b"second", b"first"]
            assert [r.body for r in c.query_by_key("Uniq", "k", max_num=2)] == [b"second", b"first"]
        assert duplicate_entries(tmp_path, cfg) == 0


def test_index_builder_restarts_index_nothing_twice(tmp_path: Path) -> None:
    """The index builder alone closed and started again between sends (the commitlog,
    the consume-queue builder and the dispatcher go on): the dispatcher resumes for it
    where it stands, and every key query answers each message once within max_num."""
    cfg = small_config()
    parts = Parts(tmp_path, cfg, dispatcher=True)
    sent = 0
    try:
        for round_ in range(4):
            chs, (cl, _, _) = parts.stubs()
            cl.AppendBatch(
                commitlog_pb2.AppendBatchRequest(
                    messages=common_pb2.MessageColumns(
                        topics=["R"],
                        bodies=[b"%04d" % (sent + i) for i in range(20)],
                        queue_ids=[0],
                        keys=[f"r{sent + i} round{round_}" for i in range(20)],
                        unique_keys=[f"U{(sent + i) // 2}" for i in range(20)],
                    )
                )
            )
            sent += 20
            wrote = cl.GetOffsets(commitlog_pb2.GetOffsetsRequest()).wrote_offset
            for _ in range(1000):  # until the index builder has everything
                p = parts.ix.state.progress()
                if p.state == "SERVING" and p.progress_offset >= wrote:
                    break
                threading.Event().wait(0.02)
            for ch in chs:
                ch.close()
            parts.ix.close()
            parts.ix = parts.start("ix")
            assert parts.ix.wait_ready(30)
        chs, (cl, _, ix) = parts.stubs()
        wrote = cl.GetOffsets(commitlog_pb2.GetOffsetsRequest()).wrote_offset
        for _ in range(1000):
            if parts.ix.state.progress().progress_offset >= wrote:
                break
            threading.Event().wait(0.02)

        def bodies(key: str, n: int) -> list[bytes]:
            hits = ix.Query(index_pb2.IndexQueryRequest(topic="R", key=key, max_num=n)).physical_offsets
            assert len(hits) == len(set(hits)), key
            return sorted(r.body for r in cl.Read(commitlog_pb2.ReadRequest(offsets=hits)).records)

        for round_ in range(4):
            assert bodies(f"round{round_}", 20) == [b"%04d" % i for i in range(20 * round_, 20 * round_ + 20)]
        for i in (0, 19, 20, 39, 59, 79):
            assert bodies(f"r{i}", 1) == [b"%04d" % i]
            assert bodies(f"U{i // 2}", 2) == [b"%04d" % (i - i % 2), b"%04d" % (i - i % 2 + 1)]
        for ch in chs:
            ch.close()
    finally:
        parts.close()
    assert duplicate_entries(tmp_path, cfg) == 0
