"""mqstore/store/pop.py: receipt handles, pop/ack/change semantics, a model-based
test with reopens, torn and garbage journal tails, snapshots, and a real kill -9."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.errors import (
    CorruptFileError,
    InvalidArgumentError,
    InvalidReceiptHandle,
    StoreClosedError,
    StoreLockedError,
    StoreNotWritableError,
)
from mqstore.store import faults
from mqstore.store.pop import (
    JOURNAL_FILE,
    POP_DIR,
    SECRET_FILE,
    SNAPSHOT_FILE,
    SNAPSHOT_TMP,
    AckOutcome,
    Delivery,
    InFlight,
    PopState,
    ReceiptHandle,
)
from tests.tiers import examples

ROOT = Path(__file__).resolve().parents[2]
G, T = "GID_pop", "TopicA"
I32, I64 = (1 << 31) - 1, (1 << 63) - 1

Dump = dict[tuple[str, str, int], tuple[int | None, tuple[InFlight, ...]]]


def dump(state: PopState) -> Dump:
    """Everything the state holds, comparable with ==."""
    return {
        (k.group, k.topic, k.queue_id): (k.cursor, tuple(state.in_flight(k.group, k.topic, k.queue_id)))
        for k in state.groups()
    }


def new(q: int, offset: int, hold: int | None = None) -> Delivery:
    """A delivery of queue ``q``'s message at ``offset`` (commitlog offset derived from both)."""
    return Delivery(q, offset, q * 1_000_000 + offset * 10, 10, hold)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[PopState]:
    s = PopState(tmp_path, shard=3)
    yield s
    s.close()


def journal(tmp_path: Path) -> Path:
    return tmp_path / POP_DIR / JOURNAL_FILE


# ---------------------------------------------------------------------- receipt handles

handles = st.builds(
    ReceiptHandle,
    shard=st.integers(0, I32),
    queue_id=st.integers(0, I32),
    offset=st.integers(0, I64),
    generation=st.integers(0, I64),
    pop_ms=st.integers(0, I64),
    invisible_ms=st.integers(0, I64),
    commitlog_offset=st.integers(0, I64),
    tag=st.from_regex(r"[A-Za-z0-9_-]{22}", fullmatch=True),
)
TAG = "A" * 22


@given(handles)
def test_handle_round_trip(h: ReceiptHandle) -> None:
    text = h.encode()
    assert text.startswith("m2 ") and len(text.split(" ")) == 9
    assert ReceiptHandle.parse(text) == h
    assert ReceiptHandle.parse(text).encode() == text


@given(st.text(alphabet="m1 0123456789-+x\t", max_size=60) | st.text(max_size=40))
def test_handle_parse_refuses_or_round_trips(text: str) -> None:
    """Any text either parses to a handle that writes it back exactly, or is refused."""
    try:
        h = ReceiptHandle.parse(text)
    except InvalidReceiptHandle as e:
        assert e.reason == "malformed"
    else:
        assert h.encode() == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "m2",
        "m1 1 2 3 4 5 6 7",  # m1 had no tag: refused since m2
        f"m1 1 2 3 4 5 6 7 {TAG}",
        "m2 1 2 3 4 5 6 7",  # no tag
        f"m2 1 2 3 4 5 6 {TAG}",  # a field short
        f"m2 1 2 3 4 5 6 7 8 {TAG}",  # a field too many
        f"m3 1 2 3 4 5 6 7 {TAG}",  # unknown version
        f"M2 1 2 3 4 5 6 7 {TAG}",
        f" m2 1 2 3 4 5 6 7 {TAG}",
        f"m2 1 2 3 4 5 6 7 {TAG} ",
        f"m2  1 2 3 4 5 6 7 {TAG}",
        f"m2 1 2 3 4 5 6 -7 {TAG}",
        f"m2 1 2 3 4 5 6 +7 {TAG}",
        f"m2 01 2 3 4 5 6 7 {TAG}",  # not canonical
        f"m2 1 2 3 4 5 6 7x {TAG}",
        f"m2\t1 2 3 4 5 6 7 {TAG}",
        f"m2 1 2 3 4 5 6 ٣ {TAG}",  # a non-ASCII digit
        f"m2 1 2 3 4 5 6 7 {TAG[:-1]}",  # a tag short
        f"m2 1 2 3 4 5 6 7 {TAG}A",  # a tag too long
        f"m2 1 2 3 4 5 6 7 {TAG[:-1]}=",  # not url-safe base64
        f"m2 {I32 + 1} 2 3 4 5 6 7 {TAG}",  # shard over 31 bits
        f"m2 1 {I32 + 1} 3 4 5 6 7 {TAG}",
        f"m2 1 2 {I64 + 1} 4 5 6 7 {TAG}",  # over 63 bits
        "m2 1 2 3 4 5 6 " + "9" * 25 + f" {TAG}",
        "m2 " + " ".join(["1"] * 7) * 100 + f" {TAG}",
    ],
)
def test_malformed_handles_refused(text: str) -> None:
    with pytest.raises(InvalidReceiptHandle) as e:
        ReceiptHandle.parse(text)
    assert e.value.reason == "malformed"
    assert isinstance(e.value, InvalidArgumentError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("value", [None, b"m1 1 2 3 4 5 6 7", 17])
def test_non_string_handles_refused(value: object) -> None:
    with pytest.raises(InvalidReceiptHandle):
        ReceiptHandle.parse(value)  # type: ignore[arg-type]


def test_handle_fields_checked() -> None:
    with pytest.raises(InvalidReceiptHandle):
        ReceiptHandle(0, -1, 0, 0, 0, 0, 0)
    with pytest.raises(InvalidReceiptHandle):
        ReceiptHandle(0, 0, 0, 0, True, 0, 0)  # type: ignore[arg-type]
    assert ReceiptHandle(0, 1, 2, 3, 1000, 250, 9).deadline_ms == 1250


# ---------------------------------------------------------------------- semantics


def test_new_entries_get_handles_and_move_the_cursor(state: PopState) -> None:
    assert state.cursor(G, T, 0) is None
    hs = state.pop(G, T, [new(0, 5), new(0, 6)], cursors={0: 8}, now_ms=1000, invisible_ms=300)
    assert hs == [ReceiptHandle(3, 0, 5, 1, 1000, 300, 50), ReceiptHandle(3, 0, 6, 1, 1000, 300, 60)]
    assert state.cursor(G, T, 0) == 8
    assert state.in_flight(G, T, 0) == [InFlight(5, 50, 10, 1300, 1, 1), InFlight(6, 60, 10, 1300, 1, 1)]
    assert state.cursor(G, T, 1) is None and state.cursor("other", T, 0) is None
    # the cursor may move without deliveries (filtered messages), never back
    state.pop(G, T, [], cursors={0: 9}, now_ms=1000, invisible_ms=300)
    assert state.cursor(G, T, 0) == 9
    with pytest.raises(ValueError, match="back"):
        state.pop(G, T, [], cursors={0: 8}, now_ms=1000, invisible_ms=300)
    assert state.cursor(G, T, 0) == 9


def test_redelivery_of_due_entries_bumps_attempt_and_generation(state: PopState) -> None:
    (h1,) = state.pop(G, T, [new(0, 0)], cursors={0: 1}, now_ms=1000, invisible_ms=100)
    assert state.due(G, T, [0], 1099, 10) == []
    assert state.due(G, T, [0], 1100, 10) == [(0, InFlight(0, 0, 10, 1100, 1, 1))]
    (h2,) = state.pop(G, T, [new(0, 0)], cursors={}, now_ms=1100, invisible_ms=100)
    assert (h2.generation, h2.pop_ms) == (2, 1100)
    assert state.in_flight(G, T, 0) == [InFlight(0, 0, 10, 1200, 2, 2)]
    # at its deadline the old handle is not expired, but no longer current
    assert state.ack(G, T, [h1], 1100) == [AckOutcome.STALE]
    (h3,) = state.pop(G, T, [new(0, 0)], cursors={}, now_ms=1300, invisible_ms=100)
    assert state.in_flight(G, T, 0)[0].attempt == 3
    assert state.ack(G, T, [h2, h3], 1350) == [AckOutcome.EXPIRED, AckOutcome.OK]
    assert state.in_flight(G, T, 0) == [] and state.cursor(G, T, 0) == 1


def test_ack_removes_once(state: PopState) -> None:
    hs = state.pop(G, T, [new(1, 0), new(1, 1), new(1, 2)], cursors={1: 3}, now_ms=0, invisible_ms=1000)
    assert state.ack(G, T, [hs[1], hs[1]], 10) == [AckOutcome.OK, AckOutcome.STALE]
    assert [e.offset for e in state.in_flight(G, T, 1)] == [0, 2]
    assert state.ack(G, T, [hs[1]], 20) == [AckOutcome.STALE]
    assert state.ack("other", T, [hs[0]], 20) == [AckOutcome.FORGED]  # the handle is this group's
    assert state.ack(G, T, [hs[0], hs[2]], 1000) == [AckOutcome.OK, AckOutcome.OK]
    assert state.groups()[0].in_flight == 0 and state.cursor(G, T, 1) == 3


def test_expired_handles_are_refused(state: PopState) -> None:
    (h,) = state.pop(G, T, [new(0, 0)], cursors={0: 1}, now_ms=1000, invisible_ms=100)
    assert state.ack(G, T, [h], 1101) == [AckOutcome.EXPIRED]
    with pytest.raises(InvalidReceiptHandle, match="expired") as e:
        state.change_invisible(G, T, h, 1101, 500)
    assert e.value.reason == "expired"
    assert state.in_flight(G, T, 0) == [InFlight(0, 0, 10, 1100, 1, 1)]  # it stays, and comes back when due


def test_change_invisible_voids_the_old_handle(state: PopState) -> None:
    (h,) = state.pop(G, T, [new(2, 4)], cursors={2: 5}, now_ms=1000, invisible_ms=100)
    h2 = state.change_invisible(G, T, h, 1050, 5000)
    assert h2 == ReceiptHandle(3, 2, 4, 2, 1050, 5000, h.commitlog_offset)
    assert state.in_flight(G, T, 2) == [InFlight(4, h.commitlog_offset, 10, 6050, 1, 2)]  # attempt unchanged
    assert state.entry(G, T, 2, 4) == InFlight(4, h.commitlog_offset, 10, 6050, 1, 2)
    assert state.entry(G, T, 2, 3) is None and state.entry(G, T, 9, 4) is None and state.entry("x", T, 2, 4) is None
    assert state.due(G, T, [2], 1200, 5) == []
    with pytest.raises(InvalidReceiptHandle, match="stale") as e:
        state.change_invisible(G, T, h, 1060, 10)
    assert e.value.reason == "stale"
    assert state.ack(G, T, [h], 1060) == [AckOutcome.STALE]
    h3 = state.change_invisible(G, T, h2, 1070, 0)  # 0: visible again at once
    assert state.due(G, T, [2], 1070, 5) == [(2, InFlight(4, h.commitlog_offset, 10, 1070, 1, 3))]
    assert state.ack(G, T, [h3], 1070) == [AckOutcome.OK]
    with pytest.raises(InvalidReceiptHandle, match="stale"):
        state.change_invisible(G, T, h3, 1070, 10)  # acked


def test_handles_of_another_shard_are_refused(state: PopState) -> None:
    (h,) = state.pop(G, T, [new(0, 0)], cursors={0: 1}, now_ms=0, invisible_ms=100)
    other = dataclasses.replace(h, shard=4)
    assert state.ack(G, T, [other], 10) == [AckOutcome.FORGED]
    with pytest.raises(InvalidReceiptHandle):
        state.change_invisible(G, T, other, 10, 10)
    assert state.ack(G, T, [h], 10) == [AckOutcome.OK]


def test_guessed_altered_and_other_group_handles_are_forged(state: PopState) -> None:
    """Finding 8: one ack with guessed handles acked another consumer's message.
    A handle is good only with the tag this shard made for its fields, group and topic."""
    hs = state.pop(G, T, [new(0, 0), new(0, 1)], cursors={0: 2}, now_ms=0, invisible_ms=100)
    h0, h1 = hs
    assert h0 is not None and h1 is not None and h0.tag and h0.tag != h1.tag
    guessed = [ReceiptHandle(h0.shard, 0, 0, g, 0, 100, 0) for g in range(1, 4)]  # the right fields, no tag
    assert state.ack(G, T, guessed, 10) == [AckOutcome.FORGED] * 3
    with pytest.raises(InvalidReceiptHandle):
        ReceiptHandle.parse(guessed[0].encode())  # nor does it parse without one
    wrong_tag = ReceiptHandle.parse(h0.encode().rsplit(" ", 1)[0] + " " + h1.tag)
    assert state.ack(G, T, [wrong_tag], 10) == [AckOutcome.FORGED]
    altered = dataclasses.replace(h0, invisible_ms=5000)  # a longer deadline, the same tag
    assert state.ack(G, T, [altered], 10) == [AckOutcome.FORGED]
    with pytest.raises(InvalidReceiptHandle) as e:
        state.change_invisible(G, T, altered, 10, 10)
    assert e.value.reason == "forged"
    # the same offsets popped by another group: its handles do not ack this group's
    (other,) = state.pop("other", T, [new(0, 0)], cursors={0: 1}, now_ms=0, invisible_ms=100)
    assert other is not None and other.fields() == h0.fields() and other.tag != h0.tag
    assert state.ack(G, T, [other], 10) == [AckOutcome.FORGED]
    assert state.ack(G, "other-topic", [h0], 10) == [AckOutcome.FORGED]
    assert state.check(G, T, h0, 10) == AckOutcome.OK and state.check(G, T, altered, 10) == AckOutcome.FORGED
    assert state.check(G, T, h0, 101) == AckOutcome.EXPIRED
    assert [e.offset for e in state.in_flight(G, T, 0)] == [0, 1]  # nothing was acked
    assert state.ack(G, T, [h0, h1], 10) == [AckOutcome.OK, AckOutcome.OK]
    assert state.check(G, T, h0, 10) == AckOutcome.STALE


def test_handle_secret_is_private_and_survives_reopen(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with PopState(tmp_path, shard=1) as s:
            (h,) = s.pop(G, T, [new(0, 0)], cursors={0: 1}, now_ms=0, invisible_ms=10_000)
    finally:
        os.umask(old)
    secret = tmp_path / POP_DIR / SECRET_FILE
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_bytes()) == 32
    with PopState(tmp_path, shard=1) as s:  # a restart: the handle still acks
        assert h is not None and s.ack(G, T, [ReceiptHandle.parse(h.encode())], 10) == [AckOutcome.OK]
    other = tmp_path / "other"
    with PopState(other, shard=1) as s:  # another shard's store: another secret
        s.pop(G, T, [new(0, 0)], cursors={0: 1}, now_ms=0, invisible_ms=10_000)
        assert s.ack(G, T, [h], 10) == [AckOutcome.FORGED]
    secret.write_bytes(b"short")
    with pytest.raises(CorruptFileError, match="handle secret"):
        PopState(tmp_path, shard=1)


def test_held_entries(state: PopState) -> None:
    hs = state.pop(G, T, [new(0, 0), new(0, 1, hold=5000)], cursors={0: 2}, now_ms=1000, invisible_ms=100)
    assert hs[0] is not None and hs[1] is None
    assert state.in_flight(G, T, 0)[1] == InFlight(1, 10, 10, 5000, 0, 1)
    assert state.due(G, T, [0], 4999, 10) == [(0, InFlight(0, 0, 10, 1100, 1, 1))]
    assert [e.offset for _, e in state.due(G, T, [0], 5000, 10)] == [0, 1]  # oldest deadline first
    (h,) = state.pop(G, T, [new(0, 1)], cursors={}, now_ms=5000, invisible_ms=100)
    assert state.in_flight(G, T, 0)[1] == InFlight(1, 10, 10, 5100, 1, 2)  # first delivery: attempt 1
    assert h == ReceiptHandle(3, 0, 1, 2, 5000, 100, 10)
    # a due entry may be held again (attempt unchanged)
    state.pop(G, T, [new(0, 0, hold=9000)], cursors={}, now_ms=5000, invisible_ms=100)
    assert state.in_flight(G, T, 0)[0] == InFlight(0, 0, 10, 9000, 1, 2)


def test_blocked_and_next_deadline(state: PopState) -> None:
    assert not state.blocked(G, T, 0, 0)
    assert state.next_deadline_ms(G, T, [0, 1]) is None
    state.pop(G, T, [new(0, 0), new(1, 0, hold=700)], cursors={0: 1, 1: 1}, now_ms=100, invisible_ms=400)
    assert state.blocked(G, T, 0, 100) and state.blocked(G, T, 0, 499) and not state.blocked(G, T, 0, 500)
    assert state.blocked(G, T, 1, 500) and not state.blocked(G, T, 2, 0)
    assert state.next_deadline_ms(G, T, [0, 1]) == 500
    assert state.next_deadline_ms(G, T, [1, 7]) == 700
    assert state.next_deadline_ms("other", T, [0, 1]) is None


def test_held_entries_do_not_hold_a_fifo_queue(state: PopState) -> None:
    """A held delay message is not delivered yet: it does not keep a FIFO queue from
    handing out what follows it (RocketMQ's timer puts it in the queue at its time)."""
    assert not state.delivered_in_flight(G, T, 0)
    state.pop(G, T, [new(0, 0, hold=10**12)], cursors={0: 1}, now_ms=100, invisible_ms=400)
    assert not state.delivered_in_flight(G, T, 0)
    state.pop(G, T, [new(0, 1)], cursors={0: 2}, now_ms=100, invisible_ms=400)
    assert state.delivered_in_flight(G, T, 0)
    assert state.delivered_in_flight(G, T, 0)  # due or not: a delivered one holds the queue until finished
    assert not state.delivered_in_flight(G, T, 1) and not state.delivered_in_flight("other", T, 0)


def test_due_order_and_limit_across_queues(state: PopState) -> None:
    for q, inv in [(0, 300), (1, 100), (2, 200)]:
        state.pop(G, T, [new(q, 0), new(q, 1)], cursors={q: 2}, now_ms=0, invisible_ms=inv)
    due = state.due(G, T, [2, 1, 0, 1], 1000, 3)
    assert [(q, e.offset) for q, e in due] == [(1, 0), (1, 1), (2, 0)]
    assert [q for q, _ in state.due(G, T, [0, 2], 250, 10)] == [2, 2]
    assert state.due(G, T, [0], 1000, 0) == []


def test_invalid_pops_change_nothing(state: PopState, tmp_path: Path) -> None:
    (h,) = state.pop(G, T, [new(0, 3)], cursors={0: 5}, now_ms=0, invisible_ms=100)
    before, size = dump(state), journal(tmp_path).stat().st_size
    bad = [
        ([new(0, 4)], {}),  # below the cursor, never in flight (skipped)
        ([new(0, 3)], {}),  # in flight, not due
        ([new(0, 5)], {}),  # new, but the cursor is not moved past it
        ([new(0, 5)], {0: 5}),
        ([new(0, 6), new(0, 6)], {0: 9}),  # twice
        ([new(1, 0)], {}),  # a new key needs a cursor
        ([new(0, 6)], {0: 9, 1: -1}),
        ([Delivery(0, 6, -1, 10)], {0: 9}),
        ([Delivery(I32 + 1, 0, 0, 10)], {}),
        ([(0, 6, 60, 10)], {0: 9}),  # not a Delivery
    ]
    for deliveries, cursors in bad:
        with pytest.raises(ValueError):
            state.pop(G, T, deliveries, cursors=cursors, now_ms=50, invisible_ms=100)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        state.pop(G, T, [], cursors={}, now_ms=-1, invisible_ms=100)
    with pytest.raises(ValueError):
        state.pop("", T, [], cursors={0: 6}, now_ms=0, invisible_ms=100)
    with pytest.raises(ValueError):
        state.change_invisible(G, T, h, 10, -5)
    with pytest.raises(ValueError):
        state.ack(G, T, ["m1 3 0 3 1 0 100 30"], 0)  # type: ignore[list-item]
    assert dump(state) == before and journal(tmp_path).stat().st_size == size
    # an empty step writes nothing
    assert state.pop(G, T, [], cursors={0: 5}, now_ms=0, invisible_ms=1) == []
    assert state.ack(G, T, [h, h], 10**6) == [AckOutcome.EXPIRED, AckOutcome.EXPIRED]
    assert state.drop(G, T, 0, [4, 99]) == 0
    assert journal(tmp_path).stat().st_size == size


def test_numpy_integers_are_accepted(state: PopState) -> None:
    np = pytest.importorskip("numpy")
    d = Delivery(np.int32(0), np.int64(4), np.int64(40), np.int32(9))
    (h,) = state.pop(G, T, [d], cursors={0: np.int64(5)}, now_ms=0, invisible_ms=10)
    assert type(h.offset) is int and state.cursor(G, T, 0) == 5
    assert type(state.in_flight(G, T, 0)[0].offset) is int


def test_drop(state: PopState) -> None:
    state.pop(G, T, [new(0, i) for i in range(4)], cursors={0: 4}, now_ms=0, invisible_ms=10)
    assert state.drop(G, T, 0, [1, 3, 3, 7]) == 2
    assert [e.offset for e in state.in_flight(G, T, 0)] == [0, 2]
    assert state.drop(G, T, 5, [0]) == 0


def test_names_round_trip(tmp_path: Path) -> None:
    group = "G" * 120
    topic = "%RETRY%" + group + "_" + "t|-" * 60  # longer than 255
    with PopState(tmp_path) as s:
        s.pop(group, topic, [new(7, 0)], cursors={7: 1}, now_ms=0, invisible_ms=10)
        s.pop(G, T, [], cursors={0: 3}, now_ms=0, invisible_ms=10)
        before = dump(s)
    with PopState(tmp_path) as s:
        assert dump(s) == before
        assert [(k.group, k.topic, k.queue_id, k.cursor, k.in_flight) for k in s.groups()] == [
            (group, topic, 7, 1, 1),
            (G, T, 0, 3, 0),
        ]


def test_one_opener_and_closed(tmp_path: Path) -> None:
    s = PopState(tmp_path)
    with pytest.raises(StoreLockedError):
        PopState(tmp_path)
    s.close()
    s.close()
    with pytest.raises(StoreClosedError):
        s.cursor(G, T, 0)
    with pytest.raises(StoreClosedError):
        s.pop(G, T, [], cursors={0: 1}, now_ms=0, invisible_ms=1)
    PopState(tmp_path).close()


def test_files_only_under_pop(tmp_path: Path) -> None:
    root = tmp_path / "shard"
    with PopState(root, compact_bytes=200) as s:
        for i in range(20):
            s.pop(G, T, [new(0, i)], cursors={0: i + 1}, now_ms=i, invisible_ms=10)
        assert s.stats().snapshots_written > 0
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "shard",
        "shard/pop",
        "shard/pop/handle_secret",
        "shard/pop/journal",
        "shard/pop/snapshot",
    ]


# ---------------------------------------------------------------------- failures and group commit


def test_failed_write_changes_nothing(tmp_path: Path) -> None:
    with PopState(tmp_path) as s:
        s.pop(G, T, [new(0, 0)], cursors={0: 1}, now_ms=0, invisible_ms=10)
        before, size = dump(s), journal(tmp_path).stat().st_size
        faults.install("pop.write=ENOSPC")
        try:
            with pytest.raises(StoreNotWritableError) as e:
                s.pop(G, T, [new(0, 1)], cursors={0: 2}, now_ms=0, invisible_ms=10)
        finally:
            faults.install(None)
        assert e.value.cause == "disk_full"
        assert dump(s) == before and journal(tmp_path).stat().st_size == size
        s.pop(G, T, [new(0, 1)], cursors={0: 2}, now_ms=0, invisible_ms=10)  # the next call works
        after = dump(s)
    with PopState(tmp_path) as s:
        assert dump(s) == after


def test_failed_sync_refuses_writes_until_reopened(tmp_path: Path) -> None:
    s = PopState(tmp_path)
    s.pop(G, T, [new(0, 0)], cursors={0: 1}, now_ms=0, invisible_ms=10)
    faults.install("pop.sync=EIO")
    try:
        with pytest.raises(StoreNotWritableError) as e:
            s.pop(G, T, [new(0, 1)], cursors={0: 2}, now_ms=0, invisible_ms=10)
    finally:
        faults.install(None)
    assert e.value.cause == "flush_failed"
    with pytest.raises(StoreNotWritableError):
        s.drop(G, T, 0, [0])
    assert s.cursor(G, T, 0) == 2  # reads answer from memory
    s.close()
    with PopState(tmp_path) as s:  # the record was written: here it is kept
        assert s.cursor(G, T, 0) == 2
        s.drop(G, T, 0, [0])


def test_concurrent_callers_share_fsyncs(tmp_path: Path) -> None:
    threads, steps = 6, 40
    faults.install("nothing.fires.here=EIO")  # a plan, so hits are counted
    try:
        with PopState(tmp_path, compact_bytes=4096) as s:

            def work(k: int) -> None:
                group = f"G{k}"
                for i in range(steps):
                    (h,) = s.pop(group, T, [new(0, i)], cursors={0: i + 1}, now_ms=i, invisible_ms=10**6)
                    if i % 2:
                        assert s.ack(group, T, [h], i) == [AckOutcome.OK]

            ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            calls = threads * (steps + steps // 2)
            assert s.stats().seq == calls
            syncs = faults.hits().get("pop.sync", 0)
            before = dump(s)
    finally:
        faults.install(None)
    assert syncs < calls  # shared: ~150 fdatasyncs for 360 calls on 2 cores
    with PopState(tmp_path) as s:
        assert dump(s) == before
        assert all(s.cursor(f"G{k}", T, 0) == steps for k in range(threads))
        assert all(len(s.in_flight(f"G{k}", T, 0)) == steps // 2 for k in range(threads))


# ---------------------------------------------------------------------- torn tails, snapshots


def _steps(s: PopState, n: int) -> list[Dump]:
    """n pop/ack/change steps on s, each writing one record; the dump after each (index 0: before)."""
    out = [dump(s)]
    hs: list[ReceiptHandle] = []
    for i in range(n):
        if i % 3 == 2:
            s.ack(G, T, [hs.pop(0)], i)
        elif i % 5 == 4:
            hs.append(s.change_invisible(G, T, hs.pop(), i, 10**6))
        else:
            q = i % 2
            got = s.pop(
                G, T, [new(q, i), new(q, i + 1, hold=i + 10**6)], cursors={q: i + 2}, now_ms=i, invisible_ms=10**6
            )
            hs.extend(h for h in got if h is not None)
        out.append(dump(s))
    return out


def test_every_torn_tail_reopens_to_a_prefix(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with PopState(src) as s:
        states = _steps(s, 12)
    data = journal(src).read_bytes()
    ends = []  # the byte where each record ends, from the seq numbering
    with PopState(src) as s:
        assert s.recovery.replayed == 12
    pos = 0
    while pos < len(data):
        pos += 16 + int.from_bytes(data[pos : pos + 4], "big")
        ends.append(pos)
    assert len(ends) == 12 and ends[-1] == len(data)
    rng = random.Random(7)
    cuts = sorted({*range(ends[-2], len(data) + 1), *rng.sample(range(len(data)), 40)})
    for cut in cuts:
        d = tmp_path / f"cut{cut}"
        (d / POP_DIR).mkdir(parents=True)
        (d / POP_DIR / JOURNAL_FILE).write_bytes(data[:cut])
        whole = sum(1 for e in ends if e <= cut)
        with PopState(d) as s:
            assert dump(s) == states[whole], cut
            assert s.recovery.truncated_bytes == cut - ([0, *ends][whole])
        assert journal(d).stat().st_size == ([0, *ends][whole])


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 100, b"\xff" * 7, os.urandom(300), b"\x00\x00\x00\x12\x00\x00\x00\x00" + b"\x01" * 40]
)
def test_garbage_tail_is_cut(tmp_path: Path, garbage: bytes) -> None:
    with PopState(tmp_path) as s:
        states = _steps(s, 6)
    size = journal(tmp_path).stat().st_size
    with journal(tmp_path).open("ab") as f:
        f.write(garbage)
    with PopState(tmp_path) as s:
        assert dump(s) == states[-1]
        assert s.recovery.truncated_bytes == len(garbage)
        s.pop(G, T, [], cursors={5: 1}, now_ms=0, invisible_ms=1)  # writes after the cut continue the journal
        after = dump(s)
    assert journal(tmp_path).stat().st_size > size
    with PopState(tmp_path) as s:
        assert dump(s) == after and s.recovery.truncated_bytes == 0


def test_old_records_behind_a_torn_write_are_cut(tmp_path: Path) -> None:
    """A valid record with a lower seq after the last good one (an older journal's
    bytes behind a torn write) ends the journal."""
    with PopState(tmp_path) as s:
        states = _steps(s, 4)
    data = journal(tmp_path).read_bytes()
    first = 16 + int.from_bytes(data[:4], "big")
    journal(tmp_path).write_bytes(data + data[:first])
    with PopState(tmp_path) as s:
        assert dump(s) == states[-1] and s.recovery.truncated_bytes == first


def test_missing_records_are_corruption(tmp_path: Path) -> None:
    with PopState(tmp_path) as s:
        _steps(s, 3)
    data = journal(tmp_path).read_bytes()
    first = 16 + int.from_bytes(data[:4], "big")
    journal(tmp_path).write_bytes(data[first:])  # starts at seq 2, no snapshot
    with pytest.raises(CorruptFileError, match="missing"):
        PopState(tmp_path)


def test_snapshots_then_reopen_give_equal_state(tmp_path: Path) -> None:
    with PopState(tmp_path, compact_bytes=300) as s:
        states = _steps(s, 40)
        st_ = s.stats()
        assert st_.snapshots_written >= 3 and st_.journal_bytes < 300 + 2 * st_.snapshot_bytes
        assert st_.seq == 40
    with PopState(tmp_path) as s:
        assert dump(s) == states[-1]
        assert s.recovery.snapshot_seq > 0 and s.recovery.seq == 40
        assert s.recovery.replayed == 40 - s.recovery.snapshot_seq


def test_crash_between_snapshot_and_journal_restart(tmp_path: Path) -> None:
    """The old journal next to a newer snapshot: its records are skipped, then new ones follow."""
    with PopState(tmp_path, compact_bytes=10**9) as s:
        states = _steps(s, 10)
    old = journal(tmp_path).read_bytes()
    with PopState(tmp_path, compact_bytes=1) as s:
        s.pop(G, T, [], cursors={5: 1}, now_ms=0, invisible_ms=1)  # this call triggers a snapshot at seq 11
        assert s.stats().snapshots_written == 1
        after = dump(s)
    assert after != states[-1]
    journal(tmp_path).write_bytes(old + _record_of(tmp_path, 11))  # as if the truncate never happened
    (tmp_path / POP_DIR / SNAPSHOT_TMP).write_bytes(b"half a snapshot")
    with PopState(tmp_path) as s:
        assert dump(s) == after and s.recovery.snapshot_seq == 11 and s.recovery.replayed == 0
        assert not (tmp_path / POP_DIR / SNAPSHOT_TMP).exists()
        assert journal(tmp_path).stat().st_size == 0  # restarted: every record was in the snapshot
        s.pop(G, T, [], cursors={5: 2}, now_ms=0, invisible_ms=1)
        again = dump(s)
    with PopState(tmp_path) as s:
        assert dump(s) == again and s.recovery.replayed == 1


def _record_of(tmp_path: Path, seq: int) -> bytes:
    """A journal record with ``seq`` (the snapshot's own first record, reframed)."""
    import struct
    import zlib

    data = (tmp_path / POP_DIR / SNAPSHOT_FILE).read_bytes()
    body_len = int.from_bytes(data[24:28], "big")
    tail = struct.pack(">Q", seq) + data[40 : 40 + body_len]
    return struct.pack(">II", body_len, zlib.crc32(tail)) + tail


def test_damaged_snapshot_is_corruption(tmp_path: Path) -> None:
    with PopState(tmp_path, compact_bytes=1) as s:
        _steps(s, 3)
    snap = tmp_path / POP_DIR / SNAPSHOT_FILE
    data = snap.read_bytes()
    for bad in (data[:-1], data[:10], data[:30] + bytes([data[30] ^ 1]) + data[31:], data + b"x"):
        snap.write_bytes(bad)
        with pytest.raises(CorruptFileError):
            PopState(tmp_path)
    snap.write_bytes(data)
    PopState(tmp_path).close()


# ---------------------------------------------------------------------- model-based


class Model:
    """The semantics as plain dicts: (group, topic, queue) -> [cursor, {offset: InFlight}]."""

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.keys: dict[tuple[str, str, int], list] = {}

    def _key(self, g: str, t: str, q: int) -> list:
        return self.keys.get((g, t, q), [None, {}])

    def pop(self, g, t, deliveries, cursors, now, inv) -> list[ReceiptHandle | None]:
        for q, c in cursors.items():
            old = self._key(g, t, q)[0]
            if old is not None and c < old:
                raise ValueError("back")
        if len({(d.queue_id, d.offset) for d in deliveries}) != len(deliveries):
            raise ValueError("twice")
        puts, out = [], []
        for d in deliveries:
            cursor, entries = self._key(g, t, d.queue_id)
            if cursor is None or d.offset >= cursor:
                moved = cursors.get(d.queue_id, cursor)
                if moved is None or moved <= d.offset:
                    raise ValueError("cursor not past a new offset")
                attempt = gen = 0
            else:
                e = entries.get(d.offset)
                if e is None or e.deadline_ms > now:
                    raise ValueError("not in flight or not due")
                attempt, gen = e.attempt, e.generation
            if d.hold_until_ms is None:
                puts.append(
                    (d.queue_id, InFlight(d.offset, d.commitlog_offset, d.size, now + inv, attempt + 1, gen + 1))
                )
                out.append(ReceiptHandle(self.shard, d.queue_id, d.offset, gen + 1, now, inv, d.commitlog_offset))
            else:
                puts.append(
                    (d.queue_id, InFlight(d.offset, d.commitlog_offset, d.size, d.hold_until_ms, attempt, gen + 1))
                )
                out.append(None)
        for q, c in cursors.items():
            self.keys.setdefault((g, t, q), [None, {}])[0] = c
        for q, e in puts:
            self.keys.setdefault((g, t, q), [None, {}])[1][e.offset] = e
        return out

    def _current(self, g, t, h) -> bool:
        e = self._key(g, t, h.queue_id)[1].get(h.offset)
        return (
            h.shard == self.shard
            and e is not None
            and (e.generation, e.deadline_ms, e.commitlog_offset) == (h.generation, h.deadline_ms, h.commitlog_offset)
        )

    def ack(self, g, t, hs, now) -> list[AckOutcome]:
        out = []
        for h in hs:
            if now > h.deadline_ms:
                out.append(AckOutcome.EXPIRED)
            elif not self._current(g, t, h):
                out.append(AckOutcome.STALE)
            else:
                self._remove(g, t, h.queue_id, h.offset)
                out.append(AckOutcome.OK)
        return out

    def change(self, g, t, h, now, inv) -> ReceiptHandle | str:
        if now > h.deadline_ms:
            return "expired"
        if not self._current(g, t, h):
            return "stale"
        entries = self.keys[(g, t, h.queue_id)][1]
        e = entries[h.offset]
        entries[h.offset] = e._replace(deadline_ms=now + inv, generation=e.generation + 1)
        return ReceiptHandle(self.shard, h.queue_id, h.offset, e.generation + 1, now, inv, e.commitlog_offset)

    def _remove(self, g, t, q, off) -> bool:
        key = self.keys.get((g, t, q))
        if key is None or key[1].pop(off, None) is None:
            return False
        if key[0] is None and not key[1]:
            del self.keys[(g, t, q)]
        return True

    def drop(self, g, t, q, offsets) -> int:
        return sum(self._remove(g, t, q, o) for o in set(offsets))

    def due(self, g, t, qs, now, limit):
        found = [(q, e) for q in set(qs) for e in self._key(g, t, q)[1].values() if e.deadline_ms <= now]
        return sorted(found, key=lambda qe: (qe[1].deadline_ms, qe[0], qe[1].offset))[:limit]

    def dump(self) -> Dump:
        return {k: (c, tuple(sorted(es.values()))) for k, (c, es) in sorted(self.keys.items())}


GROUPS = ["GA", "%RETRY%GB"]
QUEUES = [0, 1, 2]


OPS = ["pop", "pop", "pop", "ack", "ack", "change", "drop", "reopen"]


class ModelRun:
    """Applies one op at a time to PopState and Model alike and compares every answer
    (errors included). Each op's arguments come from a Random seeded by hypothesis, so
    hypothesis shrinks the op list and the failing example replays exactly."""

    def __init__(self, directory: Path, compact_bytes: int) -> None:
        self.dir, self.compact = directory, compact_bytes
        self.state = PopState(directory, shard=2, compact_bytes=compact_bytes)
        self.model = Model(2)
        self.now = 1000
        self.handles: list[tuple[str, ReceiptHandle]] = []
        self.done: list[str] = []  # what each op did, for the statistics test
        self.snapshots = 0

    def step(self, op: str, seed: int) -> None:
        rng = random.Random(seed)
        self.now += rng.choice([0, 0, 1, 50, 200, 600])
        getattr(self, "_" + op)(rng, rng.choice(GROUPS))
        assert dump(self.state) == self.model.dump()
        self._compare_reads(rng.choice(GROUPS), rng.randint(0, 5))

    def _hold(self, rng: random.Random) -> int | None:
        return self.now + rng.randint(0, 900) if rng.random() < 0.25 else None

    def _pop(self, rng: random.Random, g: str) -> None:
        deliveries = [
            Delivery(q, e.offset, e.commitlog_offset, e.size, self._hold(rng))
            for q, e in self.model.due(g, T, QUEUES, self.now, rng.randint(0, 4))
        ]
        cursors = {}
        for q in rng.sample(QUEUES, rng.randint(0, 2)):
            start = self.model._key(g, T, q)[0] or 0
            n = rng.randint(0, 3)
            deliveries += [new(q, off, self._hold(rng)) for off in range(start, start + n)]
            cursors[q] = start + n + rng.randint(0, 2)
        if rng.random() < 0.1:  # an invalid pop (a cursor back, or a new offset it does not cover)
            q = rng.choice(QUEUES)
            c = self.model._key(g, T, q)[0]
            cursors[q] = c - 1 if c else 0
            deliveries.append(new(q, (c or 0) + 5))
        inv = rng.choice([0, 10, 100, 500, 5000])
        due_before = {q: set(self.model._key(g, T, q)[1]) for q in QUEUES}
        try:
            expected = self.model.pop(g, T, deliveries, cursors, self.now, inv)
        except ValueError:
            with pytest.raises(ValueError):
                self.state.pop(g, T, deliveries, cursors=cursors, now_ms=self.now, invisible_ms=inv)
            self.done.append("pop refused")
            return
        got = self.state.pop(g, T, deliveries, cursors=cursors, now_ms=self.now, invisible_ms=inv)
        assert got == expected
        self.handles += [(g, h) for h in got if h is not None]
        del self.handles[:-30]  # recent handles: acks of them may still succeed
        self.done += ["held" if d.hold_until_ms is not None else "delivered" for d in deliveries]
        self.done += ["redelivered"] * sum(1 for d in deliveries if d.offset in due_before.get(d.queue_id, ()))

    def _ack(self, rng: random.Random, g: str) -> None:
        if not self.handles:
            return
        g = rng.choice(self.handles)[0]
        hs = [h for gg, h in rng.sample(self.handles, min(len(self.handles), rng.randint(1, 4))) if gg == g]
        expected = self.model.ack(g, T, hs, self.now)
        assert self.state.ack(g, T, hs, self.now) == expected
        self.done += [f"ack {o.value}" for o in expected]

    def _change(self, rng: random.Random, g: str) -> None:
        if not self.handles:
            return
        g, h = rng.choice(self.handles)
        inv = rng.choice([0, 10, 100, 500, 5000])
        expected = self.model.change(g, T, h, self.now, inv)
        if isinstance(expected, str):
            with pytest.raises(InvalidReceiptHandle) as e:
                self.state.change_invisible(g, T, h, self.now, inv)
            assert e.value.reason == expected
            self.done.append(f"change {expected}")
        else:
            got = self.state.change_invisible(g, T, h, self.now, inv)
            assert got == expected
            self.handles.append((g, got))  # the model's has no tag
            self.done.append("change ok")

    def _drop(self, rng: random.Random, g: str) -> None:
        q = rng.choice(QUEUES)
        offs = [rng.randint(0, 12) for _ in range(rng.randint(0, 3))]
        assert self.state.drop(g, T, q, offs) == self.model.drop(g, T, q, offs)

    def _reopen(self, rng: random.Random, g: str) -> None:
        before = dump(self.state)
        self.snapshots += self.state.stats().snapshots_written
        self.state.close()
        self.state = PopState(self.dir, shard=2, compact_bytes=self.compact)
        assert dump(self.state) == before
        self.done.append("reopen")

    def _compare_reads(self, g: str, limit: int) -> None:
        assert self.state.due(g, T, QUEUES, self.now, limit) == self.model.due(g, T, QUEUES, self.now, limit)
        entries = [e for q in QUEUES for e in self.model._key(g, T, q)[1].values()]
        assert self.state.next_deadline_ms(g, T, QUEUES) == min((e.deadline_ms for e in entries), default=None)
        for q in QUEUES:
            blocked = any(e.deadline_ms > self.now for e in self.model._key(g, T, q)[1].values())
            assert self.state.blocked(g, T, q, self.now) == blocked
            delivered = any(e.attempt > 0 for e in self.model._key(g, T, q)[1].values())
            assert self.state.delivered_in_flight(g, T, q) == delivered
            assert self.state.cursor(g, T, q) == self.model._key(g, T, q)[0]

    def close(self) -> None:
        self.state.close()
        with PopState(self.dir, shard=2) as s:  # and a last reopen, with whatever snapshot it left
            assert dump(s) == self.model.dump()


model_ops = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 2**32 - 1)), min_size=1, max_size=60)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=model_ops, compact=st.sampled_from([150, 600, 10**9]))
def test_pop_state_against_a_model(tmp_path_factory: pytest.TempPathFactory, ops, compact: int) -> None:
    run = ModelRun(tmp_path_factory.mktemp("model"), compact)
    try:
        for op, seed in ops:
            run.step(op, seed)
    finally:
        run.close()


def test_the_model_run_reaches_every_case(tmp_path: Path) -> None:
    """The op mix above does what it is meant to: redeliveries, holds, every outcome."""
    run = ModelRun(tmp_path / "m", 300)
    rng = random.Random(5)
    for _ in range(400):
        run.step(rng.choice(OPS), rng.getrandbits(32))
    snapshots = run.snapshots + run.state.stats().snapshots_written
    run.close()
    seen = set(run.done)
    wanted = {"pop refused", "held", "delivered", "redelivered", "ack ok", "ack stale", "ack expired", "change ok"}
    assert wanted <= seen and {"change stale", "change expired"} & seen and snapshots > 0, seen


# ---------------------------------------------------------------------- kill -9


def crash_workload(state: PopState, seed: int) -> Iterator[str]:
    """Deterministic pop/ack/change steps; yields one line per completed step (its answer)."""
    rng = random.Random(seed)
    now = 10_000
    handles: list[tuple[str, ReceiptHandle]] = []
    groups = ["GA", "GB"]
    for i in range(10**9):
        now += rng.randint(0, 40)
        op = rng.random()
        if op < 0.5 or not handles:
            g = rng.choice(groups)
            ds = [Delivery(q, e.offset, e.commitlog_offset, e.size) for q, e in state.due(g, T, QUEUES, now, 4)]
            q = rng.choice(QUEUES)
            start = state.cursor(g, T, q) or 0
            n = rng.randint(0, 4)
            ds += [
                new(q, o, now + rng.randint(1, 300) if rng.random() < 0.2 else None) for o in range(start, start + n)
            ]
            hs = state.pop(
                g, T, ds, cursors={q: start + n + rng.randint(0, 1)}, now_ms=now, invisible_ms=rng.randint(1, 200)
            )
            handles.extend((g, h) for h in hs if h is not None)
            answer = [h.encode() if h else None for h in hs]
        elif op < 0.85:
            g = rng.choice(groups)
            picked = [h for gg, h in rng.sample(handles, min(len(handles), 3)) if gg == g]
            answer = [o.value for o in state.ack(g, T, picked, now)]
        else:
            g, h = rng.choice(handles)
            try:
                h2 = state.change_invisible(g, T, h, now, rng.randint(0, 200))
                handles.append((g, h2))
                answer = h2.encode()
            except InvalidReceiptHandle as e:
                answer = e.reason
        del handles[:-60]
        yield json.dumps([i, answer])


STEP = "step "


def _child(directory: str, seed: int) -> None:
    """The killed process: runs crash_workload, printing each completed step."""
    state = PopState(directory, compact_bytes=4000)
    for line in crash_workload(state, seed):
        sys.stdout.write(STEP + line + "\n")  # structlog writes to stdout too
        sys.stdout.flush()


def _run_child(directory: Path, seed: int, env: dict[str, str], kill_after_lines: int | None) -> list[str]:
    code = f"from tests.unit.test_pop_state import _child; _child({str(directory)!r}, {seed})"
    p = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, env={**os.environ, **env}, text=True
    )
    lines = []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line)
        if kill_after_lines is not None and len(lines) >= kill_after_lines:
            p.send_signal(signal.SIGKILL)
            lines += p.stdout.read().splitlines(keepends=True)  # what it printed before the kill
            break
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    return [ln[len(STEP) :] for ln in lines if ln.startswith(STEP) and ln.endswith("\n")]


@pytest.mark.crash
@pytest.mark.parametrize(
    ("seed", "plan", "expect"),
    [
        (1, None, "either"),  # killed at a random moment
        (2, None, "either"),
        (3, "pop.write.torn=kill@{n}", "prefix"),  # between the two halves of a record: cut off
        (4, "pop.sync=kill@{n}", "one_more"),  # written, not synced: the OS still has it
        (5, "pop.snapshot.rename=kill@4", "one_more"),  # the call was durable, its snapshot not renamed
        (6, "pop.snapshot.sync=kill@5", "one_more"),
    ],
    ids=["random-1", "random-2", "torn-record", "before-fdatasync", "before-snapshot-rename", "in-snapshot"],
)
def test_kill_9_keeps_every_reported_step_and_no_partial_one(
    tmp_path: Path, seed: int, plan: str | None, expect: str
) -> None:
    """A child runs crash_workload, printing each step once it returned, and is killed;
    reopened, the state is the one after the reported steps, or after one more (the step
    the kill interrupted had become durable): never anything in between."""
    rng = random.Random(seed)
    env = {faults.ENV: plan.format(n=rng.randint(200, 700))} if plan else {}
    lines = _run_child(tmp_path / "child", seed, env, None if plan else rng.randint(300, 1500))
    done = len(lines)
    assert done > 50
    # the same steps again, in this process, on a state of our own (with the child's handle secret)
    (tmp_path / "replay" / POP_DIR).mkdir(parents=True)
    shutil.copy(tmp_path / "child" / POP_DIR / SECRET_FILE, tmp_path / "replay" / POP_DIR / SECRET_FILE)
    with PopState(tmp_path / "replay", fsync=False, compact_bytes=4000) as ref:
        steps = crash_workload(ref, seed)
        for k in range(done):
            assert next(steps) + "\n" == lines[k], k  # the child did what we do
        prefix = dump(ref)
        next(steps)
        one_more = dump(ref)
    assert prefix != one_more or expect == "either"
    with PopState(tmp_path / "child") as s:
        got = dump(s)
        assert (
            got == {"prefix": prefix, "one_more": one_more}[expect] if expect != "either" else got in (prefix, one_more)
        )
        assert (s.recovery.truncated_bytes > 0) == (expect == "prefix")
    assert sorted(p.name for p in (tmp_path / "child" / POP_DIR).iterdir()) == [
        SECRET_FILE,
        JOURNAL_FILE,
        SNAPSHOT_FILE,
    ]
