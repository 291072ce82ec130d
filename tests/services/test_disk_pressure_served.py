"""Disk pressure through the served stack (issue 25, item 2): a file the store does not
own fills its disk; sends are refused with a clear status, nothing acknowledged is
deleted, `mqstore status` says why and since when; with --clean-forcibly every
group's lost ranges are in the status (a committed-offset group and a pop group)."""

from __future__ import annotations

import time

import grpc
import pytest
from prometheus_client import generate_latest

from mqstore.cli.queries import shard_status_row
from mqstore.rpc.v1 import consume_queue_pb2, consume_queue_pb2_grpc, front_pb2
from mqstore.services.common.server import sync_channel
from mqstore.services.query.client import FrontClient, decode_pulled
from mqstore.services.startup.local import LocalStack
from mqstore.store.retention import RetentionConfig
from tests.services.helpers import small_config, wait_dispatched
from tests.small_disk import small_disk  # noqa: F401 - the fixture

SEGMENT = 256 * 1024


def _never_at_this_hour() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"  # expired deletion never due


def _pulled(c: FrontClient, topic: str, queue: int) -> list[bytes]:
    out, offset = [], 0
    while (res := c.pull(topic, queue, offset, max_messages=1000, raw=True)).status == front_pb2.FOUND:
        out += [r.body for r in decode_pulled(res)]
        offset = res.next_offset
    return out


def test_a_full_disk_refuses_sends_keeps_what_was_acknowledged_and_says_why(small_disk) -> None:  # noqa: F811
    retention = RetentionConfig(check_interval_ms=200, delete_when=_never_at_this_hour())
    with (
        LocalStack(small_disk.path / "store", small_config(segment_bytes=SEGMENT), retention=retention) as st,
        FrontClient(st.front_endpoint) as c,
    ):
        assert st.wait_ready(30)
        acked = [b"%04d" % i + b"." * 2000 for i in range(300)]  # past two segments
        for lo in range(0, 300, 100):
            c.send("Kept", acked[lo : lo + 100], queue_ids=0)
        wait_dispatched(c)

        small_disk.fill_to(0.95)
        with pytest.raises(grpc.RpcError) as refused:
            c.send("Kept", [b"late"], queue_ids=0)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "disk_full" in refused.value.details() and "over the warning ratio 90%" in refused.value.details()

        time.sleep(0.6)  # three retention passes over a disk past every ratio
        (s,) = c.store_status()
        assert not s.writable and s.unwritable_cause == "disk_full"
        assert s.write_refusals.count == 1 and s.write_refusals.cause == "disk_full" and s.write_refusals.since_ms > 0
        assert "below 85%" in s.write_refusals.reason
        assert s.min_offset == 0 and s.forced_deleted_segments == 0 and not s.consumer_losses
        assert "refusing since" in shard_status_row(s)["refused"]
        scraped = generate_latest(st.front.metrics.registry).decode()
        assert 'mqstore_shard_writes_refused_total{shard="0"} 1.0' in scraped
        assert 'mqstore_shard_refusing_writes{cause="disk_full",shard="0"} 1.0' in scraped
        assert _pulled(c, "Kept", 0) == acked  # every acknowledged message, in order

        small_disk.free()
        c.send("Kept", [b"after"], queue_ids=0)
        (s,) = c.store_status()
        assert s.writable and s.write_refusals.since_ms == 0 and s.write_refusals.count == 1


@pytest.mark.slow  # a few seconds of retention passes and dispatch
def test_clean_forcibly_reports_each_groups_lost_ranges_in_status(small_disk) -> None:  # noqa: F811
    retention = RetentionConfig(check_interval_ms=200, delete_when=_never_at_this_hour())
    cfg = small_config(segment_bytes=SEGMENT, clean_forcibly_enable=True)
    with (
        LocalStack(small_disk.path / "store", cfg, retention=retention) as st,
        FrontClient(st.front_endpoint) as c,
        sync_channel(st.queue_builders[0].endpoint, auth=st.auth) as ch,
    ):
        assert st.wait_ready(30)
        for i in range(6):
            c.send("Gone", [b"%05d" % (i * 100 + j) + b"." * 3000 for j in range(100)], queue_ids=0)
        wait_dispatched(c)
        c.commit_offset("slow", "Gone", 0, 10)
        pop = consume_queue_pb2_grpc.ConsumeQueueServiceStub(ch).Pop
        first = pop(
            consume_queue_pb2.PopRequest(
                group="popper", topic="Gone", queue_ids=[0], max_messages=5, invisible_ms=60_000, max_attempts=16
            )
        )
        assert [m.queue_offset for m in first.messages] == [0, 1, 2, 3, 4]

        small_disk.fill_to(0.95)
        deadline = time.monotonic() + 30
        while c.topic_status("Gone")[0].min_offset == 0:
            assert time.monotonic() < deadline, "forced deletion did not run"
            time.sleep(0.1)
        queue_min = c.topic_status("Gone")[0].min_offset
        later = pop(
            consume_queue_pb2.PopRequest(
                group="popper", topic="Gone", queue_ids=[0], max_messages=5, invisible_ms=60_000, max_attempts=16
            )
        )
        assert later.messages and later.messages[0].queue_offset >= queue_min  # the pop group sees the gap ...

        (s,) = c.store_status()
        losses = {x.group: x for x in s.consumer_losses}
        assert set(losses) == {"slow", "popper"}  # ... and status names it, as the committed-offset group's
        assert (losses["slow"].from_offset, losses["slow"].to_offset) == (10, queue_min)
        assert (losses["popper"].from_offset, losses["popper"].to_offset) == (5, queue_min)
        assert all(x.forced and x.topic == "Gone" and x.queue_id == 0 and x.at_ms > 0 for x in losses.values())
        assert s.forced_deleted_segments > 0 and s.forced_deleted_bytes >= SEGMENT
        assert "2 groups" in shard_status_row(s)["lost"]
        scraped = generate_latest(st.front.metrics.registry).decode()
        lost = queue_min - 10
        assert f'mqstore_consumer_lost_messages_total{{group="slow",shard="0",topic="Gone"}} {lost}.0' in scraped
        assert 'mqstore_shard_forced_deleted_bytes_total{shard="0"}' in scraped
