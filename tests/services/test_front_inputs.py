"""Over gRPC through a LocalStack (no Ray): reserved topics and transaction bits
refused, topic permissions enforced (PERMISSION_DENIED), bad inputs INVALID_ARGUMENT,
poison records in the delay topic skipped (also in a store that already held one
when it was opened), and a background loop that stops turns the shard's health
NOT_SERVING and is named by StoreStatus."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mqstore.rpc.v1 import common_pb2, front_pb2
from mqstore.services.common.server import sync_channel
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store import MessageBatch
from mqstore.store.message_store import MessageStore
from mqstore.store.schedule import SCHEDULE_TOPIC
from tests.services.helpers import code_of, small_config, wait_dispatched

C = grpc.StatusCode
FORGED_TOPIC = {"DELAY": "1", "REAL_TOPIC": "../../etc", "REAL_QID": "0"}
FORGED_QID = {"DELAY": "1", "REAL_TOPIC": "Later", "REAL_QID": "-7"}
SELF_FEEDING = {"REAL_TOPIC": "Later", "REAL_QID": "0"}  # no DELAY


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    st = LocalStack(tmp_path_factory.mktemp("inputs"), small_config())
    assert st.wait_ready(60)
    yield st
    st.close()


@pytest.fixture(scope="module")
def client(stack):
    with FrontClient(stack.front_endpoint) as c:
        yield c


def cols(**kw) -> common_pb2.MessageColumns:
    kw.setdefault("topics", ["Inputs"])
    kw.setdefault("bodies", [b"x"])
    return common_pb2.MessageColumns(**kw)


def wrote(client) -> int:
    return client.store_status()[0].wrote_offset


@pytest.mark.parametrize(
    "topic",
    [
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    ],
)
def test_sends_to_reserved_topics_are_permission_denied(client, topic) -> None:
    before = wrote(client)
    with pytest.raises(grpc.RpcError) as e:
        client.send(topic, [b"x"], queue_ids=0, properties=SELF_FEEDING)
    assert e.value.code() is C.PERMISSION_DENIED and "forbidden" in e.value.details()
    assert wrote(client) == before


@pytest.mark.parametrize("sysflag", [0x4, 0x8, 0xC])
def test_transaction_bits_are_refused(client, sysflag) -> None:
    before = wrote(client)
    assert code_of(lambda: client.send_columns(cols(sysflags=[sysflag]))) is C.INVALID_ARGUMENT
    assert wrote(client) == before


def test_a_read_only_topic_refuses_sends_and_serves_pulls(client) -> None:
    assert client.update_topic("ReadOnly", perm=4).perm == 4
    with pytest.raises(grpc.RpcError) as e:
        client.send("ReadOnly", [b"x"], queue_ids=0)
    assert e.value.code() is C.PERMISSION_DENIED and "not writable" in e.value.details()
    assert client.pull("ReadOnly", 0, 0).status == front_pb2.NO_MESSAGE_IN_QUEUE


def test_a_write_only_topic_takes_sends_and_refuses_pulls(client) -> None:
    client.update_topic("WriteOnly", perm=2)
    client.send("WriteOnly", [b"x"], queue_ids=0)
    wait_dispatched(client)
    with pytest.raises(grpc.RpcError) as e:
        client.pull("WriteOnly", 0, 0)
    assert e.value.code() is C.PERMISSION_DENIED and "not readable" in e.value.details()
    client.update_topic("WriteOnly", perm=6)  # the front's table follows the change at once
    assert [r.body for r in client.pull("WriteOnly", 0, 0).records] == [b"x"]


def test_perm_0_is_stored_as_0_and_refuses_both(stack, client) -> None:
    assert client.update_topic("Closed", perm=0).perm == 0
    assert stack.shards[0].state.log_store.topics.get("Closed").perm == 0  # config/topics.json
    assert code_of(lambda: client.send("Closed", [b"x"], queue_ids=0)) is C.PERMISSION_DENIED
    assert code_of(lambda: client.pull("Closed", 0, 0)) is C.PERMISSION_DENIED
    assert client.update_topic("Default").perm == 6  # perm not given: 6


@pytest.mark.parametrize(
    ("what", "columns"),
    [
        ("empty property name", cols(properties=[common_pb2.Properties(entries={"": "v"})])),
        ("empty property value", cols(properties=[common_pb2.Properties(entries={"k": ""})])),
        ("store-only property", cols(properties=[common_pb2.Properties(entries={"SCHEDULE_SOURCE": "1:0"})])),
        ("born host port 99999", cols(born_hosts=["10.0.0.1:99999"])),
        ("born host port 65536, per message", cols(bodies=[b"a", b"b"], born_hosts=["10.0.0.1:1", "10.0.0.1:65536"])),
    ],
)
def test_bad_inputs_are_invalid_argument(client, what, columns) -> None:
    before = wrote(client)
    assert code_of(lambda: client.send_columns(columns)) is C.INVALID_ARGUMENT, what
    assert wrote(client) == before
    assert client.send("Inputs", [b"fine"]).statuses[0] == common_pb2.PUT_OK  # the server goes on


def _internal_append(stack, props: dict) -> None:
    """A record in the delay topic as a store written before the fix holds it (the
    internal append path, which the producers' checks do not guard)."""
    stack.shards[0].state.log_store.commitlog.append(
        MessageBatch(topics=SCHEDULE_TOPIC, bodies=[b"poison"], queue_ids=0, properties=props)
    )


def _delivered(client, topic: str, queue: int, body: bytes, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        p = client.pull(topic, queue, 0, max_messages=100)
        if body in [r.body for r in p.records]:
            return
        assert time.monotonic() < deadline, f"{body!r} was never delivered into {topic}:{queue}"
        time.sleep(0.1)


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_poison_schedule_records_are_skipped_and_later_delays_delivered(stack, client) -> None:
    for props in (FORGED_TOPIC, FORGED_QID, SELF_FEEDING):
        _internal_append(stack, props)
    client.send("Later", [b"after the poison"], queue_ids=3, properties={"DELAY": "1"})
    _delivered(client, "Later", 3, b"after the poison")
    sched = stack.queue_builders[0].state.scheduler  # the delay scheduler runs with the consume queues
    assert sched.running and sched.skipped >= 3
    size = wrote(client)
    time.sleep(2.5)  # the self-feeding record is not delivered into the delay topic again, every second
    assert wrote(client) == size
    (st,) = client.store_status()
    assert st.state == "SERVING" and not st.error


def test_delayed_messages_keep_their_born_times_when_delivered(stack, client) -> None:
    """The delay scheduler delivers through the commitlog's DeliverDelayed: a record
    keeps its own born time, also 0 (an in-process producer's), which a producer's
    columns would read as "the store's clock"."""
    stack.shards[0].state.log_store.append(
        MessageBatch(
            topics="Born",
            bodies=[b"zero", b"set"],
            queue_ids=1,
            properties={"DELAY": "1"},
            born_timestamps=[0, 1_700_000_000_123],
        )
    )
    _delivered(client, "Born", 1, b"set")
    got = {r.body: r.born_timestamp for r in client.pull("Born", 1, 0).records}
    assert got == {b"zero": 0, b"set": 1_700_000_000_123}


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_a_store_that_already_holds_a_poison_delivers_when_served(tmp_path) -> None:
    cfg = small_config()
    with MessageStore(tmp_path, cfg, background_dispatch=False) as s:  # written before the fix (internal path)
        for props in (FORGED_TOPIC, FORGED_QID, SELF_FEEDING):
            s.commitlog.append(MessageBatch(topics=SCHEDULE_TOPIC, bodies=[b"poison"], queue_ids=0, properties=props))
    for _ in range(2):  # and after a restart of the served store
        with LocalStack(tmp_path, cfg) as st, FrontClient(st.front_endpoint) as c:
            assert st.wait_ready(60)
            body = f"delayed {_}".encode()
            c.send("Later", [body], queue_ids=1, properties={"DELAY": "1"})
            _delivered(c, "Later", 1, body)


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_a_stopped_loop_makes_health_not_serving_and_status_names_it(tmp_path) -> None:
    with LocalStack(tmp_path, small_config()) as st, FrontClient(st.front_endpoint) as c:
        assert st.wait_ready(60)
        builder = st.queue_builders[0].state  # the delay scheduler runs with the consume queues
        deadline = time.monotonic() + 10
        while builder.scheduler is None:
            assert time.monotonic() < deadline, "the consume-queue builder started no delay scheduler"
            time.sleep(0.05)
        sched = builder.scheduler

        def dies(now_ms: int) -> int:
            raise SystemExit("gone")  # not an Exception: the scheduler's thread ends

        sched.deliver_due = dies
        with sync_channel(st.queue_builders[0].endpoint, auth=st.auth) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            deadline = time.monotonic() + 10
            while (
                health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
                != health_pb2.HealthCheckResponse.NOT_SERVING
            ):
                assert time.monotonic() < deadline, "health stayed SERVING with the delay scheduler gone"
                time.sleep(0.1)
        (s,) = c.store_status()
        assert "delay_scheduler" in s.error and "SystemExit" in s.error
        assert [x.split(":")[0] for x in s.stopped_loops] == ["delay_scheduler"]
        p = subprocess.run(
            [sys.executable, "-m", "mqstore.cli.main", "status", "--server", st.front_endpoint],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 1 and "delay_scheduler" in p.stdout, (p.stdout, p.stderr)
