"""The dispatcher sends the consume-queue builder its topics as ids of its epoch
(PutUnits' topic_epoch, topic_ids, named_ids), naming each id once per resync: a
dispatcher that restarts (a new epoch) and a builder that restarts (it forgets every
epoch) against running peers; every unit lands in its own topic's queue."""

from __future__ import annotations

import threading

import grpc
import pytest

from mqstore.rpc.v1 import commitlog_pb2, common_pb2, consume_queue_pb2
from mqstore.services.common.columns import INT32, INT64, pack
from tests.services.helpers import small_config
from tests.services.test_shard_services import Parts

TOPICS = [f"Ids{i}" for i in range(40)]


def _send(cl, start: int, count: int, topics: list[str]) -> None:
    names = [topics[i % len(topics)] for i in range(start, start + count)]
    cl.AppendBatch(
        commitlog_pb2.AppendBatchRequest(
            messages=common_pb2.MessageColumns(
                topics=names, bodies=[f"{t}:{i}".encode() for i, t in zip(range(start, start + count), names)]
            )
        )
    )


def _wait_dispatched(parts: Parts, cl) -> None:
    for _ in range(1500):
        offsets = cl.GetOffsets(commitlog_pb2.GetOffsetsRequest())
        if parts.disp.dispatcher.dispatched_offset >= offsets.confirm_offset > 0:
            return
        threading.Event().wait(0.02)
    raise AssertionError(f"not dispatched: {parts.disp.status()}")


@pytest.mark.parametrize("part", ["disp", "cq"])
@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_units_land_in_their_topics_across_a_restart(tmp_path, part) -> None:
    parts = Parts(tmp_path, small_config(), dispatcher=True)
    try:
        chs, (cl, _, _) = parts.stubs()
        _send(cl, 0, 400, TOPICS[:30])
        _wait_dispatched(parts, cl)
        epoch = parts.disp.dispatcher.topic_epoch
        resyncs = parts.disp.status()["resyncs"]
        for ch in chs:
            ch.close()
        getattr(parts, part).close()
        setattr(parts, part, parts.start(part))
        chs, (cl, cq, _) = parts.stubs()
        _send(cl, 400, 400, TOPICS[10:])  # topics named before the restart, and new ones
        _wait_dispatched(parts, cl)
        if part == "disp":
            assert parts.disp.dispatcher.topic_epoch != epoch  # a new dispatcher numbers topics anew
        else:
            assert parts.disp.status()["resyncs"] > resyncs  # told names were forgotten: named again
        seen = []
        for t in TOPICS:
            for q in range(4):
                u = cq.GetUnits(consume_queue_pb2.GetUnitsRequest(topic=t, queue_id=q, offset=0, max_units=1000))
                if not u.physical_offsets:
                    continue
                recs = cl.Read(commitlog_pb2.ReadRequest(offsets=u.physical_offsets)).records
                assert {r.topic for r in recs} == {t} and [r.queue_offset for r in recs] == list(range(len(recs)))
                seen += [int(r.body.split(b":")[1]) for r in recs]
        assert sorted(seen) == list(range(800))  # every message once, in its topic's queues
        for ch in chs:
            ch.close()
    finally:
        parts.close()


def test_a_topic_id_never_named_is_refused_before_anything_is_written(tmp_path) -> None:
    parts = Parts(tmp_path, small_config())
    try:
        chs, (cl, cq, _) = parts.stubs()
        res = cl.AppendBatch(
            commitlog_pb2.AppendBatchRequest(
                messages=common_pb2.MessageColumns(topics=["Ids0"], bodies=[b"x"], queue_ids=[0])
            )
        ).result
        inc = cl.GetOffsets(commitlog_pb2.GetOffsetsRequest()).incarnation
        put = consume_queue_pb2.PutUnitsRequest(
            incarnation=inc,
            topic_epoch=5,
            topic_ids=pack([3], INT32),
            topic_codes=pack([0], INT32),
            queue_ids=pack([0], INT32),
            queue_offsets=pack([0], INT64),
            physical_offsets=pack(res.physical_offsets, INT64),
            sizes=pack(res.sizes, INT32),
            tags_codes=pack([0], INT64),
            store_timestamps=pack([0], INT64),
            sysflags=pack([0], INT32),
            from_offset=0,
            to_offset=res.physical_offsets[0] + res.sizes[0],
        )
        with pytest.raises(grpc.RpcError) as e:
            cq.PutUnits(put)
        assert e.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        u = cq.GetUnits(consume_queue_pb2.GetUnitsRequest(topic="Ids0", queue_id=0, offset=0, max_units=10))
        assert not u.physical_offsets and cq.GetProgress(consume_queue_pb2.GetProgressRequest()).progress_offset == 0
        put.named_ids, put.topics[:] = pack([3], INT32), ["Ids0"]  # named: taken
        assert cq.PutUnits(put).progress_offset == put.to_offset
        u = cq.GetUnits(consume_queue_pb2.GetUnitsRequest(topic="Ids0", queue_id=0, offset=0, max_units=10))
        assert list(u.physical_offsets) == list(res.physical_offsets)
        for ch in chs:
            ch.close()
    finally:
        parts.close()
