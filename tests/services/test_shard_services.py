"""A shard's own services (CommitLog, ConsumeQueue, Index: three hosts, as three
actors would be) and the dispatcher, over gRPC without Ray: bad requests, the open
protocol, restarts of each component mid-stream, two shards."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from mqstore.errors import (
    CorruptFileError,
    InvalidTopicError,
    MessageTooLargeError,
    OffsetError,
    StoreClosedError,
    StoreNotWritableError,
)
from mqstore.rpc.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    consume_queue_pb2,
    consume_queue_pb2_grpc,
    front_pb2,
    index_pb2,
    index_pb2_grpc,
)
from mqstore.services.commitlog.host import CommitLogHost
from mqstore.services.common.columns import INT32, INT64, pack
from mqstore.services.common.errors import status_of
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import PeerUnavailable, resolver_of
from mqstore.services.common.server import sync_channel
from mqstore.services.dispatcher.host import DispatcherHost
from mqstore.services.index.host import BuilderHost
from mqstore.services.query.client import FrontClient, decode_pulled
from mqstore.services.startup.local import LocalStack
from mqstore.store.builders import GapError
from mqstore.store.retention import RetentionConfig
from tests.services.helpers import code_of, small_config, wait_dispatched

C = grpc.StatusCode


@pytest.mark.parametrize(
    "exc,code",
    [
        (InvalidTopicError("t"), C.INVALID_ARGUMENT),
        (MessageTooLargeError("m"), C.RESOURCE_EXHAUSTED),
        (OffsetError("o"), C.INVALID_ARGUMENT),
        (CorruptFileError("c"), C.DATA_LOSS),
        (StoreClosedError("s"), C.UNAVAILABLE),
        (StoreNotWritableError("d", cause="disk_full"), C.RESOURCE_EXHAUSTED),
        (StoreNotWritableError("f", cause="flush_failed"), C.UNAVAILABLE),
        (RuntimeError("x"), C.INTERNAL),
        (PeerUnavailable("builder gone"), C.UNAVAILABLE),
        (GapError("gap"), C.FAILED_PRECONDITION),
    ],
)
def test_one_table_maps_store_errors_to_codes(exc, code):
    assert status_of(exc)[0] is code


def test_a_blocking_call_to_a_peer_keeps_its_code():
    """A builder's call to its commitlog (remote.py) fails: the caller sees why, not INTERNAL."""
    with sync_channel("127.0.0.1:1") as ch:  # nothing listens there
        with pytest.raises(grpc.RpcError) as e:
            commitlog_pb2_grpc.CommitLogServiceStub(ch).GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5)
    assert status_of(e.value)[0] is C.UNAVAILABLE


class Parts:
    """One shard's commitlog, consume-queue builder and index builder hosts (each
    restartable: peers resolve the current endpoint), with or without a dispatcher."""

    def __init__(self, root, cfg, *, dispatcher: bool = False) -> None:
        self.root, self.cfg, self.endpoints = root, cfg, {}
        self.auth = InternalAuth.new()
        self.shard = self.start("cl")
        self.cq = self.start("cq")
        self.ix = self.start("ix")
        self.disp = self.start("disp") if dispatcher else None
        assert self.shard.wait_ready(30)

    def start(self, part: str):
        e = self.endpoints
        if part == "cl":
            h = CommitLogHost(self.root, self.cfg, auth=self.auth)
        elif part in ("cq", "ix"):
            h = BuilderHost(
                "consumequeue" if part == "cq" else "index",
                self.root,
                self.cfg,
                resolve_commitlog=resolver_of(e, "cl"),
                auth=self.auth,
            )
        else:
            h = DispatcherHost({k: resolver_of(e, k) for k in ("cl", "cq", "ix")}, config=self.cfg, auth=self.auth)
        e[part] = h.endpoint
        return h

    def stubs(self):
        chs = [sync_channel(self.endpoints[k], auth=self.auth) for k in ("cl", "cq", "ix")]
        return chs, (
            commitlog_pb2_grpc.CommitLogServiceStub(chs[0]),
            consume_queue_pb2_grpc.ConsumeQueueServiceStub(chs[1]),
            index_pb2_grpc.IndexServiceStub(chs[2]),
        )

    def close(self) -> None:
        for h in (self.disp, self.cq, self.ix, self.shard):
            if h is not None:
                h.close()


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    parts = Parts(tmp_path_factory.mktemp("shard"), small_config())
    chs, (cl, cq, ix) = parts.stubs()
    res = cl.AppendBatch(
        commitlog_pb2.AppendBatchRequest(
            messages=common_pb2.MessageColumns(topics=["S"], bodies=[b"a" * 100, b"b" * 100], queue_ids=[0])
        )
    )
    yield parts, (cl, cq, ix), res.result
    for ch in chs:
        ch.close()
    parts.close()


def test_read_range_lingers_for_min_bytes_once_records_are_visible(shard):
    """min_bytes/linger_ms: with fewer bytes visible the answer waits up to linger_ms
    (never past wait_ms), then brings what there is; enough bytes answer at once."""
    _, (cl, _, _), appended = shard
    start = appended.physical_offsets[0]

    def timed(**kw):
        t0 = time.monotonic()
        r = cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=start, bounds_only=True, **kw))
        return r, time.monotonic() - t0

    r, waited = timed(wait_ms=2_000, min_bytes=1 << 20, linger_ms=300)
    assert r.record_count >= 2 and 0.25 <= waited < 1.5
    r, waited = timed(wait_ms=100, min_bytes=1 << 20, linger_ms=1_000)
    assert r.record_count >= 2 and waited < 0.6
    r, waited = timed(wait_ms=2_000, min_bytes=100, linger_ms=1_000)
    assert r.record_count >= 2 and waited < 0.25


def test_shard_rejects_bad_internal_requests(shard):
    parts, (cl, cq, ix), appended = shard
    inc = cl.GetOffsets(commitlog_pb2.GetOffsetsRequest()).incarnation
    mid = appended.physical_offsets[0] + 3
    one, zero = pack([1], INT64), pack([0], INT64)
    cases = [
        (lambda: cl.Read(commitlog_pb2.ReadRequest(offsets=[mid])), C.INVALID_ARGUMENT),
        (lambda: cl.Read(commitlog_pb2.ReadRequest(offsets=[-1])), C.INVALID_ARGUMENT),
        (lambda: cl.Read(commitlog_pb2.ReadRequest(offsets=[10**12])), C.NOT_FOUND),
        (lambda: cl.Read(commitlog_pb2.ReadRequest(offsets=[0], raw=True, sizes=[7])), C.INVALID_ARGUMENT),
        (lambda: cl.Read(commitlog_pb2.ReadRequest(offsets=[0] * 10_001)), C.RESOURCE_EXHAUSTED),
        (lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=mid)), C.INVALID_ARGUMENT),
        (lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=10**12)), C.INVALID_ARGUMENT),
        (lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=0, max_bytes=1 << 30)), C.RESOURCE_EXHAUSTED),
        (lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=0, wait_ms=-5)), C.INVALID_ARGUMENT),
        (lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=0, linger_ms=5_000)), C.INVALID_ARGUMENT),
        (lambda: cq.Pull(front_pb2.PullRequest(topic="S", queue_id=0, offset=0)), C.INVALID_ARGUMENT),
        (lambda: cq.Pull(front_pb2.PullRequest(topic="bad topic", queue_id=0, raw=True)), C.INVALID_ARGUMENT),
        (lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=0, min_bytes=-1)), C.INVALID_ARGUMENT),
        (lambda: cq.PutUnits(consume_queue_pb2.PutUnitsRequest(incarnation=inc + 1)), C.ABORTED),
        (
            lambda: cq.PutUnits(
                consume_queue_pb2.PutUnitsRequest(
                    incarnation=inc, from_offset=appended.physical_offsets[1], to_offset=appended.physical_offsets[1]
                )
            ),
            C.FAILED_PRECONDITION,
        ),
        (lambda: cq.PutUnits(consume_queue_pb2.PutUnitsRequest(incarnation=inc, to_offset=10**9)), C.INVALID_ARGUMENT),
        (
            lambda: cq.PutUnits(
                consume_queue_pb2.PutUnitsRequest(
                    incarnation=inc, topics=["S"], topic_codes=pack([0, 0], INT32), queue_ids=pack([0], INT32)
                )
            ),
            C.INVALID_ARGUMENT,
        ),
        (
            lambda: cq.PutUnits(
                consume_queue_pb2.PutUnitsRequest(
                    incarnation=inc,
                    topics=["S"],
                    topic_codes=pack([3], INT32),
                    queue_ids=pack([0], INT32),
                    queue_offsets=pack([0], INT64),
                    physical_offsets=pack([0], INT64),
                    sizes=pack([10], INT32),
                    tags_codes=pack([0], INT64),
                    store_timestamps=pack([0], INT64),
                    sysflags=pack([0], INT32),
                    to_offset=10,
                )
            ),
            C.INVALID_ARGUMENT,
        ),
        (
            lambda: cq.GetUnits(consume_queue_pb2.GetUnitsRequest(topic="S", queue_id=0, offset=0, max_units=200_000)),
            C.RESOURCE_EXHAUSTED,
        ),
        (lambda: cq.MinMax(consume_queue_pb2.MinMaxRequest(topic="bad topic")), C.INVALID_ARGUMENT),
        (
            lambda: ix.PutKeys(
                index_pb2.PutKeysRequest(
                    incarnation=inc, key_hashes=one, physical_offsets=zero, store_timestamps=zero, to_offset=1 << 40
                )
            ),
            C.INVALID_ARGUMENT,
        ),
        (
            lambda: ix.PutKeys(
                index_pb2.PutKeysRequest(
                    incarnation=inc,
                    key_hashes=pack([-5], INT64),
                    physical_offsets=zero,
                    store_timestamps=zero,
                    to_offset=1,
                )
            ),
            C.INVALID_ARGUMENT,
        ),
        (  # a packed column cut inside a value
            lambda: ix.PutKeys(
                index_pb2.PutKeysRequest(
                    incarnation=inc, key_hashes=one[:5], physical_offsets=zero, store_timestamps=zero, to_offset=1
                )
            ),
            C.INVALID_ARGUMENT,
        ),
        (lambda: ix.Query(index_pb2.IndexQueryRequest(topic="S", key="k", max_num=65)), C.RESOURCE_EXHAUSTED),
        (lambda: cl.CheckUnits(commitlog_pb2.CheckUnitsRequest(physical_offsets=[0], sizes=[1])), C.INVALID_ARGUMENT),
        (
            lambda: cl.CheckUnits(
                commitlog_pb2.CheckUnitsRequest(
                    physical_offsets=[0],
                    sizes=[1],
                    queue_ids=[0],
                    queue_offsets=[0],
                    topics=["S"],
                    topic_codes=[4],
                    tags_codes=[0],
                    check_tags=[False],
                )
            ),
            C.INVALID_ARGUMENT,
        ),
        (lambda: cl.NoteDerived(commitlog_pb2.NoteDerivedRequest(kind="nope", durable_offset=0)), C.INVALID_ARGUMENT),
        (lambda: cl.NoteDerived(commitlog_pb2.NoteDerivedRequest(kind="index", durable_offset=-1)), C.INVALID_ARGUMENT),
        (lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=0, dispatched_offset=-1)), C.INVALID_ARGUMENT),
    ]
    for i, (call, code) in enumerate(cases):
        assert code_of(call) is code, f"case {i}"
    r = cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=0))  # still answering, and right
    assert r.record_count == 2 and r.next_offset == appended.physical_offsets[1] + appended.sizes[1]


def test_units_and_keys_sent_twice_are_harmless(shard):
    parts, (cl, cq, ix), appended = shard
    inc = parts.shard.state.incarnation
    again = consume_queue_pb2.PutUnitsRequest(
        incarnation=inc,
        topics=["S"],
        topic_codes=pack([0, 0], INT32),
        queue_ids=pack([0, 0], INT32),
        queue_offsets=pack([0, 1], INT64),
        physical_offsets=pack(appended.physical_offsets, INT64),
        sizes=pack(appended.sizes, INT32),
        tags_codes=pack([0, 0], INT64),
        store_timestamps=pack([0, 0], INT64),
        sysflags=pack([0, 0], INT32),
        from_offset=0,
        to_offset=0,
    )
    # (no dispatcher runs against this shard: the units are not there yet; send them twice)
    again.to_offset = appended.physical_offsets[1] + appended.sizes[1]
    cq.PutUnits(again)
    cq.PutUnits(again)
    u = cq.GetUnits(consume_queue_pb2.GetUnitsRequest(topic="S", queue_id=0, offset=0, max_units=10))
    assert (u.min_offset, u.max_offset, list(u.physical_offsets)) == (0, 2, list(appended.physical_offsets))


def test_a_recovering_shard_answers_unavailable(tmp_path):
    from mqstore.services.commitlog.servicer import CommitLogServicer
    from mqstore.services.commitlog.state import CommitLogState
    from mqstore.services.common.server import ServerThread, start_grpc_server

    sh = CommitLogState(tmp_path, small_config())  # never opened: stays RECOVERING
    t = ServerThread()
    server = t.run(start_grpc_server("127.0.0.1", 0, [CommitLogServicer(sh).registration()], serving=False))
    with sync_channel(f"127.0.0.1:{server.port}") as ch:
        with pytest.raises(grpc.RpcError) as e:
            commitlog_pb2_grpc.CommitLogServiceStub(ch).GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5)
    assert e.value.code() is C.UNAVAILABLE and "recovering" in e.value.details()
    t.run(server.stop(0))
    t.stop()


@pytest.mark.parametrize("part", ["disp", "cq", "ix", pytest.param("cl", marks=pytest.mark.slow)])  # cl: over 5 s
@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_restarts_mid_stream_lose_and_duplicate_nothing(tmp_path, part):
    """Each component of a shard closed and started again while messages flow: the
    dispatcher resumes at the builders' progress, a builder recovers against the
    commitlog and the dispatcher fills its gap, a reopened commitlog makes both
    builders recover against its new open; every unit and key exactly once."""
    parts = Parts(tmp_path, small_config(), dispatcher=True)
    attr = {"disp": "disp", "cq": "cq", "ix": "ix", "cl": "shard"}[part]
    sent = 0
    try:
        for round_ in range(4):
            chs, (cl, _, _) = parts.stubs()
            for _ in range(15):  # 15 x 100 x ~700 B: crosses 1 MiB segments (BLANKs)
                cl.AppendBatch(
                    commitlog_pb2.AppendBatchRequest(
                        messages=common_pb2.MessageColumns(
                            topics=["R"],
                            bodies=[b"%06d" % (sent + i) + b"." * 600 for i in range(100)],
                            queue_ids=[round_ % 2],
                            keys=[f"r{sent + i}" for i in range(100)],
                        )
                    )
                )
                sent += 100
            for ch in chs:
                ch.close()
            getattr(parts, attr).close()  # mid-stream, wherever dispatch is
            setattr(parts, attr, parts.start(part))
            assert parts.shard.wait_ready(30)
        chs, (cl, cq, ix) = parts.stubs()
        for _ in range(1000):
            offsets = cl.GetOffsets(commitlog_pb2.GetOffsetsRequest())
            d, end = parts.disp.dispatcher, offsets.confirm_offset
            built = min(b.state.progress().progress_offset for b in (parts.cq, parts.ix))  # (0 while one recovers)
            if d.dispatched_offset >= end > 0 and built >= end and not d.index_behind:  # (a new index catches up)
                break
            threading.Event().wait(0.02)
        bodies = []
        for q in (0, 1):
            u = cq.GetUnits(consume_queue_pb2.GetUnitsRequest(topic="R", queue_id=q, offset=0, max_units=100_000))
            assert u.max_offset == len(u.physical_offsets) == sent // 2  # no unit lost, none twice
            rd = cl.Read(commitlog_pb2.ReadRequest(offsets=u.physical_offsets))
            assert [r.queue_offset for r in rd.records] == list(range(sent // 2))
            bodies += [int(r.body[:6]) for r in rd.records]
        assert sorted(bodies) == list(range(sent))
        for k in (0, 777, sent - 1):
            # (the last message indexed before a restart is indexed again, as RocketMQ does: queries dedupe)
            hits = sorted(set(ix.Query(index_pb2.IndexQueryRequest(topic="R", key=f"r{k}")).physical_offsets))
            assert [int(r.body[:6]) for r in cl.Read(commitlog_pb2.ReadRequest(offsets=hits)).records].count(k) == 1
        st = parts.disp.status()
        assert st["resyncs"] >= 1 and offsets.dispatched_offset <= offsets.confirm_offset
        # the feed and the puts on streams opened per connection and resync (and an index
        # stream again after each of the 4 restarts, at most twice), not per batch
        assert 1 <= st["streams_opened"] <= 3 * st["resyncs"] + 2 * 4 + 1, st
        assert parts.disp.status()["reads"] == "remote"  # (no store directory given: the bytes come over ReadRange)
        for ch in chs:
            ch.close()
    finally:
        parts.close()
    assert not any((tmp_path / f).exists() for f in ("abort", "abort.consumequeue", "abort.index"))


def test_two_shards_spread_queues_and_answer_as_one(tmp_path):
    with LocalStack(tmp_path, small_config(), shards=2) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        c.update_topic("Spread", write_queue_nums=8, read_queue_nums=8)
        res = c.send("Spread", [f"s{i}".encode() for i in range(160)], keys=[f"key{i % 5}" for i in range(160)])
        assert sorted(set(res.queue_ids)) == list(range(8)) and set(res.shards) == {0, 1}
        assert len({m[:16] for m in res.msg_ids}) == 2  # each shard's msgIds name its own store host
        wait_dispatched(c)
        assert all(s.wrote_offset > 0 for s in c.store_status())
        bodies = [r.body for q in range(8) for r in c.pull("Spread", q, 0, max_messages=100).records]
        assert sorted(bodies) == sorted(f"s{i}".encode() for i in range(160))
        for i in (0, 77, 159):
            (rec,) = c.query_by_msg_id(res.msg_ids[i])
            assert rec.body == f"s{i}".encode() and rec.shard == res.shards[i]
        found = c.query_by_key("Spread", "key3", max_num=64)
        assert len(found) == 32 and {r.shard for r in found} == {0, 1}
        assert [r.store_timestamp for r in found] == sorted((r.store_timestamp for r in found), reverse=True)
        st_rows = c.topic_status("Spread")
        assert [q.queue_id for q in st_rows] == list(range(8)) and {q.shard for q in st_rows} == {0, 1}
        for q in range(8):
            c.commit_offset("g", "Spread", q, 1)
        assert len(c.consumer_progress("g")) == 8
    assert (tmp_path / "shard-0" / "commitlog").is_dir() and (tmp_path / "shard-1" / "commitlog").is_dir()


def test_corrupt_bytes_where_dispatch_stands_are_data_loss(tmp_path):
    parts = Parts(tmp_path, small_config())
    shard = parts.shard
    try:
        with sync_channel(shard.endpoint, auth=parts.auth) as ch:
            cl = commitlog_pb2_grpc.CommitLogServiceStub(ch)
            res = cl.AppendBatch(
                commitlog_pb2.AppendBatchRequest(
                    messages=common_pb2.MessageColumns(topics=["D"], bodies=[b"a" * 50, b"b" * 50], queue_ids=[0])
                )
            ).result
            seg = shard.state.log_store.commitlog._segments.find(0)  # no dispatcher runs: dispatch stands at 0
            seg.mm[4:8] = b"\x00\x00\x00\x00"  # the first record's magic
            with pytest.raises(grpc.RpcError) as e:
                cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=0), timeout=10)
            assert e.value.code() is C.DATA_LOSS
            assert (
                code_of(lambda: cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=3), timeout=10))
                is C.INVALID_ARGUMENT
            )
            r = cl.ReadRange(commitlog_pb2.ReadRangeRequest(offset=res.physical_offsets[1]), timeout=10)
            assert r.record_count == 1  # the server still answers, and the rest reads
    finally:
        parts.close()


def test_a_shard_that_can_not_be_resolved_is_unavailable(tmp_path):
    from mqstore.services.query.host import FrontHost

    async def nowhere() -> str:
        raise LookupError("no actor named shard-0")

    front = FrontHost([({"cl": nowhere, "cq": nowhere, "ix": nowhere}, None)], auth=InternalAuth.new())
    try:
        with FrontClient(front.endpoint) as c:
            assert code_of(lambda: c.pull("T", 0, 0)) is C.UNAVAILABLE
            (st,) = c.store_status()
            assert st.state == "UNAVAILABLE" and "can not be reached" in st.error
    finally:
        front.close()


def test_retention_runs_across_the_split(tmp_path):
    """The commitlog deletes expired segments (not past what the builders acknowledged);
    each builder then deletes its own files below the commitlog's new min offset, and
    the queues' min offsets follow, so pulls start where messages still exist."""
    every_hour = ";".join(str(h) for h in range(24))
    retention = RetentionConfig(file_reserved_hours=0, delete_when=every_hour, check_interval_ms=200)
    cfg = small_config()
    with LocalStack(tmp_path, cfg, retention=retention) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(30)
        for i in range(24):  # ~7 MiB: seven 1 MiB segments; queue files of 1,000 units
            c.send("Old", [b"%05d" % (i * 100 + j) + b"." * 3000 for j in range(100)], queue_ids=0)
        wait_dispatched(c)
        # Every segment but the one written to expires at once and is deleted within a
        # pass or two; the queue's min follows once the builder is told (the next batch
        # or idle ReadRange carries the commitlog's min). Wait for that end state: before
        # it, the queue's min may still point into a segment deleted meanwhile.
        deadline = time.monotonic() + 30
        while True:
            (q,) = c.topic_status("Old")
            (s,) = c.store_status()
            last_segment = s.wrote_offset // cfg.segment_bytes * cfg.segment_bytes
            p = c.pull("Old", 0, 0, max_messages=5)  # a deleted offset: the consumer is sent to the queue's min
            start = p.next_offset
            got = c.pull("Old", 0, start, max_messages=5).records if s.min_offset == last_segment else []
            if q.min_offset > 1000 and got:
                break
            assert time.monotonic() < deadline, (s, q)
            time.sleep(0.1)
        assert q.max_offset == 2400 and q.min_offset < 2400 and s.min_offset > 0
        assert p.status == front_pb2.OFFSET_TOO_SMALL and p.next_offset == p.min_offset >= q.min_offset
        p = c.pull("Old", 0, start, max_messages=5)
        assert [int(r.body[:5]) for r in p.records] == list(range(start, start + 5))
        # raw pulls, answered by the consume-queue builder from its maps of the segments
        assert c.pull("Old", 0, 0, max_messages=5, raw=True).status == front_pb2.OFFSET_TOO_SMALL
        pr = c.pull("Old", 0, start, max_messages=5, raw=True)
        assert [int(r.body[:5]) for r in decode_pulled(pr)] == list(range(start, start + 5))
        assert all(r.physical_offset >= s.min_offset for r in p.records)
        files = sorted((tmp_path / "consumequeue" / "Old" / "0").iterdir())
        assert files and int(files[0].name) > 0  # the builder deleted its first queue files


def test_forced_retention_reports_unread_losses_as_forced(tmp_path):
    """The disk past the forced-deletion watermark: the commitlog deletes segments that
    had not expired and says so (GetOffsets.forced_deleted_to); the consume-queue
    builder, cleaning its files, reports the group that had not read them as a forced
    loss with exact queue-offset ranges."""
    from structlog.testing import capture_logs

    # Any disk is past 1% used: every pass forces (never past what the builders acknowledged),
    # forced deletion opted in (off by default: tests/unit/test_disk_pressure.py).
    retention = RetentionConfig(
        disk_max_used_ratio=0.01, clean_forcibly_ratio=0.01, check_interval_ms=200, clean_forcibly_enable=True
    )
    with (
        capture_logs() as logs,
        LocalStack(tmp_path, small_config(), retention=retention) as st,
        FrontClient(st.front_endpoint) as c,
    ):
        assert st.wait_ready(30)
        c.commit_offset("slow-group", "Full", 0, 0)
        for i in range(24):
            c.send("Full", [b"%05d" % (i * 100 + j) + b"." * 3000 for j in range(100)], queue_ids=0)
        wait_dispatched(c)
        deadline = time.monotonic() + 30
        while c.topic_status("Full")[0].min_offset <= 1000:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with sync_channel(st.shards[0].endpoint, auth=st.auth) as ch:
            o = commitlog_pb2_grpc.CommitLogServiceStub(ch).GetOffsets(commitlog_pb2.GetOffsetsRequest())
        assert 0 < o.min_offset <= o.forced_deleted_to
    losses = [e for e in logs if e["event"] == "unconsumed_messages_deleted" and e["group"] == "slow-group"]
    assert losses and all(e["forced"] for e in losses), losses
    assert losses[0]["ranges"][0].startswith("Full-0:[0,")
