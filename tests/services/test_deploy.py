"""deploy/: the cluster-launcher YAML passes Ray's own schema, the KubeRay manifest
is what the shards need (one worker group and one claim per shard, the resource
that places it, ports outside Ray's worker range), and the `ray job submit`
entrypoint builds a command line `mqstore serve` accepts. No cluster is started."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from mqstore.cli.main import app

yaml = pytest.importorskip("yaml")
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RAY_WORKER_PORTS = range(10002, 20000)


def job_command(**env: str) -> list[str]:
    """The entrypoint's command line (MQSTORE_DRY_RUN=1 prints it, one argument a line)."""
    extra = env.pop("_extra", "").split()
    full = {**os.environ, "MQSTORE_DRY_RUN": "1", **env}
    p = subprocess.run(
        ["bash", str(DEPLOY / "serve-job.sh"), *extra], capture_output=True, text=True, env=full, timeout=10, check=True
    )
    return p.stdout.splitlines()


def serve_args(argv: list[str]) -> list[str]:
    assert argv[1:5] == ["-m", "mqstore.cli.main", "serve", "--address"], argv
    return argv[4:]


def parse_serve(args: list[str]) -> dict:
    """Parse ``args`` exactly as `mqstore serve` would (types, ranges, choices), without running it."""
    cmd = typer.main.get_command(app).commands["serve"]
    return cmd.make_context("serve", list(args)).params


def test_cluster_yaml_passes_rays_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    cfg = yaml.safe_load((DEPLOY / "cluster.yaml").read_text())
    prepared = prepare_config(copy.deepcopy(cfg))
    validate_config(prepared)
    assert prepared["provider"]["type"] == "local"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        start = " ".join(cfg[key])
        assert "--resources=" in start and "ray-resources.json" in start and "RAY_AUTH_MODE=token" in start
    setup = " ".join(cfg["setup_commands"])
    assert "pip install --quiet /opt/mqstore/src" in setup and "/var/lib/mqstore" in setup
    assert cfg["file_mounts"]["/opt/mqstore/src"] == "."


def test_kuberay_manifest_places_each_shard_on_its_claim():
    import ray

    docs = list(yaml.safe_load_all((DEPLOY / "kuberay.yaml").read_text()))
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    (rc,) = by_kind["RayCluster"]
    assert rc["apiVersion"] == "ray.io/v1" and rc["spec"]["rayVersion"] == ray.__version__
    assert rc["spec"]["authOptions"]["mode"] == "token"
    claims = {c["metadata"]["name"] for c in by_kind["PersistentVolumeClaim"]}
    groups = rc["spec"]["workerGroupSpecs"]
    assert len(groups) == len(claims) == 2
    for i, g in enumerate(groups):
        assert g["replicas"] == g["minReplicas"] == g["maxReplicas"] == 1  # a shard is one pod, never scaled
        resources = json.loads(json.loads(g["rayStartParams"]["resources"]))  # KubeRay's quoted JSON
        assert resources == {f"mqstore_shard_{i}": 1}
        spec = g["template"]["spec"]
        (vol,) = spec["volumes"]
        assert vol["persistentVolumeClaim"]["claimName"] == f"mqstore-shard-{i}" in claims
        (mount,) = spec["containers"][0]["volumeMounts"]
        assert mount["mountPath"] == "/var/lib/mqstore"  # the store root: DIR/shard-i and the layout file
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in head["env"]}
    assert env["MQSTORE_SHARDS"] == str(len(groups))
    (svc,) = by_kind["Service"]
    ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert ports["grpc"] == 8080 and ports["rocketmq"] == 8081
    every_port = list(ports.values()) + [p["containerPort"] for p in head["ports"]]
    assert not [p for p in every_port if p in RAY_WORKER_PORTS]
    assert "MQSTORE_PYTHON=" in (DEPLOY / "Dockerfile").read_text()


def test_job_entrypoint_is_a_command_serve_accepts():
    argv = job_command()
    assert argv[0] == "/opt/mqstore/venv/bin/python"
    params = parse_serve(serve_args(argv))
    assert params["address"] == "auto" and params["placement"].value == "resource"
    assert params["host"] == "0.0.0.0" and params["port"] == 8080 and params["store"] == Path("/var/lib/mqstore")
    assert params["metrics_port"] == 9464 and params["metrics_port"] not in RAY_WORKER_PORTS
    assert params["rocketmq_port"] == 8081 and params["rocketmq_port"] not in RAY_WORKER_PORTS
    # settings through the environment, options appended
    argv = job_command(
        MQSTORE_SHARDS="3", MQSTORE_PLACEMENT="node", MQSTORE_PYTHON="/x/python", _extra="--segment-bytes 65536"
    )
    params = parse_serve(serve_args(argv))
    assert argv[0] == "/x/python" and params["shards"] == 3 and params["segment_bytes"] == 65536
    assert params["placement"].value == "node"
    # every option it passes is in `mqstore serve --help`
    help_text = subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    for opt in (a for a in serve_args(job_command()) if a.startswith("--")):
        assert re.search(rf"{opt}\b", help_text), opt
    assert params["tls_cert"] is None  # no MQSTORE_TLS_DIR
    with pytest.raises(Exception):  # noqa: B017 - click's UsageError/BadParameter: the check bites
        parse_serve(serve_args(job_command(MQSTORE_PLACEMENT="anywhere")))


def test_job_entrypoint_passes_a_tls_secret(tmp_path):
    argv = job_command(MQSTORE_TLS_DIR=str(tmp_path))  # empty (the secret is optional): plaintext
    assert "--tls-cert" not in argv
    (tmp_path / "tls.crt").write_text("x")
    (tmp_path / "tls.key").write_text("y")
    params = parse_serve(serve_args(job_command(MQSTORE_TLS_DIR=str(tmp_path))))
    assert params["tls_cert"] == tmp_path / "tls.crt" and params["tls_key"] == tmp_path / "tls.key"


def test_job_entrypoint_refuses_a_missing_interpreter():
    p = subprocess.run(
        ["bash", str(DEPLOY / "serve-job.sh")],
        capture_output=True,
        text=True,
        timeout=10,
        env={**os.environ, "MQSTORE_PYTHON": "/nonexistent/python"},
    )
    assert p.returncode == 1 and "MQSTORE_PYTHON" in p.stderr
