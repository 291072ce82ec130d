"""Issue 28 item 3: a follower appends its master's bytes as they are (checked,
byte-identical, within one epoch, the epoch persisted first), and acknowledges what
it has made durable; the master's batches (ha/source.py) end at record ends, never
cross an epoch, and a new follower starts at the master's oldest offset."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import NoConsistentPointError, ReplicaBatchError, ReplicaOffsetError, StaleEpochError
from mqstore.store import CommitLog, FlushMode, MessageBatch, StoreConfig
from mqstore.store.ha import EpochCache, ReplicaFollower, check_batch, next_batch, read_epoch_entries, start_empty_at
from tests.tiers import examples

SEG = 64 * 1024


def open_log(path: Path, flush: FlushMode = FlushMode.SYNC) -> CommitLog:
    return CommitLog(path, StoreConfig(segment_bytes=SEG, flush_mode=flush, preallocate_segments=False))


def fill(cl: CommitLog, batches: int, *, per: int = 20, body: int = 500, start: int = 0) -> None:
    for i in range(start, start + batches):
        cl.append(MessageBatch(topics=["A", "B"][i % 2], bodies=[bytes([i % 251]) * body] * per, queue_ids=i % 3))


def copy_all(master: CommitLog, epochs: EpochCache, follower: ReplicaFollower, max_bytes: int = 8192) -> int:
    """Stream every batch; returns the last acknowledged offset."""
    ack, n = follower.end, 0
    while (b := next_batch(master, epochs, follower.end, max_bytes)) is not None:
        ack = follower.append(b.offset, b.data, epoch=b.epoch, epoch_start=b.epoch_start, confirm_offset=ack)
        n += 1
    assert n or master.wrote_offset == follower.end
    return ack


def same_bytes(a: CommitLog, b: CommitLog) -> bool:
    lo, hi = max(a.min_offset, b.min_offset), a.wrote_offset
    return hi == b.wrote_offset and all(
        a.read_log_bytes(o, SEG) == b.read_log_bytes(o, SEG) for o in range(lo, hi, SEG)
    )


@pytest.fixture
def master(tmp_path: Path):
    cl = open_log(tmp_path / "master")
    epochs = EpochCache(tmp_path / "master")
    epochs.append(1, 0)
    fill(cl, 12)  # about 2 segments: BLANKs at their ends
    yield cl, epochs
    cl.close()


def test_follower_copies_the_master_byte_for_byte(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f") as f:
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        ack = copy_all(m, me, fol)
        assert ack == m.wrote_offset == f.flushed_offset  # sync flush: acknowledged = fsynced
        assert same_bytes(m, f) and len(f._segments.segments) >= 2  # (rolled like the master)
        assert read_epoch_entries(tmp_path / "f") == me.entries
        for topic in "AB":
            for q in range(3):
                assert f.queue_offset(topic, q) == m.queue_offset(topic, q)  # a promoted follower continues
    with open_log(tmp_path / "f") as f:  # recovery accepts every replicated record
        assert f.wrote_offset == m.wrote_offset and f.recovery.truncated_at is None


def test_async_follower_acknowledges_what_it_wrote(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f", FlushMode.ASYNC) as f:
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        b = next_batch(m, me, 0, 4096)
        assert fol.append(b.offset, b.data, epoch=1, epoch_start=0) == b.offset + len(b.data) == f.wrote_offset


@settings(max_examples=examples(20), deadline=None)
@given(st.integers(1, 40_000))
def test_any_batch_size_gives_identical_logs(tmp_path_factory, max_bytes: int) -> None:
    root = tmp_path_factory.mktemp("any")
    with open_log(root / "m", FlushMode.ASYNC) as m, open_log(root / "f", FlushMode.ASYNC) as f:
        me = EpochCache(root / "m")
        me.append(3, 0)
        fill(m, 6, per=7, body=300)
        copy_all(m, me, ReplicaFollower(f, EpochCache(root / "f")), max_bytes)
        assert same_bytes(m, f)


def test_a_batch_not_at_the_end_is_refused(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f") as f:
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        b = next_batch(m, me, 0, 4096)
        fol.append(b.offset, b.data, epoch=1, epoch_start=0)
        again = next_batch(m, me, 0, 4096)
        with pytest.raises(ReplicaOffsetError) as e:
            fol.append(again.offset, again.data, epoch=1, epoch_start=0)
        assert (e.value.expected, e.value.got) == (f.wrote_offset, 0)
        assert str(f.wrote_offset) in str(e.value)


def test_damaged_bytes_are_refused_and_nothing_changes(tmp_path: Path, master) -> None:
    m, me = master
    b = next_batch(m, me, 0, 4096)
    bad = bytearray(b.data)
    bad[200] ^= 0xFF  # inside the first record's body: its CRC fails
    with open_log(tmp_path / "f") as f:
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        with pytest.raises(ReplicaBatchError, match="CRC"):
            fol.append(0, bytes(bad), epoch=1, epoch_start=0)
        with pytest.raises(ReplicaBatchError, match="runs past"):
            fol.append(0, b.data[:-10], epoch=1, epoch_start=0)  # a record cut short
        assert f.wrote_offset == 0
        assert read_epoch_entries(tmp_path / "f") == []  # a refused batch persists no epoch


def test_records_must_not_cross_a_segment_and_a_blank_must_end_it(master) -> None:
    m, me = master
    seg0 = m.read_log_bytes(0, SEG)  # whole records, then a BLANK to the segment end
    assert check_batch(seg0, 0, SEG).end == SEG
    with pytest.raises(ReplicaBatchError, match="runs past"):
        check_batch(seg0, 0, SEG // 2)
    with pytest.raises(ReplicaBatchError, match="BLANK"):
        check_batch(seg0, 0, 2 * SEG)
    # a batch may end inside a BLANK's region: the follower's end is the segment's end
    chunk = m.scan(0, max_bytes=SEG, fields=False)
    blank = int(chunk.physical_offsets[-1] + chunk.sizes[-1])
    assert chunk.next_offset == SEG > blank
    assert check_batch(m.read_log_bytes(blank, 20), blank, SEG) == (SEG, 0, {}, 0)


def test_epoch_rules(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f") as f:
        fe = EpochCache(tmp_path / "f")
        fol = ReplicaFollower(f, fe)
        b = next_batch(m, me, 0, 4096)
        fol.append(b.offset, b.data, epoch=5, epoch_start=0)
        c = next_batch(m, me, f.wrote_offset, 4096)
        with pytest.raises(StaleEpochError) as e:
            fol.append(c.offset, c.data, epoch=4, epoch_start=0)  # a deposed master
        assert (e.value.epoch, e.value.last_epoch) == (4, 5)
        with pytest.raises(StaleEpochError):
            fol.append(c.offset, c.data, epoch=5, epoch_start=100)  # the same epoch, another start
        with pytest.raises(ReplicaOffsetError) as e2:
            fol.append(c.offset, c.data, epoch=6, epoch_start=c.offset - 1)  # a new epoch must start at the end
        assert e2.value.expected == c.offset
        assert fe.last_epoch == 5 and f.wrote_offset == c.offset

        seen = {}
        real = f.append_replicated

        def spy(*a, **kw):
            seen["epochs"] = read_epoch_entries(tmp_path / "f")  # what the disk held when bytes went in
            return real(*a, **kw)

        f.append_replicated = spy
        fol.append(c.offset, c.data, epoch=6, epoch_start=c.offset)
        assert [(e.epoch, e.start_offset) for e in seen["epochs"]] == [(5, 0), (6, c.offset)]


def test_confirm_offset_follows_the_master_capped_at_the_local_end(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f") as f:
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        b = next_batch(m, me, 0, 4096)
        fol.append(b.offset, b.data, epoch=1, epoch_start=0, confirm_offset=10**9)
        assert f.replica_confirm_offset == f.wrote_offset
        c = next_batch(m, me, f.wrote_offset, 4096)
        fol.append(c.offset, c.data, epoch=1, epoch_start=0, confirm_offset=b.offset + len(b.data))
        assert f.replica_confirm_offset == b.offset + len(b.data)
    with open_log(tmp_path / "f") as f:  # a replica's store (it has epochs) reopens with the checkpoint's
        assert f.replica_confirm_offset == b.offset + len(b.data)


def test_master_batches_stay_in_one_epoch(tmp_path: Path) -> None:
    with open_log(tmp_path / "m", FlushMode.ASYNC) as m:
        me = EpochCache(tmp_path / "m")
        me.append(1, 0)
        fill(m, 2, per=5)
        switch = m.wrote_offset
        me.append(2, switch)
        fill(m, 2, per=5, start=2)
        b = next_batch(m, me, 0, 10**6)
        assert (b.epoch, b.epoch_start, b.offset + len(b.data)) == (1, 0, switch)
        b2 = next_batch(m, me, switch, 10**6)
        assert (b2.epoch, b2.epoch_start, b2.offset + len(b2.data)) == (2, switch, m.wrote_offset)
        assert next_batch(m, me, m.wrote_offset, 10) is None


def test_a_new_follower_starts_at_the_masters_oldest_offset(tmp_path: Path, master) -> None:
    m, me = master
    fill(m, 10, start=12)
    gone = m.delete_segments(older_than_ms=None, now_ms=0, max_offset=m.wrote_offset, force_count=2)
    assert m.min_offset == 2 * SEG and len(gone) == 2
    start_empty_at(tmp_path / "f", m.min_offset, SEG, preallocate=False)
    with open_log(tmp_path / "f") as f:
        assert (f.min_offset, f.wrote_offset) == (2 * SEG, 2 * SEG)
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        assert fol.is_empty and fol.consistent_point(me.entries, m.wrote_offset) == 2 * SEG
        copy_all(m, me, fol)  # epoch 1 started at 0, before this follower's first byte: accepted
        assert same_bytes(m, f)
        assert [(e.epoch, e.start_offset) for e in EpochCache(tmp_path / "f").entries] == [(1, 0)]
    with pytest.raises(ValueError, match="holds records"):
        start_empty_at(tmp_path / "f", 4 * SEG, SEG)
    with pytest.raises(ValueError, match="multiple"):
        start_empty_at(tmp_path / "g", 100, SEG)


def test_a_log_without_epochs_cannot_follow(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f") as f:
        fill(f, 1)  # records written on its own: nothing says which epoch they belong to
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        with pytest.raises(NoConsistentPointError):
            fol.consistent_point(me.entries, m.wrote_offset)
        b = next_batch(m, me, f.wrote_offset, 4096)
        with pytest.raises(NoConsistentPointError):
            fol.append(f.wrote_offset, b.data if b else b"", epoch=1, epoch_start=0)


def test_a_new_followers_store_hands_out_nothing_unconfirmed(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f") as f:
        assert f.replica_confirm_offset is None  # no epochs yet: not known as a replica's
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        assert f.replica_confirm_offset == 0
        b = next_batch(m, me, 0, 4096)
        fol.append(b.offset, b.data, epoch=1, epoch_start=0)  # no confirm offset from the master yet
        assert f.replica_confirm_offset == 0


def test_a_pipelined_follower_acknowledges_only_what_is_fsynced(tmp_path: Path, master) -> None:
    m, me = master
    with open_log(tmp_path / "f") as f:
        fol = ReplicaFollower(f, EpochCache(tmp_path / "f"))
        acks = []
        while (b := next_batch(m, me, fol.end, 8192)) is not None:
            acks.append(fol.append(b.offset, b.data, epoch=1, epoch_start=0, wait=False))
            assert acks[-1] <= f.flushed_offset  # never past what is fsynced
        assert fol.wait_durable(fol.end, 10) == m.wrote_offset == f.flushed_offset == fol.durable_offset
        assert fol.append(fol.end, b"", epoch=1, epoch_start=0) == m.wrote_offset  # a heartbeat acks the durable end
        assert same_bytes(m, f)


@pytest.fixture(scope="module")
def one_segment(tmp_path_factory) -> tuple[bytes, list[int], int]:
    """A full first segment: its bytes, its records' starts, where its BLANK starts."""
    root = tmp_path_factory.mktemp("slices")
    with open_log(root / "m", FlushMode.ASYNC) as m:
        fill(m, 16, per=9, body=500)  # past the first segment: it ends with a BLANK
        chunk = m.scan(0, max_bytes=SEG, fields=False)
        starts = [int(p) for p in chunk.physical_offsets]
        blank = starts[-1] + int(chunk.sizes[-1])
        assert chunk.next_offset == SEG > blank
        return m.read_log_bytes(0, SEG), starts, blank


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_check_batch_accepts_exactly_whole_records(one_segment, data) -> None:
    """Any slice [a, b) of a real segment that starts at a record (or its BLANK) is
    accepted iff it ends at a record end, or past a whole BLANK head (then the
    follower's end is the segment's end)."""
    seg, starts, blank = one_segment
    a = data.draw(st.sampled_from([*starts, blank]))
    ends = {*starts, blank}
    near = sorted({e + d for e in ends | {SEG} for d in (-1, 0, 1, 7, 8) if a <= e + d <= SEG})
    b = data.draw(st.one_of(st.sampled_from(near), st.integers(a, SEG)))
    whole = b in ends or b >= blank + 8 or b == a
    try:
        got = check_batch(seg[a:b], a, SEG)
    except ReplicaBatchError:
        assert not whole, (a, b)
        return
    assert whole, (a, b)
    assert got.end == (SEG if b >= blank + 8 else b)
