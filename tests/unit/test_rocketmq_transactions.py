"""The records of RocketMQ transactions (services/rocketmq/transactions.py) without a
server: a half, the message its commit becomes, op records and the check-back message,
each through the store's own encoder and decoder (a small MessageStore's internal
append, as DeliverDelayed writes them); transaction ids; the progress point of a
shard's halves (a model run: it is never ahead of what is resolved)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore import MessageStore, StoreConfig
from mqstore.formats.message import TRANSACTION_TYPE_MASK, SysFlag, decode_records
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.rpc.v1 import common_pb2
from mqstore.services.common.convert import columns_to_batch
from mqstore.services.rocketmq import convert
from mqstore.services.rocketmq import transactions as tx
from mqstore.services.rocketmq.status import Code, ProtocolError
from tests.tiers import examples

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
    assert tx.real_queue(half) == ("Orders", 3)
    assert tx.first_check_ms(half.store_timestamp, p, 6_000) == half.store_timestamp + 30_000
    (plain,) = stored(store, tx.half_columns([tx_message(None)], [1], 0, MAX_BODY, NOW_MS))
    assert tx.first_check_ms(plain.store_timestamp, plain.properties, 6_000) == plain.store_timestamp + 6_000


def test_a_half_without_a_born_time_gets_now(store):
    m = tx_message()
    m.system_properties.ClearField("born_timestamp")
    (half,) = stored(store, tx.half_columns([m], [0], 0, MAX_BODY, NOW_MS))
    assert half.born_timestamp == NOW_MS


def test_a_commit_is_the_producers_message_again(store):
    m = tx_message()
    (half,) = stored(store, tx.half_columns([m], [2], 0, MAX_BODY, NOW_MS))
    (real,) = stored(store, tx.committed_columns(half))
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
    ops = stored(store, tx.op_columns(2, [5, 70], NOW_MS))
    assert [(r.topic, r.queue_id, r.tags, r.body) for r in ops] == [
        (tx.OP_TOPIC, 2, "d", b"5,"),
        (tx.OP_TOPIC, 2, "d", b"70,"),
    ]
    assert [tx.parse_op_body(r.body) for r in ops] == [[5], [70]]
    assert tx.parse_op_body(b"1,2,3,") == [1, 2, 3]  # RocketMQ's batched op body
    assert tx.parse_op_body(b"12") == [12]  # an older broker's
    assert tx.parse_op_body(b"x,3,,-1,\xff") == [3]


def test_a_commit_and_its_op_are_one_append(store):
    (half,) = stored(store, tx.half_columns([tx_message()], [0], 0, MAX_BODY, NOW_MS))
    both = tx.join_columns(tx.committed_columns(half), tx.op_columns(0, [half.queue_offset], NOW_MS))
    real, op = stored(store, both)
    assert (real.topic, op.topic, tx.parse_op_body(op.body)) == ("Orders", tx.OP_TOPIC, [half.queue_offset])
    (kept,) = stored(store, tx.discard_columns(half, 0))
    assert kept.topic == tx.CHECK_MAX_TOPIC and kept.properties["REAL_TOPIC"] == "Orders"
    with pytest.raises(ValueError):
        tx.join_columns(tx.op_columns(0, [1], NOW_MS), v2_columns_without_tags())


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


def half(q: int) -> tx.Half:
    return tx.Half(q, 1000 + q, "T", f"id{q}", 0)


def test_progress_point_by_hand():
    sh = tx.ShardHalves(0, 0, 0)
    for q in range(5):
        sh.add(half(q))
    sh.resolve(1, 0)
    sh.resolve(3, 1)
    assert sh.progress() == (0, 0)
    sh.resolve(0, 2)
    assert sh.progress() == (2, 1)  # op 1 (for half 3) is still needed
    assert sh.ended(0) and sh.ended(1) and sh.ended(3) and not sh.ended(2)
    sh.busy += 1
    assert sh.progress() is None  # a write in flight: nothing is stored
    sh.busy -= 1
    sh.resolve(2, 3)
    sh.resolve(4, 4)
    assert sh.progress() == (5, 5)
    assert sh.resolved == {} and all(sh.ended(q) for q in range(5))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "resolve", "save"]), st.integers(0, 30)), max_size=80))
def test_progress_point_is_never_ahead(steps):
    """Whatever the order of halves and their ends, a stored (H, P) says no more than
    is true: every half below H has an op record, every op record below P names a half
    below H (so a recovery from (H, P) misses no pending half and no op it needs)."""
    sh = tx.ShardHalves(0, 0, 0)
    ops: list[int] = []  # op offset -> half offset
    halves = 0
    for action, n in steps:
        if action == "add":
            sh.add(half(halves))
            halves += 1
        elif action == "resolve" and sh.pending:
            q = sorted(sh.pending)[n % len(sh.pending)]
            ops.append(q)
            sh.resolve(q, len(ops) - 1)
        elif action == "save":
            h, p = sh.progress()
            done = set(ops)
            assert all(q in done for q in range(h))
            assert all(ops[o] < h for o in range(p))
            assert all(q in sh.pending or sh.ended(q) for q in range(halves))


def test_halves_are_found_by_their_offset_and_ended_ones_are_bounded(monkeypatch):
    """EndTransaction looks a transaction id's offset up in memory (never reads the
    commitlog at it): pending halves by their commitlog offset, ended ones among the
    last ENDED_KEPT of the shard; every miss is one INVALID_TRANSACTION_ID text."""
    monkeypatch.setattr(tx, "ENDED_KEPT", 3)
    sh = tx.ShardHalves(0, 0, 0)
    for q in range(5):
        sh.add(half(q))
    assert sh.pending_at(1002).queue_offset == 2 and sh.pending_at(1005) is None
    for q in range(5):
        sh.resolve(q, q)
    assert all(sh.pending_at(1000 + q) is None for q in range(5))
    assert list(sh.ended_at) == [1002, 1003, 1004]  # the oldest forgotten first
    assert sh.ended_at[1004].message_id == "id4"
    answers = set()
    for bad in ["", "   ", "garbage", "7F00000100002A9F", "Z" * 32]:
        with pytest.raises(ProtocolError) as e:
            tx.parse_transaction_id(bad)
        answers.add((e.value.code, str(e.value)))
    assert answers == {(Code.INVALID_TRANSACTION_ID, tx.NO_TRANSACTION)}


class _Shard:
    def __init__(self, shard: int) -> None:
        self.shard = shard


def test_the_transaction_service_needs_only_the_shard_set_and_the_producers():
    """Transactions run over the front's ShardSet (routing, typed clients) and a
    producers(topic) callback, not over the RocketMQ servicer: each shard's half, op
    and discard queues are the lowest of their topics the shard rule puts there."""
    from mqstore.services.common.shard_set import ShardSet

    shards = ShardSet([_Shard(i) for i in range(3)])
    svc = tx.TransactionService(shards, producers=lambda topic: [], max_body=1024)
    for s in range(3):
        st_ = svc.shard(s)
        assert shards.shard_of(tx.HALF_TOPIC, st_.half_queue) == s and shards.shard_of(tx.OP_TOPIC, st_.op_queue) == s
        assert st_.half_queue == min(q for q in range(3) if shards.shard_of(tx.HALF_TOPIC, q) == s)
    assert svc.max_body == 1024 and svc.shard(1) is svc.shard(1)
