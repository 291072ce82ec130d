"""The internal streams over real gRPC (one shard's commitlog and builders, no Ray):
CommitLogService.Tail (one answer per credit, from where the last ended, the
grants' dispatched offsets noted), PutUnitsStream / PutKeysStream (each request
answered in order with the status the unary call would have had, the stream kept),
the secret checked when a stream opens. The dispatcher on these streams through
restarts: test_shard_services.py."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from mqstore.rpc.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    consume_queue_pb2,
    consume_queue_pb2_grpc,
    index_pb2,
    index_pb2_grpc,
)
from mqstore.services.commitlog.host import CommitLogHost
from mqstore.services.common.columns import INT32, INT64, pack
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import RequestStream, internal_channel
from mqstore.services.common.peers import fixed
from mqstore.services.index.host import BuilderHost
from tests.services.helpers import small_config

C = grpc.StatusCode


class Parts:
    """One shard's commitlog and builders (no dispatcher: the tests send its traffic)."""

    def __init__(self, root) -> None:
        cfg, self.auth = small_config(), InternalAuth.new()
        self.shard = CommitLogHost(root, cfg, auth=self.auth)
        at = fixed(self.shard.endpoint)
        self.cq = BuilderHost("consumequeue", root, cfg, resolve_commitlog=at, auth=self.auth)
        self.ix = BuilderHost("index", root, cfg, resolve_commitlog=at, auth=self.auth)
        self.endpoints = {"cl": self.shard.endpoint, "cq": self.cq.endpoint, "ix": self.ix.endpoint}
        assert self.shard.wait_ready(30) and self.cq.wait_ready(30) and self.ix.wait_ready(30)

    def close(self) -> None:
        for h in (self.cq, self.ix, self.shard):
            h.close()


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    p = Parts(tmp_path_factory.mktemp("streams"))
    yield p
    p.close()


def _append(parts: Parts, topic: str, n: int, keys: bool = False) -> common_pb2.AppendResult:
    async def run():
        async with internal_channel(parts.endpoints["cl"], parts.auth) as ch:
            msgs = common_pb2.MessageColumns(topics=[topic], bodies=[b"x" * 50] * n, queue_ids=[0])
            if keys:
                msgs.keys.extend([f"k{i}" for i in range(n)])
            r = await commitlog_pb2_grpc.CommitLogServiceStub(ch).AppendBatch(
                commitlog_pb2.AppendBatchRequest(messages=msgs), timeout=10, metadata=parts.auth.metadata()
            )
            return r.result

    return asyncio.run(run())


def _code(e: BaseException) -> C:
    assert isinstance(e, grpc.aio.AioRpcError), e
    return e.code()


def test_tail_sends_one_answer_per_credit_from_where_the_last_ended(parts):
    first = _append(parts, "T", 2)
    start = first.physical_offsets[0]
    end = first.physical_offsets[1] + first.sizes[1]

    async def run():
        async with internal_channel(parts.endpoints["cl"], parts.auth) as ch:
            cl = commitlog_pb2_grpc.CommitLogServiceStub(ch)
            call = cl.Tail(metadata=parts.auth.metadata())
            await call.write(
                commitlog_pb2.TailRequest(
                    start=commitlog_pb2.ReadRangeRequest(offset=start, wait_ms=300, bounds_only=True), credit=1
                )
            )
            a = await asyncio.wait_for(call.read(), 10)
            assert (a.offset, a.record_count, a.next_offset, a.data) == (start, 2, end, b"")
            more = await asyncio.to_thread(_append, parts, "T", 1)
            pending = asyncio.ensure_future(call.read())
            done, _ = await asyncio.wait([pending], timeout=0.6)
            assert not done  # no credit, no answer (while records are there)
            await call.write(commitlog_pb2.TailRequest(dispatched_offset=end, credit=1))
            b = await asyncio.wait_for(pending, 10)
            assert (b.offset, b.record_count) == (end, 1)
            offsets = await cl.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10, metadata=parts.auth.metadata())
            assert offsets.dispatched_offset >= end  # the grant's dispatched offset was noted
            await call.write(commitlog_pb2.TailRequest(credit=1))
            idle = await asyncio.wait_for(call.read(), 10)  # nothing new: an answer after wait_ms, no records
            assert (idle.record_count, idle.next_offset) == (0, more.physical_offsets[0] + more.sizes[0])
            assert idle.incarnation == offsets.incarnation
            await call.done_writing()  # the dispatcher is done: the stream ends
            assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF
            assert await call.code() is C.OK

    asyncio.run(run())


def test_tail_refuses_bad_opens_and_grants_with_read_ranges_codes(parts):
    rec = _append(parts, "T", 1)
    mid = rec.physical_offsets[0] + 3

    async def status_of(*requests) -> C:
        async with internal_channel(parts.endpoints["cl"], parts.auth) as ch:
            call = commitlog_pb2_grpc.CommitLogServiceStub(ch).Tail(metadata=parts.auth.metadata())
            for r in requests:
                await call.write(r)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                while True:
                    assert await asyncio.wait_for(call.read(), 10) is not grpc.aio.EOF
            return e.value.code()

    ok = commitlog_pb2.ReadRangeRequest(offset=rec.physical_offsets[0], wait_ms=100)

    async def run():
        assert await status_of(commitlog_pb2.TailRequest(credit=1)) is C.INVALID_ARGUMENT  # no start
        for bad, code in (
            (commitlog_pb2.ReadRangeRequest(offset=mid), C.INVALID_ARGUMENT),
            (commitlog_pb2.ReadRangeRequest(offset=0, max_bytes=1 << 30), C.RESOURCE_EXHAUSTED),
            (commitlog_pb2.ReadRangeRequest(offset=0, linger_ms=5_000), C.INVALID_ARGUMENT),
        ):
            assert await status_of(commitlog_pb2.TailRequest(start=bad, credit=1)) is code
        assert await status_of(commitlog_pb2.TailRequest(start=ok, credit=1_000)) is C.INVALID_ARGUMENT
        assert (
            await status_of(commitlog_pb2.TailRequest(start=ok, credit=1), commitlog_pb2.TailRequest(start=ok))
            is C.INVALID_ARGUMENT
        )  # start twice
        assert (
            await status_of(commitlog_pb2.TailRequest(start=ok), commitlog_pb2.TailRequest(dispatched_offset=-1))
            is C.INVALID_ARGUMENT
        )

    asyncio.run(run())


def test_streams_check_the_secret_once_when_they_open(parts):
    stranger = InternalAuth.new()

    async def run():
        for name, open_stream in (
            ("cl", lambda ch: commitlog_pb2_grpc.CommitLogServiceStub(ch).Tail),
            ("cq", lambda ch: consume_queue_pb2_grpc.ConsumeQueueServiceStub(ch).PutUnitsStream),
            ("ix", lambda ch: index_pb2_grpc.IndexServiceStub(ch).PutKeysStream),
        ):
            async with internal_channel(parts.endpoints[name], parts.auth) as ch:
                for md in (stranger.metadata(), None):  # another deployment's secret, none
                    call = open_stream(ch)(metadata=md)  # refused as it opens, before any request
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await asyncio.wait_for(call.read(), 10)
                    assert e.value.code() is C.UNAUTHENTICATED, name

    asyncio.run(run())


def _units(inc: int, rec: common_pb2.AppendResult, frm: int, **kw) -> consume_queue_pb2.PutUnitsRequest:
    n = len(rec.physical_offsets)
    return consume_queue_pb2.PutUnitsRequest(
        incarnation=inc,
        topics=["U"],
        topic_codes=pack([0] * n, INT32),
        queue_ids=pack(rec.queue_ids, INT32),
        queue_offsets=pack(rec.queue_offsets, INT64),
        physical_offsets=pack(rec.physical_offsets, INT64),
        sizes=pack(rec.sizes, INT32),
        tags_codes=pack([0] * n, INT64),
        store_timestamps=pack(rec.store_timestamps, INT64),
        sysflags=pack([0] * n, INT32),
        from_offset=frm,
        to_offset=rec.physical_offsets[-1] + rec.sizes[-1],
        **kw,
    )


def test_put_streams_answer_each_request_with_the_unary_calls_status(parts):
    """Every answer and error of PutUnits / PutKeys, on one stream each, in order,
    the stream open throughout: a new incarnation ABORTED, a gap
    FAILED_PRECONDITION, a bad batch INVALID_ARGUMENT, a good one its progress."""
    rec = _append(parts, "U", 3, keys=True)
    inc = parts.shard.state.incarnation
    progress = parts.cq.state.progress().progress_offset
    end = rec.physical_offsets[-1] + rec.sizes[-1]

    async def run():
        async with (
            internal_channel(parts.endpoints["cq"], parts.auth) as cq_ch,
            internal_channel(parts.endpoints["ix"], parts.auth) as ix_ch,
        ):
            units = RequestStream.open(
                consume_queue_pb2_grpc.ConsumeQueueServiceStub(cq_ch).PutUnitsStream, "units", parts.auth.metadata()
            )
            keys = RequestStream.open(
                index_pb2_grpc.IndexServiceStub(ix_ch).PutKeysStream, "keys", parts.auth.metadata()
            )
            bad = _units(inc, rec, progress)
            bad.topic_codes = pack([0, 5, 0], INT32)
            sent = [
                await units.send(r, 10)
                for r in (
                    _units(inc + 1, rec, progress),
                    consume_queue_pb2.PutUnitsRequest(incarnation=inc, from_offset=end, to_offset=end),  # a gap
                    bad,
                    _units(inc, rec, progress),
                    _units(inc, rec, progress),  # twice: harmless
                )
            ]
            out = await asyncio.gather(*sent, return_exceptions=True)
            assert [_code(e) for e in out[:3]] == [C.ABORTED, C.FAILED_PRECONDITION, C.INVALID_ARGUMENT]
            assert out[3].progress_offset == out[4].progress_offset == end and units.broken is None
            k = index_pb2.PutKeysRequest(
                key_hashes=pack([1, 2, 3], INT64),
                physical_offsets=pack(rec.physical_offsets, INT64),
                store_timestamps=pack(rec.store_timestamps, INT64),
                from_offset=parts.ix.state.progress().progress_offset,
                to_offset=end,
                incarnation=inc,
            )
            late = index_pb2.PutKeysRequest(incarnation=inc + 1)
            out = await asyncio.gather(await keys.send(late, 10), await keys.send(k, 10), return_exceptions=True)
            assert _code(out[0]) is C.ABORTED and out[1].progress_offset == end and keys.broken is None
            await units.close()
            await keys.close()
            assert _code(units.broken) is C.CANCELLED
            with pytest.raises(grpc.aio.AioRpcError):
                await units.send(_units(inc, rec, progress), 10)  # a closed stream is not used again

    asyncio.run(run())


def test_a_put_stream_whose_peer_goes_away_fails_its_requests_unavailable(parts, tmp_path):
    """The builder's server stops under an open stream: the request waiting fails
    (UNAVAILABLE or CANCELLED, as a unary call would), the stream is broken."""
    from mqstore.services.common.server import ServerThread, start_grpc_server
    from mqstore.services.index.queue_servicer import ConsumeQueueServicer

    class Stalled(ConsumeQueueServicer):
        async def _put_units(self, request):
            await asyncio.sleep(30)  # never answers before the server goes

    t = ServerThread()
    server = t.run(start_grpc_server("127.0.0.1", 0, [Stalled(parts.cq.state).registration()], auth=parts.auth))

    async def run():
        async with internal_channel(f"127.0.0.1:{server.port}", parts.auth) as ch:
            units = RequestStream.open(
                consume_queue_pb2_grpc.ConsumeQueueServiceStub(ch).PutUnitsStream, "units", parts.auth.metadata()
            )
            waiting = await units.send(consume_queue_pb2.PutUnitsRequest(), 20)
            await asyncio.sleep(0.2)
            stopping.append(t.submit(server.stop(0)))
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await asyncio.wait_for(waiting, 10)
            assert e.value.code() in (C.UNAVAILABLE, C.CANCELLED) and units.broken is not None

    stopping = []
    try:
        asyncio.run(run())
    finally:
        for f in stopping:
            f.result(10)
        t.stop()


def test_a_batch_the_commitlog_vouched_for_is_taken_without_asking_it(parts):
    """A range's end comes with the commitlog's vouch (ReadRangeResponse.vouch); a
    builder takes a batch to there without a GetOffsets. Without a vouch, or with
    another deployment's, it asks (a claim past the write position: INVALID_ARGUMENT)."""
    import threading

    rec = _append(parts, "V", 2)
    end = rec.physical_offsets[-1] + rec.sizes[-1]
    inc = parts.shard.state.incarnation
    view = parts.cq.state.view
    asked, offsets = [], view.offsets

    def counted():
        if not threading.current_thread().name.endswith("-open"):  # (not the builder's once-a-second watch)
            asked.append(end)
        return offsets()

    async def run():
        async with (
            internal_channel(parts.endpoints["cl"], parts.auth) as cl_ch,
            internal_channel(parts.endpoints["cq"], parts.auth) as cq_ch,
        ):
            md = parts.auth.metadata()
            r = await commitlog_pb2_grpc.CommitLogServiceStub(cl_ch).ReadRange(
                commitlog_pb2.ReadRangeRequest(offset=rec.physical_offsets[0], bounds_only=True), metadata=md
            )
            assert r.next_offset == end and parts.auth.vouched(r.vouch, b"commitlog-range-end", inc, end)
            units = RequestStream.open(consume_queue_pb2_grpc.ConsumeQueueServiceStub(cq_ch).PutUnitsStream, "u", md)
            progress = parts.cq.state.progress().progress_offset
            view._wrote = 0  # as if the commitlog had grown since the view last asked
            view.offsets = counted
            try:
                ok = await (await units.send(_units(inc, rec, progress, to_offset_vouch=r.vouch), 10))
                assert ok.progress_offset == end and asked == []  # taken on the vouch
                forged = InternalAuth.new().vouch(b"commitlog-range-end", inc, 10**9)
                far = consume_queue_pb2.PutUnitsRequest(
                    incarnation=inc, from_offset=end, to_offset=10**9, to_offset_vouch=forged
                )
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await (await units.send(far, 10))
                assert e.value.code() is C.INVALID_ARGUMENT and asked == [end]  # asked, and refused
            finally:
                del view.offsets
            await units.close()

    asyncio.run(run())


def test_a_stopping_server_ends_its_open_streams_at_once(parts):
    """A put stream never ends on its own: its server's host ends it when it stops
    (stop_server), instead of waiting out the grace period (30 s here)."""
    import time

    from mqstore.services.common.internal_streams import stop_server
    from mqstore.services.common.server import ServerThread, start_grpc_server
    from mqstore.services.index.queue_servicer import ConsumeQueueServicer

    servicer = ConsumeQueueServicer(parts.cq.state)
    t = ServerThread()
    server = t.run(start_grpc_server("127.0.0.1", 0, [servicer.registration()], auth=parts.auth))

    async def run():
        async with internal_channel(f"127.0.0.1:{server.port}", parts.auth) as ch:
            stub = consume_queue_pb2_grpc.ConsumeQueueServiceStub(ch)
            units = RequestStream.open(stub.PutUnitsStream, "units", parts.auth.metadata())
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await (await units.send(consume_queue_pb2.PutUnitsRequest(), 10))  # answered; idle now
            assert e.value.code() is C.ABORTED and units.broken is None and len(servicer.streams) == 1
            t0 = time.monotonic()
            await asyncio.wrap_future(t.submit(stop_server(server, servicer.streams, grace_s=30)))
            assert time.monotonic() - t0 < 10 and len(servicer.streams) == 0
            await asyncio.sleep(0.2)
            assert units.broken is not None and _code(units.broken) is C.UNAVAILABLE

    try:
        asyncio.run(run())
    finally:
        t.stop()
