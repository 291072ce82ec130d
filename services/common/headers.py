"""Client interceptors that add headers to every call of a channel: the deployment's
secret on internal channels (internal_auth.py), a user's signature on the front's
clients (query/acl.py). ``headers`` is asked on every call (a signature carries the time)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grpc

Headers = Callable[[], Iterable[tuple[str, str]]]

# Trailing metadata of a FrontService.SendEncoded whose shard was not reached: nothing
# of the batch was written, so the client may send it again.
NOT_STORED_HEADER = "x-mqstore-not-stored"


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


def _metadata(details, headers: Headers) -> list[tuple[str, str]]:
    return list(details.metadata or ()) + list(headers())


class AddHeaders(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """For a blocking channel: ``grpc.intercept_channel(channel, AddHeaders(headers))``."""

    def __init__(self, headers: Headers) -> None:
        self._headers = headers

    def _call(self, continuation, details, request):
        return continuation(
            _CallDetails(
                details.method,
                details.timeout,
                _metadata(details, self._headers),
                details.credentials,
                details.wait_for_ready,
                getattr(details, "compression", None),
            ),
            request,
        )

    intercept_unary_unary = intercept_unary_stream = intercept_stream_unary = intercept_stream_stream = _call


class AioAddHeaders(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
    grpc.aio.StreamUnaryClientInterceptor,
    grpc.aio.StreamStreamClientInterceptor,
):
    """For an aio channel: ``grpc.aio.insecure_channel(..., interceptors=[AioAddHeaders(headers)])``."""

    def __init__(self, headers: Headers) -> None:
        self._headers = headers

    async def _call(self, continuation, details, request):
        return await continuation(
            grpc.aio.ClientCallDetails(
                details.method,
                details.timeout,
                _metadata(details, self._headers),
                details.credentials,
                details.wait_for_ready,
            ),
            request,
        )

    intercept_unary_unary = intercept_unary_stream = intercept_stream_unary = intercept_stream_stream = _call


__all__ = ["NOT_STORED_HEADER", "AddHeaders", "AioAddHeaders", "Headers"]
