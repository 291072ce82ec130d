"""Issue 28 item 2: EpochCache, RocketMQ's EpochFileCache rules, persisted on every change."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import NoConsistentPointError, ReplicaOffsetError, StaleEpochError
from mqstore.formats.epoch_file import NO_END, EpochEntry
from mqstore.store.ha import EpochCache, read_epoch_entries
from tests.tiers import examples


def rocketmq_setup(path: Path | None = None) -> EpochCache:
    """EpochFileCacheTest.setup: <1, 100>, <2, 300>, <3, 500>."""
    cache = EpochCache(path)
    for epoch, start in ((1, 100), (2, 300), (3, 500)):
        cache.append(epoch, start)
    return cache


def test_rocketmq_setup_entries_and_ends(tmp_path: Path) -> None:
    cache = rocketmq_setup(tmp_path)
    assert cache.entry(2) == EpochEntry(2, 300, 500)
    assert cache.last_epoch == 3 and cache.last_entry() == EpochEntry(3, 500, NO_END)
    assert EpochCache(tmp_path).entry(2) == EpochEntry(2, 300, 500)  # testInitFromFile
    assert cache.entry_at(350) == EpochEntry(2, 300, 500)  # testFindEpochEntryByOffset
    assert cache.entry_at(50) is None and cache.entry_at(10**12).epoch == 3
    assert cache.next_entry(1).epoch == 2 and cache.next_entry(3) is None
    assert EpochCache().last_epoch == -1


def test_rocketmq_truncate(tmp_path: Path) -> None:
    cache = rocketmq_setup(tmp_path)
    assert [e.epoch for e in cache.truncate_suffix_by_offset(150)] == [2, 3]  # testTruncate
    assert cache.entry(1) == EpochEntry(1, 100, NO_END) and cache.entry(2) is None
    assert [e.epoch for e in read_epoch_entries(tmp_path)] == [1]  # persisted


def test_truncate_by_epoch_and_prefix(tmp_path: Path) -> None:
    cache = rocketmq_setup(tmp_path)
    cache.truncate_suffix_by_epoch(3)
    assert [e.epoch for e in EpochCache(tmp_path).entries] == [1, 2]
    cache = rocketmq_setup(tmp_path / "b")
    cache.truncate_prefix_by_offset(300)  # epoch 1 ends at 300: its records are gone
    assert [e.epoch for e in cache.entries] == [2, 3]
    cache.truncate_prefix_by_offset(10**15)  # the last epoch is open: it stays
    assert [e.epoch for e in EpochCache(tmp_path / "b").entries] == [3]


@pytest.mark.parametrize(
    ("other", "local_end", "other_end", "want"),
    [
        ([(1, 100), (2, 300), (3, 450)], NO_END, NO_END, 450),  # testFindConsistentPointSample1
        ([(1, 100), (2, 300), (3, 500)], 700, 600, 600),  # Sample2
        ([(1, 100), (2, 300), (3, 500)], NO_END, NO_END, NO_END),  # the same epochs, open ends
        ([(1, 100), (2, 300), (3, 500), (4, 800)], 700, NO_END, 700),  # Sample4 (seen from the shorter side)
    ],
)
def test_rocketmq_consistent_points(other, local_end: int, other_end: int, want: int) -> None:
    local = rocketmq_setup()
    theirs = [EpochEntry(e, s) for e, s in other]
    assert local.find_consistent_point(theirs, local_end=local_end, other_end=other_end) == want


def test_rocketmq_sample4_from_the_longer_side() -> None:
    """Sample4 as RocketMQ runs it: cache2 (4 epochs, open end) against cache1 ended at 700."""
    longer = EpochCache(None, [EpochEntry(1, 100), EpochEntry(2, 300), EpochEntry(3, 500), EpochEntry(4, 800)])
    shorter = rocketmq_setup().entries
    assert longer.find_consistent_point(shorter, local_end=NO_END, other_end=700) == 700


def test_no_common_epoch_is_a_clear_refusal() -> None:
    """Sample3: <1, 200>, <2, 500> share no (epoch, start) with <1, 100>, <2, 300>, <3, 500>."""
    with pytest.raises(NoConsistentPointError, match="no common epoch"):
        rocketmq_setup().find_consistent_point(
            [EpochEntry(1, 200), EpochEntry(2, 500)], local_end=700, other_end=NO_END
        )
    with pytest.raises(NoConsistentPointError):
        EpochCache().find_consistent_point([EpochEntry(1, 0)], local_end=0, other_end=10)


def test_append_refuses_older_epochs_and_starts_going_back(tmp_path: Path) -> None:
    cache = rocketmq_setup(tmp_path)
    before = (tmp_path / "epochFileCheckpoint").read_bytes()
    with pytest.raises(StaleEpochError) as e:
        cache.append(3, 900)
    assert (e.value.epoch, e.value.last_epoch) == (3, 3)
    with pytest.raises(StaleEpochError):
        cache.append(2, 900)
    with pytest.raises(ReplicaOffsetError):
        cache.append(4, 499)
    assert (tmp_path / "epochFileCheckpoint").read_bytes() == before  # nothing persisted
    cache.append(4, 500)  # an equal start: epoch 3 was empty (RocketMQ refuses this and loses epoch 4)
    assert EpochCache(tmp_path).entry(3) == EpochEntry(3, 500, 500)
    assert EpochCache(tmp_path).entry_at(500).epoch == 4


@st.composite
def diverged(draw):
    """A shared history of epochs, and two replicas that each hold a prefix of it
    (cut at any offset) and then took epochs of their own that the other never saw."""
    lengths = draw(st.lists(st.integers(0, 50), min_size=1, max_size=6))
    starts, pos = [], 0
    for n in lengths:
        starts.append(pos)
        pos += n
    shared = [EpochEntry(i + 1, s) for i, s in enumerate(starts)]
    total = pos

    def replica(parity: int):
        cut = draw(st.integers(0, total))
        held = [e for e in shared if e.start_offset < cut] or shared[:1]
        own, end, epoch = [], cut, len(shared) + 1 + parity
        for n in draw(st.lists(st.integers(0, 30), max_size=3)):
            own.append(EpochEntry(epoch, end))
            end += n
            epoch += 2
        return held + own, cut, end

    return replica(0), replica(1)


@settings(max_examples=examples(300), deadline=None)
@given(diverged())
def test_consistent_point_is_the_longest_common_prefix(pair) -> None:
    (a, a_cut, a_end), (b, b_cut, b_end) = pair
    point = EpochCache(None, a).find_consistent_point(b, local_end=a_end, other_end=b_end)
    assert point == min(a_cut, b_cut)
    assert point == EpochCache(None, b).find_consistent_point(a, local_end=b_end, other_end=a_end)
