"""mqstore/store/pop_rules.py: every pop rule over a real PopState and real records,
with a fake clock and the shard's I/O in memory (no client, no Ray, no gRPC):
visibility and redelivery, attempts and the dead-letter queue, FIFO order and holds,
tag filters, delay messages, records set aside, handle checks, queue rotation, and
retention's losses."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore import MessageStore, StoreConfig
from mqstore.errors import InvalidArgumentError, StoreNotWritableError
from mqstore.formats.javahash import tags_code
from mqstore.formats.message import MessageRecord, decode_records
from mqstore.formats.receipt_handle import ReceiptHandle
from mqstore.store.consumer_rules import TIMER_DELIVER_MS
from mqstore.store.messages import MessageBatch
from mqstore.store.pop import AckOutcome, PopState
from mqstore.store.pop_rules import (
    DEAD_LETTER_RETRY_MS,
    DLQ_ORIGIN_TOPIC,
    DLQ_REASON,
    RETRY_TOPIC,
    PopAnswer,
    PopAsk,
    PopRules,
)
from mqstore.store.reads import UnitsPage
from tests.tiers import examples

G, T = "GID_rules", "TopicR"
NOW = 1_700_000_000_000
SHARD = 2
_NONE = np.zeros(0, np.int64)


class FakeClock:
    def __init__(self, ms: int = NOW) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


class FakeShard:
    """pop_rules.PopShard in memory: units per queue, records encoded by a real
    commitlog (so they decode as stored ones), dead letters kept, losses noted."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self.units_of: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.mins: dict[tuple[str, int], int] = {}
        self.raws: dict[int, bytes] = {}
        self.dead_letters: list[MessageBatch] = []
        self.refuse_dead_letters = False
        self.losses: list[tuple[str, str, int, int, int]] = []

    def send(  # noqa: PLR0913
        self,
        q: int,
        bodies: Sequence[bytes],
        *,
        topic: str = T,
        tags: str | None = None,
        props: dict[str, str] | None = None,
        born: int = NOW,
    ) -> list[int]:
        """Store ``bodies`` in queue ``q``; their queue offsets."""
        n = len(bodies)
        res = self._store.commitlog.append(
            MessageBatch(
                topics=topic,
                bodies=list(bodies),
                queue_ids=q,
                tags=[tags] * n,
                properties=[props] * n if props else None,
                born_timestamps=[born] * n,
            )
        )
        offs, sizes = np.asarray(res.physical_offsets), np.asarray(res.sizes)
        raw = self._store.commitlog.read_raw(offs, sizes)
        units = self.units_of.setdefault((topic, q), [])
        first = len(units)
        for k in range(n):
            self.raws[int(offs[k])] = bytes(raw.buffer[raw.offsets[k] : raw.offsets[k + 1]])
            units.append((int(offs[k]), int(sizes[k]), tags_code(tags) if tags else 0))
        return list(range(first, first + n))

    def retain_from(self, q: int, offset: int, *, topic: str = T) -> None:
        """Retention: the queue's min moves to ``offset``, the records below are gone."""
        for phys, _, _ in self.units_of[(topic, q)][:offset]:
            self.raws.pop(phys, None)
        self.mins[(topic, q)] = offset

    def forget_record(self, q: int, offset: int, *, topic: str = T) -> None:
        """Retention removed the record, the queue still points at it."""
        self.raws.pop(self.units_of[(topic, q)][offset][0], None)

    # PopShard

    def units(self, topic: str, queue_id: int, offset: int, max_units: int) -> UnitsPage:
        rows = self.units_of.get((topic, queue_id))
        if rows is None:
            return UnitsPage(False, offset, 0, 0, _NONE, _NONE, _NONE)
        lo, hi = self.mins.get((topic, queue_id), 0), len(rows)
        start = min(max(offset, lo), hi)
        page = rows[start : start + max_units]
        cols = [np.asarray([r[i] for r in page], np.int64) for i in range(3)]
        return UnitsPage(True, start, lo, hi, *cols)

    def records(self, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes | None]:
        return [self.raws.get(int(o)) for o in offsets]

    def append_dead_letters(self, batch: MessageBatch) -> None:
        if self.refuse_dead_letters:
            raise StoreNotWritableError("the disk is full", cause="disk_full")
        self.dead_letters.append(batch)

    def lost(self, group: str, topic: str, queue_id: int, ranges: Sequence[tuple[int, int]]) -> None:
        self.losses += [(group, topic, queue_id, a, b) for a, b in ranges]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessageStore]:
    """One store for the module's records (a test's queues are its own FakeShard's)."""
    where = tmp_path_factory.mktemp("records")
    with MessageStore(where, StoreConfig(segment_bytes=4 << 20), background_dispatch=False) as store:
        yield store


@pytest.fixture
def shard(encoder: MessageStore) -> FakeShard:
    return FakeShard(encoder)


@pytest.fixture
def rules(tmp_path: Path, clock: FakeClock) -> Iterator[PopRules]:
    r = PopRules(lambda: PopState(tmp_path / "shard", shard=SHARD), shard=SHARD, clock=clock)
    yield r
    r.close()


def ask(**kw) -> PopAsk:
    args = {
        "group": G,
        "topic": T,
        "queue_ids": (0,),
        "max_messages": 32,
        "invisible_ms": 1000,
        "max_attempts": 16,
        "dead_letter_queue_id": 0,
    }
    args.update(kw)
    return PopAsk(**args)


def bodies(answer: PopAnswer) -> list[bytes]:
    return [record(m.record).body for m in answer.messages]


def record(raw: bytes) -> MessageRecord:
    return decode_records(raw, np.zeros(1, np.int64), check_crc=False)[0]


# ---------------------------------------------------------------------- visibility and redelivery


def test_new_messages_are_handed_out_once_until_their_invisible_time_passes(
    rules: PopRules, shard: FakeShard, clock: FakeClock
) -> None:
    shard.send(0, [b"a", b"b", b"c"])
    first = rules.pop(ask(max_messages=2), shard)
    assert bodies(first) == [b"a", b"b"]
    assert [(m.queue_id, m.offset, m.attempt) for m in first.messages] == [(0, 0, 1), (0, 1, 1)]
    assert first.next_due_ms == NOW + 1000
    assert bodies(rules.pop(ask(), shard)) == [b"c"]  # the cursor moved past a and b
    assert rules.pop(ask(), shard).messages == []  # all three invisible
    clock.advance(999)
    assert rules.pop(ask(), shard).messages == []
    clock.advance(1)  # due at exactly its deadline
    again = rules.pop(ask(), shard)
    assert [(m.offset, m.attempt) for m in again.messages] == [(0, 2), (1, 2), (2, 2)]  # in place, attempt + 1


def test_an_acked_message_is_not_redelivered(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a", b"b"])
    a, b = rules.pop(ask(), shard).messages
    assert rules.ack(G, T, [a.receipt_handle]) == [AckOutcome.OK]
    clock.advance(1000)
    assert [m.offset for m in rules.pop(ask(), shard).messages] == [b.offset]


def test_a_redelivery_voids_the_earlier_handle(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a"])
    (old,) = rules.pop(ask(), shard).messages
    clock.advance(1000)
    (new,) = rules.pop(ask(), shard).messages
    assert rules.ack(G, T, [old.receipt_handle, new.receipt_handle]) == [AckOutcome.STALE, AckOutcome.OK]


# ---------------------------------------------------------------------- attempts and the dead-letter queue


def test_out_of_attempts_goes_to_the_dead_letter_queue(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a"], tags="TagA")
    for attempt in (1, 2):
        assert [m.attempt for m in rules.pop(ask(max_attempts=2), shard).messages] == [attempt]
        clock.advance(1000)
    answer = rules.pop(ask(max_attempts=2, dead_letter_queue_id=3), shard)
    assert answer.messages == [] and answer.dead_lettered == 1 and answer.next_due_ms is None
    (batch,) = shard.dead_letters
    assert batch.topics == [f"%DLQ%{G}"] and batch.queue_ids == [3] and batch.reconsume_times == [2]
    assert batch.bodies == [b"a"] and batch.tags == ["TagA"]
    props = batch.properties[0]
    assert props[DLQ_ORIGIN_TOPIC] == T and props[RETRY_TOPIC] == T and DLQ_REASON not in props
    assert "TAGS" not in props  # a column of its own
    clock.advance(10_000)
    assert rules.pop(ask(max_attempts=2), shard).dead_lettered == 0  # finished for the group


def test_a_refused_dead_letter_is_tried_again_later(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a"])
    rules.pop(ask(max_attempts=1), shard)
    clock.advance(1000)
    shard.refuse_dead_letters = True
    answer = rules.pop(ask(max_attempts=1), shard)
    assert answer.dead_lettered == 0 and answer.next_due_ms == clock.ms + DEAD_LETTER_RETRY_MS
    shard.refuse_dead_letters = False
    clock.advance(DEAD_LETTER_RETRY_MS - 1)
    assert rules.pop(ask(max_attempts=1), shard).dead_lettered == 0  # held until then
    clock.advance(1)
    assert rules.pop(ask(max_attempts=1), shard).dead_lettered == 1
    assert len(shard.dead_letters) == 1


def test_to_dead_letter_by_handle(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a", b"b"])
    a, b = rules.pop(ask(), shard).messages
    assert rules.to_dead_letter(G, T, a.receipt_handle, 1, "a converter bug", shard) is AckOutcome.OK
    (batch,) = shard.dead_letters
    assert batch.bodies == [b"a"] and batch.queue_ids == [1]
    assert batch.properties[0][DLQ_REASON] == "a converter bug"
    assert rules.to_dead_letter(G, T, a.receipt_handle, 1, "", shard) is AckOutcome.STALE  # finished already
    assert rules.to_dead_letter("other", T, b.receipt_handle, 1, "", shard) is AckOutcome.FORGED
    assert rules.to_dead_letter(G, T, "m2 nonsense", 1, "", shard) is AckOutcome.MALFORMED
    clock.advance(1001)
    assert rules.to_dead_letter(G, T, b.receipt_handle, 1, "", shard) is AckOutcome.EXPIRED
    assert len(shard.dead_letters) == 1
    (again,) = rules.pop(ask(), shard).messages  # b was never finished: it comes back
    assert again.offset == b.offset


# ---------------------------------------------------------------------- FIFO


def test_fifo_takes_nothing_new_from_a_queue_while_one_is_out(
    rules: PopRules, shard: FakeShard, clock: FakeClock
) -> None:
    shard.send(0, [b"a", b"b"])
    shard.send(1, [b"x"])
    first = rules.pop(ask(queue_ids=(0, 1), fifo=True, max_messages=1), shard)
    assert bodies(first) == [b"a"]
    second = rules.pop(ask(queue_ids=(0, 1), fifo=True), shard)
    assert bodies(second) == [b"x"]  # queue 0 is held by a; queue 1 is free
    assert rules.pop(ask(queue_ids=(0, 1), fifo=True), shard).messages == []
    clock.advance(1000)  # both due: redelivered before anything after them
    again = rules.pop(ask(queue_ids=(0, 1), fifo=True), shard)
    assert sorted(bodies(again)) == [b"a", b"x"] and {m.attempt for m in again.messages} == {2}
    (a,) = [m for m in again.messages if m.queue_id == 0]
    assert rules.ack(G, T, [a.receipt_handle]) == [AckOutcome.OK]
    assert bodies(rules.pop(ask(queue_ids=(0, 1), fifo=True), shard)) == [b"b"]


def test_a_non_fifo_group_takes_new_messages_while_others_are_out(rules: PopRules, shard: FakeShard) -> None:
    shard.send(0, [b"a", b"b"])
    assert bodies(rules.pop(ask(max_messages=1), shard)) == [b"a"]
    assert bodies(rules.pop(ask(max_messages=1), shard)) == [b"b"]


def test_a_held_delay_message_does_not_hold_a_fifo_queue(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"later"], props={TIMER_DELIVER_MS: str(NOW + 5000)})
    shard.send(0, [b"now"])
    assert bodies(rules.pop(ask(fifo=True, invisible_ms=10_000), shard)) == [b"now"]
    clock.advance(5000)  # its time came while "now" is out: it waits behind it
    assert rules.pop(ask(fifo=True), shard).messages == []
    clock.advance(5000)  # "now" is due again: redelivered first, alone
    (now,) = rules.pop(ask(fifo=True), shard).messages
    assert record(now.record).body == b"now" and now.attempt == 2
    rules.ack(G, T, [now.receipt_handle])
    (later,) = rules.pop(ask(fifo=True), shard).messages
    assert record(later.record).body == b"later" and later.attempt == 1


# ---------------------------------------------------------------------- delay messages


def test_a_delay_message_is_held_until_its_time(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"later"], props={TIMER_DELIVER_MS: str(NOW + 5000)})
    shard.send(0, [b"past"], props={TIMER_DELIVER_MS: str(NOW - 5000)})
    answer = rules.pop(ask(), shard)
    assert bodies(answer) == [b"past"] and answer.next_due_ms == NOW + 1000
    rules.ack(G, T, [answer.messages[0].receipt_handle])
    assert rules.pop(ask(), shard).next_due_ms == NOW + 5000
    clock.advance(5000)
    (m,) = rules.pop(ask(), shard).messages
    assert record(m.record).body == b"later" and m.attempt == 1


# ---------------------------------------------------------------------- tag filters


def test_a_tag_filter_consumes_other_tags_silently(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a1"], tags="TagA")
    shard.send(0, [b"b1"], tags="TagB")
    shard.send(0, [b"none"])
    shard.send(0, [b"a2"], tags="TagA")
    assert bodies(rules.pop(ask(tag_expression="TagA || TagC"), shard)) == [b"a1", b"a2"]
    assert rules.state().cursor(G, T, 0) == 4  # past the skipped ones
    clock.advance(10_000)
    assert sorted(bodies(rules.pop(ask(), shard))) == [b"a1", b"a2"]  # skipped ones never come back


def test_a_tag_hash_collision_is_not_taken(rules: PopRules, shard: FakeShard) -> None:
    assert tags_code("Aa") == tags_code("BB")  # Java's String.hashCode
    shard.send(0, [b"bb"], tags="BB")
    shard.send(0, [b"aa"], tags="Aa")
    assert bodies(rules.pop(ask(tag_expression="Aa"), shard)) == [b"aa"]


def test_a_filter_scans_past_a_page_of_skipped_messages(rules: PopRules, shard: FakeShard) -> None:
    shard.send(0, [b"x"] * 300, tags="TagB")  # more than one page (pop_rules.SCAN_UNITS)
    shard.send(0, [b"a"], tags="TagA")
    assert bodies(rules.pop(ask(tag_expression="TagA"), shard)) == [b"a"]


# ---------------------------------------------------------------------- records no consumer can take


def test_an_unconvertible_record_is_set_aside_and_the_others_answered(
    rules: PopRules, shard: FakeShard, clock: FakeClock
) -> None:
    shard.send(0, [b"good1"])
    shard.send(0, [b"poison"], born=1 << 60)
    shard.send(0, [b"good2"])
    answer = rules.pop(ask(), shard)
    assert bodies(answer) == [b"good1", b"good2"] and answer.set_aside == ["born_time"]
    (batch,) = shard.dead_letters
    assert batch.bodies == [b"poison"] and "born time" in batch.properties[0][DLQ_REASON]
    assert batch.born_timestamps[0] != 1 << 60  # a born time a consumer can take
    clock.advance(10_000)
    assert b"poison" not in bodies(rules.pop(ask(), shard))


def test_an_unreachable_delivery_time_leaves_the_dead_letter(rules: PopRules, shard: FakeShard) -> None:
    shard.send(0, [b"never"], props={TIMER_DELIVER_MS: "9" * 30})
    assert rules.pop(ask(), shard).set_aside == ["delivery_time"]
    (batch,) = shard.dead_letters
    assert TIMER_DELIVER_MS not in batch.properties[0] and TIMER_DELIVER_MS in batch.properties[0][DLQ_REASON]


# ---------------------------------------------------------------------- receipt handles


def test_ack_outcomes(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a", b"b", b"c"])
    a, b, c = rules.pop(ask(), shard).messages
    h = ReceiptHandle.parse(a.receipt_handle)
    other_shard = ReceiptHandle(SHARD + 1, *(getattr(h, f) for f in ("queue_id", "offset", "generation")),
                                h.pop_ms, h.invisible_ms, h.commitlog_offset, tag=h.tag).encode()  # fmt: skip
    altered = ReceiptHandle(h.shard, h.queue_id, h.offset + 1, h.generation, h.pop_ms, h.invisible_ms,
                            h.commitlog_offset, tag=h.tag).encode()  # fmt: skip
    assert rules.ack(G, T, ["", "m1 1 2 3", other_shard, altered, a.receipt_handle, a.receipt_handle]) == [
        AckOutcome.MALFORMED,
        AckOutcome.MALFORMED,
        AckOutcome.MALFORMED,  # another shard's: not one of this shard's handles
        AckOutcome.FORGED,
        AckOutcome.OK,
        AckOutcome.STALE,  # acked already
    ]
    assert rules.ack("GID_other", T, [b.receipt_handle]) == [AckOutcome.FORGED]
    clock.advance(1001)
    assert rules.ack(G, T, [b.receipt_handle]) == [AckOutcome.EXPIRED]
    redelivered = rules.pop(ask(), shard).messages
    assert [m.offset for m in redelivered] == [b.offset, c.offset]


def test_change_invisible(rules: PopRules, shard: FakeShard, clock: FakeClock) -> None:
    shard.send(0, [b"a"])
    (a,) = rules.pop(ask(), shard).messages
    clock.advance(500)
    outcome, new = rules.change_invisible(G, T, a.receipt_handle, 5000)
    assert outcome is AckOutcome.OK and new is not None
    old = ReceiptHandle.parse(a.receipt_handle)
    assert new.generation == old.generation + 1 and new.deadline_ms == clock.ms + 5000
    assert rules.change_invisible(G, T, a.receipt_handle, 5000) == (AckOutcome.STALE, None)
    assert rules.change_invisible("GID_other", T, new.encode(), 5000) == (AckOutcome.FORGED, None)
    assert rules.change_invisible(G, T, "junk", 5000) == (AckOutcome.MALFORMED, None)
    clock.advance(1000)  # past the old deadline, not the new one
    assert rules.pop(ask(), shard).messages == []
    clock.advance(4000)  # at the new deadline
    (again,) = rules.pop(ask(), shard).messages
    assert again.attempt == 2  # a change of invisible time is not an attempt
    assert rules.change_invisible(G, T, new.encode(), 10) == (AckOutcome.STALE, None)  # redelivered since
    clock.advance(1001)
    assert rules.change_invisible(G, T, again.receipt_handle, 10) == (AckOutcome.EXPIRED, None)


def test_handles_survive_a_reopen(tmp_path: Path, shard: FakeShard, clock: FakeClock) -> None:
    def opened() -> PopRules:
        return PopRules(lambda: PopState(tmp_path / "shard", shard=SHARD), shard=SHARD, clock=clock)

    shard.send(0, [b"a"])
    first = opened()
    (a,) = first.pop(ask(), shard).messages
    first.close()
    second = opened()
    try:
        assert second.ack(G, T, [a.receipt_handle]) == [AckOutcome.OK]
    finally:
        second.close()


# ---------------------------------------------------------------------- queues in turn, retention


def test_queues_are_taken_in_turn(rules: PopRules, shard: FakeShard) -> None:
    for q in (0, 1, 2):
        shard.send(q, [b"%d" % q] * 3)
    got = [rules.pop(ask(queue_ids=(0, 1, 2), max_messages=1), shard).messages[0].queue_id for _ in range(6)]
    assert got == [0, 1, 2, 0, 1, 2]


def test_a_new_group_starts_at_the_queue_min_and_losses_are_noted(
    rules: PopRules, shard: FakeShard, clock: FakeClock
) -> None:
    shard.send(0, [b"%d" % i for i in range(6)])
    shard.retain_from(0, 2)
    assert bodies(rules.pop(ask(max_messages=1), shard)) == [b"2"]  # a new group: from the min, nothing lost
    assert shard.losses == []
    shard.retain_from(0, 5)  # the group's cursor (3) is below the min now
    assert bodies(rules.pop(ask(max_messages=1), shard)) == [b"5"]
    assert shard.losses == [(G, T, 0, 3, 5)]


def test_records_gone_before_the_queue_is_cleaned_are_losses(rules: PopRules, shard: FakeShard) -> None:
    shard.send(0, [b"0", b"1", b"2", b"3"])
    shard.forget_record(0, 1)
    shard.forget_record(0, 2)
    assert bodies(rules.pop(ask(), shard)) == [b"0", b"3"]
    assert shard.losses == [(G, T, 0, 1, 3)]


def test_a_queue_cut_below_the_cursor_hands_out_nothing(rules: PopRules, shard: FakeShard) -> None:
    shard.send(0, [b"0", b"1", b"2"])
    assert len(rules.pop(ask(), shard).messages) == 3
    del shard.units_of[(T, 0)][1:]  # a crash under async flush cut the queue back to 1 unit
    assert rules.pop(ask(), shard).messages == []
    assert rules.state().cursor(G, T, 0) == 3  # a cursor never moves back


def test_an_unknown_queue_gives_nothing(rules: PopRules, shard: FakeShard) -> None:
    answer = rules.pop(ask(queue_ids=(7,)), shard)
    assert answer == PopAnswer()


# ---------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"group": ""}, "group"),
        ({"topic": "bad topic!"}, "topic"),
        ({"max_messages": 0}, "max_messages"),
        ({"max_messages": 33}, "max_messages"),
        ({"invisible_ms": -1}, "invisible_ms"),
        ({"invisible_ms": 12 * 3600 * 1000 + 1}, "invisible_ms"),
        ({"wait_ms": 60_001}, "wait_ms"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"queue_ids": ()}, "queue_ids"),
        ({"queue_ids": (0, -1)}, "queue_ids"),
        ({"tag_expression": "A || "}, "tag expression"),
    ],
)
def test_bad_pop_requests_are_refused(change: dict, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        ask(**change)


def test_bad_names_and_invisible_times_are_refused_before_any_handle_is_read(rules: PopRules) -> None:
    with pytest.raises(InvalidArgumentError):
        rules.ack("", T, ["x"])
    with pytest.raises(InvalidArgumentError, match="invisible_ms"):
        rules.change_invisible(G, T, "x", -1)


# ---------------------------------------------------------------------- a random run against the rules' promises

ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 1), st.integers(1, 4)),
        st.tuples(st.just("pop"), st.integers(1, 5), st.sampled_from([500, 2000])),
        st.tuples(st.just("ack"), st.integers(0, 7), st.booleans()),
        st.tuples(st.just("wait"), st.sampled_from([1, 499, 500, 1500, 2000])),
    ),
    max_size=30,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops, st.booleans(), st.integers(2, 4))
def test_random_runs_keep_the_promises(  # noqa: C901, PLR0912
    tmp_path_factory: pytest.TempPathFactory, encoder: MessageStore, steps: list, fifo: bool, max_attempts: int
) -> None:
    """Nothing handed out while invisible; attempts count up by one; an acked message
    never comes back; FIFO hands a message out first only after everything before it
    in its queue is acked or handed out with it; at the end, every message sent was
    acked or went to the DLQ after ``max_attempts`` deliveries, none lost."""
    where = tmp_path_factory.mktemp("run")
    clock, shard = FakeClock(), FakeShard(encoder)
    rules = PopRules(lambda: PopState(where, shard=SHARD, fsync=False), shard=SHARD, clock=clock)
    sent: list[tuple[int, int]] = []
    body_of: dict[bytes, tuple[int, int]] = {}
    dead: set[tuple[int, int]] = set()
    visible_at: dict[tuple[int, int], int] = {}
    attempts: dict[tuple[int, int], int] = {}
    out: dict[tuple[int, int], str] = {}  # handed out, not acked: its latest handle
    acked: set[tuple[int, int]] = set()

    def pop(n: int, invisible: int) -> None:
        answer = rules.pop(ask(queue_ids=(0, 1), max_messages=n, invisible_ms=invisible, fifo=fifo,
                               max_attempts=max_attempts), shard)  # fmt: skip
        this = {(m.queue_id, m.offset) for m in answer.messages}
        for m in answer.messages:
            key = (m.queue_id, m.offset)
            assert key not in acked and key not in dead and visible_at.get(key, 0) <= clock.ms
            assert m.attempt == attempts.get(key, 0) + 1 <= max_attempts
            if fifo and m.attempt == 1:
                done = acked | dead | this
                assert all((m.queue_id, o) in done for o in range(m.offset))
            attempts[key], visible_at[key], out[key] = m.attempt, clock.ms + invisible, m.receipt_handle
        gone = {body_of[b] for batch in shard.dead_letters for b in batch.bodies}
        assert len(gone) == sum(len(b.bodies) for b in shard.dead_letters)  # each once
        for key in gone - dead:
            assert attempts[key] == max_attempts and visible_at[key] <= clock.ms  # out of attempts, due
            out.pop(key)
        dead.update(gone)

    for step in steps:
        if step[0] == "send":
            texts = [b"%d-%d" % (step[1], len(sent) + k) for k in range(step[2])]
            for text, off in zip(texts, shard.send(step[1], texts)):
                sent.append((step[1], off))
                body_of[text] = (step[1], off)
        elif step[0] == "pop":
            pop(step[1], step[2])
        elif step[0] == "ack" and out:
            key = sorted(out)[step[1] % len(out)]
            got = rules.ack(G, T, [out[key]])
            if visible_at[key] >= clock.ms:
                assert got == [AckOutcome.OK]
                acked.add(key)
                del out[key]
            else:
                assert got == [AckOutcome.EXPIRED]
        elif step[0] == "wait":
            clock.advance(step[1])
    for _ in range(4 * max_attempts + len(sent)):  # drain: ack whatever comes
        clock.advance(2000)
        pop(5, 500)
        for key in list(out):
            if visible_at[key] >= clock.ms:
                assert rules.ack(G, T, [out.pop(key)]) == [AckOutcome.OK]
                acked.add(key)
    assert acked | dead == set(sent) and not acked & dead
    rules.close()
