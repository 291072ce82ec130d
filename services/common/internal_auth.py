"""Who may call a deployment's internal services, and how their channels are made.

Every internal gRPC call (front -> commitlog, dispatcher -> builders, builder ->
commitlog, ...) carries the deployment's secret in the ``x-mqstore-secret`` header.
The secret is made when ``serve`` starts (``InternalAuth.new``), handed to the actors
as a constructor argument through Ray (whose own traffic is token-authenticated) and
never written to disk. Internal servers refuse any call without it (UNAUTHENTICATED),
except gRPC health checks, which carry nothing but a status.

With ``tls=True`` (the front speaks TLS) the internal servers speak TLS as well, with
a certificate made for the deployment alone (``INTERNAL_NAME`` is the name it
carries); internal clients trust only that certificate.

A process may also *vouch* for values it states (``InternalAuth.vouch``: an HMAC under
the secret) so that a third process checks them without a call to the first (the
commitlog's range ends, carried by the dispatcher to the builders).

Every server, internal or public, also decodes requests itself (``StrictDecode``):
bytes that are not the request message are INVALID_ARGUMENT with a message, not
grpc's ``UNKNOWN "Unexpected DecodeError"``.
"""

from __future__ import annotations

import datetime
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import grpc

SECRET_HEADER = "x-mqstore-secret"
RANGE_END = b"commitlog-range-end"  # vouch(RANGE_END, incarnation, next_offset): the commitlog had records to there
INTERNAL_NAME = "mqstore-internal"  # the name on the deployment's internal certificate
_OPEN_SERVICES = ("/grpc.health.v1.Health/",)  # answered without the secret


@dataclass(frozen=True)
class InternalAuth:
    """A deployment's secret and, when internal traffic is encrypted, its internal
    certificate and key (PEM). Pickled to the actors; never logged (``repr`` hides it)."""

    secret: str
    cert_chain: bytes | None = None
    private_key: bytes | None = None

    @classmethod
    def new(cls, *, tls: bool = False) -> InternalAuth:
        """A fresh secret (256 random bits); with ``tls`` a fresh self-signed
        certificate for ``INTERNAL_NAME`` too."""
        if not tls:
            return cls(secrets.token_urlsafe(32))
        cert, key = _self_signed(INTERNAL_NAME)
        return cls(secrets.token_urlsafe(32), cert, key)

    @property
    def tls(self) -> bool:
        return self.cert_chain is not None

    def __repr__(self) -> str:
        return f"InternalAuth(secret=<hidden>, tls={self.tls})"

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ((SECRET_HEADER, self.secret),)

    def accepts(self, metadata) -> bool:
        """True if the call's metadata carries this deployment's secret."""
        for key, value in metadata or ():
            if key == SECRET_HEADER:
                given = value.encode() if isinstance(value, str) else value
                return hmac.compare_digest(given, self.secret.encode())
        return False

    def vouch(self, what: bytes, *values: int) -> bytes:
        """A tag saying a process of this deployment stated ``values`` about ``what``
        (HMAC-SHA256 under the secret, 16 bytes): passed on by a peer, checked by a
        third (``vouched``) without asking the first. E.g. the commitlog vouches for
        (incarnation, next_offset) of a range; the builders check a batch's to_offset."""
        msg = what + b"".join(v.to_bytes(8, "big", signed=True) for v in values)
        return hmac.new(self.secret.encode(), msg, "sha256").digest()[:16]

    def vouched(self, tag: bytes, what: bytes, *values: int) -> bool:
        """True if ``tag`` is this deployment's ``vouch(what, *values)``."""
        return len(tag) == 16 and hmac.compare_digest(tag, self.vouch(what, *values))

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_server_credentials([(self.private_key, self.cert_chain)])

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(root_certificates=self.cert_chain)

    def channel_options(self) -> list[tuple[str, str]]:
        """Internal endpoints are addresses; the certificate names the deployment."""
        return [("grpc.ssl_target_name_override", INTERNAL_NAME)] if self.tls else []


def _self_signed(name: str) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


# ---------------------------------------------------------------- server side


class StrictDecode(grpc.aio.ServerInterceptor):
    """Decode each unary request in the handler, so malformed bytes end the call
    with INVALID_ARGUMENT; with ``auth``, refuse calls without the deployment's
    secret (UNAUTHENTICATED) before anything is decoded."""

    def __init__(self, auth: InternalAuth | None = None) -> None:
        self._auth = auth

    async def intercept_service(self, continuation, details):
        method = details.method or ""
        handler = await continuation(details)
        if (
            self._auth is not None
            and not method.startswith(_OPEN_SERVICES)
            and not self._auth.accepts(details.invocation_metadata)
        ):
            # every method, known or not: a stranger learns nothing of what is served
            return _refuse(
                handler,
                grpc.StatusCode.UNAUTHENTICATED,
                "internal service: the call does not carry this deployment's secret",
            )
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer
        if handler.response_streaming:
            inner = handler.unary_stream

            async def stream(raw, context):
                request = await _decode(decode, raw, context, method)
                async for item in inner(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(stream, response_serializer=handler.response_serializer)
        inner = handler.unary_unary

        async def unary(raw, context):
            return await inner(await _decode(decode, raw, context, method), context)

        return grpc.unary_unary_rpc_method_handler(unary, response_serializer=handler.response_serializer)


async def _decode(decode: Callable, raw: bytes, context, method: str):
    try:
        return decode(raw)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, or anything a decoder raises
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"malformed request for {method}: {type(e).__name__}: {e}"
        )


def _refuse(handler: grpc.RpcMethodHandler | None, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` (unary without one) that ends every
    call with ``code`` (requests are not decoded)."""

    async def refuse(request, context):
        await context.abort(code, message)

    async def refuse_stream(request, context):
        await context.abort(code, message)
        yield  # an async generator, as a streaming handler must be

    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    shape = (False, False) if handler is None else (handler.request_streaming, handler.response_streaming)
    return make[shape](refuse_stream if shape[1] else refuse)


# ---------------------------------------------------------------- Ray


def gcs_requires_token(gcs_address: str, timeout_s: float = 10.0) -> bool:
    """True if the Ray GCS at ``gcs_address`` refuses a call that carries no token
    (token authentication is on); False if it answers one."""
    with grpc.insecure_channel(gcs_address) as ch:
        try:
            ch.unary_unary("/ray.rpc.NodeInfoGcsService/GetAllNodeInfo")(b"", timeout=timeout_s)
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.UNAUTHENTICATED:
                return True
            raise
    return False


__all__ = ["INTERNAL_NAME", "RANGE_END", "SECRET_HEADER", "InternalAuth", "StrictDecode", "gcs_requires_token"]
