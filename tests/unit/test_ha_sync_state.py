"""Issue 28 item 4: the master's SyncStateSet and confirm offset (RocketMQ
AutoSwitchHAService rules, injected clock), min-in-sync refusals, and the confirm
offset as the dispatch bound of a replica's store (persisted in the checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.errors import InSyncReplicasNotEnoughError
from mqstore.store import FlushMode, MessageBatch, StoreConfig
from mqstore.store.checkpoint_file import read_checkpoint
from mqstore.store.ha import HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS, EpochCache, SyncStateSet
from mqstore.store.message_store import MessageStore


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000


def caught_up(s: SyncStateSet, f: str, end: int):
    s.on_transfer(f, end)
    return s.on_ack(f, end, end)


def test_followers_join_when_caught_up_and_the_confirm_offset_is_the_lowest_ack() -> None:
    clock = Clock()
    s = SyncStateSet("m", clock=clock)
    assert s.members == {"m"} and s.confirm_offset(500) == 500  # alone: its own durable end
    s.on_transfer("f1", 500)
    assert s.on_ack("f1", 300, 500) is None  # behind the batch's end: not caught up
    change = s.on_ack("f1", 500, 500)
    assert change is not None and change.joined == {"f1"} and change.set_epoch == 1
    assert s.confirm_offset(600) == 500  # the master has 600 durable, f1 500
    s.on_transfer("f1", 600)
    s.on_ack("f1", 600, 650)
    assert s.confirm_offset(650) == 600
    assert caught_up(s, "f2", 650).joined == {"f2"}
    assert s.confirm_offset(700) == 600  # f1 acked 600 only
    assert s.confirm_offset(100) == 600  # never goes down


def test_join_needs_the_confirm_offset_and_the_current_epoch() -> None:
    s = SyncStateSet("m", clock=Clock(), confirm_offset=1000)
    assert caught_up(s, "f1", 900) is None  # below the confirm offset
    s.new_epoch(2000)
    assert caught_up(s, "f1", 1500) is None  # holds nothing of the current epoch
    assert caught_up(s, "f1", 2000).joined == {"f1"}


def test_a_follower_not_caught_up_for_15_s_leaves() -> None:
    clock = Clock()
    s = SyncStateSet("m", clock=clock)
    caught_up(s, "f1", 100)
    caught_up(s, "f2", 100)
    assert s.max_not_caught_up_ms == HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS == 15_000
    clock.ms += 10_000
    s.on_caught_up("f2")  # nothing to send f2: caught up now
    s.on_transfer("f1", 200)  # f1 gets a batch, acks only part of it
    s.on_ack("f1", 150, 200)
    clock.ms += 5_001
    change = s.shrink()
    assert change is not None and change.left == {"f1"} and s.members == {"m", "f2"}
    assert s.confirm_offset(300) == 100  # f2 acked 100
    clock.ms += 15_001
    assert s.shrink().left == {"f2"} and s.members == {"m"}
    assert s.shrink() is None


def test_caught_up_time_is_the_batchs_when_the_master_moved_on() -> None:
    """An ack reaching the end as of the last batch counts from when that batch went
    (the master has written more since), now only if it reaches the master's end."""
    clock = Clock()
    s = SyncStateSet("m", clock=clock)
    caught_up(s, "f", 100)
    s.on_transfer("f", 200)
    sent = clock.ms
    clock.ms += 14_000
    s.on_ack("f", 200, 900)
    assert s.followers["f"].caught_up_ms == sent
    clock.ms += 1_001
    assert s.shrink().left == {"f"}


def test_a_lost_stream_leaves_and_a_member_without_a_stream_holds_the_confirm_offset() -> None:
    s = SyncStateSet("m", clock=Clock(), members={"f1"}, confirm_offset=400)
    assert s.confirm_offset(900) == 400  # f1 is in the set but has not reconnected: no new confirm
    caught_up(s, "f1", 500)
    assert s.confirm_offset(900) == 500
    assert s.remove("f1").left == {"f1"}
    assert s.confirm_offset(900) == 900
    assert s.remove("f1") is None


def test_min_in_sync_refuses_sends_with_rocketmqs_status() -> None:
    s = SyncStateSet("m", clock=Clock(), min_in_sync=2)
    with pytest.raises(InSyncReplicasNotEnoughError, match="IN_SYNC_REPLICAS_NOT_ENOUGH") as e:
        s.check_writable()
    assert (e.value.in_sync, e.value.min_in_sync) == (1, 2)
    caught_up(s, "f1", 10)
    s.check_writable()
    s.remove("f1")
    with pytest.raises(InSyncReplicasNotEnoughError):
        s.check_writable()
    with pytest.raises(ValueError):
        SyncStateSet("m", min_in_sync=0)


# ---------------------------------------------------------------- the confirm offset bounds dispatch


def cfg() -> StoreConfig:
    return StoreConfig(segment_bytes=1 << 20, flush_mode=FlushMode.SYNC, preallocate_segments=False)


def queue_end(store: MessageStore) -> int:
    cq = store.consume_queues.find("T", 0)
    return 0 if cq is None else cq.max_offset


def test_dispatch_stops_at_a_replicas_confirm_offset(tmp_path: Path) -> None:
    EpochCache(tmp_path).append(1, 0)  # a replica's store
    with MessageStore(tmp_path, cfg()) as s:
        first = s.append(MessageBatch(topics="T", bodies=[b"a" * 100] * 10, queue_ids=0))
        s.commitlog.set_confirm_offset(int(first.end_offset))
        s.append(MessageBatch(topics="T", bodies=[b"b" * 100] * 10, queue_ids=0))
        assert s.wait_dispatched(10)
        assert queue_end(s) == 10  # the second batch is written and flushed, not confirmed
        s.commitlog.set_confirm_offset(s.commitlog.wrote_offset)
        assert s.wait_dispatched(10) and queue_end(s) == 20
        s.commitlog.set_confirm_offset(int(first.end_offset))  # persisted at close (the checkpoint)
    assert read_checkpoint(tmp_path).confirm_phy_offset == first.end_offset
    with MessageStore(tmp_path, cfg(), background_dispatch=False) as s:
        assert s.commitlog.replica_confirm_offset == first.end_offset  # recovery starts from it


def test_a_restarted_replica_dispatches_no_further_than_its_checkpoints_confirm_offset(tmp_path: Path) -> None:
    EpochCache(tmp_path).append(1, 0)
    with MessageStore(tmp_path, cfg(), background_dispatch=False) as s:
        first = s.append(MessageBatch(topics="T", bodies=[b"a" * 100] * 10, queue_ids=0))
        s.commitlog.set_confirm_offset(int(first.end_offset))
    # the consume queues are lost (as after a crash that left them behind): the open re-dispatches
    import shutil

    shutil.rmtree(tmp_path / "consumequeue")
    with MessageStore(tmp_path, cfg(), background_dispatch=False) as s:
        s.append(MessageBatch(topics="T", bodies=[b"b" * 100] * 5, queue_ids=0))
        s.dispatcher.catch_up()
        assert queue_end(s) == 10


def test_without_replicas_nothing_changes(tmp_path: Path) -> None:
    with MessageStore(tmp_path, cfg()) as s:
        assert s.commitlog.replica_confirm_offset is None
        s.append(MessageBatch(topics="T", bodies=[b"a" * 100] * 10, queue_ids=0))
        assert s.wait_dispatched(10) and queue_end(s) == 10
    assert read_checkpoint(tmp_path).confirm_phy_offset > 0  # the flushed offset, as before
