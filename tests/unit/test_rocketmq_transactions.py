"""The records of RocketMQ transactions without a server: a half (the front's,
services/rocketmq/transactions.py), the message its commit becomes, op and discard
records (the shard's, services/index/transactions.py) and the check-back message,
each through the store's own encoder and decoder (a small MessageStore's internal
append, as DeliverDelayed writes them); transaction ids; where a shard keeps its half,
op and discard queues. The rules are tests/unit/test_transaction_rules.py's."""

from __future__ import annotations

import numpy as np
import pytest

from mqstore import MessageStore, StoreConfig
from mqstore.formats.message import TRANSACTION_TYPE_MASK, SysFlag, decode_records
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.rpc.v1 import common_pb2
from mqstore.services.common.convert import columns_to_batch
from mqstore.services.index import transactions as shard_tx
from mqstore.services.rocketmq import convert
from mqstore.services.rocketmq import transactions as tx
from mqstore.services.rocketmq.status import Code, ProtocolError
from mqstore.store import transaction_rules as rules

MAX_BODY = 4 << 20
NOW_MS = 1_790_000_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = MessageStore(
        tmp_path_factory.mktemp("tx-store"), StoreConfig(segment_bytes=16 << 20), background_dispatch=False
    )
    yield s
    s.close()


def stored(store: MessageStore, cols) -> list:
    """``cols`` appended as DeliverDelayed appends (as given), read back and decoded."""
    res = store.log.deliver(columns_to_batch(cols, exact_born_times=True))
    out = []
    for off, size in zip(res.physical_offsets, res.sizes):
        raw = store.commitlog.read_raw(np.array([off]), np.array([size]))
        out.append(decode_records(bytes(raw.buffer[raw.offsets[0] : raw.offsets[1]]), np.zeros(1, np.int64))[0])
    return out


def tx_message(recovery_s: int | None = 30) -> v2.Message:
    m = v2.Message(topic=v2.Resource(name="Orders"), body=b"paid", user_properties={"amount": "12", "cur": "EUR"})
    sp = m.system_properties
    sp.message_id = "01AABBCCDDEEFF00112233445566778899"
    sp.tag = "Pay"
    sp.keys.extend(["order-1", "user-7"])
    sp.message_type = v2.TRANSACTION
    sp.born_timestamp.FromMilliseconds(NOW_MS - 5)
    sp.born_host = "10.1.2.3"
    if recovery_s is not None:
        sp.orphaned_transaction_recovery_duration.seconds = recovery_s
    convert.check_message(m, (v2.TRANSACTION,), NOW_MS, MAX_BODY)
    return m


def test_a_half_is_stored_as_rocketmq_stores_it(store):
    m = tx_message()
    (half,) = stored(store, tx.half_columns([m], [3], 0, MAX_BODY, NOW_MS))
    assert (half.topic, half.queue_id, half.body) == (tx.HALF_TOPIC, 0, b"paid")
    assert half.sysflag & TRANSACTION_TYPE_MASK == 0  # parseHalfMessageInner: TRANSACTION_NOT_TYPE
    p = half.properties
    assert (p["REAL_TOPIC"], p["REAL_QID"], p["TRAN_MSG"], p["PGROUP"]) == ("Orders", "3", "true", "Orders")
    assert p["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "30"
    assert half.unique_key == m.system_properties.message_id
    assert (half.tags, half.keys, p["amount"]) == ("Pay", "order-1 user-7", "12")
    assert half.born_timestamp == NOW_MS - 5 and str(half.born_host) == "10.1.2.3:0"
    assert rules.real_queue(half) == ("Orders", 3)
    assert rules.first_check_ms(half.store_timestamp, p, 6_000) == half.store_timestamp + 30_000
    (plain,) = stored(store, tx.half_columns([tx_message(None)], [1], 0, MAX_BODY, NOW_MS))
    assert rules.first_check_ms(plain.store_timestamp, plain.properties, 6_000) == plain.store_timestamp + 6_000


def test_a_half_without_a_born_time_gets_now(store):
    m = tx_message()
    m.system_properties.ClearField("born_timestamp")
    (half,) = stored(store, tx.half_columns([m], [0], 0, MAX_BODY, NOW_MS))
    assert half.born_timestamp == NOW_MS


def test_a_commit_is_the_producers_message_again(store):
    m = tx_message()
    (half,) = stored(store, tx.half_columns([m], [2], 0, MAX_BODY, NOW_MS))
    (real,) = stored(store, shard_tx.committed_columns(half))
    assert (real.topic, real.queue_id, real.body) == ("Orders", 2, b"paid")
    assert real.sysflag & TRANSACTION_TYPE_MASK == SysFlag.TRANSACTION_COMMIT  # EndTransactionProcessor's
    for gone in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG", "CHECK_IMMUNITY_TIME_IN_SECONDS"):
        assert gone not in real.properties
    assert real.unique_key == m.system_properties.message_id and real.properties["PGROUP"] == "Orders"
    assert (real.born_timestamp, real.born_host) == (half.born_timestamp, half.born_host)
    got = convert.to_message(real, receipt_handle="h", attempt=1, invisible_ms=1000)
    sp = got.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys)) == (m.system_properties.message_id, "Pay", ["order-1", "user-7"])
    assert sp.message_type == v2.NORMAL  # RocketMQ clears TRAN_MSG: consumers see a normal message
    assert dict(got.user_properties) == dict(m.user_properties)
    assert got.body == b"paid" and got.topic.name == "Orders"


def test_the_check_back_message_is_the_real_one(store):
    m = tx_message()
    (half,) = stored(store, tx.half_columns([m], [1], 0, MAX_BODY, NOW_MS))
    got = tx.check_back_message(half)
    sp = got.system_properties
    assert got.topic.name == "Orders" and got.body == b"paid"
    assert sp.message_id == m.system_properties.message_id and sp.message_type == v2.TRANSACTION
    assert sp.queue_id == 1 and sp.body_digest.type == v2.MD5
    assert not sp.HasField("receipt_handle") and not sp.HasField("delivery_attempt")
    assert dict(got.user_properties) == dict(m.user_properties)


def test_op_records_and_their_bodies(store):
    ops = stored(store, shard_tx.op_columns(2, [5, 70], NOW_MS))
    assert [(r.topic, r.queue_id, r.tags, r.body) for r in ops] == [
        (tx.OP_TOPIC, 2, "d", b"5,"),
        (tx.OP_TOPIC, 2, "d", b"70,"),
    ]
    assert [rules.parse_op_body(r.body) for r in ops] == [[5], [70]]
    assert rules.parse_op_body(b"1,2,3,") == [1, 2, 3]  # RocketMQ's batched op body
    assert rules.parse_op_body(b"12") == [12]  # an older broker's
    assert rules.parse_op_body(b"x,3,,-1,\xff") == [3]


def test_a_commit_and_its_op_are_one_append(store):
    (half,) = stored(store, tx.half_columns([tx_message()], [0], 0, MAX_BODY, NOW_MS))
    both = shard_tx.join_columns(shard_tx.committed_columns(half), shard_tx.op_columns(0, [half.queue_offset], NOW_MS))
    real, op = stored(store, both)
    assert (real.topic, op.topic, rules.parse_op_body(op.body)) == ("Orders", tx.OP_TOPIC, [half.queue_offset])
    (kept,) = stored(store, shard_tx.discard_columns(half, 0))
    assert kept.topic == tx.CHECK_MAX_TOPIC and kept.properties["REAL_TOPIC"] == "Orders"
    with pytest.raises(ValueError):
        shard_tx.join_columns(shard_tx.op_columns(0, [1], NOW_MS), v2_columns_without_tags())


def v2_columns_without_tags():
    return common_pb2.MessageColumns(topics=["T"], bodies=[b"x"], queue_ids=[0])


def test_transaction_ids(store):
    (half,) = stored(store, tx.half_columns([tx_message()], [0], 0, MAX_BODY, NOW_MS))
    host, offset = tx.parse_transaction_id(half.msg_id)
    assert (host, offset) == (half.store_host, half.physical_offset)
    for bad in ["", "   ", "garbage", "7F00000100002A9F", "Z" * 32]:
        with pytest.raises(ProtocolError) as e:
            tx.parse_transaction_id(bad)
        assert e.value.code == Code.INVALID_TRANSACTION_ID and str(e.value)


def test_each_shard_keeps_its_own_half_op_and_discard_queues():
    """A shard's transactions learn the shard count from the fronts' calls: its half,
    op and discard queues are the lowest of their topics the shard rule puts there, and
    a call naming another count is refused."""
    import asyncio

    from mqstore.services.common import shard_rule
    from mqstore.services.common.errors import BadRequest

    class _State:
        def __init__(self, shard: int) -> None:
            self.shard = shard

    class _CommitLog:
        async def close_stream(self) -> None:
            pass

        class conn:  # noqa: N801 - stands for a Connection
            @staticmethod
            async def reset() -> None:
                pass

    async def run() -> None:
        for s in range(3):
            keeper = shard_tx.ShardTransactions(_State(s), _CommitLog())
            keeper.recover = asyncio.Event().wait  # (no store here)
            halves = keeper.learn_shards(3)
            assert shard_rule.shard_of(rules.HALF_TOPIC, halves.half_queue, 3) == s
            assert shard_rule.shard_of(rules.OP_TOPIC, halves.op_queue, 3) == s
            assert shard_rule.shard_of(rules.CHECK_MAX_TOPIC, keeper.check_max_queue, 3) == s
            assert halves.half_queue == min(q for q in range(3) if shard_rule.shard_of(rules.HALF_TOPIC, q, 3) == s)
            assert keeper.learn_shards(3) is halves
            with pytest.raises(BadRequest):
                keeper.learn_shards(4)
            await keeper.stop()
        with pytest.raises(BadRequest):
            shard_tx.ShardTransactions(_State(2), _CommitLog()).learn_shards(2)  # shard 2 of 2: no such shard

    asyncio.run(run())
