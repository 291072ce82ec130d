"""Issue 28: the core pieces together, in one process, as the services will drive
them (mqstore/store/ha/__init__.py's design note): a master and two followers, the
SyncStateSet on an injected clock, the confirm offset as every replica's dispatch
bound, min-in-sync refusals, a follower that falls behind and returns, and a
switch of master with epochs taken and followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.errors import InSyncReplicasNotEnoughError, StaleEpochError
from mqstore.store import CommitLog, FlushMode, MessageBatch, StoreConfig
from mqstore.store.ha import (
    EpochCache,
    ReplicaFollower,
    SyncStateSet,
    check_master_epoch,
    next_batch,
    take_epoch,
)

SEG = 64 * 1024


class Clock:
    def __init__(self) -> None:
        self.ms = 5_000_000

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000


class Replica:
    def __init__(self, path: Path) -> None:
        self.log = CommitLog(
            path, StoreConfig(segment_bytes=SEG, flush_mode=FlushMode.SYNC, preallocate_segments=False)
        )
        self.epochs = EpochCache(path)

    def close(self) -> None:
        self.log.close()


@pytest.fixture
def group(tmp_path: Path):
    reps = {name: Replica(tmp_path / name) for name in ("r0", "r1", "r2")}
    yield reps
    for r in reps.values():
        r.close()


def stream(master: Replica, sync: SyncStateSet, name: str, follower: ReplicaFollower) -> None:
    """One follower's stream until it is caught up (a batch, its ack, ...)."""
    ml = master.log
    while (b := next_batch(ml, master.epochs, follower.end, 16384)) is not None:
        sync.on_transfer(name, ml.wrote_offset)
        confirm = sync.confirm_offset(ml.durable_offset)
        ack = follower.append(b.offset, b.data, epoch=b.epoch, epoch_start=b.epoch_start, confirm_offset=confirm)
        sync.on_ack(name, ack, ml.wrote_offset)
    sync.on_caught_up(name)
    sync.on_ack(name, follower.durable_offset, ml.wrote_offset)  # (its report when idle: a heartbeat)
    ml.set_confirm_offset(sync.confirm_offset(ml.durable_offset))


def send(master: Replica, sync: SyncStateSet, n: int = 20) -> int:
    sync.check_writable()
    res = master.log.append(MessageBatch(topics="T", bodies=[b"m" * 300] * n, queue_ids=0))
    master.log.set_confirm_offset(sync.confirm_offset(master.log.durable_offset))
    return int(res.end_offset)


def test_a_replica_set_confirms_what_every_member_holds(group) -> None:
    clock = Clock()
    r0, r1, r2 = group["r0"], group["r1"], group["r2"]
    take_epoch(r0.log, r0.epochs, 1)
    sync = SyncStateSet("r0", clock=clock, min_in_sync=2)
    f1, f2 = ReplicaFollower(r1.log, r1.epochs), ReplicaFollower(r2.log, r2.epochs)
    with pytest.raises(InSyncReplicasNotEnoughError):
        send(r0, sync)  # no follower in sync yet
    stream(r0, sync, "r1", f1)
    stream(r0, sync, "r2", f2)  # (both join at once: nothing to copy)
    assert sync.members == {"r0", "r1", "r2"}
    end = send(r0, sync)
    assert r0.log.replica_confirm_offset < end  # written and fsynced on the master only
    stream(r0, sync, "r1", f1)
    assert sync.confirm_offset(r0.log.durable_offset) < end  # r2 has not acknowledged it
    stream(r0, sync, "r2", f2)
    assert r0.log.replica_confirm_offset == end
    for r in (r1, r2):
        assert r.log.wrote_offset == end and r.log.replica_confirm_offset <= end

    # r2 stops following: after 15 s without catching up it leaves, and sends go on (min 2)
    for _ in range(3):
        send(r0, sync)
        stream(r0, sync, "r1", f1)
        clock.ms += 6_000
    change = sync.shrink()
    assert change is not None and change.left == {"r2"}
    end = send(r0, sync)
    stream(r0, sync, "r1", f1)
    assert r0.log.replica_confirm_offset == end  # r2 no longer holds it back
    # r1 goes too: sends are refused until a follower is back in sync
    sync.remove("r1")
    with pytest.raises(InSyncReplicasNotEnoughError, match="IN_SYNC_REPLICAS_NOT_ENOUGH"):
        send(r0, sync)
    stream(r0, sync, "r2", f2)  # r2 catches up from where it stopped, and joins
    assert sync.in_sync("r2")
    send(r0, sync)


def test_a_switch_of_master_moves_the_epoch_and_fences_the_old_one(group) -> None:
    clock = Clock()
    r0, r1, r2 = group["r0"], group["r1"], group["r2"]
    take_epoch(r0.log, r0.epochs, 1)
    sync = SyncStateSet("r0", clock=clock)
    f1, f2 = ReplicaFollower(r1.log, r1.epochs), ReplicaFollower(r2.log, r2.epochs)
    send(r0, sync, 50)
    stream(r0, sync, "r1", f1)
    stream(r0, sync, "r2", f2)
    switch_at = r1.log.wrote_offset

    # r1 becomes master of epoch 2 (caught up: nothing to cut); r0 and r2 follow it
    assert take_epoch(r1.log, r1.epochs, 2).start_offset == switch_at
    assert take_epoch(r1.log, r1.epochs, 2).start_offset == switch_at  # a restart in its epoch keeps it
    assert take_epoch(r0.log, r0.epochs, 1).start_offset == 0  # r0 again in its own epoch: no change
    with pytest.raises(StaleEpochError):
        take_epoch(r0.log, r0.epochs, 0)  # an older one: refused
    sync2 = SyncStateSet("r1", clock=clock)
    sync2.new_epoch(switch_at)
    send(r1, sync2, 10)
    new_f0, new_f2 = ReplicaFollower(r0.log, r0.epochs), ReplicaFollower(r2.log, r2.epochs)
    for name, f in (("r0", new_f0), ("r2", new_f2)):
        check_master_epoch(f.epochs, 2)
        assert f.consistent_point(r1.epochs.entries, r1.log.wrote_offset) == switch_at
        stream(r1, sync2, name, f)
        assert f.epochs.entries == r1.epochs.entries
        assert f.end == r1.log.wrote_offset
    # the old master is now in epoch 2: a batch of epoch 1 from anyone is refused
    b = next_batch(r1.log, r1.epochs, 0, 4096)
    with pytest.raises(StaleEpochError):
        new_f0.append(new_f0.end, b.data, epoch=1, epoch_start=0)
    with pytest.raises(StaleEpochError):
        check_master_epoch(r0.epochs, 1)
