"""Queues an open takes from the summary of queue ends, kept as rows in arrays
(mqstore/store/known_queues.py), the summary written from them with the queues in
use (queue_ends.build_with), and the check of a listed queue at its first use that
replaces the open's stat per queue in a big store after a clean close
(ConsumeQueues.load / get; issue 26 item 4)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.consume_queue import decode_units
from mqstore.store import consume_queues as cqs_module
from mqstore.store import queue_ends as qe
from mqstore.store.known_queues import KnownQueues
from mqstore.store.message_store import MessageStore
from tests.tiers import examples
from tests.unit.test_queue_ends import CFG, QUEUES, TOPICS, closed_store, ends_of, fill, full_read

ROWS = [
    ("TopicB", 3, 0, 1, 0, 7, 4096),
    ("TopicA", 0, 2000, 3, 120, 240, 99_000),
    ("%RETRY%g1", 65535, 0, 1, 0, 0, -1),
    ("TopicA", 1, 0, 1, 4, 50, 777),
]


def summary(rows=ROWS) -> qe.QueueEnds:
    return qe.build(rows, file_bytes=1000, progress_offset=1, cleaned_min=0)


def test_rows_are_found_kept_and_popped() -> None:
    known = KnownQueues(summary())
    assert len(known) == 0 and known.keys() == []  # nothing taken yet
    assert known.keep_topics({"TopicA", "Nope"}) == 2
    assert known.keys() == [("TopicA", 0), ("TopicA", 1)]
    assert ("TopicA", 1) in known and ("TopicB", 3) not in known and ("Nope", 0) not in known
    known.keep(np.array([known.topic_rows("TopicB")[3]]), np.array([8]))
    assert len(known) == 3
    assert known.get(("TopicB", 3)) == (0, 1, 0, 7, 4096, 8)
    assert dict(known.max_offsets()) == {("TopicA", 0): 240, ("TopicA", 1): 50, ("TopicB", 3): 7}
    assert known.max_physical_offset() == 99_000
    assert known.past(4096) == [("TopicA", 0)]
    assert known.find_many([("TopicB", 3), ("TopicA", 2), ("X", 0), ("%RETRY%g1", 65535)]).tolist()[1:] == [-1, -1, -1]
    assert known.pop(("TopicA", 0)) == (2000, 3, 120, 240, 99_000, -1)
    assert known.pop(("TopicA", 0)) is None and len(known) == 2
    assert known.max_physical_offset() == 4096
    known.clear()
    assert len(known) == 0 and known.find_many([("TopicB", 3)]).tolist() == [-1]


def test_empty_without_a_summary() -> None:
    known = KnownQueues()
    assert len(known) == 0 and known.keys() == [] and known.max_physical_offset() == -1
    assert known.pop(("T", 0)) is None and known.topic_rows("T") == {}
    assert known.find_many([("T", 0)]).tolist() == [-1]


names = st.sampled_from(["A", "B", "Topic_C", "%RETRY%g", "d-e"])
row = st.tuples(names, st.integers(0, 65535), st.integers(0, 3), st.integers(1, 3), st.integers(0, 5))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(row, unique_by=lambda r: r[:2], max_size=12), st.data())
def test_summary_from_known_rows_and_live_rows_is_the_summary_of_all(rows, data) -> None:
    """build_with(known arrays, live tuples) == build(all tuples), whichever rows are
    still known and whichever are in use."""
    full = [(t, q, first * 1000, files, first * 50, (first + files) * 50 - 1, 77) for t, q, first, files, _ in rows]
    known = KnownQueues(summary(full))
    keep = data.draw(st.lists(st.sampled_from(full), unique=True)) if full else []
    known.keep(np.array([known.topic_rows(t)[q] for t, q, *_ in keep], np.int64))
    live = [r for r in full if r not in keep]
    got = qe.build_with(*known.summary_rows(), live, file_bytes=1000, progress_offset=5, cleaned_min=3)
    want = qe.build(full, file_bytes=1000, progress_offset=5, cleaned_min=3)
    assert got.keys() == want.keys()
    assert got.rows.tobytes() == want.rows.tobytes()
    assert qe.decode(qe.encode(got)).keys() == want.keys()  # sorted, numbered: a summary the open accepts


def lazy(monkeypatch) -> None:
    """Make every summary 'big': queues are checked at first use, not at the open."""
    monkeypatch.setattr(cqs_module, "_CHECK_AT_OPEN_UP_TO", 0)


def test_big_clean_open_touches_no_queue_and_checks_each_at_first_use(tmp_path: Path, monkeypatch) -> None:
    store = closed_store(tmp_path)
    want = full_read(store, tmp_path)
    lazy(monkeypatch)
    stats = []
    real_fits = cqs_module.ConsumeQueues._row_fits
    monkeypatch.setattr(
        cqs_module.ConsumeQueues, "_row_fits", lambda self, *a: stats.append(a[0]) or real_fits(self, *a)
    )
    with MessageStore(store, CFG) as s:
        assert stats == [] and s.consume_queues.pool.opened == 0
        assert s.consume_queues.summary_queues == TOPICS * QUEUES
        assert s.consume_queues.ends() == {k: v[1] for k, v in want.items()}
        assert ends_of(s) == want
        assert len(stats) == TOPICS * QUEUES and s.consume_queues.changed_since_summary == 0
        fill(s, 400, start=1200)
        assert s.wait_dispatched()
    after = full_read(store, tmp_path)
    with MessageStore(store, CFG) as s:
        assert ends_of(s) == after


def test_big_clean_open_reads_a_queue_changed_since_the_summary_at_its_first_use(tmp_path: Path, monkeypatch) -> None:
    store = closed_store(tmp_path)
    time.sleep(0.01)  # a later mtime
    for qdir in sorted((store / "consumequeue").glob("*/*")):  # a queue whose last file has room after its units
        last = sorted(qdir.iterdir())[-1]
        data = bytearray(last.read_bytes())
        units = len(decode_units(bytes(data)))
        if units * 20 + 20 <= len(data):
            break
    data[units * 20 : units * 20 + 7] = b"garbage"  # past the last unit: changed, nothing lost
    last.write_bytes(bytes(data))
    topic, qid = qdir.parent.name, int(qdir.name)
    listed = dict(zip(qe.read(store).keys(), qe.read(store).rows["max_offset"].tolist()))
    lazy(monkeypatch)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == TOPICS * QUEUES  # not checked at the open
        cq = s.consume_queues.find(topic, qid)
        assert s.consume_queues.changed_since_summary == 1
        assert cq.max_offset == listed[(topic, qid)]
        assert b"garbage" not in last.read_bytes()  # cut as recovery cuts a tail
        got = s.pull(topic, qid, cq.min_offset, max_count=1000)
        assert [r.queue_offset for r in got.records] == list(range(cq.min_offset, cq.max_offset))


def test_big_clean_open_reads_topics_the_summary_does_not_list(tmp_path: Path, monkeypatch) -> None:
    store = closed_store(tmp_path)
    ends = qe.read(store)
    keep = np.array([t != "BenchTopic3" for t, _ in ends.keys()])
    ends.rows = ends.rows[keep]
    qe.write(store, ends)
    want = full_read(store, tmp_path)
    lazy(monkeypatch)
    with MessageStore(store, CFG) as s:
        assert s.consume_queues.summary_queues == (TOPICS - 1) * QUEUES
        assert ends_of(s) == want
