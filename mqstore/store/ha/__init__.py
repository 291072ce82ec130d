"""Replicas of a shard's store, RocketMQ 5's way (controller mode): the core rules,
plain Python, no Ray or gRPC (issue 28; ../shared/notes/replication.md).

    module         what                                           RocketMQ
    files.py       epochFileCheckpoint (+.bak), brokerIdentity,   CheckpointFile, BrokerMetadata
                   written crash-safe
    epochs.py      EpochCache: epochs, consistent point            EpochFileCache
    follower.py    check_batch, ReplicaFollower: a follower's      AutoSwitchHAClient (transfer)
                   append; start_empty_at for a new follower
    roles.py       take_epoch, check_master_epoch                 changeToMaster / changeToSlave
    source.py      next_batch: what a master sends a follower      AutoSwitchHAConnection (transfer)
    sync_state.py  SyncStateSet: acks, join/leave, confirm         AutoSwitchHAService
                   offset, min-in-sync
    truncation.py  crash-safe truncation to the consistent point   doTruncate (+ the fix of #10666)

Watermarks (flushed <= wrote on every replica): the master's ``confirm_offset`` is
the lowest acknowledged offset over the SyncStateSet, its own durable end included;
a follower's is the master's, capped at its own end. Dispatch (and so every
consumer) stops at it: CommitLog.set_confirm_offset / replica_confirm_offset, taken
by LogStore.confirm_offset, persisted as the checkpoint's confirmPhyOffset; a store
with an epoch file starts from the checkpoint's after a restart.

Design for the services (next session): what each actor calls, in order.

Master (the shard's commitlog actor in the master role):
  1. ``EpochCache(store_dir)``; on election to ``epoch``: ``take_epoch(commitlog,
     cache, epoch)`` (persisted) before accepting a write; a lower epoch than
     ``cache.last_epoch`` is refused (StaleEpochError); ``sync_state.new_epoch(start)``.
  2. ``SyncStateSet(master_id, clock=..., min_in_sync=M)``; before each append
     ``check_writable()`` (InSyncReplicasNotEnoughError ->
     IN_SYNC_REPLICAS_NOT_ENOUGH); after each flush ``confirm_offset(flushed)`` ->
     ``commitlog.set_confirm_offset``; sync replication answers a send once its end
     is at or below the confirm offset.
  3. Per follower stream: handshake (the follower's end, epochs) -> the master
     answers its epochs and end; then loop ``next_batch(commitlog, cache, from,
     max_bytes)`` -> send (offset, epoch, epoch start, confirm offset, bytes) and
     ``sync_state.on_transfer(f, commitlog.wrote_offset)``; on each ack
     ``sync_state.on_ack(f, acked, commitlog.wrote_offset)``; idle
     (nothing to send) -> ``on_caught_up(f)``; a lost stream -> ``remove(f)``.
     Every second or so ``shrink()`` (a follower not caught up for
     ``max_not_caught_up_ms`` leaves the set).
  4. After retention deleted segments: ``cache.truncate_prefix_by_offset(
     commitlog.min_offset)`` (on every replica), as RocketMQ does.
Follower (the same actor in the follower role):
  1. Open the store. If it is empty and the master's oldest offset is above 0:
     close, ``start_empty_at(store_dir, master_min, segment_bytes)``, open again.
  2. ``check_master_epoch(cache, master_epoch)`` (a deposed master is refused);
     ``ReplicaFollower(commitlog, cache)``; handshake with the master's epochs and
     end: ``follower.consistent_point(master_epochs, master_end)``; if it is below
     the local end: stop, ``request_truncation``,
     close the shard (all four actors), open again (the open finishes the cut and
     the builders cut consume queues and index), then handshake again.
  3. For each batch: ``follower.append(offset, data, epoch=, epoch_start=,
     confirm_offset=)`` -> the offset to acknowledge (durable under sync flush;
     ``wait=False`` pipelines: write the next batch while the fsync runs, ack
     ``durable_offset``).
     A StaleEpochError means the sender is deposed; ReplicaOffsetError says where
     to resume; ReplicaBatchError: reconnect.
"""

from mqstore.store.ha.epochs import EpochCache
from mqstore.store.ha.files import (
    has_epoch_file,
    read_broker_identity,
    read_epoch_entries,
    write_broker_identity,
    write_epoch_entries,
)
from mqstore.store.ha.follower import CheckedBatch, ReplicaFollower, check_batch, start_empty_at
from mqstore.store.ha.roles import check_master_epoch, take_epoch
from mqstore.store.ha.source import Batch, next_batch
from mqstore.store.ha.sync_state import HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS, SetChange, SyncStateSet
from mqstore.store.ha.truncation import (
    TruncationReport,
    complete_pending_truncation,
    pending_truncation,
    request_truncation,
    truncate_store,
)

__all__ = [
    "HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS",
    "Batch",
    "CheckedBatch",
    "EpochCache",
    "ReplicaFollower",
    "SetChange",
    "SyncStateSet",
    "TruncationReport",
    "check_batch",
    "check_master_epoch",
    "complete_pending_truncation",
    "has_epoch_file",
    "next_batch",
    "pending_truncation",
    "read_broker_identity",
    "read_epoch_entries",
    "request_truncation",
    "start_empty_at",
    "take_epoch",
    "truncate_store",
    "write_broker_identity",
    "write_epoch_entries",
]
