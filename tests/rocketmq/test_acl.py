"""ACL 2.0 on the RocketMQ port: the official client's signed requests checked against
the same users and rules as mqstore's own API (one file, one permission check):
a wrong secret is 40100, a user without Pub on the topic 40300, Sub on the group and
the topic needed to receive."""

from __future__ import annotations

import json

import pytest

from mqstore.services.startup.local import LocalStack
from tests.rocketmq.conftest import Clients, receive_until
from tests.services.helpers import small_config

pytestmark = pytest.mark.slow

PROD, CONS = ("prod", "prod-secret-1"), ("cons", "cons-secret-1")
ACL = {
    "users": [{"access_key": "root", "secret_key": "root-secret-1", "admin": True}]
    + [{"access_key": u, "secret_key": s} for u, s in (PROD, CONS)],
    "rules": [
        {"user": "prod", "resource": "Topic:Acl*", "actions": ["Pub"], "decision": "Allow"},
        {"user": "cons", "resource": "Topic:Acl*", "actions": ["Sub"], "decision": "Allow"},
        {"user": "cons", "resource": "Group:cg-*", "actions": ["Sub"], "decision": "Allow"},
    ],
}


@pytest.fixture(scope="module")
def acl_stack(tmp_path_factory):
    f = tmp_path_factory.mktemp("acl") / "acl.json"
    f.write_text(json.dumps(ACL))
    f.chmod(0o600)
    with LocalStack(tmp_path_factory.mktemp("store"), small_config(), acl=f, rocketmq_port=0) as st:
        assert st.wait_ready(60)
        yield st


@pytest.fixture
def acl_clients(rmq, acl_stack):
    c = Clients(rmq, acl_stack.rocketmq_endpoint)
    yield c
    c.close()


def test_signed_producer_and_consumer_work(acl_clients):
    p = acl_clients.producer("AclOrders", config=acl_clients.config(*PROD))
    receipt = p.send(acl_clients.message("AclOrders", b"signed"))
    c = acl_clients.simple("cg-1", {"AclOrders": "*"}, config=acl_clients.config(*CONS))
    (m,) = receive_until(c, 1)
    assert m.message_id == receipt.message_id
    c.ack(m)


def refused(stack, method: str, code: str) -> float:
    """How many calls of ``method`` the RocketMQ port answered with ``code``."""
    labels = {"method": method, "code": code}
    return stack.front.metrics.registry.get_sample_value("mqstore_rocketmq_requests_total", labels) or 0.0


@pytest.mark.parametrize("ak, sk", [("prod", "not-the-secret"), ("nobody", "whatever-1"), ("", "")])
def test_bad_credentials_are_unauthorized_40100(acl_clients, acl_stack, ak, sk):
    """The client fetches the route first: answered 40100, it can not send (it raises
    "failed to fetch topic route"; the code is in its log and our metrics)."""
    before = refused(acl_stack, "QueryRoute", "UNAUTHORIZED")
    p = acl_clients.producer("AclOrders", config=acl_clients.config(ak, sk))
    with pytest.raises(Exception, match="route"):
        p.send(acl_clients.message("AclOrders", b"x"))
    assert refused(acl_stack, "QueryRoute", "UNAUTHORIZED") > before


def test_wrong_secret_gets_40100_in_the_answer(acl_stack, rmq):
    """The same through the client's own signing and stubs, one call: the status code itself."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
    from rocketmq.v5.util.signature import Signature

    with grpc.insecure_channel(acl_stack.rocketmq_endpoint) as ch:
        stub = service_pb2_grpc.MessagingServiceStub(ch)
        for ak, sk, code in ((*PROD, 20000), ("prod", "not-the-secret", 40100), ("nobody", "whatever-1", 40100)):
            config = rmq.ClientConfiguration(acl_stack.rocketmq_endpoint, rmq.Credentials(ak, sk))
            metadata = Signature.metadata(config, "test-client-1")
            res = stub.QueryRoute(
                service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="AclOrders")),
                metadata=metadata,
                timeout=5,
            )
            assert res.status.code == code, (ak, res.status)


def test_user_without_pub_is_forbidden_40300(acl_clients, rmq):
    p = acl_clients.producer("AclOrders", config=acl_clients.config(*CONS))  # cons may Sub, not Pub
    with pytest.raises(rmq.v5.exception.client_exception.ForbiddenException) as e:
        p.send(acl_clients.message("AclOrders", b"x"))
    assert e.value.code == 40300


def test_consumer_needs_sub_on_its_group(acl_clients, rmq):
    acl_clients.producer("AclOrders", config=acl_clients.config(*PROD)).send(acl_clients.message("AclOrders", b"y"))
    c = acl_clients.simple("other-group", {"AclOrders": "*"}, config=acl_clients.config(*CONS))
    with pytest.raises(rmq.v5.exception.client_exception.ForbiddenException) as e:
        c.receive(1, 30)
    assert e.value.code == 40300
