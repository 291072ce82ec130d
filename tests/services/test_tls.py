"""TLS on the front (LocalStack, no Ray): a CA and a server certificate made in the
test; a client trusting the CA sends and pulls, a plaintext client and a client
trusting another CA are refused, the CLI's --tls-ca (and MQSTORE_TLS_CA) work, and
`serve` refuses half a pair or a key that does not match before starting anything."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from mqstore.services.common.server import TlsFiles
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import small_config, wait_dispatched

pytestmark = pytest.mark.timeout(120)


def make_ca_and_server(d: Path, name: str = "test") -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key) under ``d``: a CA and a certificate it signs
    for localhost / 127.0.0.1 (cryptography if installed, else openssl)."""
    d.mkdir(parents=True, exist_ok=True)
    ca_pem, cert_pem, key_pem = d / "ca.pem", d / "server.pem", d / "server.key"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        _openssl(d, ca_pem, cert_pem, key_pem, name)
        return ca_pem, cert_pem, key_pem
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_pem, cert_pem, key_pem


def _openssl(d: Path, ca_pem: Path, cert_pem: Path, key_pem: Path, name: str) -> None:
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=d)  # noqa: E731
    run(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        str(ca_pem),
        "-days",
        "1",
        "-subj",
        f"/CN={name} CA",
    )
    run(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        str(key_pem),
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    )
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        str(ca_pem),
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        str(cert_pem),
        "-days",
        "1",
        "-extfile",
        "san.ext",
    )


def mq(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_ca_and_server(d / "pki")
    with LocalStack(d / "store", small_config(), tls=TlsFiles.load(cert, key)) as st:
        assert st.wait_ready(30)
        yield st, ca, d


def test_a_client_trusting_the_ca_sends_and_pulls(tls_stack):
    st, ca, _ = tls_stack
    with FrontClient(st.front_endpoint, tls_ca=ca) as c:
        res = c.send("Tls", [b"secret-1", b"secret-2"], queue_ids=0, keys="tk")
        assert list(res.queue_offsets) == [0, 1]
        wait_dispatched(c)
        assert [r.body for r in c.pull("Tls", 0, 0).records] == [b"secret-1", b"secret-2"]
    port = st.front_endpoint.rsplit(":", 1)[1]
    with FrontClient(f"localhost:{port}", tls_ca=ca.read_bytes()) as c:  # by name: the certificate's DNS name
        assert len(c.query_by_key("Tls", "tk")) == 2


def test_plaintext_and_untrusting_clients_are_refused(tls_stack, tmp_path):
    st, ca, _ = tls_stack
    with FrontClient(st.front_endpoint, timeout=5) as c, pytest.raises(grpc.RpcError) as e:
        c.send("Tls", [b"plain"])
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE
    other_ca, _, _ = make_ca_and_server(tmp_path / "other", name="other")
    with FrontClient(st.front_endpoint, tls_ca=other_ca, timeout=5) as c, pytest.raises(grpc.RpcError) as e:
        c.send("Tls", [b"wrong-ca"])
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE
    with FrontClient(st.front_endpoint, tls_ca=ca) as c:  # nothing of theirs was stored
        assert c.pull("Tls", 0, 0).max_offset == 2


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_cli_with_tls_ca(tls_stack):
    st, ca, _ = tls_stack
    p = mq("send", "--server", st.front_endpoint, "--tls-ca", str(ca), "--topic", "TlsCli", "--queue", "1", "one")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["status"] == "PUT_OK"
    p = mq("status", "--server", st.front_endpoint, env={"MQSTORE_TLS_CA": str(ca)})  # the environment works too
    assert p.returncode == 0 and " SERVING " in p.stdout, p.stderr
    p = mq("topic-status", "--server", st.front_endpoint, "--topic", "TlsCli")
    assert p.returncode == 1 and p.stderr.startswith("mqstore: error: UNAVAILABLE"), p.stderr


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_serve_refuses_a_bad_pair(tmp_path):
    _, cert, key = make_ca_and_server(tmp_path / "a")
    _, _, other_key = make_ca_and_server(tmp_path / "b")
    p = mq("serve", "--store", str(tmp_path / "s"), "--tls-cert", str(cert))
    assert p.returncode == 1 and "both --tls-cert and --tls-key" in p.stderr, p.stderr
    p = mq("serve", "--store", str(tmp_path / "s"), "--tls-cert", str(cert), "--tls-key", str(other_key))
    assert p.returncode == 1 and "can not be used" in p.stderr, p.stderr
    with pytest.raises(ValueError):
        TlsFiles.load(cert, other_key)
    assert TlsFiles.load(cert, key).cert_chain.startswith(b"-----BEGIN CERTIFICATE")


@pytest.mark.skipif(
    not any((Path(p) / "openssl").exists() for p in os.environ.get("PATH", "").split(":")), reason="no openssl"
)
def test_the_openssl_way_makes_a_pair_too(tmp_path):
    d = tmp_path / "o"
    d.mkdir()
    _openssl(d, d / "ca.pem", d / "server.pem", d / "server.key", "o")
    assert TlsFiles.load(d / "server.pem", d / "server.key").private_key


def test_internal_services_speak_tls_when_the_front_does(tls_stack):
    """With a TLS front the internal servers speak TLS with the deployment's own
    certificate: the secret sent in plaintext reaches nothing, and a client that
    trusts that certificate (the deployment's own) is answered."""
    from dataclasses import replace

    from mqstore.rpc.v1 import commitlog_pb2, commitlog_pb2_grpc
    from mqstore.services.common.server import sync_channel

    st, _, _ = tls_stack
    assert st.auth.tls
    plain = replace(st.auth, cert_chain=None, private_key=None)  # the right secret, without TLS
    for auth, ok in ((plain, False), (st.auth, True)):
        with sync_channel(st.shards[0].endpoint, auth=auth) as ch:
            stub = commitlog_pb2_grpc.CommitLogServiceStub(ch)
            if ok:
                assert stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5).wrote_offset >= 0
            else:
                with pytest.raises(grpc.RpcError) as e:
                    stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5)
                assert e.value.code() is grpc.StatusCode.UNAVAILABLE
