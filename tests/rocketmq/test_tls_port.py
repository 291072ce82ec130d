"""The front's TLS option covers the RocketMQ port: the official client with TLS on
(trusting the test CA) sends and receives; a plaintext client gets no answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from mqstore.services.common.server import TlsFiles
from mqstore.services.startup.local import LocalStack
from tests.rocketmq_client import HOME
from tests.services.helpers import small_config
from tests.services.test_tls import make_ca_and_server

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_official_client_over_tls(tmp_path):
    ca, cert, key = make_ca_and_server(tmp_path / "pki")
    with LocalStack(tmp_path / "store", small_config(), tls=TlsFiles.load(cert, key), rocketmq_port=0) as st:
        assert st.wait_ready(60)
        port = st.rocketmq_endpoint.rsplit(":", 1)[1]
        env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca), "HOME": str(HOME), "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-m", "tests.rocketmq.tls_client", f"localhost:{port}", "TlsTopic"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        assert answer["received"] == [answer["sent"]]
        with grpc.insecure_channel(st.rocketmq_endpoint) as ch:  # plaintext: the TLS port does not answer it
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute")(b"", timeout=3)
            assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
