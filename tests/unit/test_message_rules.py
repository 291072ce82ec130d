"""The message rules every producer door applies (mqstore/store/message_rules.py),
in the core: ``MessageStore.append`` (the columnar path: SendBatch, ``--store``
sends, the RocketMQ port's appends) and ``LogStore.append_encoded`` (SendEncoded)
refuse the same messages with a typed error naming the message, and write nothing;
the numpy parse of encoded delivery times agrees with the Python rule; and the
RocketMQ port's ``check_message`` and the store's rules agree on random messages."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore import MessageStore, StoreConfig
from mqstore.errors import DeliveryTimeError, InvalidMessageError, MessageTypeError
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.rpc.v1 import common_pb2
from mqstore.services.common.convert import columns_to_batch
from mqstore.services.rocketmq import convert
from mqstore.services.rocketmq.status import Code, ProtocolError
from mqstore.store import message_rules
from mqstore.store.encoded_batch import parse_encoded
from mqstore.store.message_rules import MAX_TIME_MS, MIN_TIME_MS
from mqstore.store.messages import MessageBatch
from mqstore.store.record_batch import BatchEncoder, encode_for_send
from mqstore.store.topic_configs import TopicConfig
from tests.tiers import examples

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = MessageStore(tmp_path_factory.mktemp("rules"), StoreConfig(segment_bytes=4 << 20), background_dispatch=False)
    s.update_topic("Two", read_queue_nums=2, write_queue_nums=2)
    s.update_topic("Fifo", message_type="FIFO")
    s.update_topic("Later", message_type="DELAY")
    s.update_topic("Mixed", message_type="MIXED")
    s.update_topic("Tx", message_type="TRANSACTION")
    yield s
    s.close()


GOOD = {"Fifo": {"__SHARDINGKEY": "g"}, "Later": {"TIMER_DELIVER_MS": "1"}}  # a first message each topic takes


def one(topic: str = "Plain", props=None, **kw) -> MessageBatch:
    """Two messages, the second the one under test (the error must name message 1)."""
    return MessageBatch(topics=topic, bodies=[b"ok", b"x"], properties=[GOOD.get(topic), props], **kw)


# name -> (batch, error type, text the error holds); each is refused by every door
REFUSED = {
    "TIMER_DELIVER_MS beyond int64": (
        lambda: one("Later", {"TIMER_DELIVER_MS": str(1 << 64)}),
        DeliveryTimeError,
        "18446744073709551616",
    ),
    "TIMER_DELIVER_MS below int64": (
        lambda: one("Later", {"TIMER_DELIVER_MS": str(-(1 << 63) - 1)}),
        DeliveryTimeError,
        "TIMER_DELIVER_MS",
    ),
    "TIMER_DELIVER_MS not a number": (lambda: one("Later", {"TIMER_DELIVER_MS": "soon"}), DeliveryTimeError, "'soon'"),
    "TIMER_DELIVER_MS with a plus": (lambda: one("Later", {"TIMER_DELIVER_MS": "+5"}), DeliveryTimeError, "'+5'"),
    "TIMER_DELIVER_MS a year ahead": (
        lambda: one("Later", {"TIMER_DELIVER_MS": str(now_ms() + 365 * DAY_MS)}),
        DeliveryTimeError,
        "24 h ahead",
    ),
    "TIMER_DELIVER_MS before year 1": (
        lambda: one("Later", {"TIMER_DELIVER_MS": str(MIN_TIME_MS - 1)}),
        DeliveryTimeError,
        "before 0001-01-01",
    ),
    "TIMER_DELAY_SEC": (lambda: one("Later", {"TIMER_DELAY_SEC": "10"}), DeliveryTimeError, "TIMER_DELAY_SEC"),
    "TIMER_DELAY_MS": (lambda: one("Later", {"TIMER_DELAY_MS": "10"}), DeliveryTimeError, "TIMER_DELAY_MS"),
    "born time past Timestamp's range": (
        lambda: one(born_timestamps=[1, MAX_TIME_MS + 1]),
        InvalidMessageError,
        "born time",
    ),
    "born time before Timestamp's range": (
        lambda: one(born_timestamps=[1, -(1 << 62)]),
        InvalidMessageError,
        "born time",
    ),
    "FIFO topic, no group": (lambda: one("Fifo"), MessageTypeError, "message group"),
    "a group to a NORMAL topic": (lambda: one("Plain", {"__SHARDINGKEY": "g"}), MessageTypeError, "NORMAL"),
    "a delivery time to a NORMAL topic": (
        lambda: one("Plain", {"TIMER_DELIVER_MS": str(now_ms())}),
        MessageTypeError,
        "DELAY",
    ),
    "a group and a delivery time": (
        lambda: one("Mixed", {"__SHARDINGKEY": "g", "TIMER_DELIVER_MS": str(now_ms())}),
        MessageTypeError,
        "not both",
    ),
    "a blank group": (lambda: one("Fifo", {"__SHARDINGKEY": "  "}), InvalidMessageError, "blank"),
    "a group of 64 bytes": (lambda: one("Fifo", {"__SHARDINGKEY": "g" * 64}), InvalidMessageError, "64 bytes"),
    "a group with a control character": (
        lambda: one("Fifo", {"__SHARDINGKEY": "a\tb"}),
        InvalidMessageError,
        "control",
    ),
    "queue id past the write queues": (lambda: one("Two", queue_ids=[0, 5]), InvalidMessageError, "write queue"),
    "queue id at the write queue count": (lambda: one("Two", queue_ids=[1, 2]), InvalidMessageError, "write queue"),
}
COLUMNAR_ONLY = {  # DELAY levels: the encoded path refuses every DELAY (encoded_batch.py)
    "DELAY level not a number": (lambda: one("Plain", {"DELAY": "x"}), InvalidMessageError, "delay level"),
    "DELAY level and a delivery time": (
        lambda: one("Later", {"DELAY": "2", "TIMER_DELIVER_MS": str(now_ms())}),
        DeliveryTimeError,
        "not both",
    ),
    "DELAY level to a FIFO topic": (lambda: one("Fifo", {"DELAY": "1"}), MessageTypeError, "message group"),
    "DELAY level with a group": (
        lambda: one("Mixed", {"DELAY": "1", "__SHARDINGKEY": "g"}),
        MessageTypeError,
        "not both",
    ),
}
ACCEPTED = {
    "a delivery time 23 h ahead": lambda: one("Later", {"TIMER_DELIVER_MS": str(now_ms() + 23 * HOUR_MS)}),
    "a delivery time in the past": lambda: one("Later", {"TIMER_DELIVER_MS": "-5"}),
    "a FIFO message": lambda: one("Fifo", {"__SHARDINGKEY": "order-1"}),
    "every kind to a MIXED topic": lambda: MessageBatch(
        topics="Mixed",
        bodies=[b"a", b"b", b"c"],
        properties=[None, {"__SHARDINGKEY": "g"}, {"TIMER_DELIVER_MS": str(now_ms())}],
    ),
    "born times at both ends": lambda: one(born_timestamps=[MIN_TIME_MS, MAX_TIME_MS]),
    "the last write queue": lambda: one("Two", queue_ids=[0, 1]),
    "automatic queues": lambda: one("Two", queue_ids=[-1, -1]),
    "a topic without a config, any queue": lambda: one("Plain", queue_ids=[0, 7]),
}
COLUMNAR_ACCEPTED = {
    "a DELAY level to a NORMAL topic": lambda: one("Plain", {"DELAY": "1"}),
    "a DELAY level to a DELAY topic": lambda: one("Later", {"DELAY": "3"}),
}


@pytest.mark.parametrize("name", list(REFUSED) + list(COLUMNAR_ONLY))
def test_the_columnar_door_refuses(store, name):
    make, error, text = {**REFUSED, **COLUMNAR_ONLY}[name]
    before = store.commitlog.wrote_offset
    with pytest.raises(error, match=r"message 1\b") as e:
        store.append(make())
    assert text in str(e.value)
    assert store.commitlog.wrote_offset == before  # nothing of the batch was written


def test_only_the_port_writes_transaction_topics(store):
    for append in (store.append, lambda b: store.log.append_encoded(client_encoded(store, b))):
        with pytest.raises(MessageTypeError, match="TRANSACTION messages, which only the RocketMQ port"):
            append(MessageBatch(topics="Tx", bodies=[b"x"]))


def client_encoded(store: MessageStore, batch: MessageBatch):
    """``batch`` encoded as a producer encodes it (the client does not check the
    rules; the store must), then parsed as SendEncoded parses it."""
    encoder = BatchEncoder(StoreConfig(store_host=store.log.config.store_host), store.log._clock)
    return parse_encoded(encode_for_send(encoder, batch).data, store.log.config)


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_encoded_door_refuses(store, name):
    make, error, text = REFUSED[name]
    before = store.commitlog.wrote_offset
    # the compiled scan refuses reserved names as InvalidMessageError; the rules their own types
    with pytest.raises(InvalidMessageError, match=r"encoded record 1\b|message 1\b") as e:
        store.log.append_encoded(client_encoded(store, make()))
    assert text in str(e.value)
    assert store.commitlog.wrote_offset == before


@pytest.mark.parametrize("name", list(ACCEPTED) + list(COLUMNAR_ACCEPTED))
def test_the_columnar_door_takes(store, name):
    batch = {**ACCEPTED, **COLUMNAR_ACCEPTED}[name]()
    assert len(store.append(batch)) == len(batch)


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_the_encoded_door_takes(store, name):
    batch = ACCEPTED[name]()
    assert len(store.log.append_encoded(client_encoded(store, batch))) == len(batch)


def test_an_unsupported_timer_property_is_refused_encoded_by_the_scan(store):
    """TIMER_DELAY_SEC / _MS are reserved in the compiled property scan of SendEncoded."""
    with pytest.raises(InvalidMessageError, match="encoded record 1: TIMER_DELAY_SEC"):
        client_encoded(store, one("Later", {"TIMER_DELAY_SEC": "3"}))


# ------------------------------------------------------------------ encoded delivery times


delivery_texts = st.one_of(
    st.integers(-(1 << 70), 1 << 70).map(str),
    st.integers(-(10**17), 10**17).map(str),
    st.text("0123456789-+ x", max_size=22),
    st.sampled_from(["0", "-0", "007", "-", "", "1" * 16, "9" * 17, "-" + "9" * 16]),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(delivery_texts, min_size=1, max_size=8), st.binary(max_size=5))
def test_numpy_delivery_times_agree_with_the_python_rule(texts, filler):
    """``decimal_values`` (the encoded path, one numpy pass) takes exactly the texts
    ``parse_delivery_ms`` (the columnar path) takes, with the same value."""
    data, starts, ends = bytearray(filler), [], []
    for t in texts:
        starts.append(len(data))
        data += t.encode()
        ends.append(len(data))
        data += b"\x02"
    values, ok = message_rules.decimal_values(np.frombuffer(bytes(data), np.uint8), np.array(starts), np.array(ends))
    for t, v, k in zip(texts, values.tolist(), ok.tolist()):
        want = message_rules.parse_delivery_ms(t)
        assert k == (want is not None), t
        if want is not None:
            assert v == want, t


# ------------------------------------------------------------------ the port and the store agree

NOW = 1_790_000_000_000
TOPIC_TYPES = ["NORMAL", "FIFO", "DELAY", "MIXED"]


@st.composite
def port_messages(draw):
    """A v2 message whose type follows its fields (as the clients send), with times
    and groups anywhere, and the type of the topic it goes to."""
    m = v2.Message(topic=v2.Resource(name="T"), body=b"x")
    sp = m.system_properties
    sp.message_id = "01AABBCCDDEEFF00112233445566778899"
    kind = draw(st.sampled_from(["normal", "fifo", "delay"]))
    if kind == "fifo":
        sp.message_group = draw(st.text(st.characters(codec="utf-8"), min_size=0, max_size=40))
    if kind == "delay":
        ms = draw(
            st.integers(MIN_TIME_MS - 10, MIN_TIME_MS + 10)
            | st.integers(NOW - DAY_MS, NOW + DAY_MS + 10)
            | st.integers(-(10**15), 10**15)
        )
        sp.delivery_timestamp.seconds, sp.delivery_timestamp.nanos = ms // 1000, (ms % 1000) * 1_000_000
    sp.message_type = {"normal": v2.NORMAL, "fifo": v2.FIFO, "delay": v2.DELAY}[kind]
    if draw(st.booleans()):
        born = draw(
            st.integers(MIN_TIME_MS - 10, MIN_TIME_MS + 10)
            | st.integers(MAX_TIME_MS - 10, MAX_TIME_MS + 10)
            | st.integers(-(10**16), 10**16)
        )
        sp.born_timestamp.seconds, sp.born_timestamp.nanos = born // 1000, (born % 1000) * 1_000_000
    return m, draw(st.sampled_from(TOPIC_TYPES))


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(port_messages())
def test_the_port_and_the_store_rules_agree(sent):
    """A message the RocketMQ port takes, the store's rules take as the port writes it
    (to_columns), and the other way round: no door accepts what another refuses."""
    m, topic_type = sent
    config = TopicConfig(topic_name="T", attributes={"message.type": topic_type})
    try:
        convert.check_message(m, convert.accepted_types(topic_type), NOW, 1 << 20)
        port_ok = True
    except ProtocolError:
        port_ok = False
    sp = m.system_properties
    own = common_columns(m)
    try:
        message_rules.check_batch(columns_to_batch(own), {"T": config}.get, NOW)
        store_ok = True
    except InvalidMessageError:
        store_ok = False
    assert port_ok == store_ok, (sp, topic_type)


def raw_ms(t) -> int:
    return t.seconds * 1000 + t.nanos // 1_000_000  # ToMilliseconds refuses what is out of range


def common_columns(m: v2.Message):
    """``m`` as own-API columns carrying what the port would store (to_columns needs a
    valid message; here every field is copied as it stands)."""
    sp = m.system_properties
    props = {}
    if sp.HasField("message_group"):
        props["__SHARDINGKEY"] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        props["TIMER_DELIVER_MS"] = str(raw_ms(sp.delivery_timestamp))
    born = raw_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    return common_pb2.MessageColumns(
        topics=["T"],
        bodies=[m.body],
        properties=[common_pb2.Properties(entries=props)],
        born_timestamps=[born] if born else [],  # 0: the store's clock
    )


PORT_REFUSED = {
    "a delivery time before year 1": ("delivery", MIN_TIME_MS - 1000, Code.ILLEGAL_DELIVERY_TIME),
    "a delivery time past Timestamp's seconds": ("delivery", (1 << 62) * 1000, Code.ILLEGAL_DELIVERY_TIME),
    "a born time before year 1": ("born", MIN_TIME_MS - 1000, Code.BAD_REQUEST),
    "a born time past 9999": ("born", MAX_TIME_MS + 1, Code.BAD_REQUEST),
}


@pytest.mark.parametrize("name", list(PORT_REFUSED))
def test_the_port_refuses_the_same_times_with_its_codes(name):
    """The times the store refuses, sent to the RocketMQ port: its code, not a ValueError."""
    field, ms, code = PORT_REFUSED[name]
    m = v2.Message(topic=v2.Resource(name="T"), body=b"x")
    sp = m.system_properties
    sp.message_id = "01AABBCCDDEEFF00112233445566778899"
    sp.message_type = v2.DELAY if field == "delivery" else v2.NORMAL
    t = sp.delivery_timestamp if field == "delivery" else sp.born_timestamp
    t.seconds, t.nanos = ms // 1000, (ms % 1000) * 1_000_000
    with pytest.raises(ProtocolError) as e:
        convert.check_message(m, convert.accepted_types("MIXED"), NOW, 1 << 20)
    assert e.value.code == code


def mq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # five CLI processes
def test_cli_sends_meet_the_same_rules(tmp_path):
    """`send --store`: a queue past the write queues and a FIFO message without a group
    exit 1 with one line naming the rule; --message-group and --deliver-at-ms send
    what FIFO and DELAY topics take."""
    store = str(tmp_path / "s")
    assert mq("update-topic", "--store", store, "--create", "--topic", "Two", "--write-queue-nums", "2").returncode == 0
    assert mq("update-topic", "--store", store, "--topic", "Fifo", "--message-type", "FIFO").returncode == 0
    p = mq("send", "--store", store, "--topic", "Two", "--queue", "5", "hello")
    assert p.returncode == 1 and "queue id 5" in p.stderr and "2 write queue" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    p = mq("send", "--store", store, "--topic", "Fifo", "hello")
    assert p.returncode == 1 and "message group" in p.stderr, p.stderr
    p = mq("send", "--store", store, "--topic", "Fifo", "--message-group", "order-1", "hello")
    assert p.returncode == 0 and json.loads(p.stdout.splitlines()[0])["status"] == "PUT_OK", p.stderr


def test_a_fifo_group_keeps_to_one_queue(store):
    """Sent to the automatic queue, a group's messages go to crc32(group) % write
    queues, the queue the RocketMQ port picks; a given queue id is kept."""
    groups = [f"order-{i}" for i in range(12)]
    res = store.append(
        MessageBatch(
            topics="Fifo", bodies=[b"m"] * 24, queue_ids=-1, properties=[{"__SHARDINGKEY": g} for g in groups * 2]
        )
    )
    wq = store.topics.get("Fifo").write_queue_nums
    want = [zlib.crc32(g.encode()) % wq for g in groups * 2]
    assert res.queue_ids.tolist() == want
    assert len(set(want)) > 1  # the groups spread over the queues
    res = store.append(MessageBatch(topics="Fifo", bodies=[b"m"], queue_ids=[3], properties={"__SHARDINGKEY": "x"}))
    assert res.queue_ids.tolist() == [3]
    encoded = MessageBatch(  # records whose sender left the queue automatic: the store picks the group's
        topics="Fifo", bodies=[b"m"] * 12, queue_ids=-1, properties=[{"__SHARDINGKEY": g} for g in groups]
    )
    assert store.log.append_encoded(client_encoded(store, encoded)).queue_ids.tolist() == want[:12]


property_names = st.sampled_from(["__SHARDINGKEY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "k", "v2"])
property_values = st.one_of(
    st.integers(-(1 << 64), 1 << 64).map(str),
    st.integers(NOW - 2 * DAY_MS, NOW + 2 * DAY_MS).map(str),
    st.sampled_from(["007", "-0", "+5", "soon", " ", "g" * 64, "order-1"]),
    # no control characters: the port refuses them in any property, the store only the
    # separators (a control character in a user property fails no consumer)
    st.text(st.characters(codec="utf-8", exclude_categories=["Cc"]), min_size=1, max_size=8),
)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(property_names, property_values, max_size=4), st.sampled_from(TOPIC_TYPES))
def test_random_property_maps_meet_the_same_verdict_on_both_ports(props, topic_type):
    """An own-API property map and the v2 message a RocketMQ client would send for it
    (the group as message_group, a TIMER_DELIVER_MS written as str(int) as
    delivery_timestamp, anything else as a user property, its type from its fields)
    are taken by both doors or by neither."""
    m = v2.Message(topic=v2.Resource(name="T"), body=b"x")
    sp = m.system_properties
    sp.message_id = "01AABBCCDDEEFF00112233445566778899"
    for name, value in props.items():
        at = message_rules.parse_delivery_ms(value) if name == "TIMER_DELIVER_MS" else None
        if name == "__SHARDINGKEY":
            sp.message_group = value
        elif at is not None:
            sp.delivery_timestamp.seconds, sp.delivery_timestamp.nanos = at // 1000, (at % 1000) * 1_000_000
        else:
            m.user_properties[name] = value
    sp.message_type = (
        v2.FIFO if sp.HasField("message_group") else v2.DELAY if sp.HasField("delivery_timestamp") else v2.NORMAL
    )
    try:
        convert.check_message(m, convert.accepted_types(topic_type), NOW, 1 << 20)
        port_ok = True
    except ProtocolError:
        port_ok = False
    config = TopicConfig(topic_name="T", attributes={"message.type": topic_type})
    try:
        message_rules.check_batch(MessageBatch(topics="T", bodies=[b"x"], properties=props), {"T": config}.get, NOW)
        store_ok = True
    except InvalidMessageError:
        store_ok = False
    assert port_ok == store_ok, (props, topic_type)
