"""mqstore/store/consumer_rules.py: which stored records a RocketMQ 5 consumer can
take, in one place, and that the port's converter takes exactly those; the front's
guard sets a record it can not convert aside alone (issue 25, item 4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqstore import MessageStore, StoreConfig
from mqstore.formats.message import MessageRecord, decode_records
from mqstore.formats.msgid import Host
from mqstore.rpc.v1 import consume_queue_pb2 as cq
from mqstore.services.rocketmq import convert
from mqstore.services.rocketmq.messaging import _messages
from mqstore.store.consumer_rules import MAX_TIME_MS, MIN_TIME_MS, delivery_ms, unconvertible
from mqstore.store.messages import MessageBatch

NOW = 1_700_000_000_000


def record(born: int = NOW, stored: int = NOW, **props: str) -> MessageRecord:
    return MessageRecord(
        total_size=0,
        magic=0,
        body_crc=0,
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sysflag=0,
        born_timestamp=born,
        born_host=Host("127.0.0.1", 0),
        store_timestamp=stored,
        store_host=Host("127.0.0.1", 10911),
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=b"x",
        topic="T",
        properties=dict(props),
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("0", 0),
        ("-5", -5),
        ("007", 7),  # not canonical, still a time: delivered as before
        ("", None),
        ("soon", None),  # no integer: no delivery time, delivered at once as before
        ("\u00b2", None),  # str.isdigit() says yes, int() says no: it once failed the receive
        ("\u0663", None),  # a non-ASCII digit
        ("1e9", None),
        ("9" * 30, 1 << 64),  # huge: beyond every range, without int() of a long text
        ("-" + "9" * 30, -(1 << 64)),
        ("9" * 5000, 1 << 64),  # int() refuses over 4300 digits
    ],
)
def test_delivery_ms(text: str, want: int | None) -> None:
    assert delivery_ms({"TIMER_DELIVER_MS": text}) == want
    assert delivery_ms({}) is None


@pytest.mark.parametrize(
    ("rec", "code"),
    [
        (record(), None),
        (record(born=MIN_TIME_MS), None),
        (record(born=MAX_TIME_MS), None),
        (record(born=0), None),
        (record(born=MIN_TIME_MS - 1), "born_time"),
        (record(born=MAX_TIME_MS + 1), "born_time"),
        (record(born=1 << 62), "born_time"),
        (record(stored=-(1 << 62)), "store_time"),
        (record(TIMER_DELIVER_MS=str(NOW + 3600_000)), None),
        (record(TIMER_DELIVER_MS=str(MAX_TIME_MS)), None),
        (record(TIMER_DELIVER_MS=str(MAX_TIME_MS + 1)), "delivery_time"),
        (record(TIMER_DELIVER_MS=str(1 << 63)), "delivery_time"),
        (record(TIMER_DELIVER_MS="9" * 5000), "delivery_time"),
        (record(TIMER_DELIVER_MS=str(MIN_TIME_MS - 1)), "delivery_time"),
        (record(TIMER_DELIVER_MS="later"), None),
    ],
)
def test_unconvertible_names_why(rec: MessageRecord, code: str | None) -> None:
    why = unconvertible(rec)
    assert (why and why.code) == code
    if why is not None:
        assert why.reason and len(why.reason) < 300  # a sentence, never the whole value


times = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(MIN_TIME_MS - 2, MIN_TIME_MS + 2),
    st.integers(MAX_TIME_MS - 2, MAX_TIME_MS + 2),
)
deliver_texts = st.one_of(
    st.none(),
    times.map(str),
    st.integers(0, 1 << 80).map(str),
    st.text("0123456789-\u00b2\u0663x", min_size=1, max_size=25),
)


@given(born=times, stored=times, deliver=deliver_texts)
def test_the_converter_takes_exactly_what_the_rule_lets_through(born: int, stored: int, deliver: str | None) -> None:
    """One rule for the shard and the port: what unconvertible() passes, to_message
    converts; what it refuses, to_message can not convert either."""
    rec = record(born, stored, **({} if deliver is None else {"TIMER_DELIVER_MS": deliver}))
    why = unconvertible(rec)
    try:
        convert.to_message(rec, receipt_handle="h", attempt=1, invisible_ms=1000)
    except (ValueError, OverflowError):
        assert why is not None
    else:
        assert why is None


def test_the_front_guard_sets_one_message_aside_and_answers_the_others(tmp_path) -> None:
    """A record the converter can not take among good ones (the shard's check is the
    rule, this is the guard): the good ones come through, the bad one is named."""
    with MessageStore(tmp_path, StoreConfig(segment_bytes=4 << 20), background_dispatch=False) as store:
        res = store.commitlog.append(  # the commitlog's own append: no producer door
            MessageBatch(topics="T", bodies=[b"a", b"poison", b"c"], queue_ids=0, born_timestamps=[NOW, 1 << 60, NOW])
        )
        raw = store.commitlog.read_raw(np.asarray(res.physical_offsets), np.asarray(res.sizes))
        data = bytes(raw.buffer[raw.offsets[0] : raw.offsets[3]])
    answer = cq.PopResponse(records=data)
    for i in range(3):
        answer.messages.add(queue_id=0, queue_offset=i, attempt=1, receipt_handle=f"h{i}", size=int(res.sizes[i]))
    assert unconvertible(decode_records(data, np.asarray([int(res.sizes[0])]), check_crc=False)[0]).code == "born_time"
    messages, failed = _messages(answer, 30_000)
    assert [m.body for m in messages] == [b"a", b"c"]
    assert [m.system_properties.receipt_handle for m in messages] == ["h0", "h2"]
    ((handle, reason),) = failed
    assert handle == "h1" and "could not convert" in reason
