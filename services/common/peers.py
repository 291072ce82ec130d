"""How services find and call each other: the address a server binds and publishes
(never a wildcard for internal ones), resolvers of a peer's endpoint (fixed, or read
from a table filled in later), and ``Peer``, a blocking stub for core code running in
plain threads (its typed face is shard_clients.SyncCommitLogClient). ``Peer`` and the
async shard_clients.Connection keep one set of rules to find, connect, call and
retry (connect.py): ``Peer`` with ``PEER_RULES`` (a resolution that failed makes calls
fail at once for a second), the fronts' Connection with ``FRONT_RULES``."""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from mqstore.services.common import connect
from mqstore.services.common.connect import PEER_RULES, ConnectRules
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.server import sync_channel

Resolver = Callable[[], Awaitable[str]]
ShardResolvers = dict[str, Resolver]  # "cl", "cq", "ix" (absent: index disabled) -> resolver
RESOLVE_S = PEER_RULES.resolve_cap_s


@dataclass(frozen=True)
class Placement:
    """Where one of a shard's processes is, as the cluster manager has it (Ray's
    actor table): ``state`` ALIVE, PENDING_CREATION (not placed on a node yet),
    RESTARTING, DEAD, GONE (no actor by that name: killed for good or out of
    restarts) or UNKNOWN; ``node_id`` the node it runs on ("" unless ALIVE);
    ``detail`` why it is dead, or what could not be asked."""

    name: str
    state: str
    node_id: str = ""
    detail: str = ""

    def describe(self) -> str:
        """One phrase for people: "commitlog-1 is not placed on any node yet"."""
        what = {
            "ALIVE": "is alive",
            "PENDING_CREATION": "is not placed on any node yet (no node offers what it needs, or its process is starting)",
            "DEPENDENCIES_UNREADY": "is not placed on any node yet (waiting for its arguments)",
            "RESTARTING": "is restarting (waiting for a node, or opening again)",
            "DEAD": "is dead for good",
            "GONE": "does not exist (killed for good, out of restarts, or never created)",
        }.get(self.state, f"is in an unknown state ({self.state})")
        return f"{self.name} {what}" + (f": {self.detail}" if self.detail else "")


Locator = Callable[[], Awaitable[dict[str, Placement]]]  # "cl", "cq", "ix", "dp" -> where that process is

WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def advertised(host: str) -> str:
    """The address others reach the front bound to ``host`` at: a wildcard bind
    (0.0.0.0, ::) is published as this machine's address, not as the wildcard
    (internal servers never bind a wildcard: see ``internal_address``)."""
    if host not in WILDCARDS:
        return host
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: it only picks the outgoing interface
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def internal_address(host: str) -> str:
    """The address an internal server binds to and publishes: one address of this
    node (what Ray knows the node as), never a wildcard, which would listen on
    every interface."""
    if host in WILDCARDS:
        raise ValueError(f"internal services bind to the node's own address, not to {host!r}")
    return host


def endpoint_of(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def fixed(endpoint: str) -> Resolver:
    """A resolver that always answers ``endpoint``."""

    async def resolve() -> str:
        return endpoint

    return resolve


def resolver_of(endpoints: dict[str, str], name: str) -> Resolver:
    """A resolver reading ``endpoints[name]`` on every call (waiting until it is
    there): endpoints filled in or replaced after the caller was created."""

    async def resolve() -> str:
        while name not in endpoints:
            await asyncio.sleep(0.01)
        return endpoints[name]

    return resolve


class PeerUnavailable(ConnectionError):
    """The peer could not be reached (UNAVAILABLE; nothing was sent): its endpoint not
    resolved in time (its actor restarts or is gone), or no connection taken."""


def resolve_within(resolve: Resolver, timeout_s: float = RESOLVE_S) -> str:
    """Run the async resolver to completion in a daemon thread, at most ``timeout_s``."""
    box: dict = {}

    def run() -> None:
        try:
            box["endpoint"] = asyncio.run(resolve())
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, name="mqstore-resolve", daemon=True)
    t.start()
    t.join(timeout_s)
    if "endpoint" in box:
        return box["endpoint"]
    why = (
        f"{type(box['error']).__name__}: {box['error']}" if "error" in box else f"not resolved within {timeout_s:.0f} s"
    )
    raise PeerUnavailable(why)


class Peer:
    """A stub of one peer service, found, connected and called by ``rules``
    (connect.py): after the peer could not be found, calls fail at once for
    ``rules.backoff_s`` (a caller polling many things must not wait on each).
    Thread-safe."""

    def __init__(self, resolve: Resolver, stub_class, auth: InternalAuth, *, rules: ConnectRules = PEER_RULES) -> None:
        self._resolve = resolve
        self._auth = auth
        self._stub_class = stub_class
        self.rules = rules
        self._backoff = connect.Backoff(rules)
        self._closed = False
        self._channel: grpc.Channel | None = None
        self._lock = threading.Lock()
        self._who = f"the {getattr(stub_class, '__name__', 'peer').removesuffix('Stub')}"

    def stub(self):
        """The stub, found and connected (rules 1 and 2); PeerUnavailable otherwise."""
        with self._lock:
            if self._closed:
                raise PeerUnavailable("closed")
            if self._channel is None:
                if self._backoff.down:
                    raise PeerUnavailable(f"{self._who} was not found a moment ago")
                wait_s = self.rules.resolve_wait()
                try:
                    endpoint = resolve_within(self._resolve, wait_s)
                except PeerUnavailable as e:
                    self._backoff.failed()
                    raise PeerUnavailable(f"{connect.not_found(self._who, 'it', wait_s)}: {e}") from None
                ch = sync_channel(endpoint, auth=self._auth)
                try:
                    self._connect(ch, endpoint)
                except PeerUnavailable:
                    ch.close()
                    raise
                self._channel, self._stub = ch, self._stub_class(ch)
            return self._stub

    def _connect(self, ch: grpc.Channel, endpoint: str) -> None:
        """Rule 2, blocking: until the channel is READY; PeerUnavailable at once if
        the peer refuses connections, or once the connect cap passed."""
        states: queue.SimpleQueue = queue.SimpleQueue()
        ch.subscribe(states.put, try_to_connect=True)
        wait_s = self.rules.connect_wait()
        what = f"its endpoint {endpoint}"
        try:
            while True:
                try:
                    ok = self.rules.connected(states.get(timeout=wait_s))
                except queue.Empty:
                    raise PeerUnavailable(connect.no_connection(self._who, what, wait_s)) from None
                if ok is not None:
                    break
            if not ok:
                raise PeerUnavailable(connect.refused(self._who, what))
        finally:
            ch.unsubscribe(states.put)

    def call(self, pick: Callable, request, timeout: float = 30.0, *, retry: bool = False):
        """``pick(stub)(request)`` (``lambda s: s.Read``: typed clients name their RPC,
        shard_clients.SyncCommitLogClient) within ``timeout``; UNAVAILABLE drops the
        channel, so the next call finds the peer again; ``retry`` (reads only): tried
        once more after UNAVAILABLE (rule 4)."""
        rules = self.rules
        for attempt in rules.attempts(retry):
            try:
                return pick(self.stub())(request, timeout=rules.call_timeout(timeout))
            except grpc.RpcError as e:
                if not rules.drops_channel(e):
                    raise
                self.reset()
                if not rules.may_retry(attempt, retry):
                    raise
            except PeerUnavailable:
                if not rules.may_retry(attempt, retry):
                    raise
            except ValueError as e:  # the channel was closed under the call (a reopen, a close)
                raise PeerUnavailable(str(e)) from e
            time.sleep(rules.retry_pause_s)
        raise AssertionError("unreachable")

    def reset(self, *, close: bool = False) -> None:
        with self._lock:
            ch, self._channel = self._channel, None
            self._closed |= close
        if ch is not None:
            ch.close()


__all__ = [
    "RESOLVE_S",
    "Locator",
    "Peer",
    "PeerUnavailable",
    "Placement",
    "Resolver",
    "ShardResolvers",
    "advertised",
    "endpoint_of",
    "fixed",
    "internal_address",
    "resolve_within",
    "resolver_of",
]
