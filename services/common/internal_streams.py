"""Long-lived internal streams: the framing rules both ends of a stream keep.

Where two processes talk all the time (the dispatcher and the commitlog's feed, the
dispatcher and the builders' puts) the traffic goes over one bidi stream opened
once, not a unary call per step: each unary call costs grpc.aio about 0.44 ms of
CPU (BENCHMARKS.md, issue 16), plus a client interceptor task and a server
interceptor's secret check. A stream pays those once, when it opens; its messages
pay only their encoding and one read or write each.

Two shapes (proto/mqstore/v1: CommitLogService.Tail, PutUnitsStream, PutKeysStream):

* **request streams** (``RequestStream`` on the client, ``answer_in_order`` on the
  server): requests are numbered (``seq``) and answered in order, each answer
  carrying its request's seq and the status a unary call would have ended with
  (``CallStatus``; code 0 = OK). A failed request fails alone; the stream stays
  open. ``Pending`` holds the matching rules: an answer settles the oldest request
  waiting and must carry its seq.
* **feeds** (``Credits`` on the server): the server sends one answer per credit
  the client granted, so it never runs ahead of what the client takes.
* **call streams** (``CallStream`` on the client, ``answer_as_done`` on the server;
  CommitLogService.AppendStream): many unary calls' worth multiplexed on one
  stream. Each request message carries the calls waiting when it was written
  (``calls``, each with an ``id`` and its ``timeout_ms``: group-commit style), each
  call is answered as soon as it is done, in any order (``answers``, several to a
  message when several are ready), with its id and the unary call's status. A call
  whose deadline passes fails alone with DEADLINE_EXCEEDED (the stream stays open,
  unless the peer has sent nothing since for ``SILENT_S``: presumed gone, it breaks);
  at most ``MAX_IN_FLIGHT`` calls are unanswered (a caller waits for room: the
  server never holds more than that of one stream). A broken stream fails the calls
  it wrote with its error (UNAVAILABLE when it just ended: their outcome is unknown,
  as a unary call's on a lost connection) and those it did not write yet with the
  owner's "not sent" error.

A stream that ends, fails or answers out of order is *broken*: every request waiting
on it fails with a ``grpc.aio.AioRpcError`` (the stream's own status; UNAVAILABLE
when it just ended; INTERNAL for an answer out of order; DEADLINE_EXCEEDED when an
answer does not come in time), which callers handle as the unary call's failure.
A broken stream is not used again: its owner opens a new one.

Requests inside a stream are decoded by gRPC itself (StrictDecode only sees the
stream open, where it checks the secret once): these are internal peers only.

Streams go over ``internal_channel``: no client interceptor (grpc.aio runs one as a
task per call, and its stream-stream interceptors do not send the headers of a
stream written with ``write``); the caller passes the secret as the metadata of
each call and each stream open.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from mqstore.rpc.v1 import common_pb2
from mqstore.services.common.errors import BadRequest, status_of
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.server import CHANNEL_OPTIONS

log = structlog.get_logger(__name__)
_CODES = {c.value[0]: c for c in grpc.StatusCode}
MAX_CREDIT = 64  # answers a feed's client may have granted and not taken
MAX_IN_FLIGHT = 256  # calls of a call stream sent and not answered
MAX_CALLS_PER_MESSAGE = 64  # calls written together in one message of a call stream
# A call stream's call times out and the peer sent nothing since it was written, nor
# for this long: the peer is presumed gone (a dead host answers nothing, and the
# channel's keepalive is minutes) and the stream breaks, so the next call opens a new
# one (found and connected again). A peer that is only slow for less keeps the stream.
SILENT_S = 10.0
A = TypeVar("A")


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """The error a unary call that ended with ``code`` would have raised."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def error_of(status: common_pb2.CallStatus) -> grpc.aio.AioRpcError | None:
    """None for OK (code 0, or no status), else the unary call's error."""
    if not status.code:
        return None
    return rpc_error(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), status.message)


def status_pb(exc: BaseException) -> common_pb2.CallStatus:
    """The CallStatus of a request that raised ``exc`` (the one table: errors.py)."""
    code, message = status_of(exc)
    return common_pb2.CallStatus(code=code.value[0], message=message)


# ---------------------------------------------------------------- the rules (no gRPC)


class Pending:
    """The requests of one stream waiting for their answers, oldest first. The
    server answers in order, so an answer settles the oldest request; another seq
    is a broken stream (``settle`` raises ValueError). One event loop uses it."""

    def __init__(self) -> None:
        self._next_seq = 1
        self._waiting: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, future: asyncio.Future) -> int:
        """Number a request whose answer ``future`` is to get: its seq."""
        seq = self._next_seq
        self._next_seq += 1
        self._waiting.append((seq, future))
        return seq

    def settle(self, seq: int, answer: Any = None, error: BaseException | None = None) -> None:
        """The answer to request ``seq`` (or its error) for its future; ValueError
        if it is not the oldest request waiting."""
        if not self._waiting:
            raise ValueError(f"an answer for request {seq}, but no request is waiting")
        want, future = self._waiting[0]
        if seq != want:
            raise ValueError(f"an answer for request {seq}, but request {want} is the oldest waiting")
        self._waiting.popleft()
        if future.done():  # (its caller gave up: cancelled)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)

    def fail_all(self, error: BaseException) -> None:
        """Every request waiting fails with ``error`` (the stream broke)."""
        waiting, self._waiting = self._waiting, collections.deque()
        for _, future in waiting:
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved here: a caller that gave up must not warn


class Credits:
    """A feed's back-pressure on the server: answers the client granted and the
    server did not send yet. ``take`` waits for one; after ``close`` (the client
    stopped granting: it half-closed, or its grant was refused) it answers False,
    or raises the error it was closed with. One event loop uses it."""

    def __init__(self, limit: int = MAX_CREDIT) -> None:
        self._credit = 0
        self._limit = limit
        self._closed = False
        self._error: BaseException | None = None
        self._changed = asyncio.Event()

    @property
    def available(self) -> int:
        return self._credit

    def grant(self, n: int) -> None:
        """``n`` more answers; BadRequest if negative or past the limit."""
        if n < 0:
            raise BadRequest(f"credit {n} is negative")
        if self._credit + n > self._limit:
            raise BadRequest(f"credit {self._credit + n} is past the limit of {self._limit} answers")
        self._credit += n
        if n:
            self._changed.set()

    def close(self, error: BaseException | None = None) -> None:
        self._closed, self._error = True, error
        self._changed.set()

    async def take(self) -> bool:
        """Spend one credit, waiting for a grant: True, or False once closed
        (raising the error it was closed with, if any)."""
        while not self._closed and self._credit <= 0:
            self._changed.clear()
            await self._changed.wait()
        if self._closed:
            if self._error is not None:
                raise self._error
            return False
        self._credit -= 1
        return True


# ---------------------------------------------------------------- the client side


# A stream can be idle for long (the puts of an idle store): gRPC servers answer pings
# more often than every 5 minutes without data in between with GOAWAY ("too_many_pings"),
# which would break it. A dead peer is found by the streams' own answer timeouts.
_STREAM_KEEPALIVE = ("grpc.keepalive_time_ms", 330_000)
_STREAM_OPTIONS = [o for o in CHANNEL_OPTIONS if o[0] != _STREAM_KEEPALIVE[0]] + [_STREAM_KEEPALIVE]


def internal_channel(endpoint: str, auth: InternalAuth) -> grpc.aio.Channel:
    """An aio channel to an internal service without interceptors (the module
    docstring): every call and stream open passes ``auth.metadata()`` itself."""
    creds = auth.channel_credentials()
    if creds is None:
        return grpc.aio.insecure_channel(endpoint, options=_STREAM_OPTIONS)
    return grpc.aio.secure_channel(endpoint, creds, options=_STREAM_OPTIONS + auth.channel_options())


class RequestStream:
    """A request stream's client end (the module docstring): ``send`` writes a
    request numbered in turn and returns the future of its answer (its error: the
    unary call's). Opened by ``open``; not used again once ``broken``."""

    def __init__(self, call, name: str) -> None:
        self._call = call
        self.name = name
        self._pending = Pending()
        self.broken: BaseException | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=f"stream-{name}")

    @classmethod
    def open(cls, method: Callable[..., Any], name: str, metadata) -> RequestStream:
        """Open a stream with the stub's stream method (``stub.PutUnitsStream``),
        ``metadata`` (the secret: ``InternalAuth.metadata()``) sent once, as it opens."""
        return cls(method(metadata=metadata), name)

    async def send(self, request, timeout_s: float) -> Awaitable:
        """Write ``request`` (its ``seq`` set here); the answer's future, failing
        with DEADLINE_EXCEEDED (the stream broken) after ``timeout_s``."""
        if self.broken is not None:
            raise self.broken
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        request.seq = self._pending.add(future)
        timer = loop.call_later(timeout_s, self._late, request.seq, timeout_s)
        future.add_done_callback(lambda _: timer.cancel())
        try:
            await self._call.write(request)
        except asyncio.CancelledError:
            self._break(rpc_error(grpc.StatusCode.CANCELLED, f"{self.name}: cancelled while writing"))
            raise
        except Exception as e:  # the stream ended under the write: its status (not the write's INTERNAL)
            self._break(await _ended(self, e))
        return future

    def _late(self, seq: int, timeout_s: float) -> None:
        self._break(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"{self.name}: no answer to {seq} in {timeout_s} s"))

    async def _read(self) -> None:
        try:
            while True:
                answer = await self._call.read()
                if answer is grpc.aio.EOF:
                    self._break(rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name}: the peer ended the stream"))
                    return
                try:
                    self._pending.settle(answer.seq, answer, error_of(answer.status))
                except ValueError as e:
                    self._break(rpc_error(grpc.StatusCode.INTERNAL, f"{self.name}: {e}"))
                    return
        except asyncio.CancelledError:
            self._break(rpc_error(grpc.StatusCode.CANCELLED, f"{self.name}: closed"))
        except grpc.aio.AioRpcError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - anything else ends the stream too
            self._break(rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name}: {type(e).__name__}: {e}"))

    def _break(self, error: BaseException) -> None:
        if self.broken is None:
            self.broken = error
            self._call.cancel()
        self._pending.fail_all(self.broken)

    async def close(self) -> None:
        self._break(rpc_error(grpc.StatusCode.CANCELLED, f"{self.name}: closed"))
        if asyncio.current_task() is not self._reader:
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass


class CallStream:
    """A call stream's client end (the module docstring). ``call(item, timeout_s)``
    numbers ``item`` (an element of the request type's ``calls``), sends it with the
    requests waiting beside it, and returns its own answer (an element of the
    response's ``answers``) or raises the unary call's error. ``not_sent(text)``: the
    error of a call the stream broke before writing it (nothing of it reached the
    peer). Opened on a stub's stream method by ``open``; not used again once
    ``broken``. One event loop uses it."""

    def __init__(
        self,
        call,
        name: str,
        request_type: Callable[..., Any],
        *,
        not_sent: Callable[[str], BaseException] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_per_message: int = MAX_CALLS_PER_MESSAGE,
        silent_s: float = SILENT_S,
    ) -> None:
        self._call = call
        self._silent_s = silent_s
        self.name = name
        self._request_type = request_type
        self._not_sent = not_sent or (lambda text: rpc_error(grpc.StatusCode.UNAVAILABLE, text))
        self._max_per_message = max_per_message
        self._room = asyncio.Semaphore(max_in_flight)
        self._next_id = 1
        self._waiting: dict[int, asyncio.Future] = {}
        self._outbox: list[tuple[int, Any]] = []  # (id, call) not written yet, oldest first
        self._wake = asyncio.Event()
        self.broken: BaseException | None = None
        loop = asyncio.get_running_loop()
        self._heard = loop.time()  # when the peer last sent a message (or the stream opened)
        self._reader = loop.create_task(self._read(), name=f"stream-{name}-reader")
        self._writer = loop.create_task(self._write(), name=f"stream-{name}-writer")

    @classmethod
    def open(cls, method: Callable[..., Any], name: str, metadata, request_type, **kw) -> CallStream:
        """Open a stream with the stub's stream method (``stub.AppendStream``),
        ``metadata`` (the secret) sent once, as it opens."""
        return cls(method(metadata=metadata), name, request_type, **kw)

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    async def call(self, item, timeout_s: float):
        """Send ``item`` and wait for its answer, at most ``timeout_s`` (room
        included): DEADLINE_EXCEEDED after it, and the stream stays open."""
        if self.broken is not None:
            raise self._not_sent(f"{self.name} is broken: {_details(self.broken)}")
        loop = asyncio.get_running_loop()
        if self._room.locked():  # back-pressure: wait for an answer to make room
            t0 = loop.time()
            try:
                await asyncio.wait_for(self._room.acquire(), timeout_s)
            except TimeoutError:
                raise rpc_error(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"{self.name}: no room for the call within {timeout_s} s"
                ) from None
            timeout_s = max(timeout_s - (loop.time() - t0), 0.001)
            if self.broken is not None:
                self._room.release()
                raise self._not_sent(f"{self.name} is broken: {_details(self.broken)}")
        else:
            await self._room.acquire()
        call_id = self._next_id
        self._next_id += 1
        item.id = call_id
        item.timeout_ms = max(1, int(timeout_s * 1000))
        future = loop.create_future()
        self._waiting[call_id] = future
        self._outbox.append((call_id, item))
        self._wake.set()
        timer = loop.call_later(timeout_s, self._late, call_id, timeout_s, loop.time())
        try:
            return await future
        finally:
            timer.cancel()
            self._waiting.pop(call_id, None)
            self._room.release()
            if self._outbox:  # the caller gave up (cancelled, or its deadline passed): not sent now
                self._outbox = [(i, c) for i, c in self._outbox if i != call_id]

    def _late(self, call_id: int, timeout_s: float, sent_at: float) -> None:
        future = self._waiting.pop(call_id, None)
        if future is not None and not future.done():
            future.set_exception(
                rpc_error(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"{self.name}: no answer to call {call_id} in {timeout_s} s"
                )
            )
        silent = asyncio.get_running_loop().time() - self._heard
        if self._heard < sent_at and silent >= self._silent_s:  # SILENT_S: presumed gone
            self._break(
                rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name}: the peer sent nothing for {silent:.1f} s")
            )

    async def _write(self) -> None:
        try:
            while True:
                if not self._outbox:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                take = self._outbox[: self._max_per_message]
                del self._outbox[: len(take)]
                await self._call.write(self._request_type(calls=[c for _, c in take]))
        except asyncio.CancelledError:
            self._break(rpc_error(grpc.StatusCode.CANCELLED, f"{self.name}: closed"))
        except Exception as e:  # noqa: BLE001 - the stream ended under the write: its status
            self._break(await _ended(self, e))

    async def _read(self) -> None:
        try:
            while True:
                message = await self._call.read()
                if message is grpc.aio.EOF:
                    self._break(rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name}: the peer ended the stream"))
                    return
                self._heard = asyncio.get_running_loop().time()
                waiting = self._waiting
                for answer in message.answers:
                    future = waiting.pop(answer.id, None)  # none: its caller gave up (a late answer)
                    if future is None or future.done():
                        continue
                    error = error_of(answer.status) if answer.HasField("status") else None
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(answer)
        except asyncio.CancelledError:
            self._break(rpc_error(grpc.StatusCode.CANCELLED, f"{self.name}: closed"))
        except grpc.aio.AioRpcError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - anything else ends the stream too
            self._break(rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name}: {type(e).__name__}: {e}"))

    def _break(self, error: BaseException) -> None:
        if self.broken is None:
            self.broken = error
            self._call.cancel()
            self._wake.set()
        unsent = {i for i, _ in self._outbox}
        self._outbox = []
        waiting, self._waiting = self._waiting, {}
        for call_id, future in waiting.items():
            if future.done():
                continue
            if call_id in unsent:
                future.set_exception(self._not_sent(f"{self.name} broke before the call was sent: {_details(error)}"))
            else:
                future.set_exception(self.broken)
            future.exception()  # retrieved here: a caller that gave up must not warn

    async def close(self) -> None:
        self._break(rpc_error(grpc.StatusCode.CANCELLED, f"{self.name}: closed"))
        for task in (self._reader, self._writer):
            if task is not asyncio.current_task():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass


def _details(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"


# ---------------------------------------------------------------- the server side


class OpenStreams:
    """The handler tasks of a servicer's open streams. A stream does not end on its
    own, so a server that stops would wait out its grace period on each; its host
    ends them instead (``stop_server``): each ends with UNAVAILABLE, and the peer
    opens it again (elsewhere, once it resolved the restarted service)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task] = set()
        self._ending: set[asyncio.Task] = set()

    @contextlib.asynccontextmanager
    async def held(self, context):
        """Around a stream handler's body (the task serving the stream)."""
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if task not in self._ending:
                raise
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is stopping: open the stream again")
        finally:
            self._tasks.discard(task)
            self._ending.discard(task)

    def __len__(self) -> int:
        return len(self._tasks)

    def end(self) -> list[asyncio.Task]:
        """Cancel every stream's task; returns them (to wait for their ends)."""
        tasks = list(self._tasks)
        for task in tasks:
            self._ending.add(task)
            task.cancel()
        return tasks


async def _ended(stream, why: BaseException) -> grpc.aio.AioRpcError:
    """The error of a stream (RequestStream, CallStream) a write failed on: its reader's
    (it read the stream's status), else the call's status, else ``why`` as UNAVAILABLE."""
    await asyncio.sleep(0)  # the reader may be about to see the status
    if stream.broken is not None:
        return stream.broken
    if isinstance(why, grpc.aio.AioRpcError) and why.code() is not grpc.StatusCode.INTERNAL:
        return why
    return rpc_error(grpc.StatusCode.UNAVAILABLE, f"{stream.name} ended: {why}")


async def stop_server(server, streams: OpenStreams, grace_s: float = 1.0) -> None:
    """Stop ``server`` (a GrpcServer: no new calls; calls in progress get ``grace_s``)
    and end its open streams at once."""
    stopping = asyncio.ensure_future(server.stop(grace_s))
    await asyncio.sleep(0.05)  # (new calls are refused from here on)
    ending = streams.end()
    await stopping
    if ending:  # each handler leaves the set as it ends: none is listed once this returns
        await asyncio.wait(ending, timeout=grace_s)


async def answer_in_order(
    requests: AsyncIterator, handle: Callable[[Any], Awaitable[A]], answer_type: Callable[..., A]
) -> AsyncIterator[A]:
    """A request stream's server end: each request handled in turn by ``handle`` (the
    unary method's body), its answer (or ``answer_type(status=...)`` with the unary
    call's status) given the request's seq."""
    async for request in requests:
        try:
            answer = await handle(request)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - answered as the unary call's status, as @rpc would
            answer = answer_type(status=_failed(handle, e))
        answer.seq = request.seq
        yield answer


async def answer_as_done(
    requests: AsyncIterator,
    handle: Callable[[Any], Awaitable[A]],
    answer_type: Callable[..., A],
    response_type: Callable[..., Any],
    *,
    max_in_flight: int = MAX_IN_FLIGHT,
) -> AsyncIterator:
    """A call stream's server end: every call of every request handled at once by
    ``handle`` (the unary method's body; its answer, or ``answer_type(status=...)``
    with the unary call's status, given the call's id), the answers sent as they
    come, those ready together in one ``response_type(answers=...)``. At most
    ``max_in_flight`` calls are handled at a time (the stream is not read further
    meanwhile: gRPC's flow control holds the client). Ends once the client
    half-closed and every call is answered."""
    loop = asyncio.get_running_loop()
    done: list = []
    ready = asyncio.Event()
    room = asyncio.Semaphore(max_in_flight)
    running: set[asyncio.Task] = set()

    async def run(call) -> None:
        try:
            answer = await handle(call)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - answered as the unary call's status, as @rpc would
            answer = answer_type(status=_failed(handle, e))
        finally:
            room.release()
        answer.id = call.id
        done.append(answer)
        ready.set()

    async def take() -> None:
        try:
            async for request in requests:
                for call in request.calls:
                    await room.acquire()
                    task = loop.create_task(run(call))
                    running.add(task)
                    task.add_done_callback(running.discard)
        finally:
            ready.set()

    reader = loop.create_task(take(), name="call-stream-reader")
    try:
        while True:
            if done:
                answers, done[:] = list(done), []
                yield response_type(answers=answers)
                continue
            if reader.done() and not running:
                reader.result()  # (the stream's own error, if it failed)
                return
            ready.clear()
            if reader.done():
                await asyncio.wait(set(running), return_when=asyncio.FIRST_COMPLETED)
                await asyncio.sleep(0)  # (run appended its answer before the task ended)
            else:
                await ready.wait()
    finally:
        reader.cancel()
        for task in list(running):
            task.cancel()


def _failed(handle: Callable, e: BaseException) -> common_pb2.CallStatus:
    status = status_pb(e)
    if status.code in (grpc.StatusCode.INTERNAL.value[0], grpc.StatusCode.DATA_LOSS.value[0]):
        log.error("stream_request_failed", handler=handle.__qualname__, error=status.message, exc_info=e)
    return status


def stream_rpc(method: Callable[..., AsyncIterator]) -> Callable[..., AsyncIterator]:
    """Wrap a streaming servicer method (an async generator): whatever it raises ends
    the stream with its status from the one table, as ``@rpc`` does for unary calls."""

    @functools.wraps(method)
    async def wrapper(self, requests, context):
        try:
            async for answer in method(self, requests, context):
                yield answer
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as e:
            code, message = status_of(e)
            if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS):
                log.error("stream_failed", method=method.__qualname__, code=code.name, error=message, exc_info=e)
            await context.abort(code, message)

    return wrapper


__all__ = [
    "MAX_CALLS_PER_MESSAGE",
    "MAX_CREDIT",
    "MAX_IN_FLIGHT",
    "SILENT_S",
    "CallStream",
    "Credits",
    "OpenStreams",
    "Pending",
    "RequestStream",
    "answer_as_done",
    "answer_in_order",
    "error_of",
    "internal_channel",
    "rpc_error",
    "status_pb",
    "stop_server",
    "stream_rpc",
]
