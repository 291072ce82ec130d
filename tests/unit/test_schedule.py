"""Delay-level messages: stored under SCHEDULE_TOPIC_XXXX, delivered when due, once."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.schedule import SCHEDULE_SOURCE, SCHEDULE_TOPIC

CFG = StoreConfig(segment_bytes=256 * 1024, index_hash_slots=512, index_max_entries=2048)


class StepClock:
    """Wall time that tests move by hand (monotonic time stays real)."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


def open_store(path: Path, clock: StepClock) -> MessageStore:
    return MessageStore(path, CFG, clock=clock, background_dispatch=False)


def delayed(level: int, body: bytes, queue: int | None = 1) -> Message:
    return Message("Orders", body, queue_id=queue, tags="Pay", keys="o-1", properties={"DELAY": str(level)})


def real_bodies(s: MessageStore, queue: int = 1) -> list[bytes]:
    s.dispatcher.catch_up()
    return [r.body for r in s.pull("Orders", queue, 0, max_count=100).records]


def test_delayed_messages_wait_in_the_schedule_topic(tmp_path: Path) -> None:
    clock = StepClock(1_700_000_000_000)
    with open_store(tmp_path, clock) as s:
        res = s.append(
            MessageBatch.of(
                [delayed(1, b"one"), delayed(3, b"three"), delayed(99, b"max"), Message("Orders", b"now", queue_id=1)]
            )
        )
        s.dispatcher.catch_up()
        assert real_bodies(s) == [b"now"]
        for level, delay_ms, body in ((1, 1000, b"one"), (3, 10_000, b"three"), (18, 7_200_000, b"max")):
            cq = s.consume_queues.find(SCHEDULE_TOPIC, level - 1)
            (unit,) = cq.read_units(0, 10)
            rec = s.commitlog.read(int(unit["commitlog_offset"]))
            assert rec.body == body and rec.properties["REAL_TOPIC"] == "Orders" and rec.properties["REAL_QID"] == "1"
            assert int(unit["tags_code"]) == res.store_timestamp + delay_ms  # deliver time


def test_delivery_when_due_and_never_twice(tmp_path: Path) -> None:
    clock = StepClock(1_700_000_000_000)
    with open_store(tmp_path, clock) as s:
        s.append(MessageBatch.of([delayed(1, b"a"), delayed(1, b"b"), delayed(2, b"c")]))
        s.dispatcher.catch_up()
        assert s.scheduler.deliver_due(clock.now + 999) == 0
        clock.now += 1000
        assert s.scheduler.deliver_due(clock.now) == 2
        assert real_bodies(s) == [b"a", b"b"]
        got = s.pull("Orders", 1, 0).records[0]
        assert "DELAY" not in got.properties and got.properties[SCHEDULE_SOURCE] == "1:0"
        assert got.tags == "Pay" and got.keys == "o-1"
    # A crash after delivering but before the progress reached the disk: the
    # scheduler must find its own deliveries in the commitlog and not repeat them.
    shutil.copy(tmp_path / "config" / "delayOffset.json", tmp_path / "delayOffset.saved")
    with open_store(tmp_path, clock) as s:
        clock.now += 5000
        assert s.scheduler.deliver_due(clock.now) == 1  # level 2 (5 s) only
    (tmp_path / "config" / "delayOffset.json").write_bytes((tmp_path / "delayOffset.saved").read_bytes())
    (tmp_path / "config" / "delayOffset.json.bak").unlink(missing_ok=True)
    with open_store(tmp_path, clock) as s:
        assert s.scheduler.progress(2) == 1  # recovered from the commitlog, not from the stale file
        assert s.scheduler.deliver_due(clock.now) == 0
        assert real_bodies(s) == [b"a", b"b", b"c"]


def test_deliveries_go_in_bounded_appends_and_a_failed_one_repeats_nothing(tmp_path: Path, monkeypatch) -> None:
    """Due messages are appended a few body bytes at a time (served, each append is
    one RPC, which has a size limit); when an append fails, the pass ends and the
    next one delivers the rest, without repeating what the earlier appends did."""
    from mqstore.store import schedule

    monkeypatch.setattr(schedule, "DELIVERY_BYTES", 250)  # 100-byte bodies: two per append
    clock = StepClock(1_700_000_000_000)
    bodies = [b"%03d" % i + b"." * 97 for i in range(9)]
    with open_store(tmp_path, clock) as s:
        s.append(MessageBatch.of([delayed(1, b) for b in bodies]))
        s.dispatcher.catch_up()
        appended = []
        real_append = s.commitlog.append

        def append(batch):
            appended.append(len(batch))
            if len(appended) == 3:
                raise OSError("the disk hiccups")
            return real_append(batch)

        monkeypatch.setattr(s.commitlog, "append", append)
        clock.now += 1000
        try:
            s.scheduler.deliver_due(clock.now)
        except OSError:
            pass
        assert real_bodies(s) == bodies[:4] and appended == [2, 2, 2]
        assert s.scheduler.deliver_due(clock.now) == 5
        assert real_bodies(s) == bodies and appended[3:] == [2, 2, 1]


def test_background_scheduler_delivers(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        s.append(MessageBatch.of([delayed(1, b"soon", queue=None)]))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and s.scheduler.delivered == 0:
            time.sleep(0.05)
        assert s.scheduler.delivered == 1
        s.wait_dispatched()
        found = [r for q in range(4) for r in s.pull("Orders", q, 0).records]
        assert [r.body for r in found] == [b"soon"]
