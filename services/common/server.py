"""A grpc.aio server with health checking and reflection, on its own event loop.

``ServerThread`` runs an asyncio loop in a daemon thread; components start their
servers and background tasks on it with ``submit``. The same code runs inside a
Ray actor (whose own threads stay free for actor calls), in tests and embedded.
Every server answers ``grpc.health.v1.Health`` (overall "" and per service) and
``grpc.reflection.v1alpha.ServerReflection``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mqstore.services.common.headers import AddHeaders, AioAddHeaders
from mqstore.services.common.internal_auth import InternalAuth, StrictDecode
from mqstore.store.tuning import tune_allocator

MAX_MESSAGE_BYTES = 96 << 20  # a 64 MiB batch of bodies plus its columns
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.enable_retries", 0),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.initial_reconnect_backoff_ms", 200),  # a restarted actor is back within seconds: retry soon
    ("grpc.max_reconnect_backoff_ms", 2_000),
]
CLIENT_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]  # public clients (sync_channel)
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),  # two servers on one port would split the calls between them
]


def server_options(reuse_port: bool = False) -> list[tuple[str, int]]:
    """``SERVER_OPTIONS``, with SO_REUSEPORT on only when ``reuse_port``: the fronts of
    ``serve --fronts N`` (N > 1) share their public ports and the kernel spreads the
    clients' connections over them. Off everywhere else, one front included: a stale
    process left on the port would otherwise silently take half the connections."""
    if not reuse_port:
        return list(SERVER_OPTIONS)
    return [o for o in SERVER_OPTIONS if o[0] != "grpc.so_reuseport"] + [("grpc.so_reuseport", 1)]


T = TypeVar("T")


@dataclass(frozen=True)
class Registration:
    """One service to serve: ``add(servicer, server)`` from the generated module,
    and its full name (``mqstore.v1.CommitLogService``) for health and reflection."""

    add: Callable[[Any, grpc.aio.Server], None]
    servicer: Any
    name: str


class GrpcServer:
    """A started server: ``port`` it listens on, ``health`` to flip statuses."""

    def __init__(self, server: grpc.aio.Server, port: int, health_servicer, names: list[str]) -> None:
        self.server = server
        self.port = port
        self.health = health_servicer
        self.names = names

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *self.names]:
            await self.health.set(name, status)

    async def stop(self, grace_s: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


@dataclass(frozen=True)
class TlsFiles:
    """PEM bytes of a server's certificate chain and private key (read where the
    files are, passed to the process that serves)."""

    cert_chain: bytes
    private_key: bytes

    @classmethod
    def load(cls, cert_path, key_path) -> TlsFiles:
        """Read and check the pair (ValueError naming the files if they do not match
        or do not parse), so a bad pair fails before any server starts."""
        import ssl

        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert_path), str(key_path))
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"TLS certificate {cert_path} and key {key_path} can not be used: {e}") from None
        with open(cert_path, "rb") as c, open(key_path, "rb") as k:
            return cls(c.read(), k.read())


async def start_grpc_server(
    host: str,
    port: int,
    registrations: Iterable[Registration],
    *,
    serving: bool = True,
    tls: TlsFiles | None = None,
    auth: InternalAuth | None = None,
    strict_decode: bool = True,
    reuse_port: bool = False,
) -> GrpcServer:
    """Start a server on ``host:port`` (port 0: the system picks one, see ``.port``);
    with ``tls`` it speaks TLS only (a plaintext client can not connect). With
    ``auth`` it is an internal server: every call but health checks must carry the
    deployment's secret, and it speaks TLS with the deployment's internal
    certificate when ``auth.tls``. Malformed request bytes are INVALID_ARGUMENT
    (``strict_decode``: an interceptor decodes them; False for services whose
    handlers take bytes and answer malformed ones themselves, which spares every call
    the interceptor's cost). ``reuse_port``: share ``port`` with other processes
    (``server_options``; the fronts of ``serve --fronts N``)."""
    regs = list(registrations)
    tune_allocator()  # requests and answers of a few hundred KiB: kept off fresh mmap()s
    interceptors = [StrictDecode(auth)] if strict_decode or auth is not None else []
    server = grpc.aio.server(options=server_options(reuse_port), interceptors=interceptors)
    for r in regs:
        r.add(r.servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [r.name for r in regs]
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    creds = None
    if tls is not None:
        creds = grpc.ssl_server_credentials([(tls.private_key, tls.cert_chain)])
    elif auth is not None:
        creds = auth.server_credentials()
    bound = (
        server.add_insecure_port(f"{host}:{port}") if creds is None else server.add_secure_port(f"{host}:{port}", creds)
    )
    if bound == 0:
        raise OSError(f"can not listen on {host}:{port}")
    await server.start()
    out = GrpcServer(server, bound, health_servicer, names)
    await out.set_serving(serving)
    return out


class ServerThread:
    """An asyncio event loop in a daemon thread."""

    def __init__(self, name: str = "mqstore-grpc", os_name: str | None = None) -> None:
        """``os_name``: the thread's name as the kernel shows it (``/proc/<pid>/task/*/comm``,
        at most 15 bytes): how bench/processes.py tells the fronts of a deployment apart."""
        self.loop = asyncio.new_event_loop()
        self._os_name = os_name
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._os_name:
            set_os_thread_name(self._os_name)
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the loop (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for its result."""
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


def set_os_thread_name(name: str) -> None:
    """Name the calling thread for the kernel (Linux prctl PR_SET_NAME; elsewhere nothing)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # 15: PR_SET_NAME
    except (OSError, AttributeError):  # no libc symbol: a name is not worth failing for
        pass


def channel(endpoint: str, auth: InternalAuth) -> grpc.aio.Channel:
    """An aio channel to an internal service with mqstore's message limits: every
    call carries the deployment's secret (TLS when ``auth.tls``)."""
    creds = auth.channel_credentials()
    interceptors = [AioAddHeaders(auth.metadata)]
    if creds is None:
        return grpc.aio.insecure_channel(endpoint, options=CHANNEL_OPTIONS, interceptors=interceptors)
    return grpc.aio.secure_channel(
        endpoint, creds, options=CHANNEL_OPTIONS + auth.channel_options(), interceptors=interceptors
    )


def sync_channel(
    endpoint: str, *, tls_ca: bytes | None = None, tls_server_name: str | None = None, auth: InternalAuth | None = None
) -> grpc.Channel:
    """A blocking channel with mqstore's message limits (clients, CLI): plaintext,
    or TLS trusting the PEM certificates ``tls_ca`` (``tls_server_name``: the name
    the server's certificate must carry, when it is not the endpoint's host). With
    ``auth``: a channel to an internal service (its secret on every call, TLS when
    ``auth.tls``)."""
    if auth is not None:
        creds = auth.channel_credentials()
        ch = (
            grpc.insecure_channel(endpoint, options=CHANNEL_OPTIONS)
            if creds is None
            else grpc.secure_channel(endpoint, creds, options=CHANNEL_OPTIONS + auth.channel_options())
        )
        return grpc.intercept_channel(ch, AddHeaders(auth.metadata))
    # A client's own connection: gRPC would otherwise share one among the channels of a
    # process, and every client of it would reach the same one of the fronts on a shared port.
    if tls_ca is None:
        return grpc.insecure_channel(endpoint, options=CLIENT_OPTIONS)
    options = list(CLIENT_OPTIONS)
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    return grpc.secure_channel(endpoint, grpc.ssl_channel_credentials(root_certificates=tls_ca), options=options)


__all__ = [
    "CHANNEL_OPTIONS",
    "MAX_MESSAGE_BYTES",
    "GrpcServer",
    "Registration",
    "ServerThread",
    "TlsFiles",
    "channel",
    "server_options",
    "set_os_thread_name",
    "start_grpc_server",
    "sync_channel",
]
