"""The queue tasks' checks (units._QueueChecks, column-wise over a group of queues)
held to a model that checks one queue at a time with numpy (what check_queues did
before: the same findings, metadata and units, whatever the queues hold: pre-blanks
before and after real units, commitlog offsets going back, long tails, unreadable
queues)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.consume_queue import PRE_BLANK_SIZE, UNIT_DTYPE, is_pre_blank
from mqstore.jobs.unit_columns import UnitColumns
from mqstore.jobs.units import LISTED_PER_TASK, TaskFindings, _QueueChecks, _runs
from mqstore.store.verify.queues import QueueFiles
from mqstore.store.verify.report import Damage
from tests.tiers import examples


def model(queues: list[QueueFiles]) -> dict:
    """One queue at a time."""
    findings, damage, meta, topic_ids, parts = TaskFindings(), Damage(), {}, {}, []
    for q in queues:
        topic, qid, units = q.topic, q.queue_id, q.units
        n = len(units)
        pre = is_pre_blank(units) if n else np.zeros(0, bool)
        phys = units["commitlog_offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        qoffs = q.first_offset + np.arange(n, dtype=np.int64)
        real = np.flatnonzero(~pre)
        if real.size and pre[real[0] :].any():
            for i in np.flatnonzero(pre[real[0] :]).tolist()[:LISTED_PER_TASK]:
                qo = int(qoffs[real[0] + i])
                findings.error(
                    "cq_wrong_record", f"{q.location}#{qo}", f"a pre-blank unit at queue offset {qo}, after real units"
                )
            damage.bad_queues.add((topic, qid))
        if real.size > 1 and (np.diff(phys[real]) <= 0).any():
            i = int(real[1:][np.diff(phys[real]) <= 0][0])
            findings.error(
                "cq_order",
                f"{q.location}#{int(qoffs[i])}",
                f"unit at queue offset {int(qoffs[i])} points at "
                f"commitlog offset {int(phys[i])}, not after the unit before it",
            )
            damage.bad_queues.add((topic, qid))
        tail = real[-256:]
        if real.size:
            t = topic_ids.setdefault(topic, len(topic_ids))
            tags = units["tags_code"].astype(np.int64)
            parts.append((t, qid, qoffs[real], phys[real], sizes[real], tags[real]))
        meta[(topic, qid)] = {
            "first": q.first_offset,
            "end": q.end_offset,
            "unreadable": q.unreadable,
            "pre_blank": _runs(qoffs[pre]),
            "tail_ends": (phys[tail] + sizes[tail]).tolist(),
            "more_before_tail": bool(real.size > tail.size),
            "real": int(real.size),
        }
    return {
        "findings": findings,
        "meta": meta,
        "bad_queues": damage.bad_queues,
        "units": UnitColumns.from_parts(list(topic_ids), parts),
    }


@st.composite
def queue_files(draw) -> list[QueueFiles]:
    out = []
    for k in range(draw(st.integers(0, 6))):
        n = draw(st.sampled_from([0, 1, 3, 40, 300]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        phys = np.cumsum(rng.integers(-50, 400, n)) + 1000  # now and then going back
        units = np.zeros(n, UNIT_DTYPE)
        units["commitlog_offset"], units["size"], units["tags_code"] = phys, 20 + k, phys % 7
        blanks = draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=3 if n else 0))
        head = draw(st.integers(0, min(n, 5)))  # pre-blanks first, as retention leaves them
        for i in [*range(head), *blanks]:
            units[i] = (0, PRE_BLANK_SIZE, 0)
        topic = draw(st.sampled_from(["A", "B", "C"]))
        out.append(QueueFiles(topic, k, draw(st.integers(0, 10_000)), units, unreadable=n == 0 and k % 2 == 1))
    return out


def cols(u: UnitColumns) -> list[tuple]:
    return sorted(zip(*(c.tolist() for c in u.columns()[1:]), [u.topics[t] for t in u.topic.tolist()]))


@settings(max_examples=examples(200), deadline=None)
@given(queue_files())
def test_column_wise_checks_are_the_per_queue_ones(queues: list[QueueFiles]) -> None:
    check = _QueueChecks()
    for q in queues:
        check.add(q)
    got, want = check.result(), model(queues)
    assert got["meta"] == want["meta"]
    assert sorted(got["findings"].rows) == sorted(want["findings"].rows)
    assert got["findings"].counts == want["findings"].counts
    assert got["bad_queues"] == want["bad_queues"]
    assert cols(got["units"]) == cols(want["units"])
    assert got["units"].phys.tolist() == sorted(got["units"].phys.tolist())
