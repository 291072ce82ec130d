"""The rules of a shard's transactions (mqstore/store/transaction_rules.py), no server:
the progress point (a model run: never ahead of what is resolved), halves found by
their offset and ended ones bounded, when a half is checked and discarded, what a
recovery makes of the half and op queues, and which front gets a check."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.store import transaction_rules as rules
from tests.tiers import examples


def half(q: int) -> rules.Half:
    return rules.Half(q, 1000 + q, "T", f"id{q}", 0)


def test_progress_point_by_hand():
    sh = rules.ShardHalves(0, 0, 0)
    for q in range(5):
        sh.add(half(q))
    sh.resolve(1, 0)
    sh.resolve(3, 1)
    assert sh.progress() == (0, 0)
    sh.resolve(0, 2)
    assert sh.progress() == (2, 1)  # op 1 (for half 3) is still needed
    assert sh.ended(0) and sh.ended(1) and sh.ended(3) and not sh.ended(2)
    sh.busy += 1
    assert sh.progress() is None  # a write in flight: nothing is stored
    sh.busy -= 1
    sh.resolve(2, 3)
    sh.resolve(4, 4)
    assert sh.progress() == (5, 5)
    assert sh.resolved == {} and all(sh.ended(q) for q in range(5))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "resolve", "save"]), st.integers(0, 30)), max_size=80))
def test_progress_point_is_never_ahead(steps):
    """Whatever the order of halves and their ends, a stored (H, P) says no more than
    is true: every half below H has an op record, every op record below P names a half
    below H (so a recovery from (H, P) misses no pending half and no op it needs)."""
    sh = rules.ShardHalves(0, 0, 0)
    ops: list[int] = []  # op offset -> half offset
    halves = 0
    for action, n in steps:
        if action == "add":
            sh.add(half(halves))
            halves += 1
        elif action == "resolve" and sh.pending:
            q = sorted(sh.pending)[n % len(sh.pending)]
            ops.append(q)
            sh.resolve(q, len(ops) - 1)
        elif action == "save":
            h, p = sh.progress()
            done = set(ops)
            assert all(q in done for q in range(h))
            assert all(ops[o] < h for o in range(p))
            assert all(q in sh.pending or sh.ended(q) for q in range(halves))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "resolve", "save"]), st.integers(0, 30)), max_size=60))
def test_recovery_from_a_stored_progress_point_finds_every_pending_half(steps):
    """A recovery from the last stored (H, P), reading the op queue from P and the half
    queue's units, finds exactly the halves still pending: none resolved comes back, none
    pending is lost."""
    sh = rules.ShardHalves(0, 0, 0)
    ops: list[int] = []
    halves = 0
    saved = (0, 0)
    for action, n in steps:
        if action == "add":
            sh.add(half(halves))
            halves += 1
        elif action == "resolve" and sh.pending:
            q = sorted(sh.pending)[n % len(sh.pending)]
            ops.append(q)
            sh.resolve(q, len(ops) - 1)
        elif action == "save":
            saved = sh.progress()
    h0, p0 = saved
    got = rules.recover(
        h0,
        p0,
        [(o, rules.REMOVE_TAG, rules.op_body(q)) for o, q in enumerate(ops) if o >= p0],
        [(q, 1000 + q) for q in range(max(0, h0 - rules.ENDED_KEPT), halves)],
    )
    assert set(got.open_halves) == set(sh.pending)
    assert got.half_end == max(h0, halves) and got.op_end == max(p0, len(ops))


def test_recovery_skips_ops_of_another_tag_and_keeps_ended_halves_known():
    got = rules.recover(
        2,
        0,
        [(0, rules.REMOVE_TAG, b"0,"), (1, "x", b"3,"), (2, rules.REMOVE_TAG, b"3,4,"), (3, rules.REMOVE_TAG, b"junk")],
        [(q, 100 + q) for q in range(6)],
    )
    assert got.skipped_ops == [1]
    assert got.resolved == {3: 2, 4: 2}  # op 0 names a half below H: not needed
    assert got.open_halves == {2: 102, 5: 105}
    assert got.ended == [100, 101, 103, 104]  # below H, or with an op: "already ended" answers
    assert (got.half_end, got.op_end) == (6, 4)


def test_halves_are_found_by_their_offset_and_ended_ones_are_bounded():
    """An End looks a transaction id's offset up in memory (never reads the commitlog
    at it): pending halves by their commitlog offset, ended ones among the last
    ``ended_kept`` of the shard."""
    sh = rules.ShardHalves(0, 0, 0, ended_kept=3)
    for q in range(5):
        sh.add(half(q))
    assert sh.pending_at(1002).queue_offset == 2 and sh.pending_at(1005) is None
    for q in range(5):
        sh.resolve(q, q)
    assert all(sh.pending_at(1000 + q) is None for q in range(5))
    assert list(sh.ended_at) == [1002, 1003, 1004]  # the oldest forgotten first
    assert sh.ended_at[1004].message_id == "id4"


def test_a_half_names_its_transaction_topic_and_message():
    h = rules.Half(0, 1000, "T", "m1", 0, transaction_id="ABC")
    assert h.names("ABC", "T", "m1")
    assert not h.names("ABD", "T", "m1") and not h.names("ABC", "U", "m1") and not h.names("ABC", "T", "m2")
    assert rules.Half(0, 1000, "T", "m1", 0).names("ANY", "T", "m1")  # id not known yet: topic and message tell


def test_checks_then_discard():
    """RocketMQ's order: first check at store time + CHECK_IMMUNITY (else the timeout),
    then every interval; after check_max checks the half is discarded."""
    assert rules.first_check_ms(1_000, {rules.CHECK_IMMUNITY: "30"}, 6_000) == 31_000
    assert rules.first_check_ms(1_000, {rules.CHECK_IMMUNITY: "x"}, 6_000) == 7_000
    sh = rules.ShardHalves(0, 0, 0)
    h = sh.add(rules.Half(0, 1000, "T", "m", due_ms=7_000))
    assert sh.due(6_999) == [] and sh.due(7_000) == [h]
    now, checks = 7_000, 0
    while rules.check_or_discard(h, now, check_max=3, check_interval_ms=500):
        checks += 1
        assert h.checks == checks and h.due_ms == now + 500 and sh.due(now) == []
        now = h.due_ms
    assert checks == 3 and h.checks == 3  # the 4th time it came: discarded


def test_checks_go_to_a_front_holding_a_producer_in_turn():
    routes = rules.CheckRoutes()
    assert routes.pick("T") is None
    routes.announce("a", ["T", "U"])
    routes.announce("b", ["T"])
    assert {routes.pick("T") for _ in range(4)} == {"a", "b"}
    assert [routes.pick("U") for _ in range(2)] == ["a", "a"]
    routes.drop("a")  # a front gone: the next check goes elsewhere
    assert [routes.pick("T") for _ in range(3)] == ["b"] * 3 and routes.pick("U") is None
    routes.announce("b", [])  # its producers left
    assert routes.pick("T") is None and routes.fronts() == ["b"]


def test_op_bodies():
    assert rules.op_body(12) == b"12,"
    assert rules.parse_op_body(b"1,2,3,") == [1, 2, 3]  # RocketMQ's batched op body
    assert rules.parse_op_body(b"12") == [12]  # an older broker's
    assert rules.parse_op_body(b"x,3,,-1,\xff") == [3]
