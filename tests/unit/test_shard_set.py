"""The fronts' shard-access layer without servers (services/common/shard_set.py,
shard_clients.py, query/merge.py): the topic table's freshness rule, fan-out and
any-shard over fake shards, a batch's answer when some of its shards failed, and a
shard connection's refusals (a closed loopback port: no server, nothing sent)."""

from __future__ import annotations

import asyncio
import socket

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.rpc.v1 import commitlog_pb2, common_pb2
from mqstore.services.common import shard_rule
from mqstore.services.common.errors import BadRequest, Precondition, RpcError, Unavailable
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.shard_clients import Connection, Shard, ShardUnreachable
from mqstore.services.common.shard_set import DOWN_FOR_S, ShardSet, TopicTable
from mqstore.services.query.merge import merge_parts
from tests.tiers import examples


def run(coro):
    return asyncio.run(coro)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def config(topic: str, *, queues: int = 8, perm: int = 6, message_type: str = "") -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic=topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm, message_type=message_type
    )


class FakeCommitLog:
    def __init__(self, shard: FakeShard) -> None:
        self._shard = shard

    async def list_topics(self, **_):
        self._shard.asked.append("ListTopics")
        if self._shard.down:
            raise Unavailable(f"shard {self._shard.shard} is down")
        return commitlog_pb2.ListTopicsResponse(configs=self._shard.configs)


class FakeShard:
    """What the shard set uses of a shard: its number and its commitlog's ListTopics."""

    def __init__(self, shard: int, configs=(), *, down: bool = False) -> None:
        self.shard = shard
        self.configs = list(configs)
        self.down = down
        self.asked: list[str] = []
        self.commitlog = FakeCommitLog(self)
        self.closed = False

    async def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------------- the topic table


def test_the_topic_table_serves_one_fetch_for_its_age_then_fetches_again():
    clock, fetched = Clock(), []

    async def fetch(prefer):
        fetched.append(prefer)
        return [config("A", queues=len(fetched))]

    async def main():
        table = TopicTable(fetch, default_queue_nums=4, max_age_s=1.0, clock=clock)
        first = await table.get()
        clock.now += 1.0  # at its age: still served
        assert await table.get("s1") is first and fetched == [None]
        clock.now += 0.01
        second = await table.get("s1")
        assert second is not first and fetched == [None, "s1"] and second.write_queues("A") == 2

    run(main())


def test_a_change_through_this_front_is_fetched_at_the_next_use():
    clock, fetched = Clock(), []

    async def fetch(prefer):
        fetched.append(prefer)
        return [config("A", perm=6 if len(fetched) == 1 else 4)]

    async def main():
        table = TopicTable(fetch, default_queue_nums=4, clock=clock)
        assert (await table.get()).perm("A") == 6
        table.changed()  # no time passed
        assert (await table.get()).perm("A") == 4 and len(fetched) == 2 and table.changes == 1

    run(main())


def test_a_failed_fetch_keeps_nothing_and_the_next_use_asks_again():
    clock, calls = Clock(), []

    async def fetch(prefer):
        calls.append(prefer)
        if len(calls) == 1:
            raise Unavailable("no shard answered")
        return [config("A")]

    async def main():
        table = TopicTable(fetch, default_queue_nums=4, clock=clock)
        with pytest.raises(Unavailable):
            await table.get()
        assert "A" in await table.get() and len(calls) == 2

    run(main())


def test_topics_answer_the_stores_defaults_for_a_topic_without_config():
    async def fetch(prefer):
        return [config("Fifo", queues=3, perm=4, message_type="FIFO")]

    table = run(TopicTable(fetch, default_queue_nums=5).get())
    assert table.perm("Fifo") == 4 and table.perm("None") is None
    assert table.write_queues("Fifo") == 3 and table.write_queues("None") == 5
    assert table.write_queue_nums() == {"Fifo": 3}
    r = table.route("Fifo")
    assert (r.read_queues, r.write_queues, r.perm, r.fifo) == (3, 3, 4, True)
    d = table.route("None")
    assert (d.read_queues, d.write_queues, d.perm, d.message_type, d.fifo) == (5, 5, 6, "NORMAL", False)
    c = table.config("Fifo")
    assert c.topic_name == "Fifo" and c.message_type.name == "FIFO" and table.config("Fifo") is c
    assert table.config("None") is None


# ---------------------------------------------------------------------- routing


def test_a_shard_set_takes_its_shards_in_order():
    with pytest.raises(ValueError):
        ShardSet([])
    with pytest.raises(ValueError):
        ShardSet([FakeShard(1), FakeShard(0)])


@settings(max_examples=examples(200))
@given(
    rows=st.lists(st.tuples(st.sampled_from(["A", "B", "TopicTest", "%DLQ%g"]), st.integers(0, 63)), max_size=30),
    count=st.integers(1, 6),
)
def test_a_batch_split_by_shard_is_the_rule_per_message(rows, count):
    shards = ShardSet([FakeShard(i) for i in range(count)])
    topics = [t for t, _ in rows]
    qids = np.array([q for _, q in rows], np.int64)
    on = shards.shards_of(topics, qids)
    parts = shards.parts(on)
    assert sorted(i for _, r in parts for i in r.tolist()) == list(range(len(rows)))
    for s, r in parts:
        assert all(shards.shard_of(topics[i], int(qids[i])) == s for i in r.tolist())
        assert list(r) == sorted(r)
    by_shard = shards.queues_by_shard("TopicTest", 16)
    for s, held in by_shard.items():
        assert held == shard_rule.queues_on("TopicTest", 16, s, count)
        assert shards.queue_on("TopicTest", s) == held[0] or count > 16


# ---------------------------------------------------------------------- fan-out


def test_fan_out_raises_the_first_failure_and_settled_fan_out_answers_each_shard():
    shards = ShardSet([FakeShard(i) for i in range(3)])

    async def ask(s):
        await asyncio.sleep(0.001 * (3 - s.shard))
        if s.shard == 1:
            raise Unavailable("shard 1 is down")
        return s.shard * 10

    with pytest.raises(Unavailable, match="shard 1"):
        run(shards.fan_out(ask))
    answers = run(shards.fan_out_settled(ask))
    assert answers[0] == 0 and answers[2] == 20 and isinstance(answers[1], Unavailable)
    assert run(shards.fan_out_settled(ask, [shards[2]])) == [20]


def test_any_shard_moves_past_a_shard_that_is_down_and_asks_it_last_for_a_while():
    clock = Clock()
    down, up = FakeShard(0, [config("A")], down=True), FakeShard(1, [config("A")])
    shards = ShardSet([down, up], clock=clock)

    async def main():
        assert "A" in await shards.topics.get()
        assert down.asked == ["ListTopics"] and up.asked == ["ListTopics"]
        clock.now += 2.0  # the table is stale; shard 0 is still asked last
        await shards.topics.get()
        assert down.asked == ["ListTopics"] and len(up.asked) == 2
        clock.now += DOWN_FOR_S  # its time as "down" is over: in order again
        down.down = False
        await shards.topics.get()
        assert len(down.asked) == 2 and len(up.asked) == 2

    run(main())


def test_any_shard_asks_the_preferred_shard_first():
    a, b = FakeShard(0, [config("A")]), FakeShard(1, [config("A")])
    shards = ShardSet([a, b])
    run(shards.topics.get(b))
    assert a.asked == [] and b.asked == ["ListTopics"]


def test_any_shard_raises_what_is_not_a_shard_down_and_names_every_shard_when_none_answers():
    shards = ShardSet([FakeShard(0), FakeShard(1)])

    async def refused(s):
        raise BadRequest("bad")

    with pytest.raises(BadRequest):
        run(shards.any_shard(refused))

    async def down(s):
        raise Unavailable(f"down {s.shard}")

    with pytest.raises(Unavailable, match="shard 0: down 0; shard 1: down 1"):
        run(shards.any_shard(down))


def test_closing_the_set_closes_every_shard():
    fakes = [FakeShard(0), FakeShard(1)]
    run(ShardSet(fakes).close())
    assert all(f.closed for f in fakes)


# ---------------------------------------------------------------------- partial failures


def answer(rows: list[int], shard: int) -> commitlog_pb2.AppendBatchResponse:
    n = len(rows)
    return commitlog_pb2.AppendBatchResponse(
        result=common_pb2.AppendResult(
            statuses=[common_pb2.PUT_OK] * n,
            msg_ids=[f"id{shard}-{i}" for i in rows],
            physical_offsets=[100 * shard + i for i in rows],
            sizes=[10] * n,
            queue_ids=[shard] * n,
            queue_offsets=list(range(n)),
            unique_keys=[""] * n,
            store_timestamps=[1] * n,
            shards=[shard] * n,
        )
    )


def test_a_batch_whose_shards_partly_failed_says_per_message_what_is_known():
    parts = [(0, np.array([0, 3])), (1, np.array([1])), (2, np.array([2, 4]))]
    qids = np.array([0, 1, 2, 0, 2])
    answers = [
        answer([0, 3], 0),
        ShardUnreachable("shard 1 can not be reached"),  # nothing sent: surely not stored
        RpcError("answer lost", grpc.StatusCode.UNAVAILABLE),  # sent, answer lost: may be stored
    ]
    res = merge_parts(5, qids, parts, answers)
    r = res.result
    assert list(r.statuses) == [
        common_pb2.PUT_OK,
        common_pb2.NOT_STORED,
        common_pb2.SHARD_FAILED,
        common_pb2.PUT_OK,
        common_pb2.SHARD_FAILED,
    ]
    assert list(r.shards) == [0, 1, 2, 0, 2] and list(r.queue_ids)[1:3] == [1, 2]
    assert r.msg_ids[0] == "id0-0" and r.msg_ids[3] == "id0-3" and r.physical_offsets[1] == -1
    assert [(e.shard, e.code) for e in res.shard_errors] == [(1, "UNAVAILABLE"), (2, "UNAVAILABLE")]


def test_a_refused_part_is_not_stored_and_a_short_answer_is_a_failure():
    parts = [(0, np.array([0])), (1, np.array([1, 2]))]
    short = answer([1], 1)  # one status for two messages
    res = merge_parts(3, np.zeros(3, np.int64), parts, [Precondition("moved"), short])
    assert list(res.result.statuses) == [common_pb2.NOT_STORED, common_pb2.SHARD_FAILED, common_pb2.SHARD_FAILED]
    assert [e.code for e in res.shard_errors] == ["FAILED_PRECONDITION", "INTERNAL"]


def test_a_batch_whose_every_shard_failed_alike_fails_whole_naming_each():
    parts = [(0, np.array([0])), (1, np.array([1]))]
    with pytest.raises(RpcError, match="shard 0: a; shard 1: b") as e:
        merge_parts(2, np.zeros(2, np.int64), parts, [Unavailable("a"), Unavailable("b")])
    assert e.value.code is grpc.StatusCode.UNAVAILABLE
    with pytest.raises(BadRequest):  # one part: its own failure
        merge_parts(1, np.zeros(1, np.int64), [(0, np.array([0]))], [BadRequest("no")])


# ---------------------------------------------------------------------- a shard's connection


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_shard_without_the_process_refuses_before_sending():
    shard = Shard(0, {}, auth=InternalAuth.new())
    with pytest.raises(Precondition, match="message_index_enable=False"):
        run(shard.index.query(None))
    with pytest.raises(Precondition, match="no consume-queue builder"):
        run(shard.queues.min_max("T"))
    assert shard.services == set()
    assert not shard.has_dispatcher and run(shard.dispatcher_status()) is None


def test_calls_waiting_for_a_shard_share_one_resolution_and_a_refused_connection_is_unreachable():
    port, resolved = closed_port(), []

    async def resolve() -> str:
        resolved.append(1)
        await asyncio.sleep(0.05)
        return f"127.0.0.1:{port}"

    async def main():
        conn = Connection(0, "cl", resolve, _stub, InternalAuth.new())
        calls = [conn.call(lambda s: s.GetOffsets, commitlog_pb2.GetOffsetsRequest(), retry=False) for _ in range(3)]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert len(resolved) == 1
        assert all(isinstance(o, ShardUnreachable) for o in outcomes), outcomes
        assert "refuses connections" in str(outcomes[0]) or "took no connection" in str(outcomes[0])
        # the channel was dropped: the next call finds the shard again
        with pytest.raises(ShardUnreachable):
            await conn.call(lambda s: s.GetOffsets, commitlog_pb2.GetOffsetsRequest(), retry=False)
        assert len(resolved) == 2
        await conn.reset()

    run(main())


def test_a_resolver_that_fails_makes_the_shard_unreachable():
    async def resolve() -> str:
        raise LookupError("no actor named commitlog-0")

    async def main():
        conn = Connection(0, "cl", resolve, _stub, InternalAuth.new())
        with pytest.raises(ShardUnreachable, match="LookupError: no actor named commitlog-0"):
            await conn.call(lambda s: s.GetOffsets, commitlog_pb2.GetOffsetsRequest())

    run(main())


def _stub(ch):
    from mqstore.rpc.v1 import commitlog_pb2_grpc

    return commitlog_pb2_grpc.CommitLogServiceStub(ch)
