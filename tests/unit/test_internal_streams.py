"""The framing rules of the internal streams (services/common/internal_streams.py),
without gRPC: answers matched to requests in order, and a feed's credits."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from mqstore.rpc.v1 import common_pb2
from mqstore.services.common.errors import BadRequest
from mqstore.services.common.internal_streams import (
    Credits,
    Pending,
    answer_in_order,
    error_of,
    rpc_error,
    status_pb,
)
from mqstore.store.builders import GapError


def test_answers_settle_requests_in_order_each_by_its_seq():
    async def run():
        loop = asyncio.get_running_loop()
        p = Pending()
        futures = [loop.create_future() for _ in range(3)]
        seqs = [p.add(f) for f in futures]
        assert seqs == [1, 2, 3] and len(p) == 3
        p.settle(1, "one")
        p.settle(2, error=rpc_error(grpc.StatusCode.ABORTED, "old incarnation"))
        assert futures[0].result() == "one"
        assert futures[1].exception().code() is grpc.StatusCode.ABORTED
        assert not futures[2].done() and len(p) == 1
        with pytest.raises(ValueError, match="request 3 is the oldest"):
            p.settle(4, "four")  # out of order: the stream is broken
        p.settle(3, "three")
        with pytest.raises(ValueError, match="no request is waiting"):
            p.settle(4, "four")
        assert p.add(loop.create_future()) == 4  # numbers go on

    asyncio.run(run())


def test_a_broken_stream_fails_every_request_waiting_and_skips_those_given_up():
    async def run():
        loop = asyncio.get_running_loop()
        p = Pending()
        a, b, c = (loop.create_future() for _ in range(3))
        for f in (a, b, c):
            p.add(f)
        b.cancel()  # its caller gave up: its answer is dropped, the order kept
        p.settle(1, "a")
        p.settle(2, "b")
        p.fail_all(rpc_error(grpc.StatusCode.UNAVAILABLE, "gone"))
        assert a.result() == "a" and b.cancelled() and c.exception().code() is grpc.StatusCode.UNAVAILABLE
        assert len(p) == 0

    asyncio.run(run())


def test_credits_hold_a_feed_back_until_granted():
    async def run():
        c = Credits(limit=4)
        c.grant(1)
        assert await c.take() is True and c.available == 0
        waiter = asyncio.ensure_future(c.take())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # no credit: the feed waits
        c.grant(2)
        assert await waiter is True and c.available == 1
        with pytest.raises(BadRequest, match="negative"):
            c.grant(-1)
        with pytest.raises(BadRequest, match="past the limit"):
            c.grant(4)
        c.close()  # the client half-closed: no more answers, also with credit left
        assert await c.take() is False

    asyncio.run(run())


def test_credits_closed_with_an_error_raise_it_to_the_feed():
    async def run():
        c = Credits()
        waiter = asyncio.ensure_future(c.take())
        await asyncio.sleep(0)
        c.close(BadRequest("bad grant"))
        with pytest.raises(BadRequest, match="bad grant"):
            await waiter

    asyncio.run(run())


def test_statuses_cross_the_stream_as_the_unary_call_would_end():
    assert error_of(common_pb2.CallStatus()) is None
    e = error_of(status_pb(GapError("batch from 10 past progress 5")))
    assert e.code() is grpc.StatusCode.FAILED_PRECONDITION and "progress 5" in e.details()
    assert error_of(common_pb2.CallStatus(code=999, message="?")).code() is grpc.StatusCode.UNKNOWN


def test_a_stream_server_answers_each_request_in_turn_with_its_seq():
    class Req:
        def __init__(self, seq, value):
            self.seq, self.value = seq, value

    class Answer:
        def __init__(self, value=None, status=None):
            self.value, self.status, self.seq = value, status, 0

    async def handle(r: Req) -> Answer:
        if r.value < 0:
            raise BadRequest(f"negative {r.value}")
        if r.value == 0:
            raise RuntimeError("a bug")
        return Answer(r.value * 2)

    async def requests():
        for seq, v in ((1, 5), (2, -1), (3, 0), (4, 7)):
            yield Req(seq, v)

    async def run():
        return [a async for a in answer_in_order(requests(), handle, Answer)]

    answers = asyncio.run(run())
    assert [a.seq for a in answers] == [1, 2, 3, 4]
    assert [a.value for a in answers] == [10, None, None, 14]  # a failed request fails alone
    assert error_of(answers[1].status).code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error_of(answers[2].status).code() is grpc.StatusCode.INTERNAL


def test_a_vouch_holds_for_its_values_under_its_deployments_secret_only():
    from mqstore.services.common.internal_auth import RANGE_END, InternalAuth

    auth, other = InternalAuth.new(), InternalAuth.new()
    tag = auth.vouch(RANGE_END, 7, 4096)
    assert len(tag) == 16 and auth.vouched(tag, RANGE_END, 7, 4096)
    assert not auth.vouched(tag, RANGE_END, 7, 4097)  # another offset
    assert not auth.vouched(tag, RANGE_END, 8, 4096)  # another incarnation
    assert not auth.vouched(tag, b"other", 7, 4096)  # another statement
    assert not other.vouched(tag, RANGE_END, 7, 4096)  # another deployment
    assert not auth.vouched(b"", RANGE_END, 7, 4096) and not auth.vouched(tag[:8], RANGE_END, 7, 4096)
    assert auth.vouch(RANGE_END, -1, 0) != auth.vouch(RANGE_END, 0, -1)
