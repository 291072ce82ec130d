"""The open of one shard: its four steps and their rules, written only here.

The same steps run in one thread (``MessageStore``) and across four processes
(``mqstore serve``: services/commitlog/state.py runs step 1 and waits in 3, each
builder in services/index/state.py runs 2 and, for the consume queues, hands over
3, services/dispatcher/reput.py runs 4). Every call of the open goes toward the
commitlog; it never calls a builder. docs/architecture.md draws the processes.

1. ``recover_log``: the commitlog side takes the store's lock (waiting for one a
   dying previous incarnation still holds), recovers the commitlog (recovery.py:
   normal after a clean close, abnormal after a crash; torn tails cut), sets aside
   an unreadable topics.json or delayOffset.json, and loads the topic configs. From
   here it serves reads and its recovery facts (``CommitLogView``: incarnation, clean
   or not, where the log starts and ends, ``redispatch_from``) but refuses appends.
2. ``recover_builder`` (each builder, under its own lock): recovers its files against
   those facts: the consume queues cut torn tails, units past the log's end and
   below its start, and check the last file's units against their records (all of
   them after a crash, deep from ``redispatch_from``); the index drops entries past
   ``redispatch_from`` after a crash. A builder whose own abort marker is left
   recovers as after a crash even when the commitlog closed cleanly. Its
   ``progress_offset`` is where dispatch must resume for it.
3. ``queue_ends`` -> ``LogStore.attach_queue_ends``: the consume-queue builder,
   recovered against *this* commitlog open (its incarnation), hands over each
   queue's end and its progress; the commitlog continues its queue-offset table from
   them and from every record past that progress, rebuilds a set-aside topics.json
   from them, and accepts appends from here on. Ends from a builder recovered
   against an earlier open are refused: it recovers again.
4. ``resume_offset``: dispatch resumes at the lowest builder progress, once every
   builder has recovered against the current open. Re-dispatching what one builder
   already holds is harmless (its puts skip it); nothing either lacks is skipped.

After step 4 in one process, ``MessageStore`` catches up before its open returns
and clamps consumer offsets past their queue's end
(``QueueBuilder.clamp_consumer_offsets``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from mqstore.errors import StoreLockedError
from mqstore.store.builders import CommitLogView, IndexBuilder, QueueBuilder
from mqstore.store.clock import Clock
from mqstore.store.config import StoreConfig
from mqstore.store.log_store import LogStore
from mqstore.store.recovery import RecoveryProgress

# A builder's kind (its actor's name and lock-file suffix) -> its class and the name
# its durable offset is reported under (LogStore.note_derived).
BUILDERS: dict[str, tuple[type[QueueBuilder] | type[IndexBuilder], str]] = {
    "consumequeue": (QueueBuilder, "consume_queue"),
    "index": (IndexBuilder, "index"),
}
LOCK_RETRY_S = 0.2


def recover_log(
    store_dir: str | Path,
    config: StoreConfig | None = None,
    *,
    clock: Clock | None = None,
    progress: RecoveryProgress | None = None,
    on_sync_seconds: Callable[[float], None] | None = None,
    lock_wait_s: float = 0.0,
) -> LogStore:
    """Step 1: the commitlog side, recovered and not yet accepting appends.
    StoreLockedError once the lock stayed held for ``lock_wait_s``."""
    deadline = time.monotonic() + lock_wait_s
    while True:
        try:
            return LogStore(store_dir, config, clock=clock, progress=progress, on_sync_seconds=on_sync_seconds)
        except StoreLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(LOCK_RETRY_S)


def recover_builder(
    kind: str,
    store_dir: str | Path,
    config: StoreConfig,
    view: CommitLogView,
    *,
    on_durable: Callable[[str, int, int], None],
    clock: Clock | None = None,
    on_step: Callable[[str, int, int], None] | None = None,
) -> QueueBuilder | IndexBuilder:
    """Step 2 for one builder (``kind``: a key of BUILDERS). ``on_durable(name,
    offset, store_time)`` is told each thorough flush's durable offset, ``on_step(what,
    done, total)`` what recovery does as it goes."""
    if kind not in BUILDERS:
        raise ValueError(f"builder kind must be one of {sorted(BUILDERS)}, got {kind!r}")
    cls, name = BUILDERS[kind]
    return cls(
        store_dir, config, view, clock=clock, on_durable=lambda off, ts: on_durable(name, off, ts), on_step=on_step
    )


def queue_ends(builder: QueueBuilder) -> dict[tuple[str, int], int]:
    """Step 3's message: the next queue offset of every consume queue the builder
    holds (with ``builder.progress_offset``, what ``LogStore.attach_queue_ends`` takes)."""
    return builder.consume_queues.ends()


def resume_offset(progress_offsets: Iterable[int]) -> int:
    """Step 4: where dispatch resumes, given every builder's ``progress_offset``."""
    return min(progress_offsets)


__all__ = ["BUILDERS", "queue_ends", "recover_builder", "recover_log", "resume_offset"]
