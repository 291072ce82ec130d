"""The front's appends on one stream (CommitLogService.AppendStream), over real gRPC.

First the multiplexing itself (``CallStream`` and ``answer_as_done`` of
services/common/internal_streams.py) against a stand-in servicer whose calls take the
time their topic says: answers in any order, one call's deadline among many, a
broken stream failing what is in flight, back-pressure on both ends. Then the
commitlog's own AppendStream (each call answered as its unary call would be, an
append whose deadline passed before it started not written) and the front's
``CommitLogClient`` on it (a broken stream opened again; no append sent twice).
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from mqstore.rpc.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from mqstore.services.commitlog.host import CommitLogHost
from mqstore.services.common.errors import Unavailable
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import (
    CallStream,
    OpenStreams,
    answer_as_done,
    internal_channel,
    rpc_error,
    stop_server,
    stream_rpc,
)
from mqstore.services.common.peers import fixed, resolver_of
from mqstore.services.common.server import ServerThread, start_grpc_server
from mqstore.services.common.shard_clients import CommitLogClient, Connection, ShardUnreachable
from mqstore.services.index.host import BuilderHost
from tests.services.helpers import small_config

C = grpc.StatusCode


class NotSent(Unavailable):
    """The stand-in's "nothing of it was sent" error."""


def _call(what: str) -> commitlog_pb2.AppendCall:
    """A call the stand-in handles as ``what`` says: "sleep:S" answers after S
    seconds, "fail:CODE" fails with that status."""
    return commitlog_pb2.AppendCall(
        batch=commitlog_pb2.AppendBatchRequest(messages=common_pb2.MessageColumns(topics=[what]))
    )


def _what(answer: commitlog_pb2.AppendAnswer) -> str:
    return answer.batch.result.msg_ids[0]


class StandIn(commitlog_pb2_grpc.CommitLogServiceServicer):
    """AppendStream only; each call sleeps or fails as its topic says and answers
    its topic back (in msg_ids). Counts the calls it handles at once."""

    def __init__(self, max_in_flight: int = 256) -> None:
        self.streams = OpenStreams()
        self.max_in_flight = max_in_flight
        self.running = 0
        self.most_running = 0
        self.handled: list[str] = []

    @stream_rpc
    async def AppendStream(self, requests, context):
        async with self.streams.held(context):
            async for answer in answer_as_done(
                requests,
                self._handle,
                commitlog_pb2.AppendAnswer,
                commitlog_pb2.AppendStreamResponse,
                max_in_flight=self.max_in_flight,
            ):
                yield answer

    async def _handle(self, call: commitlog_pb2.AppendCall) -> commitlog_pb2.AppendAnswer:
        what = call.batch.messages.topics[0]
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            kind, _, arg = what.partition(":")
            if kind == "sleep":
                await asyncio.sleep(float(arg))
            elif kind == "fail":
                raise rpc_error(C[arg], f"told to fail: {arg}")
            self.handled.append(what)
            result = common_pb2.AppendResult(msg_ids=[what])
            return commitlog_pb2.AppendAnswer(batch=commitlog_pb2.AppendBatchResponse(result=result))
        finally:
            self.running -= 1


class Served:
    def __init__(self, servicer: StandIn, auth: InternalAuth) -> None:
        self.servicer = servicer
        self.thread = ServerThread("stand-in")
        reg = commitlog_pb2_grpc.add_CommitLogServiceServicer_to_server
        from mqstore.services.common.server import Registration

        self.server = self.thread.run(
            start_grpc_server("127.0.0.1", 0, [Registration(reg, servicer, "mqstore.v1.CommitLogService")], auth=auth)
        )
        self.endpoint = f"127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        self.thread.run(stop_server(self.server, self.servicer.streams, grace_s=0.5), timeout=30)
        self.thread.stop()


@pytest.fixture
def auth():
    return InternalAuth.new()


def _serve(auth, **kw) -> Served:
    return Served(StandIn(**kw), auth)


async def _open(endpoint: str, auth: InternalAuth, **kw) -> tuple[grpc.aio.Channel, CallStream]:
    ch = internal_channel(endpoint, auth)
    stub = commitlog_pb2_grpc.CommitLogServiceStub(ch)
    stream = CallStream.open(
        stub.AppendStream, "appends", auth.metadata(), commitlog_pb2.AppendStreamRequest, not_sent=NotSent, **kw
    )
    return ch, stream


def test_calls_are_answered_as_they_finish_each_with_its_own_answer(auth):
    """Three calls in flight at once; the one sent last finishes first and its
    caller has its answer while the others still wait; a failed call fails alone."""
    served = _serve(auth)

    async def run():
        ch, stream = await _open(served.endpoint, auth)
        done: list[str] = []

        async def one(what: str, timeout: float = 10):
            try:
                answer = await stream.call(_call(what), timeout)
            except grpc.aio.AioRpcError as e:
                done.append(f"{what}={e.code().name}")
                return
            done.append(_what(answer))

        slow = asyncio.ensure_future(one("sleep:0.8"))
        mid = asyncio.ensure_future(one("sleep:0.4"))
        await asyncio.sleep(0.05)
        await one("sleep:0")
        assert done == ["sleep:0"]  # answered while the two sent before it still run
        await one("fail:PERMISSION_DENIED")
        await asyncio.gather(slow, mid)
        assert done == ["sleep:0", "fail:PERMISSION_DENIED=PERMISSION_DENIED", "sleep:0.4", "sleep:0.8"]
        assert stream.broken is None and stream.in_flight == 0  # the failure was the call's, not the stream's
        await stream.close()
        await ch.close()

    try:
        asyncio.run(run())
    finally:
        served.stop()


def test_a_call_past_its_deadline_fails_alone_and_its_late_answer_is_dropped(auth):
    served = _serve(auth)

    async def run():
        ch, stream = await _open(served.endpoint, auth)
        slow = asyncio.ensure_future(stream.call(_call("sleep:0.6"), 0.2))
        others = [asyncio.ensure_future(stream.call(_call(f"sleep:0.{i}"), 10)) for i in range(3)]
        t0 = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await slow
        assert e.value.code() is C.DEADLINE_EXCEEDED and time.monotonic() - t0 < 0.5
        assert [_what(a) for a in await asyncio.gather(*others)] == ["sleep:0.0", "sleep:0.1", "sleep:0.2"]
        await asyncio.sleep(0.6)  # the late answer comes, for nobody
        assert "sleep:0.6" in served.servicer.handled
        assert _what(await stream.call(_call("sleep:0"), 10)) == "sleep:0" and stream.broken is None
        await stream.close()
        await ch.close()

    try:
        asyncio.run(run())
    finally:
        served.stop()


def test_a_broken_stream_fails_its_calls_in_flight_unavailable(auth):
    """The server goes while calls wait: each fails UNAVAILABLE (sent: their outcome
    is unknown, as a unary call's on a lost connection); a call on the broken stream
    is not sent (the owner's not-sent error)."""
    served = _serve(auth)

    async def run():
        ch, stream = await _open(served.endpoint, auth)
        waiting = [asyncio.ensure_future(stream.call(_call("sleep:30"), 20)) for _ in range(3)]
        await asyncio.sleep(0.3)
        assert served.servicer.running == 3
        await asyncio.to_thread(served.stop)
        out = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
        assert [type(e) for e in out] == [grpc.aio.AioRpcError] * 3
        assert {e.code() for e in out} <= {C.UNAVAILABLE, C.CANCELLED} and stream.broken is not None
        with pytest.raises(NotSent):
            await stream.call(_call("sleep:0"), 5)
        await ch.close()

    asyncio.run(run())


def test_back_pressure_bounds_calls_in_flight_on_both_ends(auth):
    """The client keeps at most max_in_flight calls unanswered (the rest wait for
    room, within their own deadline); the server handles at most its own bound at a
    time whatever the client sends."""
    served = _serve(auth, max_in_flight=2)

    async def run():
        ch, stream = await _open(served.endpoint, auth, max_in_flight=3)
        seen: list[int] = []

        async def watch():
            while True:
                seen.append(stream.in_flight)
                await asyncio.sleep(0.01)

        watcher = asyncio.ensure_future(watch())
        answers = await asyncio.gather(*(stream.call(_call("sleep:0.1"), 10) for _ in range(6)))
        watcher.cancel()
        assert len(answers) == 6 and max(seen) == 3
        assert served.servicer.most_running == 2  # the server read no more than it could handle
        blocked = [asyncio.ensure_future(stream.call(_call("sleep:0.4"), 10)) for _ in range(3)]
        await asyncio.sleep(0.05)
        with pytest.raises(grpc.aio.AioRpcError) as e:  # no room within its deadline
            await stream.call(_call("sleep:0"), 0.2)
        assert e.value.code() is C.DEADLINE_EXCEEDED
        await asyncio.gather(*blocked)
        await stream.close()
        await ch.close()

    try:
        asyncio.run(run())
    finally:
        served.stop()


class _StuckCall:
    """A stream call whose first write never completes and whose read fails when
    told: what a stream that breaks under a write looks like to its client."""

    def __init__(self) -> None:
        self.written: list = []
        self.fail = asyncio.Event()

    async def write(self, message) -> None:
        self.written.append(message)
        await asyncio.sleep(3600)

    async def read(self):
        await self.fail.wait()
        raise rpc_error(C.UNAVAILABLE, "connection lost")

    def cancel(self) -> None:
        pass


def test_calls_not_written_when_the_stream_breaks_fail_as_not_sent():
    async def run():
        fake = _StuckCall()
        stream = CallStream(fake, "appends", commitlog_pb2.AppendStreamRequest, not_sent=NotSent)
        first = asyncio.ensure_future(stream.call(_call("a"), 10))
        await asyncio.sleep(0.01)  # written (the write hangs)
        second = asyncio.ensure_future(stream.call(_call("b"), 10))
        await asyncio.sleep(0.01)  # waits for the writer
        fake.fail.set()
        out = await asyncio.gather(first, second, return_exceptions=True)
        assert isinstance(out[0], grpc.aio.AioRpcError) and out[0].code() is C.UNAVAILABLE
        assert isinstance(out[1], NotSent)
        assert [len(m.calls) for m in fake.written] == [1]
        await stream.close()

    asyncio.run(run())


class _SilentCall:
    """A stream call to a peer that is gone without a word: writes go out, nothing
    ever comes back."""

    def __init__(self) -> None:
        self.cancelled = False

    async def write(self, message) -> None:
        pass

    async def read(self):
        await asyncio.sleep(3600)

    def cancel(self) -> None:
        self.cancelled = True


def test_a_silent_peer_breaks_the_stream_once_a_call_times_out_but_a_slow_one_does_not():
    async def run():
        quiet = CallStream(_SilentCall(), "appends", commitlog_pb2.AppendStreamRequest, silent_s=0.2)
        other = asyncio.ensure_future(quiet.call(_call("b"), 10))
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await quiet.call(_call("a"), 0.3)
        assert e.value.code() is C.DEADLINE_EXCEEDED  # the call's own deadline
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await other
        assert e.value.code() is C.UNAVAILABLE and quiet.broken is not None  # presumed gone
        await quiet.close()
        patient = CallStream(_SilentCall(), "appends", commitlog_pb2.AppendStreamRequest, silent_s=5)
        with pytest.raises(grpc.aio.AioRpcError):
            await patient.call(_call("a"), 0.1)
        assert patient.broken is None  # silent for less than silent_s: only slow
        await patient.close()

    asyncio.run(run())


# ---------------------------------------------------------------- the commitlog's AppendStream


class Shard:
    """One shard's commitlog and builders (appends need the builders attached)."""

    def __init__(self, root) -> None:
        cfg, self.auth = small_config(), InternalAuth.new()
        self.cl = CommitLogHost(root, cfg, auth=self.auth)
        at = fixed(self.cl.endpoint)
        self.cq = BuilderHost("consumequeue", root, cfg, resolve_commitlog=at, auth=self.auth)
        self.ix = BuilderHost("index", root, cfg, resolve_commitlog=at, auth=self.auth)
        assert self.cl.wait_ready(30) and self.cq.wait_ready(30) and self.ix.wait_ready(30)

    def close(self) -> None:
        for h in (self.cq, self.ix, self.cl):
            h.close()


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    s = Shard(tmp_path_factory.mktemp("append-stream"))
    yield s
    s.close()


def _columns(topic: str, n: int = 1) -> common_pb2.MessageColumns:
    return common_pb2.MessageColumns(topics=[topic], bodies=[b"y" * 40] * n, queue_ids=[0])


def _encoded(shard_no: int = 0) -> bytes:
    from mqstore.store.clock import SystemClock
    from mqstore.store.config import StoreConfig
    from mqstore.store.messages import MessageBatch
    from mqstore.store.record_batch import BatchEncoder, encode_for_send

    enc = encode_for_send(
        BatchEncoder(StoreConfig(), SystemClock()), MessageBatch(topics="E", bodies=[b"e1", b"e2"], queue_ids=0)
    )
    return common_pb2.EncodedBatch(records=enc.data, topics=["E"], shard=shard_no, shards=1).SerializeToString()


def test_each_append_on_the_stream_is_answered_as_its_unary_call(shard):
    async def run():
        ch, stream = await _open(shard.cl.endpoint, shard.auth)
        unary = commitlog_pb2_grpc.CommitLogServiceStub(ch)
        md = shard.auth.metadata()
        batch, encoded, delayed = await asyncio.gather(
            stream.call(
                commitlog_pb2.AppendCall(batch=commitlog_pb2.AppendBatchRequest(messages=_columns("A", 3))), 10
            ),
            stream.call(commitlog_pb2.AppendCall(encoded=_encoded()), 10),
            stream.call(commitlog_pb2.AppendCall(delayed=commitlog_pb2.AppendBatchRequest(messages=_columns("D"))), 10),
        )
        assert list(batch.batch.result.statuses) == [common_pb2.PUT_OK] * 3
        assert len(batch.batch.result.physical_offsets) == 3
        got = common_pb2.EncodedAppendResult.FromString(encoded.encoded)
        assert got.status == common_pb2.PUT_OK and len(got.physical_offsets) == 16  # two int64 offsets
        assert list(delayed.batch.result.statuses) == [common_pb2.PUT_OK]
        then = await unary.AppendBatch(commitlog_pb2.AppendBatchRequest(messages=_columns("A")), metadata=md)
        assert then.result.physical_offsets[0] > max(batch.batch.result.physical_offsets)  # the same log
        for call, code in (
            (commitlog_pb2.AppendCall(encoded=b"\xff\xff"), C.INVALID_ARGUMENT),  # not an EncodedBatch
            (commitlog_pb2.AppendCall(encoded=_encoded(shard_no=3)), C.FAILED_PRECONDITION),  # another shard's
            (commitlog_pb2.AppendCall(), C.INVALID_ARGUMENT),  # nothing to append
            (
                commitlog_pb2.AppendCall(batch=commitlog_pb2.AppendBatchRequest(messages=_columns("bad topic!"))),
                C.INVALID_ARGUMENT,
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stream.call(call, 10)
            assert e.value.code() is code, call
            with pytest.raises(grpc.aio.AioRpcError) as u:  # the unary call's code, for the same request
                if call.WhichOneof("append") == "encoded":
                    await ch.unary_unary("/mqstore.v1.CommitLogService/AppendEncoded")(call.encoded, metadata=md)
                elif call.HasField("batch"):
                    await unary.AppendBatch(call.batch, metadata=md)
                else:
                    raise rpc_error(C.INVALID_ARGUMENT, "(no unary call takes nothing)")
            assert u.value.code() is code
        assert stream.broken is None
        await stream.close()
        await ch.close()

    asyncio.run(run())


def test_an_append_whose_deadline_passed_before_it_started_is_not_written(shard):
    """Every executor thread busy past the call's timeout: the append is answered
    DEADLINE_EXCEEDED and never written, as a unary call past its deadline."""
    state = shard.cl.state
    release = threading.Event()

    async def run():
        ch, stream = await _open(shard.cl.endpoint, shard.auth)
        wrote = state.log_store.commitlog.wrote_offset
        busy = [state.executor.submit(release.wait, 10) for _ in range(state.executor._max_workers)]
        try:
            call = commitlog_pb2.AppendCall(batch=commitlog_pb2.AppendBatchRequest(messages=_columns("Late")))
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stream.call(call, 0.3)
            assert e.value.code() is C.DEADLINE_EXCEEDED
        finally:
            await asyncio.sleep(0.4)  # the server's own check: past the call's time
            release.set()
            for f in busy:
                f.result(10)
        await asyncio.sleep(0.3)  # the held append ran (and refused to start)
        assert state.log_store.commitlog.wrote_offset == wrote
        ok = await stream.call(
            commitlog_pb2.AppendCall(batch=commitlog_pb2.AppendBatchRequest(messages=_columns("L"))), 10
        )
        assert ok.batch.result.physical_offsets[0] == wrote and stream.broken is None
        await stream.close()
        await ch.close()

    asyncio.run(run())


def test_the_fronts_client_opens_a_broken_stream_again_and_sends_nothing_twice(shard):
    """CommitLogClient's appends share one stream; when it breaks (the commitlog
    ends its streams, as a stopping server does) the append waiting fails UNAVAILABLE
    and is not sent again; the next append opens a new stream."""
    endpoints = {"cl": shard.cl.endpoint}
    conn = Connection(0, "cl", resolver_of(endpoints, "cl"), commitlog_pb2_grpc.CommitLogServiceStub, shard.auth)
    client = CommitLogClient(conn)
    servicer = shard.cl._servicer
    loop_of_server = shard.cl.thread

    async def run():
        first = await client.append_batch(_columns("R", 2))
        stream = client.appends.stream
        assert first.result.statuses[0] == common_pb2.PUT_OK
        more = await asyncio.gather(*(client.append_batch(_columns("R")) for _ in range(5)))
        assert client.appends.stream is stream and len(servicer.streams) >= 1  # one stream for all
        wrote = shard.cl.state.log_store.commitlog.wrote_offset
        release = threading.Event()
        busy = [shard.cl.state.executor.submit(release.wait, 10) for _ in range(shard.cl.state.executor._max_workers)]
        pending = asyncio.ensure_future(client.append_batch(_columns("R")))
        await asyncio.sleep(0.3)
        loop_of_server.loop.call_soon_threadsafe(servicer.streams.end)  # the stream ends under the call
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await asyncio.wait_for(pending, 10)
        assert e.value.code() is C.UNAVAILABLE and stream.broken is not None
        release.set()
        for f in busy:
            f.result(10)
        await asyncio.sleep(0.3)
        after = shard.cl.state.log_store.commitlog.wrote_offset  # written once, or not at all: never twice
        assert after - wrote in (0, more[0].result.sizes[0])
        again = await client.append_batch(_columns("R"))
        assert client.appends.stream is not stream and again.result.physical_offsets[0] == after
        await client.close_stream()
        await conn.reset()

    asyncio.run(run())


def test_an_unreachable_commitlog_is_not_sent_anything(shard):
    """No process at the endpoint: ShardUnreachable (nothing sent), as the unary
    send was, within the send's resolve cap."""

    async def run():
        conn = Connection(0, "cl", fixed("127.0.0.1:1"), commitlog_pb2_grpc.CommitLogServiceStub, shard.auth)
        client = CommitLogClient(conn)
        t0 = time.monotonic()
        with pytest.raises(ShardUnreachable):
            await client.append_batch(_columns("X"), timeout=10)
        assert time.monotonic() - t0 < 5
        await conn.reset()

    asyncio.run(run())


def test_pop_calls_on_the_builders_stream_are_answered_as_their_unary_calls(shard):
    """Acks, new invisible times and dead letters on the consume-queue builder's
    PopStream (ConsumeQueueClient.pop_calls): each answered as its unary call."""
    from mqstore.rpc.v1 import consume_queue_pb2 as cq
    from mqstore.rpc.v1 import consume_queue_pb2_grpc
    from mqstore.services.common.shard_clients import ConsumeQueueClient

    endpoint = shard.cq.endpoint
    conn = Connection(0, "cq", fixed(endpoint), consume_queue_pb2_grpc.ConsumeQueueServiceStub, shard.auth)
    client = ConsumeQueueClient(conn)
    ack = cq.AckPopRequest(group="G", topic="T", receipt_handles=["not a handle", "nor this"])
    change = cq.ChangeInvisibleRequest(group="G", topic="T", receipt_handle="nope", invisible_ms=1000)
    dead = cq.PopToDeadLetterRequest(group="G", topic="T", receipt_handle="nope")

    async def run():
        unary = consume_queue_pb2_grpc.ConsumeQueueServiceStub(internal_channel(endpoint, shard.auth))
        md = shard.auth.metadata()
        streamed = await asyncio.gather(client.ack_pop(ack), client.change_invisible(change))
        assert list(streamed[0].outcomes) == list((await unary.AckPop(ack, metadata=md)).outcomes)
        assert list(streamed[0].outcomes) == [cq.POP_MALFORMED] * 2
        assert streamed[1] == await unary.ChangeInvisible(change, metadata=md)
        for call in (cq.PopCall(), cq.PopCall(ack=cq.AckPopRequest(group="G", topic="bad topic!"))):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await client.pop_calls.call(call, 10)
            assert e.value.code() is C.INVALID_ARGUMENT
        got = await client.pop_to_dead_letter(dead)
        assert got == await unary.PopToDeadLetter(dead, metadata=md)
        assert client.pop_calls.stream.broken is None  # one stream for all of them
        await client.pop_calls.close()
        await conn.reset()

    asyncio.run(run())
