"""Records in SCHEDULE_TOPIC_XXXX the delay scheduler can not deliver (a forged
REAL_TOPIC or REAL_QID, no DELAY level) are skipped, logged and counted; later
delayed messages are still delivered, also after a restart on a store that already
holds such a record (one written before producers were refused the schedule topic:
written here through the internal path, as an old store's append wrote it). A pass
that fails is retried; a loop that does stop is named by ``stopped_loops``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqstore.errors import ReservedTopicError
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.schedule import SCHEDULE_TOPIC
from tests.unit.test_schedule import StepClock

CFG = StoreConfig(segment_bytes=256 * 1024, index_hash_slots=512, index_max_entries=2048)
T0 = 1_700_000_000_000


# What a producer could send to the schedule topic before the fix (queue = level - 1).
POISONS = {
    "forged REAL_TOPIC": {"DELAY": "1", "REAL_TOPIC": "../../etc", "REAL_QID": "0"},
    "forged REAL_QID": {"DELAY": "1", "REAL_TOPIC": "Orders", "REAL_QID": "x1"},
    "REAL_QID out of range": {"DELAY": "1", "REAL_TOPIC": "Orders", "REAL_QID": "99999999"},
    "no DELAY (self-feeding)": {"REAL_TOPIC": "Orders", "REAL_QID": "1"},
    "no REAL_TOPIC (self-feeding)": {"DELAY": "1"},
    "REAL_TOPIC is the schedule topic": {"DELAY": "1", "REAL_TOPIC": SCHEDULE_TOPIC, "REAL_QID": "0"},
}


def write_poison(s: MessageStore, props: dict) -> None:
    """As an old store wrote a producer's send to SCHEDULE_TOPIC_XXXX (no check then)."""
    s.commitlog.append(MessageBatch(topics=SCHEDULE_TOPIC, bodies=[b"poison"], queue_ids=0, properties=props))


def delayed(body: bytes) -> MessageBatch:
    return MessageBatch(topics="Orders", bodies=[body], queue_ids=1, properties={"DELAY": "1"})


def real_bodies(s: MessageStore) -> list[bytes]:
    s.dispatcher.catch_up()
    return [r.body for r in s.pull("Orders", 1, 0, max_count=100).records]


@pytest.mark.parametrize("kind", sorted(POISONS))
def test_a_poison_record_is_skipped_and_later_delays_are_delivered(tmp_path: Path, kind: str) -> None:
    clock = StepClock(T0)
    with MessageStore(tmp_path, CFG, clock=clock, background_dispatch=False) as s:
        write_poison(s, POISONS[kind])
        s.append(delayed(b"after"))
        s.dispatcher.catch_up()
        clock.now += 1000
        assert s.scheduler.deliver_due(clock.now) == 1  # both units consumed: one delivered, one skipped
        assert s.scheduler.skipped == 1 and s.scheduler.delivered == 1
        assert real_bodies(s) == [b"after"]
        wrote = s.commitlog.wrote_offset
        for _ in range(5):  # the poison is never redelivered (self-feeding would grow the log every pass)
            clock.now += 1000
            s.scheduler.deliver_due(clock.now)
        s.dispatcher.catch_up()
        assert s.commitlog.wrote_offset == wrote
        cq = s.consume_queues.find(SCHEDULE_TOPIC, 0)
        assert cq.max_offset == 2
        assert s.status()["loops"]["delay_scheduler"]["skipped"] == 1


def test_a_store_that_already_holds_a_poison_delivers_after_a_restart(tmp_path: Path) -> None:
    """Before the fix the scheduler stopped on the record and again after every restart."""
    clock = StepClock(T0)
    with MessageStore(tmp_path, CFG, clock=clock, background_dispatch=False) as s:
        for props in POISONS.values():
            write_poison(s, props)
        s.append(delayed(b"first"))
        s.dispatcher.catch_up()
    clock.now += 2000
    with MessageStore(tmp_path, CFG, clock=clock, background_dispatch=False) as s:
        s.append(delayed(b"second"))
        s.dispatcher.catch_up()
        clock.now += 1000
        s.scheduler.deliver_due(clock.now)
        assert real_bodies(s) == [b"first", b"second"]
        assert s.scheduler.skipped == len(POISONS)


def test_the_background_scheduler_goes_on_past_a_poison(tmp_path: Path) -> None:
    """Real clock, real thread: the loop itself survives the record (it used to log
    delay_delivery_failed and end)."""
    with MessageStore(tmp_path, CFG) as s:
        write_poison(s, POISONS["forged REAL_TOPIC"])
        write_poison(s, POISONS["no DELAY (self-feeding)"])
        s.append(delayed(b"due"))
        deadline = time.monotonic() + 15
        while s.pull("Orders", 1, 0).records == []:
            assert time.monotonic() < deadline, f"never delivered: {s.status()['loops']}"
            time.sleep(0.05)
        assert s.scheduler.running and s.scheduler.skipped == 2
        assert s.stopped_loops() == {}


def test_producers_can_not_write_the_schedule_topic(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG, background_dispatch=False) as s:
        with pytest.raises(ReservedTopicError):
            s.append(
                MessageBatch(
                    topics=SCHEDULE_TOPIC, bodies=[b"x"], queue_ids=0, properties=POISONS["no DELAY (self-feeding)"]
                )
            )
        with pytest.raises(ValueError, match="SCHEDULE_SOURCE"):  # would move the scheduler's progress
            s.append(MessageBatch(topics="Orders", bodies=[b"x"], properties={"SCHEDULE_SOURCE": "1:1000000"}))
        assert s.commitlog.wrote_offset == 0


def test_a_forged_schedule_source_in_an_old_store_does_not_stop_the_open(tmp_path: Path) -> None:
    clock = StepClock(T0)
    with MessageStore(tmp_path, CFG, clock=clock, background_dispatch=False) as s:
        s.commitlog.append(MessageBatch(topics="Orders", bodies=[b"x"], properties={"SCHEDULE_SOURCE": "not:a:number"}))
    (tmp_path / "config" / "delayOffset.json").unlink()  # the open scans the commitlog from its start
    with MessageStore(tmp_path, CFG, clock=clock, background_dispatch=False) as s:
        s.append(delayed(b"later"))
        s.dispatcher.catch_up()
        clock.now += 1000
        assert s.scheduler.deliver_due(clock.now) == 1


def test_a_failing_pass_is_retried_and_a_dead_loop_is_named(tmp_path: Path, monkeypatch) -> None:
    with MessageStore(tmp_path, CFG) as s:
        sched = s.scheduler
        calls = []

        def flaky(now_ms: int) -> int:
            calls.append(now_ms)
            if len(calls) <= 2:
                raise OSError("disk went away")
            if len(calls) == 3:
                raise SystemExit("the thread ends")  # not an Exception: the loop can not go on
            return 0

        monkeypatch.setattr(sched, "deliver_due", flaky)
        deadline = time.monotonic() + 10
        while sched.running:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert sched.failures == 2 and len(calls) == 3
        stopped = s.stopped_loops()
        assert list(stopped) == ["delay_scheduler"] and "SystemExit" in stopped["delay_scheduler"]
        assert s.status()["stopped_loops"] == stopped
