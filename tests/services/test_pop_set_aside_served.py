"""A record no consumer can take, set aside by the shard's pop service (issue 25,
item 4), when the DLQ write is refused because the disk is full (item 2): the pop
answers the other messages, never the poison, and the poison reaches
``%DLQ%<group>`` once the disk has room again."""

from __future__ import annotations

import time

import pytest

from mqstore.rpc.v1 import consume_queue_pb2, consume_queue_pb2_grpc
from mqstore.services.common.server import sync_channel
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from mqstore.store.messages import MessageBatch
from tests.services.helpers import small_config, wait_dispatched
from tests.small_disk import small_disk  # noqa: F401 - the fixture

SEGMENT = 256 * 1024


@pytest.mark.slow  # a served stack, a full disk and a retry a second later
def test_a_poison_is_set_aside_alone_even_while_the_disk_refuses_its_dead_letter(small_disk) -> None:  # noqa: F811
    with (
        LocalStack(small_disk.path / "store", small_config(segment_bytes=SEGMENT)) as st,
        FrontClient(st.front_endpoint) as c,
        sync_channel(st.queue_builders[0].endpoint, auth=st.auth) as ch,
    ):
        assert st.wait_ready(30)
        now = int(time.time() * 1000)
        st.shards[0].state.log_store.commitlog.append(  # the commitlog's own append: no producer door
            MessageBatch(
                topics="Mixed", bodies=[b"a", b"poison", b"b"], queue_ids=0, born_timestamps=[now, 1 << 60, now]
            )
        )
        c.send("Mixed", [b"c"], queue_ids=0)  # wakes the dispatcher
        wait_dispatched(c)
        pop = consume_queue_pb2_grpc.ConsumeQueueServiceStub(ch).Pop

        def request(wait_ms: int) -> consume_queue_pb2.PopRequest:
            return consume_queue_pb2.PopRequest(
                group="g", topic="Mixed", queue_ids=[0], max_messages=8, invisible_ms=60_000, max_attempts=16,
                wait_ms=wait_ms,
            )  # fmt: skip

        small_disk.fill_to(0.95)  # the DLQ write of the poison is refused now
        first = pop(request(0), timeout=30)
        assert [m.queue_offset for m in first.messages] == [0, 2, 3]  # the others, never the poison
        assert list(first.set_aside) == []  # not yet: its dead letter waits for room
        assert not pop(request(300), timeout=30).messages  # nothing more, and no error

        small_disk.free()
        deadline = time.monotonic() + 30
        while not c.store_status()[0].writable:
            assert time.monotonic() < deadline, "the store did not become writable again"
            time.sleep(0.1)
        later = pop(request(3000), timeout=30)  # its retry comes due within the long poll
        assert not later.messages and list(later.set_aside) == ["born_time"]
        deadline = time.monotonic() + 15
        while not (dlq := c.pull("%DLQ%g", 0, 0).records):
            assert time.monotonic() < deadline, "the poison did not reach the DLQ"
            time.sleep(0.1)
        assert [r.body for r in dlq] == [b"poison"]
        assert "born time" in dlq[0].properties["DLQ_REASON"]
