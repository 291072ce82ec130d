"""The dispatcher's end of CommitLogService.Tail: the visible records of one shard
as one long-lived stream (services/common/internal_streams.py says why streams).

The first request opens the feed (a ReadRangeRequest: where, how much, how long to
wait and linger, bounds only or bytes) with one credit; the commitlog answers once
per credit, each answer starting where the last one ended, as ReadRange at its
``next_offset`` would. The dispatcher grants the next credit as soon as it has an
answer (so the next chunk is read while this one goes to the builders, as the
ReadRange in flight did) and every grant carries its dispatched offset
(retention and the commitlog's back-pressure use it). An error ends the stream
with ReadRange's status; the end of the stream, or no answer within the wait plus
30 s, is UNAVAILABLE / DEADLINE_EXCEEDED. A feed is not used again after it failed.
"""

from __future__ import annotations

import asyncio

import grpc

from mqstore.rpc.v1 import commitlog_pb2
from mqstore.services.common.internal_streams import rpc_error


class TailFeed:
    """One Tail stream. ``next`` is the next answer; ``grant`` allows one more."""

    def __init__(self, call, timeout_s: float) -> None:
        self._call = call
        self._timeout_s = timeout_s

    @classmethod
    async def open(cls, stub, start: commitlog_pb2.ReadRangeRequest, timeout_s: float, metadata) -> TailFeed:
        """Open a feed on ``stub`` (a CommitLogServiceStub) from ``start.offset``;
        ``timeout_s``: the longest wait for an answer; ``metadata``: the secret."""
        feed = cls(stub.Tail(metadata=metadata), timeout_s)
        await feed._write(commitlog_pb2.TailRequest(start=start, credit=1))
        return feed

    async def next(self) -> commitlog_pb2.ReadRangeResponse:
        try:
            async with asyncio.timeout(self._timeout_s):
                answer = await self._call.read()
        except TimeoutError:
            self.close()
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"no Tail answer in {self._timeout_s} s") from None
        if answer is grpc.aio.EOF:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "the commitlog ended the Tail stream")
        return answer

    async def grant(self, dispatched_offset: int, credit: int = 1) -> None:
        await self._write(commitlog_pb2.TailRequest(dispatched_offset=dispatched_offset, credit=credit))

    async def _write(self, request: commitlog_pb2.TailRequest) -> None:
        try:
            await self._call.write(request)
        except grpc.aio.AioRpcError:
            raise
        except Exception as e:  # the stream ended under the write: its status
            code = await self._call.code()
            details = await self._call.details()
            if code is grpc.StatusCode.OK:
                code = grpc.StatusCode.UNAVAILABLE
            raise rpc_error(code, f"Tail ended: {details or type(e).__name__}") from None

    def close(self) -> None:
        self._call.cancel()


__all__ = ["TailFeed"]
