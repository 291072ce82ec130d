"""``mqstore serve`` started as scripts/run.sh starts it, probed the way an attacker on
the network would, but over loopback only (a socket bound to every interface answers
on loopback as it would to the network; these tests send nothing to any other address):

- Ray's GCS runs no code for a driver without the cluster's token;
- no internal mqstore service answers a call without the deployment's secret;
- every socket mqstore itself listens on is bound to loopback by default;
- with ``--host 0.0.0.0 --allow-anonymous`` only the front (and metrics) leave
  loopback, and the internal services still refuse calls without the secret;
- ``--host 0.0.0.0`` without ``--acl`` or ``--allow-anonymous`` does not start.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent import futures
from pathlib import Path

import grpc
import psutil
import pytest

from mqstore.rpc.v1 import commitlog_pb2, common_pb2
from mqstore.services.common.internal_auth import gcs_requires_token
from mqstore.services.query.client import FrontClient
from tests.services.helpers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
# One cheap method of each internal service, and the write an attacker wants most.
INTERNAL_CALLS = {
    "/mqstore.v1.CommitLogService/GetOffsets": b"",
    "/mqstore.v1.CommitLogService/AppendBatch": commitlog_pb2.AppendBatchRequest(
        messages=common_pb2.MessageColumns(topics=["Owned"], bodies=[b"x"], queue_ids=[0])
    ).SerializeToString(),
    "/mqstore.v1.CommitLogService/UpdateTopic": commitlog_pb2.UpdateTopicRequest(
        config=common_pb2.TopicConfig(topic="Owned", read_queue_nums=1, write_queue_nums=1, perm=6)
    ).SerializeToString(),
    "/mqstore.v1.ConsumeQueueService/GetProgress": b"",
    "/mqstore.v1.TransactionService/End": b"",  # the shard's transactions (any id: a commit)
    "/mqstore.v1.IndexService/GetProgress": b"",
    "/mqstore.v1.DispatcherService/Status": b"",
}


def loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    return (getattr(addr, "ipv4_mapped", None) or addr).is_loopback


class Served:
    def __init__(self, proc: subprocess.Popen, ready: dict, err: Path) -> None:
        self.proc, self.ready, self.err = proc, ready, err

    def tree(self) -> list[psutil.Process]:
        root = psutil.Process(self.proc.pid)
        return [root, *root.children(recursive=True)]

    def listening(self) -> list[tuple[psutil.Process, str, int]]:
        """(process, bound address, port) of every TCP socket the tree listens on."""
        out = []
        for p in self.tree():
            try:
                conns = p.net_connections(kind="tcp")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            out += [(p, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
        return out

    def actor_sockets(self) -> list[tuple[str, str, int]]:
        """(process name, address, port) of sockets in mqstore's actor processes
        (Ray names them ray::CommitLogActor, ray::BuilderActor, ...): each holds Ray's
        core-worker port and mqstore's own server."""
        out = []
        for p, ip, port in self.listening():
            try:
                name = p.name() + " " + " ".join(p.cmdline()[:1])
            except psutil.NoSuchProcess:
                continue
            if "Actor" in name:
                out.append((name, ip, port))
        return out


def start(tmp_path: Path, *args: str) -> Served:
    port, metrics = free_port(), free_port(skip=(free_port(),))
    # as on a fresh machine: no Ray auth setting in the environment (serve's token mode is its own)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(MQSTORE_SKIP_SETUP="1", MQSTORE_PYTHON=sys.executable)
    err = tmp_path / "run.err"
    proc = subprocess.Popen(
        [
            "bash",
            str(ROOT / "scripts" / "run.sh"),
            "--store",
            str(tmp_path / "data"),
            "--port",
            str(port),
            "--metrics-port",
            str(metrics),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=open(err, "w"),
        text=True,
        env=env,
        cwd=ROOT,
    )
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        raise AssertionError(err.read_text()[-4000:])
    return Served(proc, json.loads(line), err)


def stop(s: Served) -> None:
    if s.proc.poll() is None:
        s.proc.send_signal(signal.SIGTERM)
        try:
            s.proc.wait(90)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            raise


def call_without_secret(port: int, method: str, body: bytes, metadata=()) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            ch.unary_unary(method)(body, timeout=5, metadata=metadata)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def probe_internal(s: Served) -> dict[int, set[grpc.StatusCode]]:
    """Every internal call on every port of mqstore's actor processes, without the
    secret, and with a forged one: port -> the codes they ended with."""
    front = int(s.ready["front"].rsplit(":", 1)[1])
    out: dict[int, set[grpc.StatusCode]] = {}
    for _, _, port in s.actor_sockets():
        if port == front:
            continue
        codes = set()
        for method, body in INTERNAL_CALLS.items():
            codes.add(call_without_secret(port, method, body))
            codes.add(call_without_secret(port, method, body, metadata=(("x-mqstore-secret", "guess"),)))
        out[port] = codes
    return out


def probe_ray_driver(gcs_port: int, marker: Path, env_extra: dict) -> subprocess.CompletedProcess:
    """A Ray driver in a fresh HOME (no ~/.ray/auth_token) connecting to the GCS
    over loopback and trying to run a function that writes ``marker``."""
    code = textwrap.dedent(f"""
        import ray
        ray.init(address="127.0.0.1:{gcs_port}", logging_level="ERROR")
        @ray.remote
        def owned():
            open({str(marker)!r}, "w").write("ran")
            return "ran"
        print(ray.get(owned.remote(), timeout=30))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(marker.parent / "home"), **env_extra)
    (marker.parent / "home").mkdir(exist_ok=True)
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90, env=env)
    except subprocess.TimeoutExpired as e:  # hung on a refused connection: it ran nothing either
        return subprocess.CompletedProcess(e.cmd, -1, "", "timed out")


def test_default_serve_runs_nothing_for_strangers(tmp_path):
    s = start(tmp_path)
    try:
        assert s.ready["front"].startswith("127.0.0.1:")
        gcs_port = int(s.ready["ray"].rsplit(":", 1)[1])
        assert gcs_requires_token(f"127.0.0.1:{gcs_port}")  # Ray's own answer to a call without a token
        for extra in ({}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32}):
            marker = tmp_path / f"owned-{len(extra)}"
            p = probe_ray_driver(gcs_port, marker, extra)
            assert not marker.exists() and "ran" not in p.stdout, (p.stdout, p.stderr[-2000:])

        probed = probe_internal(s)
        refused = [port for port, codes in probed.items() if codes == {grpc.StatusCode.UNAUTHENTICATED}]
        assert len(refused) >= 4, probed  # the commitlog, both builders and the dispatcher
        assert all(grpc.StatusCode.OK not in codes for codes in probed.values()), probed

        ours = set(refused) | {int(s.ready["front"].rsplit(":", 1)[1]), int(s.ready["metrics"].rsplit(":", 1)[1])}
        binds = {(ip, port) for _, ip, port in s.listening() if port in ours}
        assert {port for _, port in binds} == ours, binds
        assert all(loopback(ip) for ip, _ in binds), binds

        with FrontClient(s.ready["front"]) as c:  # the store works, and the probes wrote nothing
            assert list(c.send("Mine", [b"ok"], queue_ids=0).statuses) == [common_pb2.PUT_OK]
            with pytest.raises(grpc.RpcError) as e:
                c.topic_status("Owned")
            assert e.value.code() is grpc.StatusCode.NOT_FOUND
    finally:
        stop(s)


def test_wildcard_front_keeps_internal_services_closed(tmp_path):
    s = start(tmp_path, "--host", "0.0.0.0", "--allow-anonymous")
    try:
        front = int(s.ready["front"].rsplit(":", 1)[1])
        probed = probe_internal(s)
        refused = [port for port, codes in probed.items() if codes == {grpc.StatusCode.UNAUTHENTICATED}]
        assert len(refused) >= 4 and all(grpc.StatusCode.OK not in c for c in probed.values()), probed
        binds = {(ip, port) for _, ip, port in s.listening()}
        assert all(loopback(ip) for ip, port in binds if port in refused), binds  # the node's address: loopback here
        assert ("0.0.0.0", front) in binds or ("::", front) in binds
        with FrontClient(f"127.0.0.1:{front}") as c:  # anonymous, as asked
            assert list(c.send("Open", [b"ok"], queue_ids=0).statuses) == [common_pb2.PUT_OK]
    finally:
        stop(s)


def test_wildcard_front_without_acl_does_not_start(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mqstore.cli.main",
            "serve",
            "--store",
            str(tmp_path / "d"),
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1 and "--acl" in p.stderr and "--allow-anonymous" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "d").exists()


def test_joining_a_token_cluster_without_its_token_says_how(tmp_path):
    """A cluster started with token authentication (`ray start --head`); `serve
    --address` from a HOME without the token fails in one line naming where the
    token goes, not with a traceback."""
    ray_bin = Path(sys.executable).with_name("ray")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    head_env = {**env, "HOME": str(tmp_path / "head"), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "7" * 32}
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    head = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            "--port",
            str(port),
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            "1",
            "--include-dashboard",
            "false",
            "--temp-dir",
            ray_tmp,
        ],
        env=head_env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "head.err", "w"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # the GCS answers (refusing, without a token)
            try:
                if gcs_requires_token(f"127.0.0.1:{port}", timeout_s=2):
                    break
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline and head.poll() is None, (tmp_path / "head.err").read_text()[-3000:]
            time.sleep(0.5)
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "mqstore.cli.main",
                "serve",
                "--store",
                str(tmp_path / "d"),
                "--address",
                f"127.0.0.1:{port}",
                "--port",
                str(free_port(skip=(port,))),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "HOME": str(tmp_path / "stranger")},
        )
        assert p.returncode == 1, p.stderr[-3000:]
        last = p.stderr.strip().splitlines()[-1]
        assert "requires its token" in last and "RAY_AUTH_TOKEN" in last, p.stderr[-3000:]
        assert "Traceback" not in p.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)  # the head's session (logs, sockets): not left in /tmp


def test_a_gcs_that_answers_without_a_token_is_told_apart(tmp_path):
    """gcs_requires_token: Ray's real GCS refuses (the tests above); a server that
    answers the same call without a token is recognised as unprotected."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    handler = grpc.method_handlers_generic_handler(
        "ray.rpc.NodeInfoGcsService", {"GetAllNodeInfo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"")}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        assert gcs_requires_token(f"127.0.0.1:{port}") is False
    finally:
        server.stop(0)
