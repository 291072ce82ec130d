"""The RocketMQ 5 port's codec (services/rocketmq/convert.py) without a server: a v2
message that ``check_message`` passes goes through ``to_columns``, the store's own
encoder and decoder (a small MessageStore: append, read the record's bytes back) and
``to_message``, and comes back as the producer sent it; ``check_message`` refuses what
RocketMQ's proxy refuses, each with its code; ``_born_host`` reads the forms clients send."""

from __future__ import annotations

import gzip
import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore import MessageStore, StoreConfig
from mqstore.formats.message import decode_records
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.services.common.convert import columns_to_batch
from mqstore.services.rocketmq import convert
from mqstore.services.rocketmq.status import Code, ProtocolError
from mqstore.store.system_topics import is_system_topic
from tests.tiers import examples

MAX_BODY = 4 << 20
NOW_MS = 1_790_000_000_000  # a fixed "now" for check_message
ALL_TYPES = convert.accepted_types("MIXED")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = MessageStore(
        tmp_path_factory.mktemp("convert-store"), StoreConfig(segment_bytes=16 << 20), background_dispatch=False
    )
    yield s
    s.close()


def stored(store: MessageStore, m: v2.Message):
    """``m`` checked, as columns, appended by the store's encoder, its record's bytes
    read back and decoded (what the pop service hands the port)."""
    import numpy as np

    convert.check_message(m, ALL_TYPES, NOW_MS, MAX_BODY)
    if store.topics.get(m.topic.name) is None:  # the store checks the type too (message_rules.py)
        store.update_topic(m.topic.name, message_type="MIXED")
    cols = convert.to_columns([m], [0], MAX_BODY)
    res = store.append(columns_to_batch(cols))
    raw = store.commitlog.read_raw(res.physical_offsets, res.sizes)
    data = bytes(raw.buffer[raw.offsets[0] : raw.offsets[1]])
    (rec,) = decode_records(data, np.zeros(1, np.int64))
    return rec


# ------------------------------------------------------------------ the property test

_CONTROL = "".join(map(chr, [*range(32), 127]))  # what check_message calls control characters
_NO_CONTROL = st.characters(codec="utf-8", exclude_characters=_CONTROL)
topics = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%", min_size=1, max_size=40).filter(
    lambda t: not is_system_topic(t)  # the port's _topic refuses those
)
tags = st.text(st.characters(codec="utf-8", exclude_characters=_CONTROL + "|"), max_size=20).filter(str.strip)
keys = st.text(st.characters(codec="utf-8", exclude_characters=_CONTROL + " "), min_size=1, max_size=16).filter(
    str.strip
)
_RESERVED = convert.RESERVED_PROPERTIES | {convert.SHARDING_KEY, convert.TRACE_CONTEXT, "SCHEDULE_SOURCE"}
prop_names = st.text(_NO_CONTROL, min_size=1, max_size=16).filter(lambda n: n not in _RESERVED)
prop_values = st.text(_NO_CONTROL, min_size=1, max_size=24)
message_ids = st.text("0123456789ABCDEF", min_size=34, max_size=34) | st.text(_NO_CONTROL, max_size=40).filter(
    str.strip
)
groups = st.text(_NO_CONTROL, min_size=1, max_size=20).filter(
    lambda g: g.strip() and len(g.encode()) < convert.MAX_GROUP_BYTES
)


@st.composite
def messages(draw) -> tuple[v2.Message, bytes]:
    """A v2 message check_message passes, and its body as the consumer must see it."""
    body = draw(st.binary(min_size=1, max_size=2000))
    m = v2.Message(topic=v2.Resource(name=draw(topics)))
    sp = m.system_properties
    sp.message_id = draw(message_ids)
    tag = draw(st.none() | tags)
    if tag is not None:
        sp.tag = tag
    sp.keys.extend(draw(st.lists(keys, max_size=3)))
    m.user_properties.update(draw(st.dictionaries(prop_names, prop_values, max_size=5)))
    group = draw(st.none() | groups)
    if group is not None:
        sp.message_group = group
    # a message is FIFO (a group) or DELAY (a time), never both: the proxy takes its type from them
    deliver_ms = (
        None if group is not None else draw(st.none() | st.integers(NOW_MS - 3_600_000, NOW_MS + convert.MAX_DELAY_MS))
    )
    if deliver_ms is not None:
        sp.delivery_timestamp.FromNanoseconds(deliver_ms * 1_000_000 + draw(st.integers(0, 999_999)))
    sp.message_type = v2.FIFO if group is not None else v2.DELAY if deliver_ms is not None else v2.NORMAL
    if draw(st.booleans()):
        sp.born_timestamp.FromMilliseconds(draw(st.integers(1, NOW_MS)))
    sp.born_host = draw(st.sampled_from(["", "10.1.2.3", "10.1.2.3:4567", "::1", "[fe80::2]:80", "host-a"]))
    if draw(st.booleans()):
        sp.body_encoding = v2.GZIP
        m.body = gzip.compress(body, mtime=0)
    else:
        sp.body_encoding = draw(st.sampled_from([v2.ENCODING_UNSPECIFIED, v2.IDENTITY]))
        m.body = body
    return m, body


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.integers(0, 20), st.integers(1_000, 43_200_000))
def test_a_message_comes_back_as_it_was_sent(store, sent, attempt, invisible_ms):
    m, body = sent
    sp = m.system_properties
    rec = stored(store, m)
    got = convert.to_message(rec, receipt_handle="m1 0 0 0 0 0 0 0", attempt=attempt, invisible_ms=invisible_ms)
    gp = got.system_properties
    assert got.topic.name == m.topic.name
    assert got.body == body
    assert gp.HasField("tag") == sp.HasField("tag")
    assert gp.tag == sp.tag
    assert list(gp.keys) == list(sp.keys)
    assert dict(got.user_properties) == dict(m.user_properties)
    assert gp.message_id == sp.message_id
    assert gp.HasField("message_group") == sp.HasField("message_group")
    assert gp.message_group == sp.message_group
    assert gp.HasField("delivery_timestamp") == sp.HasField("delivery_timestamp")
    if sp.HasField("delivery_timestamp"):
        assert gp.delivery_timestamp.ToMilliseconds() == sp.delivery_timestamp.ToMilliseconds()
    want_type = (
        v2.FIFO if sp.HasField("message_group") else v2.DELAY if sp.HasField("delivery_timestamp") else v2.NORMAL
    )
    assert gp.message_type == want_type == sp.message_type
    assert gp.body_digest.type == v2.MD5
    assert gp.body_digest.checksum == hashlib.md5(body).hexdigest().upper()
    assert gp.body_encoding == v2.IDENTITY
    assert gp.delivery_attempt == max(1, attempt) >= 1
    assert gp.receipt_handle == "m1 0 0 0 0 0 0 0"
    assert gp.invisible_duration.ToMilliseconds() == invisible_ms
    if sp.HasField("born_timestamp"):
        assert gp.born_timestamp.ToMilliseconds() == sp.born_timestamp.ToMilliseconds()
    assert gp.born_host == convert._born_host(sp.born_host).rsplit(":", 1)[0].strip("[]")
    assert gp.queue_id == 0 and gp.HasField("queue_offset") and gp.store_host


any_text = st.text(st.characters(codec="utf-8"), max_size=12)
_SOME_RESERVED = sorted(_RESERVED)[::7] + ["SCHEDULE_SOURCE", "UNIQ_KEY", "__SHARDINGKEY"]


@st.composite
def loose_messages(draw) -> v2.Message:
    """Messages check_message may refuse: any text where the port takes text."""
    m = v2.Message(topic=v2.Resource(name=draw(topics)), body=draw(st.binary(min_size=1, max_size=50)))
    sp = m.system_properties
    sp.message_id = draw(any_text)
    if draw(st.booleans()):
        sp.tag = draw(any_text)
    sp.keys.extend(draw(st.lists(any_text, max_size=3)))
    names = any_text | st.sampled_from(_SOME_RESERVED)
    m.user_properties.update(draw(st.dictionaries(names, any_text, max_size=4)))
    if draw(st.booleans()):
        sp.message_group = draw(any_text)
    sp.message_type = v2.FIFO if sp.HasField("message_group") else v2.NORMAL
    return m


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loose_messages())
def test_what_check_message_passes_the_store_keeps(store, m):
    """check_message is the port's only gate before the store: what it passes the store
    must take (a store refusal would reach the client as 40000 without the right code)
    and give back; what it refuses gets a 4xxxx code and a reason."""
    sp = m.system_properties
    try:
        convert.check_message(m, ALL_TYPES, NOW_MS, MAX_BODY)
    except ProtocolError as e:
        assert 40000 <= e.code < 50000 and str(e)
        return
    got = convert.to_message(stored(store, m), receipt_handle="h", attempt=1, invisible_ms=1000)
    gp = got.system_properties
    assert gp.message_id == sp.message_id
    assert gp.tag == sp.tag
    assert list(gp.keys) == [k for k in " ".join(sp.keys).split(" ") if k]  # RocketMQ's KEYS: space-joined
    assert dict(got.user_properties) == dict(m.user_properties)
    assert gp.message_group == sp.message_group


# ------------------------------------------------------------------ what check_message refuses


def message(topic: str = "T", body: bytes = b"x", **system) -> v2.Message:
    user = system.pop("user", {})
    m = v2.Message(topic=v2.Resource(name=topic), body=body, user_properties=user)
    m.system_properties.message_id = system.pop("message_id", "01AABBCCDDEEFF0011223344556677889900"[:34])
    for name, value in system.items():
        if name == "keys":
            m.system_properties.keys.extend(value)
        elif name == "delivery_ms":
            m.system_properties.delivery_timestamp.FromMilliseconds(value)
        else:
            setattr(m.system_properties, name, value)
    return m


def with_recovery(m: v2.Message, seconds: int) -> v2.Message:
    m.system_properties.orphaned_transaction_recovery_duration.seconds = seconds
    return m


NORMAL, FIFO, DELAY = (v2.NORMAL,), (v2.FIFO,), (v2.DELAY,)
REFUSED = {
    "blank message id": (message(message_id="  "), ALL_TYPES, Code.ILLEGAL_MESSAGE_ID),
    "empty message id": (message(message_id=""), ALL_TYPES, Code.ILLEGAL_MESSAGE_ID),
    "message id with \\x01": (message(message_id="AB\x01CD"), ALL_TYPES, Code.ILLEGAL_MESSAGE_ID),
    "empty body": (message(body=b""), ALL_TYPES, Code.MESSAGE_BODY_EMPTY),
    "body over the limit": (message(body=b"x" * (MAX_BODY + 1)), ALL_TYPES, Code.MESSAGE_BODY_TOO_LARGE),
    "tag with |": (message(tag="a|b"), ALL_TYPES, Code.ILLEGAL_MESSAGE_TAG),
    "blank tag": (message(tag=" "), ALL_TYPES, Code.ILLEGAL_MESSAGE_TAG),
    "empty tag": (message(tag=""), ALL_TYPES, Code.ILLEGAL_MESSAGE_TAG),
    "tag with a control character": (message(tag="a\nb"), ALL_TYPES, Code.ILLEGAL_MESSAGE_TAG),
    "blank key": (message(keys=["k", " "]), ALL_TYPES, Code.ILLEGAL_MESSAGE_KEY),
    "key with \\x02": (message(keys=["a\x02b"]), ALL_TYPES, Code.ILLEGAL_MESSAGE_KEY),
    "group of 64 bytes": (message(message_group="g" * 64, message_type=v2.FIFO), ALL_TYPES, Code.ILLEGAL_MESSAGE_GROUP),
    "blank group": (message(message_group=" ", message_type=v2.FIFO), ALL_TYPES, Code.ILLEGAL_MESSAGE_GROUP),
    "group with a control character": (
        message(message_group="a\tb", message_type=v2.FIFO),
        ALL_TYPES,
        Code.ILLEGAL_MESSAGE_GROUP,
    ),
    "FIFO without a group": (message(message_type=v2.FIFO), FIFO, Code.ILLEGAL_MESSAGE_GROUP),
    "NORMAL with a message group": (
        message(message_type=v2.NORMAL, message_group="g"),
        ALL_TYPES,
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "DELAY with a message group": (
        message(message_type=v2.DELAY, message_group="g", delivery_ms=NOW_MS + 1000),
        ALL_TYPES,
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "property UNIQ_KEY": (message(user={"UNIQ_KEY": "x"}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property DELAY": (message(user={"DELAY": "3"}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property __SHARDINGKEY": (message(user={"__SHARDINGKEY": "g"}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property TRACE_CONTEXT": (message(user={"TRACE_CONTEXT": "t"}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property SCHEDULE_SOURCE (the store's)": (
        message(user={"SCHEDULE_SOURCE": "1:2"}),
        ALL_TYPES,
        Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    ),
    "property with an empty value": (message(user={"a": ""}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property with an empty name": (message(user={"": "v"}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property name with \\x01": (message(user={"a\x01": "v"}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "property value with \\x02": (message(user={"a": "v\x02"}), ALL_TYPES, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "129 properties": (
        message(user={f"p{i}": "v" for i in range(129)}),
        ALL_TYPES,
        Code.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    "properties over 16 KiB": (message(user={"big": "v" * (16 * 1024)}), ALL_TYPES, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    "DELAY more than 24 h ahead": (
        message(message_type=v2.DELAY, delivery_ms=NOW_MS + convert.MAX_DELAY_MS + 1),
        DELAY,
        Code.ILLEGAL_DELIVERY_TIME,
    ),
    "NORMAL with a delivery time over 24 h ahead": (
        message(delivery_ms=NOW_MS + convert.MAX_DELAY_MS + 1),
        ALL_TYPES,
        Code.ILLEGAL_DELIVERY_TIME,
    ),
    "message id over the properties budget": (
        message(message_id="A" * (16 * 1024 + 1)),
        ALL_TYPES,
        Code.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    "DELAY without a time": (message(message_type=v2.DELAY), DELAY, Code.ILLEGAL_DELIVERY_TIME),
    "FIFO message, NORMAL topic": (
        message(message_group="g", message_type=v2.FIFO),
        NORMAL,
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "NORMAL message, FIFO topic": (message(message_type=v2.NORMAL), FIFO, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    "unset type, FIFO topic": (message(), FIFO, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    "DELAY message, NORMAL topic": (
        message(message_type=v2.DELAY, delivery_ms=NOW_MS + 1000),
        NORMAL,
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "TRANSACTION message, NORMAL topic": (
        message(message_type=v2.TRANSACTION),
        NORMAL,
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "TRANSACTION with a message group": (
        message(message_type=v2.TRANSACTION, message_group="g"),
        ALL_TYPES,
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "TRANSACTION with a delivery time": (
        message(message_type=v2.TRANSACTION, delivery_ms=NOW_MS + 1000),
        ALL_TYPES,
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "TRANSACTION recovery over 1 h": (
        with_recovery(message(message_type=v2.TRANSACTION), convert.MAX_TRANSACTION_RECOVERY_S + 1),
        ALL_TYPES,
        Code.BAD_REQUEST,
    ),
    "TRANSACTION recovery negative": (
        with_recovery(message(message_type=v2.TRANSACTION), -1),
        ALL_TYPES,
        Code.BAD_REQUEST,
    ),
    "unknown encoding": (message(body_encoding=7), ALL_TYPES, Code.BAD_REQUEST),
}


@pytest.mark.parametrize("m, types, code", REFUSED.values(), ids=REFUSED.keys())
def test_check_message_refuses(m, types, code):
    with pytest.raises(ProtocolError) as e:
        convert.check_message(m, types, NOW_MS, MAX_BODY)
    assert e.value.code == code, (Code.Name(e.value.code), str(e.value))
    assert str(e.value)


ACCEPTED = {
    "plain": (message(), NORMAL),
    "unset type on a NORMAL topic": (message(), NORMAL),
    "body at the limit": (message(body=b"x" * MAX_BODY), NORMAL),
    "group of 63 bytes": (message(message_group="g" * 63, message_type=v2.FIFO), FIFO),
    "128 properties": (message(user={f"p{i}": "v" for i in range(128)}), NORMAL),
    "DELAY exactly 24 h ahead": (message(message_type=v2.DELAY, delivery_ms=NOW_MS + convert.MAX_DELAY_MS), DELAY),
    "DELAY in the past": (message(message_type=v2.DELAY, delivery_ms=NOW_MS - 10_000), DELAY),
    "any type on a MIXED topic": (message(message_group="g", message_type=v2.FIFO), ALL_TYPES),
    "key with a space (RocketMQ splits it, does not refuse it)": (message(keys=["a b"]), NORMAL),
    "TRANSACTION on a TRANSACTION topic": (message(message_type=v2.TRANSACTION), (v2.TRANSACTION,)),
    "TRANSACTION recovery of 1 h": (
        with_recovery(message(message_type=v2.TRANSACTION), convert.MAX_TRANSACTION_RECOVERY_S),
        ALL_TYPES,
    ),
}


@pytest.mark.parametrize("m, types", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_check_message_accepts(m, types):
    convert.check_message(m, types, NOW_MS, MAX_BODY)


def test_a_gzip_body_is_inflated_and_held_to_the_limit():
    body = b"a" * 5000
    m = message(body=gzip.compress(body), body_encoding=v2.GZIP)
    assert convert.to_columns([m], [1], MAX_BODY).bodies == [body]
    with pytest.raises(ProtocolError) as e:
        convert.to_columns([m], [1], 4000)
    assert e.value.code == Code.MESSAGE_BODY_TOO_LARGE
    with pytest.raises(ProtocolError) as e:
        convert.to_columns([message(body=b"not gzip", body_encoding=v2.GZIP)], [1], MAX_BODY)
    assert e.value.code == Code.MESSAGE_CORRUPTED


def test_a_record_without_uniq_key_gets_its_offset_msg_id(store):
    m = message()
    m.system_properties.message_id = "X"
    rec = stored(store, m)
    rec = rec._replace(properties={k: v for k, v in rec.properties.items() if k != "UNIQ_KEY"})
    got = convert.to_message(rec, receipt_handle="h", attempt=0, invisible_ms=0)
    assert got.system_properties.message_id == rec.msg_id
    assert got.system_properties.message_type == v2.NORMAL
    assert got.system_properties.delivery_attempt == 1


# ------------------------------------------------------------------ born host

BORN_HOSTS = {
    "10.1.2.3": "10.1.2.3:0",
    " 10.1.2.3 ": "10.1.2.3:0",
    "10.1.2.3:8080": "10.1.2.3:8080",
    "10.1.2.3:65535": "10.1.2.3:65535",
    "10.1.2.3:65536": "10.1.2.3:0",
    "10.1.2.3:x": "10.1.2.3:0",
    "10.1.2.3:\u00b2": "10.1.2.3:0",  # a digit to str.isdigit(), not to int()
    "::1": "[::1]:0",
    "fe80::1:2": "[fe80::1:2]:0",
    "[::1]": "[::1]:0",
    "[2001:db8::7]:9876": "[2001:db8::7]:9876",
    "[::1]:": "[::1]:0",
    "my-host.example": "127.0.0.1:0",
    "my-host:80": "127.0.0.1:0",
    "": "127.0.0.1:0",
    "[not-an-ip]:80": "127.0.0.1:0",
}


@pytest.mark.parametrize("text, want", BORN_HOSTS.items(), ids=[repr(k) for k in BORN_HOSTS])
def test_born_host(text, want):
    assert convert._born_host(text) == want


def test_born_hosts_are_what_the_store_parses():
    from mqstore.services.common.convert import parse_host

    for text, want in BORN_HOSTS.items():
        host = parse_host(convert._born_host(text))
        assert f"[{host.address}]:{host.port}" == want or f"{host.address}:{host.port}" == want, text
