"""The confirm offset: under sync flush no consumer ever sees a record a crash can take back.

MessageStore's dispatcher stops at the commitlog's flushed offset under sync flush,
so consume queues (and so pulls and committed offsets) never get ahead of what is
durable. A kill -9 alone cannot show it (the page cache keeps what was written), so
each round runs the child in the power-loss test mode (faults.power_cut leaves only
what syncs covered, as a power cut would) with a slow disk (every flush waits
20 ms, so records spend most of their life written but not flushed) and two
consumer threads that pull, commit and persist offsets as fast as they can; the
parent kills it after a random number of acknowledgements and cuts the power.
Then, before the store is opened, every consumer offset on disk must be at most
its queue's max offset once the store has recovered, and every message a consumer
saw (and every acknowledged one) must still be served. Rounds continue on the same
store. The last test shows the rounds catch the bug when the dispatcher is let past
the flushed offset.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

from mqstore.store import faults
from mqstore.store.config_files import inspect_config_file
from mqstore.store.consumer_offsets import CONSUMER_OFFSET_FILE, TOPIC_GROUP_SEPARATOR
from tests.integration.crash_workload import check_messages, open_store, run_child, verify_errors

ROUNDS = 4


def offsets_on_disk(store: Path) -> dict[tuple[str, int], int]:
    """The consumer offsets a restart reads (the file, else its .bak)."""
    st = inspect_config_file(store, CONSUMER_OFFSET_FILE)
    if st.value is None:
        return {}
    table, _ = st.value
    return {
        (key.partition(TOPIC_GROUP_SEPARATOR)[0], qid): off
        for key, queues in table.items()
        for qid, off in queues.items()
    }


def crash_round(store: Path, image: Path, rng: random.Random, r: int, **opts):
    run = run_child(
        store,
        power_image=image,
        kill_after_acks=rng.randrange(150, 600),
        kill_delay_s=rng.random() * 0.05,
        consume_every=0,
        consumer_threads=2,
        retention_every=0,
        slow_sync_ms=20,
        round=r,
        **opts,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]
    faults.power_cut(store, image)
    return run


@pytest.mark.crash
def test_consumers_never_get_ahead_of_the_flushed_offset(tmp_path: Path) -> None:
    store, rng = tmp_path / "store", random.Random(20261122)
    acked, seen = [], []
    for r in range(ROUNDS):
        run = crash_round(store, tmp_path / f"image{r}", rng, r)
        acked += run.acks
        seen += run.seen
        assert run.seen, "the consumers saw nothing: the round proves nothing"
        on_disk = offsets_on_disk(store)
        s = open_store(store)
        try:
            assert s.wait_dispatched(30)
            for (topic, qid), offset in on_disk.items():
                cq = s.consume_queues.find(topic, qid)
                top = cq.max_offset if cq is not None else 0
                assert offset <= top, f"round {r}: committed offset {offset} of {topic}:{qid} is past its max {top}"
            assert check_messages(s, seen, what="consumed") == len(seen), f"round {r}"
            assert check_messages(s, acked) == len(acked), f"round {r}"
        finally:
            s.close()
        assert verify_errors(store) == [], f"round {r}"


def _violations(store: Path, run) -> list[str]:
    """What a round broke: consumed messages gone, committed offsets past the end."""
    out = []
    on_disk = offsets_on_disk(store)
    s = open_store(store)
    try:
        s.wait_dispatched(30)
        for (topic, qid), offset in on_disk.items():
            cq = s.consume_queues.find(topic, qid)
            if offset > (cq.max_offset if cq is not None else 0):
                out.append(f"offset {offset} of {topic}:{qid} past {cq.max_offset if cq else 0}")
        try:
            check_messages(s, run.seen, what="consumed")
        except AssertionError as e:
            out.append(str(e).splitlines()[0])
    finally:
        s.close()
    return out


@pytest.mark.crash
def test_the_rounds_catch_a_dispatcher_that_passes_the_flushed_offset(tmp_path: Path) -> None:
    """Negative control: let the dispatcher follow the write position instead (what
    async flush does) and the same rounds show consumers that saw, and committed
    past, records the power cut took back."""
    store, rng = tmp_path / "store", random.Random(7)
    found: list[str] = []
    for r in range(2 * ROUNDS):  # most rounds show it (the kill has to land in a window); stop at the first
        run = crash_round(store, tmp_path / f"image{r}", rng, r, unsafe_dispatch=True)
        found += _violations(store, run)
        if found:
            break
    assert found, "no round showed the bug the confirm offset prevents"
