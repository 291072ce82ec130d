"""StoreCheckpoint file (RocketMQ StoreCheckpoint, 5.x layout): 4096 bytes on disk.

    offset  size  field                 meaning
    0       8     physic_msg_timestamp  store time of the last message flushed to the commitlog
    8       8     logics_msg_timestamp  store time of the last message in a flushed consume queue
    16      8     index_msg_timestamp   end time of the last full (flushed) index file
    24      8     master_flushed_offset HA: the master's flushed offset (5.0+)
    32      8     confirm_phy_offset    commitlog offset known durable (5.1.1+)
    40..4095      zero

4.9 files use only the first 24 bytes; readers treat missing fields as 0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mqstore.errors import DecodeError

CHECKPOINT_BYTES = 4096
_LAYOUT = struct.Struct(">qqqqq")
_RECOVERY_MARGIN_MS = 3000


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """The five checkpoint fields; timestamps in ms, offsets in commitlog bytes."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    def encode(self) -> bytes:
        head = _LAYOUT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        return head + bytes(CHECKPOINT_BYTES - len(head))

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint:
        if len(raw) < 24:
            raise DecodeError(f"a checkpoint holds at least 24 bytes, got {len(raw)}")
        fields = _LAYOUT.unpack((bytes(raw[:40]) + bytes(40))[:40])
        return cls(
            physic_msg_timestamp=fields[0],
            logics_msg_timestamp=fields[1],
            index_msg_timestamp=fields[2],
            master_flushed_offset=fields[3],
            confirm_phy_offset=fields[4],
        )

    def min_timestamp(self) -> int:
        """RocketMQ getMinTimestamp: where abnormal recovery may start, 3 s of margin."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - _RECOVERY_MARGIN_MS)

    def min_timestamp_index(self) -> int:
        """RocketMQ getMinTimestampIndex: also no later than the last full index file."""
        return min(self.min_timestamp(), self.index_msg_timestamp)


__all__ = ["CHECKPOINT_BYTES", "Checkpoint"]
