"""Reconcile's plan lists the queues (and the names the store ignores) exactly as
verify's queue_dirs does, though from the listings alone (no stat per queue, topic
directories listed several at a time: 400,000 queues took minutes on the driver)."""

from __future__ import annotations

from pathlib import Path

from mqstore.jobs.reconcile.planning import _list_queues, queue_groups
from mqstore.jobs.units import TaskFindings
from mqstore.store.verify.queues import queue_dirs
from mqstore.store.verify.report import Damage


def test_queues_and_stray_names_are_listed_as_verify_lists_them(tmp_path: Path) -> None:
    cq = tmp_path / "consumequeue"
    for topic in ["A", "B", "bad topic!", "C%"]:
        for qid in ["0", "1", "x", "70000", "12"]:
            (cq / topic / qid).mkdir(parents=True)
    (cq / "a-file").write_text("x")
    (cq / "A" / "junk").write_text("y")
    ours, theirs = (TaskFindings(), Damage()), (TaskFindings(), Damage())
    listed = _list_queues(tmp_path, *ours)
    assert listed == [(t, q) for t, q, _ in queue_dirs(tmp_path, *theirs)]
    assert ("A", 12) in listed and ("A", 70000) not in listed
    assert ours[0].rows == theirs[0].rows and ours[0].counts[("cq_stray_file", "warning")] > 4
    assert ours[1].stray_files == theirs[1].stray_files


def test_many_queues_are_dealt_round_robin_in_groups_of_at_most_20000(tmp_path: Path) -> None:
    queues = [(f"T{i // 4}", i % 4) for i in range(50_001)]
    groups = queue_groups(tmp_path, queues, 2)  # no directory is listed: they do not exist here
    assert len(groups) == 3 and sorted(q for g in groups for q in g) == sorted(queues)
    assert max(map(len, groups)) - min(map(len, groups)) <= 1


def test_chunk_tasks_read_queue_files_up_to_1000_queues_and_never_from_a_rocksdb(tmp_path: Path) -> None:
    import dataclasses

    from mqstore.jobs.reconcile.planning import QUEUES_READ_BY_CHUNKS, Plan
    from mqstore.store.config import STORE_TYPE_ROCKSDB, StoreConfig

    def plan_of(queues: int, **kw) -> Plan:
        qs = [(f"T{i // 4}", i % 4) for i in range(queues)]
        return Plan(tmp_path, StoreConfig(), False, True, [], [], qs, [], 0, 0, **kw)

    assert QUEUES_READ_BY_CHUNKS == 1_000
    assert plan_of(16).chunks_read_queues and plan_of(1_000).chunks_read_queues
    assert not plan_of(1_001).chunks_read_queues
    assert not dataclasses.replace(plan_of(16), store_type=STORE_TYPE_ROCKSDB).chunks_read_queues
