"""What a master sends a follower (RocketMQ AutoSwitchHAConnection's transfer):
the commitlog's bytes from the follower's end, in batches of whole records, each
within one epoch and one segment (a BLANK travels with the rest of its segment).

RocketMQ sends raw 32 KiB slices, records cut anywhere; here a batch ends at a
record end so the follower can check every record it gets (follower.check_batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from mqstore.errors import OffsetError
from mqstore.store.ha.epochs import EpochCache

if TYPE_CHECKING:
    from mqstore.store.commitlog import CommitLog


class Batch(NamedTuple):
    """One transfer: the bytes [offset, offset + len(data)) of epoch ``epoch``
    (which started at ``epoch_start``)."""

    offset: int
    data: bytes
    epoch: int
    epoch_start: int


def next_batch(commitlog: CommitLog, epochs: EpochCache, offset: int, max_bytes: int) -> Batch | None:
    """The batch from ``offset`` (a follower's end: a record start or a BLANK), at
    most ``max_bytes`` of records (one at least, if one is there), or None when
    the follower is at the write position. OffsetError if ``offset`` is below the
    master's min offset or past its end, or no epoch holds it."""
    wrote = commitlog.wrote_offset
    if offset == wrote:
        return None
    entry = epochs.entry_at(offset)
    if entry is None:
        raise OffsetError(f"no epoch holds commitlog offset {offset} (epochs {epochs.entries})")
    limit = min(wrote, entry.end_offset)
    chunk = commitlog.scan(offset, limit=limit, max_bytes=max_bytes, fields=False)
    if not len(chunk.sizes) or int(chunk.physical_offsets[0]) != offset:
        # ``offset`` is a BLANK: the rest of its segment goes alone
        n = (int(chunk.physical_offsets[0]) if len(chunk.sizes) else chunk.next_offset) - offset
    else:
        n = chunk.next_offset - offset  # the records, and the BLANK after them if the scan met one
    data = commitlog.read_log_bytes(offset, n)
    if len(data) != n:
        raise OffsetError(f"commitlog bytes [{offset}, {offset + n}) crossed a segment end")
    return Batch(offset, data, entry.epoch, entry.start_offset)


__all__ = ["Batch", "next_batch"]
