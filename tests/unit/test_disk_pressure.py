"""Disk pressure from a file the store does not own (issue 25, item 2): appends are
refused from the warning ratio until the disk is below the resume ratio, nothing
acknowledged is deleted to make room, and status says so; deleting unexpired
segments is an opt-in that reports every group's lost ranges."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mqstore.errors import ConfigError, StoreNotWritableError
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.retention import ConsumerLoss, Retention, RetentionConfig
from tests.small_disk import small_disk  # noqa: F401 - the fixture

CFG = StoreConfig(
    segment_bytes=256 * 1024,
    consume_queue_file_bytes=20 * 64,
    index_hash_slots=500,
    index_max_entries=2_000,
)
QUEUES = 2


def send(store: MessageStore, n: int, tag: str = "m") -> list[int]:
    res = store.append(
        MessageBatch(
            topics="T",
            bodies=[f"{tag}{i}".encode() + os.urandom(1000) for i in range(n)],
            queue_ids=[i % QUEUES for i in range(n)],
        )
    )
    return res.physical_offsets.tolist()


def retention(store: MessageStore, **config) -> Retention:
    """Retention as the store runs it, measuring the real (small) disk; expired deletion
    never due (no hour listed is now, nothing is 72 h old)."""
    other = (time.localtime().tm_hour + 12) % 24
    return Retention(
        store.commitlog,
        store.consume_queues,
        dispatched_offset=lambda: store.dispatcher.dispatched_offset,
        consumer_offsets=store.consumer_offsets,
        config=RetentionConfig(delete_when=f"{other:02d}", **config),
    )


def segments(store: MessageStore) -> list[str]:
    return sorted(p.name for p in (store.store_dir / "commitlog").iterdir())


def queue_ranges(store: MessageStore) -> list[tuple[int, int]]:
    return [
        (store.consume_queues.find("T", q).min_offset, store.consume_queues.find("T", q).max_offset)
        for q in range(QUEUES)
    ]


def test_a_foreign_file_past_the_warning_ratio_refuses_writes_and_deletes_nothing(small_disk) -> None:  # noqa: F811
    with MessageStore(small_disk.path / "store", CFG) as s:
        acked = send(s, 200) + send(s, 200)  # two segments and more
        assert s.wait_dispatched()
        names = segments(s)
        assert len(names) >= 2

        small_disk.fill_to(0.95)
        with capture_logs() as logs, pytest.raises(StoreNotWritableError) as refused:
            send(s, 10)
        assert refused.value.cause == "disk_full"
        assert "over the warning ratio 90%" in str(refused.value) and "below 85%" in str(refused.value)
        assert [e for e in logs if e["event"] == "store_not_writable" and e["cause"] == "disk_full"]

        rep = retention(s).run_once(time.time_ns() // 1_000_000)  # clean_forcibly_enable: off by default
        assert rep.disk_full and not rep.forced and rep.deleted == () and rep.forced_range is None
        assert segments(s) == names and s.commitlog.min_offset == 0
        assert [s.commitlog.read(off).physical_offset for off in acked] == acked  # every acknowledged one
        assert queue_ranges(s) == [(0, 200), (0, 200)]

        st = s.status()
        assert not st["writable"] and st["unwritable_cause"] == "disk_full"
        wr = st["write_refusals"]
        assert wr["count"] == 1 and wr["cause"] == "disk_full" and "warning ratio" in wr["reason"]
        assert 0 < wr["since_ms"] <= time.time_ns() // 1_000_000

        small_disk.fill_to(0.87)  # below the warning ratio, not below the resume ratio: still refused
        with pytest.raises(StoreNotWritableError):
            send(s, 10)
        assert s.status()["write_refusals"]["count"] == 2

        small_disk.free()
        more = send(s, 10)
        assert s.wait_dispatched()
        assert s.writable and s.status()["write_refusals"] == {"count": 2, "since_ms": 0, "cause": "", "reason": ""}
        assert [s.commitlog.read(off).physical_offset for off in acked + more] == acked + more


def test_forced_deletion_is_opt_in_and_reports_each_groups_lost_ranges(small_disk) -> None:  # noqa: F811
    cfg = StoreConfig(**{**CFG.__dict__, "clean_forcibly_enable": True})
    with MessageStore(small_disk.path / "store", cfg) as s:
        for _ in range(4):
            send(s, 200)
        assert s.wait_dispatched()
        s.commit_offset("reader", "T", 0, 150)  # read 150 of queue 0, nothing of queue 1 yet
        s.commit_offset("idle", "T", 0, 0)
        s.commit_offset("idle", "T", 1, 0)
        names = segments(s)

        small_disk.fill_to(0.95)
        with capture_logs() as logs:
            r = retention(s)
            rep = r.run_once(time.time_ns() // 1_000_000)
        assert rep.forced and rep.forced_range is not None
        assert [d.name for d in rep.deleted] == names[:-1]  # the segment holding the write position stays
        mins = rep.queue_min_offsets
        assert set(mins) == {("T", 0), ("T", 1)}
        expected = {
            ConsumerLoss("idle", "T", 0, 0, mins[("T", 0)][1], True),
            ConsumerLoss("idle", "T", 1, 0, mins[("T", 1)][1], True),
        }
        if mins[("T", 0)][1] > 150:
            expected.add(ConsumerLoss("reader", "T", 0, 150, mins[("T", 0)][1], True))
        assert set(rep.consumer_losses) == expected
        lines = {e["group"]: e for e in logs if e["event"] == "unconsumed_messages_deleted"}
        assert lines["idle"]["forced"] and lines["idle"]["log_level"] == "error"
        assert f"T-1:[0,{mins[('T', 1)][1]})" in lines["idle"]["ranges"]
        assert [e for e in logs if e["event"] == "commitlog_forced_deletion"]
        assert r.stats()["forced_segments"] == len(names) - 1 and r.stats()["forced_bytes"] > 0


def test_disk_ratios_are_checked() -> None:
    with pytest.raises(ConfigError, match="disk_resume_ratio < disk_warning_ratio"):
        StoreConfig(disk_warning_ratio=0.8, disk_resume_ratio=0.85)
    assert StoreConfig().clean_forcibly_enable is False and RetentionConfig().clean_forcibly_enable is False


def test_the_probe_is_dfs_use_percent(tmp_path: Path) -> None:
    from mqstore.store.writability import disk_used_ratio

    st = os.statvfs(tmp_path)
    used = st.f_blocks - st.f_bfree
    assert disk_used_ratio(tmp_path) == pytest.approx(used / (used + st.f_bavail))


def test_the_loss_ledger_merges_per_group_and_queue_and_stays_bounded() -> None:
    from mqstore.store.loss_ledger import LossLedger, LossRecord, runs

    ledger = LossLedger(max_keys=2)
    ledger.note([ConsumerLoss("g", "T", 0, 0, 10, False)], now_ms=1)
    ledger.note([ConsumerLoss("g", "T", 0, 10, 25, True), ConsumerLoss("h", "T", 1, 5, 5, True)], now_ms=2)
    assert ledger.records() == [LossRecord("g", "T", 0, 0, 25, 25, True, 2)]  # an empty range is no loss
    ledger.note([ConsumerLoss("h", "T", 1, 0, 3, True), ConsumerLoss("i", "T", 2, 0, 1, True)], now_ms=3)
    assert [r.group for r in ledger.records()] == ["h", "i"] and ledger.dropped_keys == 1  # g updated longest ago
    assert ledger.messages == 29
    assert runs([3, 4, 5, 9]) == [(3, 6), (9, 10)] and runs([]) == []


def test_the_stores_own_retention_keeps_the_losses_for_status(small_disk) -> None:  # noqa: F811
    cfg = StoreConfig(**{**CFG.__dict__, "clean_forcibly_enable": True})
    other = f"{(time.localtime().tm_hour + 12) % 24:02d}"
    with MessageStore(
        small_disk.path / "store", cfg, retention=RetentionConfig(check_interval_ms=50, delete_when=other)
    ) as s:
        for _ in range(3):
            send(s, 200)
        assert s.wait_dispatched()
        s.commit_offset("idle", "T", 1, 0)
        small_disk.fill_to(0.95)
        deadline = time.monotonic() + 10
        while not s.status()["consumer_losses"]:
            assert time.monotonic() < deadline, "no loss recorded"
            time.sleep(0.05)
        (loss,) = s.status()["consumer_losses"]
        queue_min = s.consume_queues.find("T", 1).min_offset
        assert (loss["group"], loss["queue_id"], loss["from_offset"], loss["to_offset"]) == ("idle", 1, 0, queue_min)
        assert loss["forced"] and loss["messages"] == queue_min > 0
        assert s.status()["loops"]["retention"]["forced_segments"] > 0
