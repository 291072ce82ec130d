"""A simulated two-node Ray cluster (ray.cluster_utils.Cluster) running `mqstore serve
--placement resource` as a driver process; run by test_two_nodes.py in a process of
its own (a Cluster can not share a process with another Ray session).

    python tests/services/two_nodes_workload.py WORKDIR   -> last stdout line: JSON summary

The head offers mqstore_shard_0, the worker mqstore_shard_1. `serve` starts while
only the head is up (shard 1 waits for a node offering its resource), the worker
joins, and then: both shards on their own node, sends and pulls through the front
(TLS and metrics on), the worker node killed (status answers within 2 s naming shard 1, a send to
it fails fast with UNAVAILABLE, a batch over both shards is stored on shard 0 and
NOT_STORED on shard 1) and a new one offering the same resource added (shard 1
restarts there and recovers its store: nothing acknowledged lost), SIGTERM closes
every store cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

NS = "mqstore-two-nodes"


def log(msg: str) -> None:
    print(f"[two-nodes {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(work: Path) -> dict:
    import grpc
    import ray
    from ray.cluster_utils import Cluster

    from mqstore.rpc.v1 import common_pb2
    from mqstore.services.common.actor import dispatcher_name, shard_name
    from mqstore.services.query.client import FrontClient, columns
    from mqstore.services.query.routing import Router
    from tests.services.helpers import free_port, wait_dispatched
    from tests.services.test_tls import make_ca_and_server

    os.environ["RAY_AUTH_MODE"] = "token"
    ca, cert, key = make_ca_and_server(work / "pki")
    node_args = {"num_cpus": 1, "object_store_memory": 96 << 20}
    t0 = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node_args, "include_dashboard": False, "resources": {"mqstore_shard_0": 1}},
    )
    summary: dict = {"head_seconds": round(time.monotonic() - t0, 1)}
    serve = None
    err = open(work / "serve.err", "w+")
    try:
        root = work / "data"
        port, mport = free_port(), free_port(skip=(free_port(),))
        env = {**os.environ, "RAY_DEDUP_LOGS": "0"}
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mqstore.cli.main",
                "serve",
                "--address",
                cluster.address,
                "--namespace",
                NS,
                "--store",
                str(root),
                "--shards",
                "2",
                "--placement",
                "resource",
                "--port",
                str(port),
                "--metrics-port",
                str(mport),
                "--segment-bytes",
                str(1 << 20),
                "--tls-cert",
                str(cert),
                "--tls-key",
                str(key),
                "--actor-log-level",
                "warning",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        time.sleep(3)  # serve is up and waiting: shard 1 has no node yet
        assert serve.poll() is None, "serve exited early"
        worker = cluster.add_node(**node_args, resources={"mqstore_shard_1": 1})
        log("worker node added")
        line = serve.stdout.readline()  # stdout carries the ready line only (Ray's forwarded logs go to stderr)
        assert line, "no ready line"
        ready = json.loads(line)
        summary["ready_seconds"] = ready["ready_seconds"]
        assert ready["tls"] and ready["placement"] == "resource" and ready["front"] == f"127.0.0.1:{port}"

        ray.init(address=cluster.address, namespace=NS, logging_level="WARNING", log_to_driver=False)
        head_id = cluster.head_node.node_id
        nodes = {i: ray.get(ray.get_actor(shard_name(i), namespace=NS).node_id.remote(), timeout=30) for i in (0, 1)}
        dnodes = {
            i: ray.get(ray.get_actor(dispatcher_name(i), namespace=NS).node_id.remote(), timeout=30) for i in (0, 1)
        }
        assert nodes[0] == dnodes[0] == head_id, (nodes, dnodes, head_id)
        assert nodes[1] == dnodes[1] == worker.node_id != head_id, (nodes, dnodes, worker.node_id)
        summary["placed"] = {"shard-0": "head", "shard-1": "worker"}

        router = Router(2)
        queues = {s: [q for q in range(8) if router.shard_of("TwoNodes", q) == s] for s in (0, 1)}
        assert queues[0] and queues[1]
        acked: dict[int, list[bytes]] = {q: [] for q in range(8)}
        endpoint = ready["front"]
        with FrontClient(endpoint, tls_ca=ca) as c:
            c.update_topic("TwoNodes", write_queue_nums=8, read_queue_nums=8)
            for q in range(8):
                bodies = [f"q{q}-m{i}".encode() for i in range(20)]
                res = c.send("TwoNodes", bodies, queue_ids=q, keys=f"k{q}")
                assert list(res.shards) == [router.shard_of("TwoNodes", q)] * 20
                acked[q] += bodies
            wait_dispatched(c, 60)
            for q in range(8):
                assert [r.body for r in c.pull("TwoNodes", q, 0, max_messages=100).records] == acked[q]
            assert len(c.query_by_key("TwoNodes", "k5")) == 20
            shards = c.store_status()
            assert [s.state for s in shards] == ["SERVING", "SERVING"]
            assert all(s.appended_messages == 20 * len(queues[s.shard]) for s in shards)
        text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
        assert 'mqstore_shard_up{shard="1"} 1.0' in text and "mqstore_front_sent_messages_total 160.0" in text
        log("sent and pulled on two nodes")

        # The worker node dies; a new node offering mqstore_shard_1 comes: shard 1 restarts there
        # and recovers from its files (same disk here), nothing acknowledged lost.
        t1 = time.monotonic()
        cluster.remove_node(worker, allow_graceful=False)
        log("worker node killed")
        with FrontClient(endpoint, tls_ca=ca) as c:  # shard 1 is down: said plainly, and fast
            deadline = time.monotonic() + 30
            while True:
                t = time.monotonic()
                shards = c.store_status()
                took = time.monotonic() - t
                assert took < 2.0, f"status took {took:.2f} s with shard 1's node gone"
                if shards[1].state == "UNAVAILABLE":
                    break
                assert time.monotonic() < deadline, shards[1]
                time.sleep(0.5)
            assert shards[0].state == "SERVING" and shards[0].node_id == head_id, shards[0]
            assert shards[1].node_id == worker.node_id and "shard 1 did not answer" in shards[1].error, shards[1]
            summary["down_status_seconds"] = round(took, 2)
            t = time.monotonic()
            try:
                c.send("TwoNodes", [b"lost"], queue_ids=queues[1][0])
                raise AssertionError("a send to shard 1 was acknowledged with its node gone")
            except grpc.RpcError as e:
                took = time.monotonic() - t
                assert e.code() is grpc.StatusCode.UNAVAILABLE and "shard 1" in e.details(), e
                assert took < 4.0, f"a send to shard 1 took {took:.1f} s to fail"
            summary["down_send_seconds"] = round(took, 2)
            resp = c.send_columns(
                columns("TwoNodes", [f"both-{q}".encode() for q in range(8)], queue_ids=list(range(8)))
            )
            for q in range(8):
                if q in queues[0]:
                    assert resp.result.statuses[q] == common_pb2.PUT_OK, resp
                    acked[q].append(f"both-{q}".encode())
                else:
                    assert resp.result.statuses[q] == common_pb2.NOT_STORED, resp
            assert [(e.shard, e.code) for e in resp.shard_errors] == [(1, "UNAVAILABLE")], resp.shard_errors
        log("shard 1 down: status, sends and a batch over both shards said so")
        worker2 = cluster.add_node(**node_args, resources={"mqstore_shard_1": 1})
        deadline = time.monotonic() + 120
        with FrontClient(endpoint, tls_ca=ca) as c:
            while True:
                st = c.store_status()[1]
                if st.state == "SERVING":
                    break
                assert time.monotonic() < deadline, f"shard 1 did not come back: {st}"
                time.sleep(0.5)
            summary["shard1_back_seconds"] = round(time.monotonic() - t1, 1)
            assert not st.clean_shutdown  # killed: recovered as after a crash
            assert ray.get(ray.get_actor(shard_name(1), namespace=NS).node_id.remote(), timeout=30) == worker2.node_id
            q1 = queues[1][0]
            deadline = time.monotonic() + 60
            while True:  # the front's channel to the old incarnation reconnects
                try:
                    c.send("TwoNodes", [b"after"], queue_ids=q1)
                    break
                except Exception:  # noqa: BLE001
                    assert time.monotonic() < deadline
                    time.sleep(0.5)
            acked[q1].append(b"after")
            wait_dispatched(c, 60)
            for q in range(8):
                assert [r.body for r in c.pull("TwoNodes", q, 0, max_messages=100).records] == acked[q], q
        log("shard 1 back on the new node")
        ray.shutdown()

        serve.send_signal(signal.SIGTERM)
        assert serve.wait(90) == 0
        for i in (0, 1):
            assert not (root / f"shard-{i}" / "abort").exists(), f"shard {i} not closed cleanly"
        assert json.loads((root / "mqstore-layout.json").read_text())["shards"] == 2
        summary["ok"] = True
        return summary
    finally:
        if serve is not None and serve.poll() is None:
            serve.kill()
        err.close()
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    work_dir = Path(sys.argv[1])
    work_dir.mkdir(parents=True, exist_ok=True)
    print(json.dumps(main(work_dir)), flush=True)
