"""Every error a servicer can meet becomes a gRPC status here, in one table.

Servicer methods are wrapped with :func:`rpc`: whatever they raise is mapped by
:func:`status_of` and the call ends with ``context.abort(code, message)``; the
server itself never sees the exception, so a malformed request can not kill it.
Servicers raise :class:`RpcError` (or its subclasses) for conditions that are
not store errors (a bad column length, a shard that is still recovering).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from mqstore.errors import (
    ConfigError,
    CorruptFileError,
    DecodeError,
    IndexDisabledError,
    InvalidArgumentError,
    InvalidMessageError,
    LimitExceededError,
    MessageTooLargeError,
    NoPermissionError,
    NotFoundError,
    OffsetError,
    PropertiesTooLongError,
    StoreClosedError,
    StoreLockedError,
    StoreNotWritableError,
)
from mqstore.services.common import deadline
from mqstore.store.builders import GapError

log = structlog.get_logger(__name__)
Code = grpc.StatusCode


class RpcError(Exception):
    """A request fails with ``code`` and ``message`` (raised by servicers)."""

    code = Code.INTERNAL

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class BadRequest(RpcError):
    """INVALID_ARGUMENT: the request breaks a documented rule."""

    code = Code.INVALID_ARGUMENT


class NotFound(RpcError):
    """NOT_FOUND: nothing at that msgId, key or offset."""

    code = Code.NOT_FOUND


class TooLarge(RpcError):
    """RESOURCE_EXHAUSTED: a batch over the limits."""

    code = Code.RESOURCE_EXHAUSTED


class Unavailable(RpcError):
    """UNAVAILABLE: recovering, closing, or a shard that does not answer."""

    code = Code.UNAVAILABLE


class Precondition(RpcError):
    """FAILED_PRECONDITION: a feature the store has disabled, an out-of-order batch."""

    code = Code.FAILED_PRECONDITION


class Unauthenticated(RpcError):
    """UNAUTHENTICATED: the front has an ACL and the request is not signed by a known
    user with its secret (services/acl.py)."""

    code = Code.UNAUTHENTICATED


class PermissionDenied(RpcError):
    """PERMISSION_DENIED: the signed user may not do this (an ACL rule, or not an admin)."""

    code = Code.PERMISSION_DENIED


class Aborted(RpcError):
    """ABORTED: the work was meant for an earlier incarnation of the shard."""

    code = Code.ABORTED


# The table: most specific class first (the first isinstance match wins).
_TABLE: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (NoPermissionError, Code.PERMISSION_DENIED),  # a reserved topic, a topic's perm (before InvalidTopicError)
    (MessageTooLargeError, Code.RESOURCE_EXHAUSTED),
    (PropertiesTooLongError, Code.RESOURCE_EXHAUSTED),
    (InvalidMessageError, Code.INVALID_ARGUMENT),
    (LimitExceededError, Code.RESOURCE_EXHAUSTED),  # a pull or key query over its count limit
    (NotFoundError, Code.NOT_FOUND),  # a query that found nothing (before OffsetError)
    (
        IndexDisabledError,
        Code.FAILED_PRECONDITION,
    ),  # before ConfigError  # bad topic, queue id, group, columns, transaction bits
    (InvalidArgumentError, Code.INVALID_ARGUMENT),  # a read's queue id, offset or count
    (OffsetError, Code.INVALID_ARGUMENT),
    (DecodeError, Code.INVALID_ARGUMENT),  # a malformed msgId
    (ConfigError, Code.INVALID_ARGUMENT),  # an out-of-range topic config value
    (CorruptFileError, Code.DATA_LOSS),
    (GapError, Code.FAILED_PRECONDITION),  # a builder's batch past its progress
    (StoreClosedError, Code.UNAVAILABLE),
    (StoreLockedError, Code.UNAVAILABLE),
    (ConnectionError, Code.UNAVAILABLE),  # a peer service that does not answer (remote.PeerUnavailable)
    (asyncio.TimeoutError, Code.DEADLINE_EXCEEDED),
    (ValueError, Code.INVALID_ARGUMENT),
    (TypeError, Code.INVALID_ARGUMENT),
)


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a call that raised ``exc`` ends with."""
    if isinstance(exc, RpcError):
        return exc.code, str(exc)
    if isinstance(exc, grpc.aio.AioRpcError):  # a downstream call (front -> shard) failed: pass it on
        return exc.code(), exc.details() or exc.code().name
    if isinstance(exc, grpc.RpcError) and isinstance(exc, grpc.Call):  # a blocking call to a peer (common/peers.py)
        return exc.code(), exc.details() or exc.code().name
    if isinstance(exc, StoreNotWritableError):  # a full disk is a resource; the rest need a restart
        code = Code.RESOURCE_EXHAUSTED if exc.cause == "disk_full" else Code.UNAVAILABLE
        return code, f"store not writable ({exc.cause}): {exc}"
    for cls, code in _TABLE:
        if isinstance(exc, cls):
            return code, str(exc) or cls.__name__
    return Code.INTERNAL, f"{type(exc).__name__}: {exc}"


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


# Codes a shard refuses a request with before it writes anything: a send refused so
# may be sent again without storing anything twice (UNAVAILABLE may come after a write).
REFUSED_CODES = frozenset(
    {
        Code.INVALID_ARGUMENT,
        Code.PERMISSION_DENIED,
        Code.UNAUTHENTICATED,
        Code.RESOURCE_EXHAUSTED,
        Code.FAILED_PRECONDITION,
        Code.NOT_FOUND,
        Code.OUT_OF_RANGE,
        Code.UNIMPLEMENTED,
    }
)


def rpc(method: F) -> F:
    """Wrap an async servicer method: map any exception to a status (one log line
    for INTERNAL and DATA_LOSS, which are the server's problems, not the caller's).
    A servicer with an ``observe_rpc(method, seconds, code, response)`` method is
    told about every call (metrics)."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self, request, context):
        observe = getattr(self, "observe_rpc", None)
        t0 = time.perf_counter()
        deadline.start(context)
        try:
            res = await method(self, request, context)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            code, message = status_of(e)
            if code in (Code.INTERNAL, Code.DATA_LOSS):
                log.error("rpc_failed", method=method.__qualname__, code=code.name, error=message, exc_info=e)
        else:
            if observe is not None:
                observe(name, time.perf_counter() - t0, "OK", res)
            return res
        if observe is not None:
            observe(name, time.perf_counter() - t0, code.name, None)
        await context.abort(code, message)

    return wrapper  # type: ignore[return-value]


__all__ = [
    "REFUSED_CODES",
    "Aborted",
    "BadRequest",
    "NotFound",
    "PermissionDenied",
    "Precondition",
    "RpcError",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
    "rpc",
    "status_of",
]
