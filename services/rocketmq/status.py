"""Protocol status codes: every answer of the RocketMQ port carries one.

RocketMQ's proxy completes every unary call and the receive stream with gRPC OK and
puts the outcome in the answer's ``status`` (clients turn a gRPC error into a
transport error and retry it, so a refusal must not be one). ``answered`` wraps a
handler: whatever it raises becomes a ``Status`` in its response type, the code
picked by ``code_of`` from the one table below.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from mqstore.errors import (
    InvalidTopicError,
    MessageTooLargeError,
    PropertiesTooLongError,
    ReservedTopicError,
    TopicPermissionError,
)
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.services.common import deadline
from mqstore.services.common.errors import PermissionDenied, Unauthenticated, status_of

log = structlog.get_logger(__name__)
Code = v2.Code


class ProtocolError(Exception):
    """A request answered with protocol ``code`` and ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# Store and service errors first (most specific class first), then gRPC codes of a
# downstream call or of services/common/errors.py's classes.
_BY_CLASS: tuple[tuple[type[BaseException], int], ...] = (
    (ReservedTopicError, Code.ILLEGAL_TOPIC),  # a system topic (before TopicPermissionError's base)
    (InvalidTopicError, Code.ILLEGAL_TOPIC),
    (TopicPermissionError, Code.FORBIDDEN),  # the topic's perm refuses it
    (MessageTooLargeError, Code.MESSAGE_BODY_TOO_LARGE),
    (PropertiesTooLongError, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    (Unauthenticated, Code.UNAUTHORIZED),
    (PermissionDenied, Code.FORBIDDEN),
)
_BY_GRPC = {
    grpc.StatusCode.INVALID_ARGUMENT: Code.BAD_REQUEST,
    grpc.StatusCode.NOT_FOUND: Code.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED: Code.FORBIDDEN,
    grpc.StatusCode.UNAUTHENTICATED: Code.UNAUTHORIZED,
    grpc.StatusCode.UNAVAILABLE: Code.PROXY_TIMEOUT,  # producers retry it, as RocketMQ's proxy timeouts
    grpc.StatusCode.DEADLINE_EXCEEDED: Code.PROXY_TIMEOUT,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Code.TOO_MANY_REQUESTS,
    grpc.StatusCode.FAILED_PRECONDITION: Code.PRECONDITION_FAILED,
}


# The shard's refusal of a full disk (services/common/errors.py status_of).
_DISK_FULL = "store not writable (disk_full)"
DISK_FULL_ANSWER = "service not available now, the store's disk is full"


def code_of(exc: BaseException) -> tuple[int, str]:
    """The protocol code and message an answer that failed with ``exc`` carries."""
    if isinstance(exc, ProtocolError):
        return exc.code, str(exc)
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code, str(exc)
    grpc_code, message = status_of(exc)
    if grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED and message.startswith(_DISK_FULL):
        # RocketMQ's broker refuses a put on a full disk with SERVICE_NOT_AVAILABLE, which
        # its proxy answers INTERNAL_SERVER_ERROR (it maps no other code): so here, with why.
        return Code.INTERNAL_SERVER_ERROR, f"{DISK_FULL_ANSWER}: {message}"
    return _BY_GRPC.get(grpc_code, Code.INTERNAL_SERVER_ERROR), message


def status(code: int = Code.OK, message: str = "OK") -> v2.Status:
    return v2.Status(code=code, message=message)


R = TypeVar("R")


def answered(response_type: type[R]) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Wrap a unary handler: an exception becomes ``response_type(status=...)`` (INTERNAL
    ones logged), and the servicer's ``observe(method, code)`` hears of every call."""

    def wrap(method: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        name = method.__name__

        @functools.wraps(method)
        async def wrapper(self, request, context) -> Any:
            deadline.start(context)
            try:
                res = await method(self, request, context)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - every failure is an answer, never a traceback
                code, message = code_of(e)
                if code in (Code.INTERNAL_SERVER_ERROR, Code.INTERNAL_ERROR) and not message.startswith(
                    DISK_FULL_ANSWER
                ):  # a full disk is the store's refusal, logged by the store once
                    log.error("rocketmq_rpc_failed", method=name, error=message, exc_info=e)
                else:
                    log.info("rocketmq_rpc_refused", method=name, code=Code.Name(code), reason=message)
                res = response_type(status=status(code, message))
            self.observe(name, res.status.code)
            return res

        return wrapper

    return wrap


__all__ = ["DISK_FULL_ANSWER", "Code", "ProtocolError", "answered", "code_of", "status"]
