"""Differential tests of the consume-queue dispatch journal (ConsumeQueues.dispatch:
units checked against per-queue arrays by dense id and journaled, given to the queues
grouped by queue later) against its reference model (model_consume_queues.py: every
queue touched given its units per chunk). The same sequence of batches (runs that
continue their queues, repeats, gaps, re-dispatches from earlier offsets, prepared and
rollback records, new queues starting anywhere, files filling up), with reads, flushes
and write-behinds in between, must leave both with the same units in every queue and
the same files, byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.store import consume_queues
from mqstore.store.consume_queues import ConsumeQueues
from mqstore.store.dispatch import DispatchBatch
from tests.kernels.model_consume_queues import ModelConsumeQueues
from tests.tiers import examples

CASES = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
_TOPICS = ["A", "B", "Cc"]
_FILE_BYTES = 20 * 8


def _batch(rows: list[tuple[int, int, int, int, int]], phys0: int) -> DispatchBatch:
    """rows: (topic code, queue id, queue offset, sysflag, size)."""
    n = len(rows)
    code, qid, qo, sysflag, size = (np.array(c, np.int64).reshape(n) for c in zip(*rows)) if n else [np.zeros(0)] * 5
    phys = phys0 + np.concatenate(([0], np.cumsum(size)[:-1])) if n else np.zeros(0, np.int64)
    none = np.full(n, -1, np.int64)
    return DispatchBatch(
        physical_offsets=phys.astype(np.int64),
        sizes=size.astype(np.int64),
        topics=list(_TOPICS),
        topic_codes=code.astype(np.int64),
        queue_ids=qid.astype(np.int64),
        queue_offsets=qo.astype(np.int64),
        sysflags=sysflag.astype(np.int64),
        store_timestamps=np.arange(n, dtype=np.int64) + 1000,
        tags_codes=(phys * 7 % 1000).astype(np.int64),
        buffer=b"",
        keys_at=none,
        keys_end=none,
        uniq_at=none,
        uniq_end=none,
    )


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, object]]:
    """Batches that mostly continue their queues (a counter per queue), with the
    faults a re-dispatch or a bug brings, and reads / write-outs between them."""
    nxt: dict[tuple[int, int], int] = {}
    phys = draw(st.integers(0, 1000))
    out: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            out.append(("read", (draw(st.integers(0, 2)), draw(st.integers(0, 2)))))
            continue
        if kind == 1:
            out.append(("write_behind", draw(st.booleans())))
            continue
        if kind == 2 and phys > 300:
            phys = draw(st.integers(0, phys))  # a re-dispatch from an earlier commitlog offset
        rows = []
        for _ in range(draw(st.integers(0, 25))):
            q = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
            start = draw(st.integers(0, 30))
            o = nxt.get(q, start)
            fault = draw(st.integers(0, 19))
            if fault == 0:
                o = max(0, o - draw(st.integers(1, 3)))  # a repeat
            elif fault == 1:
                o += draw(st.integers(1, 3))  # a gap
            sysflag = draw(st.sampled_from([0, 0, 0, 0x8, 0x4, 0xC]))
            size = draw(st.integers(1, 50))
            rows.append((q[0], q[1], o, sysflag, size))
            if sysflag in (0, 0x8):
                nxt[q] = o + 1
        out.append(("dispatch", (rows, phys)))
        phys += sum(r[4] for r in rows) + draw(st.integers(0, 20))
    return out


def _files(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root / "consumequeue"):
        for name in names:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def _state(cqs: ConsumeQueues) -> dict:
    out = {}
    for cq in sorted(cqs.all(), key=lambda q: (q.topic, q.queue_id)):
        units = cq.read_units(cq.min_offset, 10_000) if cq.max_offset > cq.min_offset else np.zeros(0)
        out[(cq.topic, cq.queue_id)] = (cq.min_offset, cq.max_offset, cq.max_physical_offset, units.tobytes())
    return out


@pytest.mark.parametrize("mode", ["given", "direct", "direct each chunk"])
@CASES
@given(plan=steps())
def test_journal_equals_the_model(tmp_path_factory, mode, plan) -> None:
    """``direct``: every write-out of the journal writes the runs it can straight into
    the queues' files (ConsumeQueues._write_direct, past _DIRECT_FROM queues); ``each
    chunk``: and the dispatcher writes the journal out after every chunk (past
    _BUFFER_BUDGET)."""
    root = tmp_path_factory.mktemp("cq")
    was = consume_queues._DIRECT_FROM, consume_queues._BUFFER_BUDGET
    if mode != "given":
        consume_queues._DIRECT_FROM = -1
    if mode == "direct each chunk":
        consume_queues._BUFFER_BUDGET = -1
    try:
        _run_plan(root, plan)
    finally:
        consume_queues._DIRECT_FROM, consume_queues._BUFFER_BUDGET = was


def _run_plan(root: Path, plan: list[tuple[str, object]]) -> None:
    got = ConsumeQueues(root / "got", file_bytes=_FILE_BYTES)
    want = ModelConsumeQueues(root / "want", file_bytes=_FILE_BYTES)
    for cqs in (got, want):
        cqs.load()
    try:
        for kind, arg in plan:
            if kind == "dispatch":
                rows, phys = arg
                for cqs in (got, want):
                    cqs.dispatch(_batch(rows, phys))
            elif kind == "read":
                t, q = arg
                g, w = got.find(_TOPICS[t], q), want.find(_TOPICS[t], q)
                assert (g is None) == (w is None)
                if g is not None:
                    assert (g.min_offset, g.max_offset, g.max_physical_offset) == (
                        w.min_offset,
                        w.max_offset,
                        w.max_physical_offset,
                    )
                    if g.max_offset > g.min_offset:
                        assert g.read_units(g.min_offset, 1000).tobytes() == w.read_units(w.min_offset, 1000).tobytes()
            else:
                for cqs in (got, want):
                    cqs.write_behind(everything=arg)
        assert got.last_dispatched_timestamp == want.last_dispatched_timestamp
        assert _state(got) == _state(want)
        for cqs in (got, want):
            cqs.flush(thorough=True)
        assert _files(root / "got") == _files(root / "want")
    finally:
        got.close()
        want.close()


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_many_queues_one_chunk_equals_the_model(tmp_path) -> None:
    """40,000 queues met in two chunks: units given grouped by queue."""
    rng = np.random.default_rng(11)
    got = ConsumeQueues(tmp_path / "got", file_bytes=20 * 1000)
    want = ModelConsumeQueues(tmp_path / "want", file_bytes=20 * 1000)
    queues = 2000
    for cqs in (got, want):
        cqs.load()
    nxt = np.zeros((3, queues), np.int64)
    phys = 0
    for _ in range(3):
        n = 20_000
        code, qid = rng.integers(0, 3, n), rng.integers(0, queues, n)
        rows = []
        for c, q in zip(code.tolist(), qid.tolist()):
            rows.append((c, q, int(nxt[c, q]), 0, 100))
            nxt[c, q] += 1
        for cqs in (got, want):
            cqs.dispatch(_batch(rows, phys))
        phys += 100 * n
    try:
        assert _state(got) == _state(want)
    finally:
        got.close()
        want.close()
