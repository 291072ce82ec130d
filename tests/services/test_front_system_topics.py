"""mqstore's own API and RocketMQ's system topics (issue 25, item 7): no client sends
to one (SendBatch through the front's split path, SendEncoded through the shard's
check), whatever its Pub rules; under --acl only an admin pulls from one, since those
topics hold every user's messages (half messages, delayed messages, traces)."""

from __future__ import annotations

import json

import grpc
import pytest

from mqstore.rpc.v1 import common_pb2
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store.messages import MessageBatch
from tests.services.helpers import small_config

C = grpc.StatusCode
ROOT, ANY = ("root", "root-secret-1"), ("any", "any-secret-1")
ACL = {
    "users": [
        {"access_key": "root", "secret_key": ROOT[1], "admin": True},
        {"access_key": "any", "secret_key": ANY[1]},
    ],
    "rules": [{"user": "any", "resource": "Topic:*", "actions": ["Pub", "Sub"], "decision": "Allow"}],
}
SYSTEM = ["TBW102", "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_wheel_timer", "CHECKPOINT_TOPIC"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    f = tmp_path_factory.mktemp("acl") / "acl.json"
    f.write_text(json.dumps(ACL))
    f.chmod(0o600)
    with LocalStack(tmp_path_factory.mktemp("store"), small_config(), shards=2, acl=f) as st:
        assert st.wait_ready(60)
        yield st


@pytest.fixture(scope="module")
def users(stack):
    with (
        FrontClient(stack.front_endpoint, access_key=ROOT[0], secret_key=ROOT[1]) as root,
        FrontClient(stack.front_endpoint, access_key=ANY[0], secret_key=ANY[1]) as anyone,
    ):
        yield root, anyone


def refused(call) -> str:
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() is C.PERMISSION_DENIED, e.value
    return e.value.details()


@pytest.mark.parametrize("topic", SYSTEM)
def test_no_client_sends_to_a_system_topic(users, topic):
    root, anyone = users
    for c in (root, anyone):
        assert topic in refused(lambda c=c: c.send(topic, [b"x"]))
        assert topic in refused(lambda c=c: c.send(["Fine", topic], [b"x", b"y"]))
        assert topic in refused(lambda c=c: c.send_encoded(MessageBatch(topics=topic, bodies=[b"x"])))
    assert anyone.send("Fine", [b"ok"]).statuses[0] == common_pb2.PUT_OK


@pytest.mark.parametrize("topic", ["RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX", "TBW102"])
def test_only_an_admin_pulls_a_system_topic(users, topic):
    root, anyone = users
    assert "system topic" in refused(lambda: anyone.pull(topic, 0, 0))
    assert list(root.pull(topic, 0, 0).records) == []
    assert list(anyone.pull("%DLQ%cg", 0, 0).records) == []  # a group's dead letters are not a system topic
