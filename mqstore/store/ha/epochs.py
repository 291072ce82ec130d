"""EpochCache: a replica's epochs, persisted on every change (RocketMQ EpochFileCache).

Each epoch a master takes starts at the commitlog offset it first wrote at; its
records are [start, next epoch's start), the last epoch's run open (NO_END) until
``last_end`` (the log's end) is given. Rules:

- ``append(epoch, start)`` refuses an epoch <= the last one or a start below the last
  one's (StaleEpochError / ReplicaOffsetError); RocketMQ refuses an equal start too,
  which loses the record of a master that wrote nothing before the next election
  (its epoch could then be taken for new), so here an equal start is kept: the
  earlier epoch is empty.
- ``find_consistent_point(other, local_end, other_end)`` is RocketMQ's
  findConsistentPoint: local epochs newest first; the first whose epoch the other
  side has with the same start gives min(local end, other end) of that epoch. No
  such epoch: NoConsistentPointError (RocketMQ returns -1 and refuses to follow).
- ``truncate_suffix_by_offset`` / ``_by_epoch`` / ``truncate_prefix_by_offset``
  as RocketMQ's (start >= offset, epoch >= epoch, end <= offset go).

Every change is written (ha/files.py) before the method returns: a replica never
acts in an epoch its disk does not hold. One caller at a time (the replica's
commitlog actor); reads return copies.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from mqstore.errors import NoConsistentPointError, ReplicaOffsetError, StaleEpochError
from mqstore.formats.epoch_file import NO_END, EpochEntry, with_end_offsets
from mqstore.store.ha.files import read_epoch_entries, write_epoch_entries

log = structlog.get_logger(__name__)


class EpochCache:
    """Entries ascending by epoch and start; ``store_dir`` None: in memory only (the
    other side's list, as RocketMQ builds one from a handshake)."""

    def __init__(self, store_dir: str | Path | None = None, entries: list[EpochEntry] | None = None) -> None:
        self.store_dir = None if store_dir is None else Path(store_dir)
        if entries is None:
            entries = read_epoch_entries(self.store_dir) if self.store_dir is not None else []
        _check_order(entries)
        self._entries = with_end_offsets([EpochEntry(e.epoch, e.start_offset) for e in entries])

    # ------------------------------------------------------------------ reads

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last_epoch(self) -> int:
        """The newest epoch, -1 with none (RocketMQ lastEpoch)."""
        return self._entries[-1].epoch if self._entries else -1

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def first_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def entry(self, epoch: int) -> EpochEntry | None:
        return next((e for e in self._entries if e.epoch == epoch), None)

    def entry_at(self, offset: int) -> EpochEntry | None:
        """The epoch whose records hold ``offset`` (findEpochEntryByOffset)."""
        return next((e for e in self._entries if e.start_offset <= offset < e.end_offset), None)

    def next_entry(self, epoch: int) -> EpochEntry | None:
        """The first epoch after ``epoch`` (nextEntry)."""
        return next((e for e in self._entries if e.epoch > epoch), None)

    def with_last_end(self, end: int) -> list[EpochEntry]:
        """The entries with the last one ended at ``end`` (setLastEpochEntryEndOffset:
        only if it does not start after it)."""
        out = self.entries
        if out and out[-1].start_offset <= end:
            out[-1] = out[-1]._replace(end_offset=end)
        return out

    def find_consistent_point(self, other: list[EpochEntry], *, local_end: int, other_end: int) -> int:
        """The offset up to which this log and the other (its entries, its log end)
        agree: see the module docstring. Both lists' last epochs end at their log ends."""
        theirs = {e.epoch: e for e in EpochCache(None, other).with_last_end(other_end)}
        for mine in reversed(self.with_last_end(local_end)):
            match = theirs.get(mine.epoch)
            if match is not None and match.start_offset == mine.start_offset:
                return min(mine.end_offset, match.end_offset)
        raise NoConsistentPointError(
            f"no common epoch: local epochs {_show(self._entries)}, the other's {_show(other)}; "
            "the replica must be rebuilt from the master"
        )

    # ------------------------------------------------------------------ changes (persisted before return)

    def append(self, epoch: int, start_offset: int) -> EpochEntry:
        """Add the newest epoch, starting at ``start_offset``; see the module docstring."""
        last = self.last_entry()
        if last is not None and epoch <= last.epoch:
            raise StaleEpochError(
                f"epoch {epoch} is not after the last epoch {last.epoch}", epoch=epoch, last_epoch=last.epoch
            )
        if last is not None and start_offset < last.start_offset:
            raise ReplicaOffsetError(
                f"epoch {epoch} would start at {start_offset}, before epoch {last.epoch}'s start {last.start_offset}",
                expected=last.start_offset,
                got=start_offset,
            )
        if start_offset < 0:
            raise ValueError(f"start_offset must be >= 0, got {start_offset}")
        new = [*self._entries, EpochEntry(epoch, start_offset)]
        self._persist(new)
        log.info("epoch_appended", epoch=epoch, start_offset=start_offset, store=str(self.store_dir))
        return self._entries[-1]

    def truncate_suffix_by_offset(self, offset: int) -> list[EpochEntry]:
        """Drop every epoch starting at or after ``offset``; returns what went."""
        return self._drop(lambda e: e.start_offset >= offset)

    def truncate_suffix_by_epoch(self, epoch: int) -> list[EpochEntry]:
        """Drop every epoch >= ``epoch``; returns what went."""
        return self._drop(lambda e: e.epoch >= epoch)

    def truncate_prefix_by_offset(self, offset: int) -> list[EpochEntry]:
        """Drop every epoch that ends at or before ``offset`` (retention deleted its
        records); the last epoch is open and never goes."""
        return self._drop(lambda e: e.end_offset <= offset)

    def _drop(self, doomed) -> list[EpochEntry]:
        gone = [e for e in self._entries if doomed(e)]
        if gone:
            self._persist([e for e in self._entries if not doomed(e)])
            log.info("epochs_truncated", dropped=_show(gone), store=str(self.store_dir))
        return gone

    def _persist(self, entries: list[EpochEntry]) -> None:
        entries = with_end_offsets([EpochEntry(e.epoch, e.start_offset) for e in entries])
        if self.store_dir is not None:
            write_epoch_entries(self.store_dir, entries)
        self._entries = entries


def _check_order(entries: list[EpochEntry]) -> None:
    for a, b in zip(entries, entries[1:]):
        if b.epoch <= a.epoch or b.start_offset < a.start_offset:
            raise ValueError(f"epoch entries out of order: {a} then {b}")


def _show(entries: list[EpochEntry]) -> str:
    return "[" + ", ".join(f"{e.epoch}@{e.start_offset}" for e in entries) + "]"


__all__ = ["NO_END", "EpochCache", "EpochEntry"]
