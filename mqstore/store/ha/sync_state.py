"""The master's SyncStateSet and confirm offset (RocketMQ AutoSwitchHAService and
AutoSwitchHAConnection), as a plain object with an injected clock.

Facts per follower (its stream): the offset it last acknowledged (durable on it),
the master's write position when a batch was last sent to it and when, and when it
was last caught up. Rules, RocketMQ's:

- caught up (updateConnectionLastCaughtUpTime): an ack at or past the master's
  write position as of the last batch sent marks the follower caught up at the
  time of that batch (now, if the ack reaches the master's present end); a follower
  with nothing left to send is caught up now (``on_caught_up``);
- join (maybeExpandInSyncStateSet): a follower outside the set joins once its ack is
  at or past the confirm offset and at or past the current epoch's start (it holds
  the master's records of this epoch);
- leave (maybeShrinkSyncStateSet, ``shrink``): a member not caught up for more than
  ``max_not_caught_up_ms`` (haMaxTimeSlaveNotCatchup, 15 s), or whose stream is gone
  (``remove``);
- confirm offset (computeConfirmOffset): the lowest ack over the set, the master's
  own durable end included (RocketMQ takes its write position; here what the master
  has fsynced under sync flush, as a follower acks only that); it never goes down;
- sends (CommitLog.asyncPutMessage): refused with IN_SYNC_REPLICAS_NOT_ENOUGH while
  the set is smaller than ``min_in_sync`` (``check_writable``).

Every change of the set bumps ``set_epoch`` and is returned, for the caller to
publish (the controller of the next issue fences them). One caller at a time: the
master's commitlog actor (its streams' acks and its flushes are serialised there).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from mqstore.errors import InSyncReplicasNotEnoughError
from mqstore.store.clock import Clock, SystemClock

log = structlog.get_logger(__name__)

HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS = 15_000  # RocketMQ MessageStoreConfig.haMaxTimeSlaveNotCatchup


@dataclass
class FollowerState:
    """What the master knows of one follower's stream."""

    acked: int = -1  # the offset it last acknowledged (-1: none yet)
    master_end_at_send: int = -1  # the master's write position when the last batch went out
    sent_at_ms: int = 0
    caught_up_ms: int = 0  # when it was last caught up (0: never)


@dataclass(frozen=True)
class SetChange:
    """The set after a change, and its new ``set_epoch``."""

    members: frozenset[str]
    set_epoch: int
    joined: frozenset[str]
    left: frozenset[str]


class SyncStateSet:
    """See the module docstring. ``master`` is the master's replica id (always a member)."""

    def __init__(
        self,
        master: str,
        *,
        clock: Clock | None = None,
        min_in_sync: int = 1,
        max_not_caught_up_ms: int = HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS,
        members: set[str] | frozenset[str] = frozenset(),
        confirm_offset: int = 0,
    ) -> None:
        """``members``: followers already in the set (as the controller last had it);
        ``confirm_offset``: where it stood (the checkpoint's, after a restart)."""
        if min_in_sync < 1:
            raise ValueError(f"min_in_sync must be >= 1, got {min_in_sync}")
        if max_not_caught_up_ms <= 0:
            raise ValueError(f"max_not_caught_up_ms must be > 0, got {max_not_caught_up_ms}")
        self.master = master
        self.min_in_sync = min_in_sync
        self.max_not_caught_up_ms = max_not_caught_up_ms
        self._clock = clock or SystemClock()
        self._members = {master, *members}
        self.set_epoch = 0
        self.followers: dict[str, FollowerState] = {}
        self._confirm = confirm_offset
        self._epoch_start = 0

    # ------------------------------------------------------------------ reads

    @property
    def members(self) -> frozenset[str]:
        return frozenset(self._members)

    def in_sync(self, replica: str) -> bool:
        return replica in self._members

    def check_writable(self) -> None:
        """InSyncReplicasNotEnoughError while the set is smaller than ``min_in_sync``."""
        n = len(self._members)
        if n < self.min_in_sync:
            raise InSyncReplicasNotEnoughError(
                f"IN_SYNC_REPLICAS_NOT_ENOUGH: {n} replica(s) in sync ({', '.join(sorted(self._members))}), "
                f"at least {self.min_in_sync} required",
                in_sync=n,
                min_in_sync=self.min_in_sync,
            )

    def confirm_offset(self, master_durable_end: int) -> int:
        """The lowest ack over the set, ``master_durable_end`` for the master; never
        below what was confirmed before (module docstring). A member without a
        stream (or without an ack yet) keeps the confirm offset where it is, as
        RocketMQ does for a member that lost its connection (issue 6662)."""
        low = master_durable_end
        for f in self._members - {self.master}:
            st = self.followers.get(f)
            if st is None or st.acked < 0:
                return self._confirm
            low = min(low, st.acked)
        self._confirm = max(self._confirm, low)
        return self._confirm

    @property
    def last_confirm_offset(self) -> int:
        return self._confirm

    # ------------------------------------------------------------------ events

    def new_epoch(self, epoch_start: int) -> None:
        """The master took a new epoch starting at ``epoch_start``: followers join
        only once they hold records of it."""
        self._epoch_start = epoch_start

    def on_transfer(self, follower: str, master_end: int) -> None:
        """A batch went to ``follower`` while the master's write position was ``master_end``."""
        st = self.followers.setdefault(follower, FollowerState())
        st.master_end_at_send = master_end
        st.sent_at_ms = self._clock.now_ms()

    def on_caught_up(self, follower: str) -> None:
        """Nothing is left to send ``follower``: it is caught up now."""
        st = self.followers.setdefault(follower, FollowerState())
        st.caught_up_ms = max(st.caught_up_ms, self._clock.now_ms())

    def on_ack(self, follower: str, acked: int, master_end: int) -> SetChange | None:
        """``follower`` has ``acked`` durable; ``master_end``: the master's write
        position now. Returns the change if the follower joined the set."""
        st = self.followers.setdefault(follower, FollowerState())
        st.acked = max(st.acked, acked)
        if acked >= st.master_end_at_send:  # (-1 before any batch: a first report counts, as RocketMQ's)
            caught = self._clock.now_ms() if acked >= master_end else st.sent_at_ms
            st.caught_up_ms = max(st.caught_up_ms, caught)
            if follower not in self._members and acked >= self._confirm and acked >= self._epoch_start:
                return self._change(joined={follower})
        return None

    def remove(self, follower: str) -> SetChange | None:
        """``follower``'s stream is gone: it leaves the set (removeConnection)."""
        self.followers.pop(follower, None)
        return self._change(left={follower}) if follower in self._members else None

    def shrink(self) -> SetChange | None:
        """Members not caught up within ``max_not_caught_up_ms``, or without a stream,
        leave (maybeShrinkSyncStateSet); returns the change, if any."""
        now = self._clock.now_ms()
        left = set()
        for f in self._members - {self.master}:
            st = self.followers.get(f)
            if st is None or now - st.caught_up_ms > self.max_not_caught_up_ms:
                left.add(f)
        return self._change(left=left) if left else None

    def _change(self, *, joined: set[str] = frozenset(), left: set[str] = frozenset()) -> SetChange:
        self._members |= set(joined)
        self._members -= set(left) - {self.master}
        self.set_epoch += 1
        change = SetChange(frozenset(self._members), self.set_epoch, frozenset(joined), frozenset(left))
        log.info(
            "sync_state_set_changed",
            members=sorted(change.members),
            set_epoch=change.set_epoch,
            joined=sorted(joined),
            left=sorted(left),
        )
        return change


__all__ = ["HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS", "FollowerState", "SetChange", "SyncStateSet"]
