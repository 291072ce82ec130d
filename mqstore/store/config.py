"""Configuration of the store core: one frozen dataclass, checked on construction.

Defaults follow RocketMQ's MessageStoreConfig (spec section 14) unless noted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mqstore.errors import ConfigError
from mqstore.formats.msgid import Host

GIB = 1 << 30
PAGE_BYTES = 4096


STORE_TYPE_DEFAULT = "default"  # RocketMQ StoreType.DEFAULT: a file per consume queue (consumequeue/<topic>/<id>/)
STORE_TYPE_ROCKSDB = "defaultRocksDB"  # StoreType.DEFAULT_ROCKSDB: every queue in one RocksDB (rocks_queues.py)
STORE_TYPES = (STORE_TYPE_DEFAULT, STORE_TYPE_ROCKSDB)


class FlushMode(enum.Enum):
    """How appends become durable (RocketMQ flushDiskType)."""

    ASYNC = "async"  # acknowledged once in the page cache; a flusher thread fsyncs every interval
    SYNC = "sync"  # acknowledged only after an fdatasync covered the bytes (group commit)


@dataclass(frozen=True, kw_only=True)
class StoreConfig:
    """Everything that shapes a store's files and its durability.

    ``segment_bytes`` shapes files: an existing store is opened with the size its
    segments already have, and a different value is an error.
    """

    segment_bytes: int = GIB
    flush_mode: FlushMode = FlushMode.ASYNC
    flush_interval_ms: int = 500
    flush_least_pages: int = 4
    flush_thorough_interval_ms: int = 10_000
    sync_flush_timeout_ms: int = 5_000
    checkpoint_interval_ms: int = 1_000
    max_message_bytes: int = 4 * 1024 * 1024
    default_queue_nums: int = 4
    max_queue_id: int = 65_535
    check_crc_on_recover: bool = True
    consume_queue_file_bytes: int = 300_000 * 20  # rounded up to whole 20-byte units
    message_index_enable: bool = True
    index_hash_slots: int = 5_000_000
    index_max_entries: int = 20_000_000
    flush_consume_queue_interval_ms: int = 1_000
    max_open_queue_files: int = 512  # consume-queue file descriptors open at once (LRU; no maps)
    max_dispatch_lag_bytes: int = 32 << 20  # appends wait while the dispatcher is this far behind
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    preallocate_segments: bool = True
    store_host: Host = Host("127.0.0.1", 10911)
    # A disk used to disk_warning_ratio (df's Use%, whoever filled it) refuses appends
    # until it is below disk_resume_ratio (RocketMQ diskSpaceWarningLevelRatio, and
    # diskSpaceCleanForciblyRatio where its broker becomes writable again).
    disk_warning_ratio: float = 0.90
    disk_resume_ratio: float = 0.85
    # Retention may delete unexpired segments (unread messages) when the disk is over
    # RetentionConfig.clean_forcibly_ratio (RocketMQ cleanFileForciblyEnable, true
    # there): off here, a full disk refuses writes instead (serve --clean-forcibly).
    clean_forcibly_enable: bool = False
    # Where consume queues live (RocketMQ storeType), fixed when the store is made:
    # None opens a store with its own type (a new one: STORE_TYPE_DEFAULT); a type
    # named that is not the store's refuses to open (store_type.py, StoreTypeError).
    store_type: str | None = None

    def __post_init__(self) -> None:
        if self.segment_bytes < PAGE_BYTES or self.segment_bytes % PAGE_BYTES:
            raise ConfigError(f"segment_bytes must be a positive multiple of {PAGE_BYTES}, got {self.segment_bytes}")
        for name in (
            "flush_interval_ms",
            "sync_flush_timeout_ms",
            "checkpoint_interval_ms",
            "max_message_bytes",
            "default_queue_nums",
            "flush_thorough_interval_ms",
            "consume_queue_file_bytes",
            "index_hash_slots",
            "index_max_entries",
            "flush_consume_queue_interval_ms",
            "max_open_queue_files",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.store_type is not None and self.store_type not in STORE_TYPES:
            raise ConfigError(f"store_type must be one of {', '.join(STORE_TYPES)}, got {self.store_type!r}")
        if self.flush_least_pages < 0:
            raise ConfigError(f"flush_least_pages must be >= 0, got {self.flush_least_pages}")
        if self.index_max_entries < 2:
            raise ConfigError("index_max_entries must be >= 2 (entry 0 is never used)")
        if not 0 < self.default_queue_nums <= self.max_queue_id + 1:
            raise ConfigError(f"default_queue_nums must be in 1..{self.max_queue_id + 1}")
        if not 0 < self.disk_resume_ratio < self.disk_warning_ratio <= 1:
            raise ConfigError(
                "disk ratios must be 0 < disk_resume_ratio < disk_warning_ratio <= 1, got "
                f"{self.disk_resume_ratio} and {self.disk_warning_ratio}"
            )

    @property
    def max_record_bytes(self) -> int:
        """RocketMQ accepts an encoded record up to the body limit plus 64 KiB."""
        return self.max_message_bytes + 64 * 1024


__all__ = [
    "GIB",
    "PAGE_BYTES",
    "STORE_TYPES",
    "STORE_TYPE_DEFAULT",
    "STORE_TYPE_ROCKSDB",
    "FlushMode",
    "StoreConfig",
]
