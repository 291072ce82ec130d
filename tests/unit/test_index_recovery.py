"""Index recovery in linear time (issue 25, item 6): cutting entries after a crash
costs time proportional to the entries dropped, not (longest chain) x (slots cut),
and leaves the index a build from scratch of the surviving records would hold."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats import IndexFileView, index_file_size, index_key_hashes
from mqstore.store.dispatch import IndexEntries
from mqstore.store.index_service import IndexService
from tests.tiers import examples

T0 = 1_700_000_000_000
SLOTS = 100_000  # about one slot per UNIQ_KEY cut, as in a default-sized file
ENTRIES = 700_000  # one file (14.4 MB) holds the whole burst


class _Clock:
    def now_ms(self) -> int:
        return T0

    def monotonic(self) -> float:
        return T0 / 1000


def _burst(n: int) -> IndexEntries:
    """n messages, each indexed under the key they all share and its own UNIQ_KEY:
    one chain of n entries and n more spread over every slot."""
    keys = []
    for i in range(n):
        keys += ["T#shared", f"T#uniq-{i}"]
    phys = np.repeat(np.arange(n, dtype=np.int64) * 100, 2)
    times = T0 + phys // 100  # a message a millisecond
    return IndexEntries(index_key_hashes(keys), phys, times)


def _service(path: Path) -> IndexService:
    svc = IndexService(path, hash_slots=SLOTS, max_entries=ENTRIES, clock=_Clock())
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    return svc


def test_truncating_300k_entries_of_one_key_takes_seconds(tmp_path: Path) -> None:
    """A 300,000-message burst sharing one key, cut back to its first 1,000 messages
    (a crash before the index's last durable point): the cut ends in seconds (the
    chain walk it replaces took minutes at this size), and every query answers as an
    index built from the 1,000 surviving messages alone."""
    n, kept = 300_000, 1000
    burst = _burst(n)
    crashed = _service(tmp_path / "crashed")
    assert crashed.put(burst).indexed == 2 * n
    started = time.monotonic()
    report = crashed.truncate(kept * 100)  # the commitlog was cut after message 999
    took = time.monotonic() - started
    assert report.dropped_entries == 2 * (n - kept)
    assert took < 10, f"cutting {2 * (n - kept)} entries took {took:.1f} s"

    fresh = _service(tmp_path / "fresh")
    fresh.put(IndexEntries(*(col[: 2 * kept] for col in burst)))
    for key in ["shared", "uniq-0", "uniq-999", "uniq-1000", "uniq-299999", *(f"uniq-{i}" for i in range(0, 999, 97))]:
        assert crashed.query("T", key, 64) == fresh.query("T", key, 64), key
    a, b = (s.directory / s.files[0] for s in (crashed, fresh))
    assert (
        a.read_bytes()[40:] == b.read_bytes()[40:]
    )  # slots and entries to the byte (the header's end time is reconstructed)
    # And both go on alike: the re-dispatched messages index as they did the first time.
    rest = IndexEntries(*(col[2 * kept : 2 * kept + 2000] for col in burst))
    assert crashed.put(rest).indexed == fresh.put(rest).indexed == 2000
    assert crashed.query("T", "shared", 64) == fresh.query("T", "shared", 64)
    crashed.close()
    fresh.close()


hash_st = st.integers(0, (1 << 31) - 1)


@settings(max_examples=examples(200), deadline=None)
@given(hash_slots=st.integers(1, 6), max_entries=st.integers(3, 24), data=st.data())
def test_drop_uncounted_leaves_what_the_counted_puts_wrote(hash_slots, max_entries, data) -> None:
    """A put cut short between its slots and its header (a crash at ``index.put``):
    drop_uncounted gives back the slot table of a file that only got the counted
    entries, so the next puts build the chains putKey builds."""
    n = data.draw(st.integers(1, max_entries - 2))
    m = data.draw(st.integers(1, max_entries - 1 - n))
    hashes = np.array(data.draw(st.lists(hash_st, min_size=n + m, max_size=n + m)), np.int64)
    phys = np.arange(n + m, dtype=np.int64) * 10
    times = T0 + phys
    size = index_file_size(hash_slots, max_entries)
    cut_buf, ref_buf = bytearray(size), bytearray(size)
    cut = IndexFileView.create(cut_buf, hash_slots, max_entries)
    ref = IndexFileView.create(ref_buf, hash_slots, max_entries)
    cut.put_hashes(hashes[:n], phys[:n], times[:n])
    ref.put_hashes(hashes[:n], phys[:n], times[:n])

    class Crash(Exception):
        pass

    def crash() -> None:
        raise Crash

    try:
        cut.put_hashes(hashes[n:], phys[n:], times[n:], before_header=crash)
    except Crash:
        pass
    changed = cut.drop_uncounted()
    slots_end = 40 + 4 * hash_slots
    assert cut_buf[:slots_end] == ref_buf[:slots_end]
    assert changed == len({int(h) % hash_slots for h in hashes[n:]})
    more = data.draw(st.lists(hash_st, max_size=max_entries))
    if more:
        mh = np.array(more, np.int64)
        mp = 10 * (n + m) + np.arange(len(mh), dtype=np.int64)
        assert cut.put_hashes(mh, mp, T0 + mp) == ref.put_hashes(mh, mp, T0 + mp)
        counted = slots_end + 20 * ref.header.index_count  # (uncounted bytes past it are never read)
        assert cut_buf[:counted] == ref_buf[:counted]


def test_a_crashed_index_builder_says_what_its_recovery_does(tmp_path: Path) -> None:
    """The recovery steps of an index builder that died after its last thorough flush
    (what BuilderProgress.recovery_step shows while it recovers): loading the files,
    then cutting the entries past the durable point, with how many went."""
    from mqstore.bench.workload import Workload
    from mqstore.store import StoreConfig
    from mqstore.store.builders import IndexBuilder, LocalCommitLogView, QueueBuilder
    from mqstore.store.dispatch import build_dispatch_batch
    from mqstore.store.log_store import LogStore

    cfg = StoreConfig(segment_bytes=1 << 20, index_hash_slots=64, index_max_entries=4000)
    w = Workload(body_size=40, topics=2, queues=2)
    log = LogStore(tmp_path, cfg)
    view = LocalCommitLogView(log.commitlog)
    cq = QueueBuilder(tmp_path, cfg, view, on_durable=lambda o, t: log.note_derived("consume_queue", o, t))
    ix = IndexBuilder(tmp_path, cfg, view, on_durable=lambda o, t: log.note_derived("index", o, t))
    log.attach_queue_ends({}, cq.progress_offset)

    def dispatch(index: IndexBuilder) -> None:
        pos = min(cq.progress_offset, index.progress_offset)
        while pos < log.commitlog.wrote_offset:
            chunk = log.commitlog.scan(pos)
            b = build_dispatch_batch(chunk)
            cq.put(b, pos, chunk.next_offset)
            index.put(b.index_entries(), pos, chunk.next_offset)
            pos = chunk.next_offset

    log.append(w.batch(0, 300))
    dispatch(ix)
    cq.flush(thorough=True)
    ix.flush(thorough=True)  # durable up to here (config/derivedOffset.json)
    log.append(w.batch(300, 200))
    dispatch(ix)
    ix._stop.set()  # the index builder "dies": its marker and files stay
    ix._lock_file.release()
    steps: list[tuple[str, int, int]] = []
    again = IndexBuilder(tmp_path, cfg, LocalCommitLogView(log.commitlog), on_step=lambda *s: steps.append(s))
    assert again.crashed
    assert steps[0] == ("loading index files", 0, 0)
    assert steps[1][0].startswith("cutting index entries past commitlog offset")
    what, done, total = steps[-1]
    assert what.startswith("cut index entries past commitlog offset") and done == total >= 200  # (each has keys)
    dispatch(again)
    rec = log.commitlog.read(again.index.max_physical_offset)
    assert again.index.query(rec.topic, rec.unique_key) == [again.index.max_physical_offset]
    again.close()
    cq.close()
    log.close()
