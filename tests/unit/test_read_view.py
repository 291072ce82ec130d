"""ReadView (the query commands' --store): it answers as MessageStore does
(tests/equivalence runs the whole query suite on it), takes no lock, and changes no
byte, name or time of any file, whether the store closed cleanly or crashed."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from mqstore.errors import NotFoundError
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.read_view import ReadView
from mqstore.store.reads import PullStatus

CFG = StoreConfig(segment_bytes=64 * 1024, consume_queue_file_bytes=20 * 200)


def fingerprint(store: Path) -> dict[str, tuple]:
    """Every file's content hash, size and mtime, and every directory's listing."""
    out: dict[str, tuple] = {}
    for root, dirs, files in os.walk(store):
        out[root] = tuple(sorted(dirs + files))
        for name in files:
            p = Path(root) / name
            st = p.stat()
            out[str(p)] = (hashlib.sha1(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def fill(store: Path, n: int = 600) -> list:
    with MessageStore(store, CFG) as s:
        res = s.append(
            MessageBatch(
                topics="T",
                bodies=[b"m%d" % i for i in range(n)],
                queue_ids=[i % 2 for i in range(n)],
                tags=["A" if i % 3 else "B" for i in range(n)],
                keys=[f"k{i % 7}" for i in range(n)],
            )
        )
        assert s.wait_dispatched()
        s.commit_offset("g", "T", 0, 10)
        return res.msg_ids


def ask_everything(v) -> list:
    """Every kind of question, answers as plain values."""
    out = [v.topic_status("T")]
    for q in (0, 1):
        lo = v.topic_status("T")[q].min_offset
        p = v.pull("T", q, lo, max_count=50, tags={"B"})
        out.append((p.status, [r.body for r in p.records], p.next_offset))
        out.append(v.read_queue_offset("T", q, lo + 3).body)
    out.append(sorted(r.body for r in v.query_by_key("T", "k3", max_num=64)))
    out.append([(r.topic, r.queue_id, r.consumer_offset) for r in v.consumer_progress("g")])
    return out


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_a_view_answers_as_the_store_and_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s"
    ids = fill(store)
    before = fingerprint(store)
    with ReadView(store) as v:
        seen = ask_everything(v)
        assert v.read_msg_id(ids[5]).body == b"m5"
        assert v.pull("T", 0, 10_000).status is PullStatus.OFFSET_OVERFLOW
    assert fingerprint(store) == before
    with MessageStore(store, CFG, background_dispatch=False) as s:
        assert ask_everything(s) == seen


def test_a_view_reads_next_to_a_running_store(tmp_path: Path) -> None:
    """No lock: a query works while the store is open for writing (it sees what the
    files hold: units the store still buffers show up within its write-behind)."""
    store = tmp_path / "s"
    fill(store, 100)
    with MessageStore(store, CFG) as s:
        s.append(MessageBatch(topics="T", bodies=[b"late"], queue_ids=1))
        with ReadView(store) as v:
            assert [r.body for r in v.pull("T", 1, 0, max_count=3).records] == [b"m1", b"m3", b"m5"]
            assert v.topic_status("T")[1].max_offset >= 50


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_a_view_of_a_crashed_store_reads_what_the_files_hold(tmp_path: Path) -> None:
    """A store killed before its close: the view recovers nothing and writes nothing;
    it reads the valid records (a torn tail is passed over)."""
    store = tmp_path / "s"
    ids = fill(store, 300)
    shutil.copytree(store, tmp_path / "crashed")
    crashed = tmp_path / "crashed"
    (crashed / "abort").write_bytes(b"")  # as a process killed while it ran leaves it
    (crashed / "config" / "derivedOffset.json").unlink()  # no hint: the view walks the last segment
    seg = sorted((crashed / "commitlog").iterdir())[-1]
    with MessageStore(store, CFG, background_dispatch=False) as s:
        end = s.commitlog.wrote_offset
    with open(seg, "r+b") as f:  # a torn record after the last one
        f.seek(end - int(seg.name))
        f.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\xff" * 40)
    before = fingerprint(crashed)
    with ReadView(crashed) as v:
        assert v.commitlog.wrote_offset == end
        assert v.read_msg_id(ids[-1]).body == b"m299"
        assert ask_everything(v)
    assert fingerprint(crashed) == before


def test_a_view_of_a_directory_without_a_store(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    with ReadView(tmp_path) as v:
        with pytest.raises(NotFoundError, match="no queues"):
            v.topic_status("T")
        assert v.pull("T", 0, 0).status is PullStatus.NO_MESSAGE_IN_QUEUE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["commitlog"]
