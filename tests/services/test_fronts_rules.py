"""Rules of ``serve --fronts N`` that need no Ray: which ports each front binds, the
SO_REUSEPORT option (on only with N > 1), what RocketMQ routes name, how tools label
the fronts' processes."""

from __future__ import annotations

import asyncio
import socket

import pytest

from mqstore.bench.processes import front_label
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.services.common.actor import MAX_FRONTS, front_name
from mqstore.services.common.server import server_options, start_grpc_server
from mqstore.services.rocketmq.endpoints import FrontAddresses, route_endpoints
from mqstore.services.startup.front_ports import FrontPorts, PortReservations, check_fronts, front_ports


def test_reuseport_only_for_several_fronts():
    assert dict(server_options())["grpc.so_reuseport"] == 0
    assert dict(server_options(reuse_port=False))["grpc.so_reuseport"] == 0
    opts = server_options(reuse_port=True)
    assert dict(opts)["grpc.so_reuseport"] == 1
    assert [k for k, _ in opts].count("grpc.so_reuseport") == 1


def test_one_bound_on_fronts():
    from mqstore.services.startup import front_ports as fp

    assert fp.MAX_FRONTS == MAX_FRONTS


def test_front_names():
    assert front_name(0) == "front"
    assert [front_name(k) for k in (1, 2, 63)] == ["front-1", "front-2", "front-63"]
    assert [front_label(k) for k in (None, 0, 1, 7)] == ["front", "front", "front-1", "front-7"]


@pytest.mark.parametrize("bad", [0, -1, MAX_FRONTS + 1, 1.5, True, "2"])
def test_fronts_bounded(bad):
    with pytest.raises(ValueError, match="fronts must be"):
        check_fronts(bad)


def test_metrics_ports_must_fit():
    check_fronts(4, 65532)
    with pytest.raises(ValueError, match="past 65535"):
        check_fronts(4, 65533)


def test_one_front_binds_what_it_is_given():
    picked = []
    assert front_ports(1, 0, 0, 0, pick=lambda: picked.append(1) or 5555) == [FrontPorts(0, 0, 0)]
    assert picked == []  # one front keeps binding port 0 itself, as ever
    assert front_ports(1, 8080, None, 9464) == [FrontPorts(8080, None, 9464)]


def test_several_fronts_share_public_ports_and_own_metrics():
    assert front_ports(3, 8080, 8081, 9464, pick=lambda: 1 / 0) == [
        FrontPorts(8080, 8081, 9464),
        FrontPorts(8080, 8081, 9465),
        FrontPorts(8080, 8081, 9466),
    ]
    free = iter([40001, 40002])
    assert front_ports(2, 0, 0, 0, pick=lambda: next(free)) == [FrontPorts(40001, 40002, 0)] * 2
    assert front_ports(2, 0, None, 0, pick=lambda: 40003) == [FrontPorts(40003, None, 0)] * 2


def test_a_reserved_port_is_shared_by_reuseport_servers_only():
    """The port picked for N fronts is held (bound, not listening) until they listen on
    it with SO_REUSEPORT; a server without the option can not take it meanwhile."""

    async def run() -> None:
        held = PortReservations("127.0.0.1")
        port = held.pick()
        try:
            with pytest.raises((OSError, RuntimeError)):
                await start_grpc_server("127.0.0.1", port, [])
            a = await start_grpc_server("127.0.0.1", port, [], reuse_port=True)
            b = await start_grpc_server("127.0.0.1", port, [], reuse_port=True)
            assert a.port == b.port == port
            await a.stop(0)
            await b.stop(0)
        finally:
            held.close()
        with socket.socket() as s:  # let go: the port is free again
            s.bind(("127.0.0.1", port))

    asyncio.run(run())


def test_a_single_front_port_is_not_shared():
    async def run() -> None:
        a = await start_grpc_server("127.0.0.1", 0, [])
        try:
            with pytest.raises((OSError, RuntimeError)):
                await start_grpc_server("127.0.0.1", a.port, [], reuse_port=True)
        finally:
            await a.stop(0)

    asyncio.run(run())


def _hosts(e: v2.Endpoints) -> list[tuple[str, int]]:
    return [(a.host, a.port) for a in e.addresses]


def test_routes_name_the_access_point_unless_fronts_are_spread():
    asked = v2.Endpoints(scheme=v2.DOMAIN_NAME, addresses=[v2.Address(host="mq.example", port=8081)])
    own = ("10.0.0.5", 8081)
    assert route_endpoints(asked, own) == asked
    e = route_endpoints(v2.Endpoints(), own)
    assert (e.scheme, _hosts(e)) == (v2.IPv4, [own])
    spread = [("10.0.0.5", 8081), ("10.0.0.6", 8081)]
    e = route_endpoints(asked, own, spread)
    assert (e.scheme, _hosts(e)) == (v2.IPv4, spread)
    e = route_endpoints(asked, own, [("fe80::1", 8081), ("10.0.0.6", 8081)])  # one scheme: own's
    assert (e.scheme, _hosts(e)) == (v2.IPv4, [("10.0.0.6", 8081)])
    e = route_endpoints(asked, own, [("fe80::1", 8081)])
    assert _hosts(e) == [own]


def test_front_addresses_cached_and_kept_while_asks_fail():
    now = [0.0]
    answers: list = [[("10.0.0.6", 1), ("10.0.0.5", 1), ("10.0.0.5", 1)], RuntimeError("ray busy"), []]
    asked = []

    async def ask():
        asked.append(now[0])
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    f = FrontAddresses(ask, max_age_s=5.0, clock=lambda: now[0])

    async def run() -> None:
        want = [("10.0.0.5", 1), ("10.0.0.6", 1)]
        assert await f.get() == want
        now[0] = 4.9
        assert await f.get() == want and len(asked) == 1  # fresh enough
        now[0] = 5.0
        assert await f.get() == want  # the ask failed: the last list serves
        now[0] = 10.0
        assert await f.get() == want  # none answered: the last list serves
        assert len(asked) == 3

    asyncio.run(run())


@pytest.mark.parametrize("bad", ["0", "65", "x"])
def test_serve_refuses_a_bad_fronts_count(bad, tmp_path):
    from typer.testing import CliRunner

    from mqstore.cli.main import app

    r = CliRunner().invoke(app, ["serve", "--store", str(tmp_path), "--fronts", bad])
    assert r.exit_code == 2
    assert "--fronts" in r.output
    assert not any(tmp_path.iterdir())  # refused before anything started


def test_serve_help_names_the_fronts_options():
    from typer.testing import CliRunner

    from mqstore.cli.main import app

    r = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "--fronts" in r.output and "--front-placement" in r.output


def test_actor_pid_finds_each_front_whatever_the_shard(monkeypatch):
    from mqstore.bench import processes

    found = [
        processes.Proc(10, "front", 0, 0),
        processes.Proc(11, "front-1", 0, 0),
        processes.Proc(12, "commitlog-1", 0, 0),
    ]
    monkeypatch.setattr(processes, "deployment_processes", lambda root, dirs: found)
    assert processes.actor_pid(1, [], "front", 1) == 10  # soak's --kill-shard does not pick a front
    assert processes.actor_pid(1, [], "front", front=1) == 11
    assert processes.actor_pid(1, [], "commitlog", 1) == 12
