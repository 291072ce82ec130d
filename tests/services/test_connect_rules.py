"""One set of connect rules (services/common/connect.py) for the front's async
Connection and the blocking peers.Peer: attempts, which errors drop a channel, the
caller's deadline, the pause after a failed resolution, and both clients meeting a
peer that refuses connections or is not found the same way."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from mqstore.rpc.v1 import commitlog_pb2, commitlog_pb2_grpc
from mqstore.services.common import deadline
from mqstore.services.common.connect import FRONT_RULES, PEER_RULES, Backoff, ConnectRules
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import rpc_error
from mqstore.services.common.peers import Peer, PeerUnavailable, fixed
from mqstore.services.common.shard_clients import Connection, ShardUnreachable

C = grpc.StatusCode
S = grpc.ChannelConnectivity


def test_a_read_is_tried_twice_a_send_once():
    assert list(FRONT_RULES.attempts(True)) == [0, 1] and list(FRONT_RULES.attempts(False)) == [0]
    assert FRONT_RULES.may_retry(0, True) and not FRONT_RULES.may_retry(1, True)
    assert not FRONT_RULES.may_retry(0, False)


def test_only_unavailable_drops_the_channel():
    assert ConnectRules.drops_channel(rpc_error(C.UNAVAILABLE, "lost"))
    assert ConnectRules.drops_channel(ShardUnreachable("not found"))  # a class attribute code
    for code in (C.DEADLINE_EXCEEDED, C.INVALID_ARGUMENT, C.FAILED_PRECONDITION, C.INTERNAL):
        assert not ConnectRules.drops_channel(rpc_error(code, "x"))
    assert not ConnectRules.drops_channel(ValueError("no code"))


def test_connectivity_states_are_connected_refused_or_still_trying():
    assert ConnectRules.connected(S.READY) is True
    assert ConnectRules.connected(S.TRANSIENT_FAILURE) is False and ConnectRules.connected(S.SHUTDOWN) is False
    assert ConnectRules.connected(S.IDLE) is None and ConnectRules.connected(S.CONNECTING) is None


def test_waits_are_capped_by_the_rules_and_by_the_callers_deadline():
    rules = ConnectRules(resolve_cap_s=10, connect_cap_s=2.5)
    assert rules.resolve_wait() == 10 and rules.resolve_wait(4) == 4
    assert rules.connect_wait() == 2.5 and rules.connect_wait(1) == 1

    class Context:
        def time_remaining(self):
            return 1.0

    async def served():  # inside a served call: its deadline bounds every wait
        deadline.start(Context())
        assert 0.9 < rules.resolve_wait() < 1.0 and 0.9 < rules.call_timeout(30) < 1.0
        deadline._DEADLINE.set(time.monotonic() - 1)
        with pytest.raises(TimeoutError):
            rules.connect_wait()

    asyncio.run(served())
    with pytest.raises(ValueError):
        ConnectRules(backoff_s=-1)


def test_backoff_holds_calls_for_its_time_only():
    now = [100.0]
    b = Backoff(ConnectRules(backoff_s=1.0), clock=lambda: now[0])
    assert not b.down
    b.failed()
    assert b.down
    now[0] += 1.01
    assert not b.down


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nobody listens there


def test_both_clients_meet_a_peer_refusing_connections_the_same_way():
    """Nothing listens: the async Connection raises ShardUnreachable and the blocking
    Peer PeerUnavailable, both "refuses connections", both fast (nothing sent)."""
    auth = InternalAuth.new()
    endpoint = f"127.0.0.1:{_free_port()}"
    peer = Peer(fixed(endpoint), commitlog_pb2_grpc.CommitLogServiceStub, auth)
    t0 = time.monotonic()
    with pytest.raises(PeerUnavailable) as e:
        peer.call(lambda s: s.GetOffsets, commitlog_pb2.GetOffsetsRequest(), timeout=10)
    assert "refuses connections" in str(e.value) and time.monotonic() - t0 < PEER_RULES.connect_cap_s + 1

    async def front():
        conn = Connection(0, "cl", fixed(endpoint), commitlog_pb2_grpc.CommitLogServiceStub, auth)
        with pytest.raises(ShardUnreachable) as e:
            await conn.call(lambda s: s.GetOffsets, commitlog_pb2.GetOffsetsRequest(), retry=False)
        await conn.reset()
        return str(e.value)

    assert "refuses connections" in asyncio.run(front())


def test_a_peer_not_found_makes_calls_fail_at_once_for_the_backoff():
    async def never() -> str:
        await asyncio.sleep(60)
        return ""

    rules = ConnectRules(resolve_cap_s=0.2, backoff_s=30)
    peer = Peer(never, commitlog_pb2_grpc.CommitLogServiceStub, InternalAuth.new(), rules=rules)
    with pytest.raises(PeerUnavailable) as e:
        peer.stub()
    assert "was not found within 0.2 s" in str(e.value)
    t0 = time.monotonic()
    with pytest.raises(PeerUnavailable) as e:
        peer.stub()
    assert "a moment ago" in str(e.value) and time.monotonic() - t0 < 0.1


def test_a_send_finds_a_peer_that_moved_since_its_channel_was_made():
    """The peer restarted on another port (a builder or commitlog Ray restarted): the
    channel an earlier call left takes no connection, so nothing is sent and the call,
    a send too, finds the peer once more at once instead of failing UNAVAILABLE
    (the first receive after a builder's restart failed so)."""

    class Offsets(commitlog_pb2_grpc.CommitLogServiceServicer):
        async def GetOffsets(self, request, context):
            return commitlog_pb2.GetOffsetsResponse()

    async def serve() -> tuple[grpc.aio.Server, str]:
        server = grpc.aio.server()
        commitlog_pb2_grpc.add_CommitLogServiceServicer_to_server(Offsets(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, f"127.0.0.1:{port}"

    async def main():
        first, at_first = await serve()
        where = [at_first]

        async def resolve() -> str:
            return where[-1]

        conn = Connection(0, "cl", resolve, commitlog_pb2_grpc.CommitLogServiceStub, InternalAuth.new())
        ask = commitlog_pb2.GetOffsetsRequest()
        await conn.call(lambda s: s.GetOffsets, ask, retry=False)
        await first.stop(None)
        second, at_second = await serve()
        where.append(at_second)
        await asyncio.sleep(0.3)  # the kept channel notices its peer went away
        await conn.call(lambda s: s.GetOffsets, ask, retry=False)
        assert conn.endpoint == at_second
        await second.stop(None)  # and a peer that is gone for good still fails the send
        with pytest.raises(ShardUnreachable):
            await conn.call(lambda s: s.GetOffsets, ask, retry=False)
        await conn.reset()

    asyncio.run(main())
