"""A full disk on the RocketMQ port (issue 25, item 2): SendMessage answers what
RocketMQ's proxy answers for a broker that refuses puts on a full disk
(SERVICE_NOT_AVAILABLE, which the proxy maps to INTERNAL_SERVER_ERROR) with the
reason, what was acknowledged is still received, and sends go on once space is back."""

from __future__ import annotations

import uuid

import grpc
import pytest

from mqstore.services.startup.local import LocalStack
from tests import rocketmq_client
from tests.services.helpers import small_config
from tests.small_disk import small_disk  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

rocketmq_client.load()  # before the client's modules: it fixes its log folder at import

from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: E402
from rocketmq.v5.util.signature import Signature  # noqa: E402

TOPIC = "DiskFull"
TIMEOUT = 10


def _message(body: bytes) -> d.Message:
    m = d.Message(topic=d.Resource(name=TOPIC), body=body)
    sp = m.system_properties
    sp.message_id = "01" + uuid.uuid4().hex.upper()[:32]
    sp.message_type = d.NORMAL
    sp.body_encoding = d.IDENTITY
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.GetCurrentTime()
    return m


def test_send_on_a_full_disk_is_refused_as_the_proxy_refuses_it(small_disk) -> None:  # noqa: F811
    with (
        LocalStack(small_disk.path / "store", small_config(segment_bytes=256 * 1024), rocketmq_port=0) as st,
        grpc.insecure_channel(st.rocketmq_endpoint) as ch,
    ):
        assert st.wait_ready(30)
        rmq = rocketmq_client.load()
        meta = Signature.metadata(
            rmq.ClientConfiguration(st.rocketmq_endpoint, rmq.Credentials("", "")), f"disk@{uuid.uuid4().hex[:8]}"
        )
        stub = service_pb2_grpc.MessagingServiceStub(ch)

        def send(body: bytes):
            return stub.SendMessage(s.SendMessageRequest(messages=[_message(body)]), metadata=meta, timeout=TIMEOUT)

        assert send(b"before").status.code == d.Code.OK

        small_disk.fill_to(0.95)
        res = send(b"refused")
        assert res.status.code == d.Code.INTERNAL_SERVER_ERROR, res.status
        assert "disk is full" in res.status.message and "over the warning ratio 90%" in res.status.message

        small_disk.free()
        assert send(b"after").status.code == d.Code.OK
