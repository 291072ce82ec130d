"""A derived-file builder of one shard as the services see it: the consume-queue
builder or the index builder (store/builders.py) in a process of its own, with its
state and its part of the open (mqstore/store/open_protocol.py: steps 2 and 3).

The builder's thread: ask the commitlog for its recovery facts (GetRecovery, retried
while the commitlog recovers), recover against them (``RemoteCommitLog``: the tail
check goes over CheckUnits), serve (the consume-queue builder hands its queue ends
to the commitlog first: AttachQueueEnds), and then watch the commitlog once a
second for a new incarnation (it reopened: after a crash its tail may be shorter):
close the builder (everything flushed) and recover again against the new open;
batches read from the old one are refused (ABORTED) meanwhile.

Retention is told, not polled: the dispatcher's batches carry the commitlog's min
offset (PutUnits/PutKeys), and the builder deletes its files below it
(``clean_below``; the consume queues report the groups that lost unread messages).
Thorough flushes report the durable offset to the commitlog (NoteDerived). Every
call goes builder -> commitlog; the commitlog never calls a builder to open.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import grpc
import structlog

from mqstore.errors import MqStoreError, StoreLockedError, StoreNotWritableError
from mqstore.rpc.v1 import common_pb2
from mqstore.services.common.errors import Aborted, BadRequest, Unavailable
from mqstore.services.common.internal_auth import RANGE_END, InternalAuth
from mqstore.services.common.peers import PeerUnavailable, Resolver
from mqstore.services.index.commitlog_view import RemoteCommitLog
from mqstore.services.index.delay import SchedulerStore
from mqstore.store import open_protocol
from mqstore.store.builders import IndexBuilder, QueueBuilder
from mqstore.store.config import StoreConfig
from mqstore.store.delay_offsets import parse_delay_levels
from mqstore.store.loss_ledger import LossLedger
from mqstore.store.schedule import DelayScheduler

log = structlog.get_logger(__name__)
T = TypeVar("T")


class BuilderPhase(enum.Enum):
    RECOVERING = "RECOVERING"
    SERVING = "SERVING"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


class BuilderState:
    """See the module docstring. ``kind``: "consumequeue" or "index"."""

    def __init__(
        self,
        kind: str,
        store_dir: str | Path,
        config: StoreConfig | None,
        resolve_commitlog: Resolver,
        *,
        auth: InternalAuth,
        shard: int = 0,
        poll_s: float = 1.0,
    ) -> None:
        if kind not in open_protocol.BUILDERS:
            raise ValueError(f"kind must be one of {sorted(open_protocol.BUILDERS)}, got {kind!r}")
        self.kind = kind
        self.store_dir = Path(store_dir)
        self.config = config or StoreConfig()
        self.shard = shard
        self._resolve = resolve_commitlog
        self._auth = auth
        self._poll_s = poll_s
        self.phase = BuilderPhase.RECOVERING
        self.error: str | None = None
        self.builder: QueueBuilder | IndexBuilder | None = None
        self.view: RemoteCommitLog | None = None
        self.executor = ThreadPoolExecutor(8, thread_name_prefix=f"mqstore-{kind}{shard}")
        self.opened = threading.Event()  # set on every successful open
        self._stop = threading.Event()
        self._swap = threading.Lock()  # a reopen waits for puts in progress, puts wait for a reopen
        self._clean_lock = threading.Lock()
        self._cleaned = 0  # the commitlog min offset the files were last cleaned below
        self.losses = LossLedger()  # unread messages retention deleted, per group and queue (status)
        self.cleaned_forced = False  # the last clean went below a forced deletion (pop gaps are forced)
        self._ends_attached = True  # the queue ends reached this builder's commitlog open (consume queues only)
        self.scheduler: DelayScheduler | None = None  # the consume-queue builder's delay deliveries (index/delay.py)
        self.stuck: tuple[str, int] | None = None  # (why puts fail, since epoch ms); None while they succeed
        self.recovery_step: tuple[str, int, int] = ("", 0, 0)  # (what recovery does, done, total)
        self._thread = threading.Thread(target=self._run, name=f"mqstore-{kind}{shard}-open", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # ------------------------------------------------------------------ the builder's thread

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._open()
            except (
                StoreLockedError,
                grpc.RpcError,
                PeerUnavailable,
            ) as e:  # the commitlog, or an old incarnation: wait
                detail = e.details() if isinstance(e, grpc.RpcError) else str(e)
                self.error = f"{type(e).__name__}: {detail}"
                self._stop.wait(0.2)
                continue
            except Exception as e:  # noqa: BLE001 - reported through state/error; tried again
                self.phase, self.error = BuilderPhase.FAILED, f"{type(e).__name__}: {e}"
                log.error("builder_open_failed", kind=self.kind, shard=self.shard, error=self.error, exc_info=e)
                self._stop.wait(5.0)
                continue
            try:
                self._watch()
            except Exception as e:  # noqa: BLE001 - never ends the thread silently: recover again
                self.error = f"{type(e).__name__}: {e}"
                log.error(
                    "builder_watch_failed",
                    kind=self.kind,
                    shard=self.shard,
                    error=self.error,
                    action="recover again against the commitlog",
                    exc_info=e,
                )
            if not self._stop.is_set():
                self._close_builder(report=False)

    def _open(self) -> None:
        view = RemoteCommitLog(self._resolve, self._auth)
        try:
            builder = open_protocol.recover_builder(
                self.kind, self.store_dir, self.config, view, on_durable=view.note_derived, on_step=self._note_step
            )
        except BaseException:
            view.close()  # its channel: this is retried every 0.2 s while a lock is held
            raise
        with self._swap:
            self.view, self.builder, self.error = view, builder, None
            self._cleaned = view.min_offset
            self._ends_attached = self.kind != "consumequeue"
            self.phase = BuilderPhase.SERVING
        self._attach_ends()
        self._start_scheduler()
        self.opened.set()
        log.info(
            "builder_serving",
            kind=self.kind,
            shard=self.shard,
            commitlog_incarnation=view.incarnation,
            progress_offset=builder.progress_offset,
        )

    def _note_step(self, what: str, done: int, total: int) -> None:
        self.recovery_step = (what, done, total)
        log.info("builder_recovery_step", kind=self.kind, shard=self.shard, step=what, done=done, total=total)

    def _attach_ends(self) -> None:
        """Hand the queue ends to the commitlog (it awaits them to accept appends);
        retried every poll until it took them."""
        if self._ends_attached:
            return
        b, view = self.builder, self.view
        ends = [
            common_pb2.QueueRange(
                topic=q.topic, queue_id=q.queue_id, min_offset=q.min_offset, max_offset=q.max_offset, shard=self.shard
            )
            for q in b.consume_queues.all()
        ]
        try:
            view.attach_queue_ends(b.progress_offset, ends)
            self._ends_attached = True
        except (grpc.RpcError, PeerUnavailable) as e:  # the commitlog restarts: the watch sees its new open
            log.warning("queue_ends_not_attached", shard=self.shard, error=str(e), action="tried again")

    def _start_scheduler(self) -> None:
        """Delay deliveries (consume-queue builder only), once the commitlog took the
        queue ends (it serves); its progress recovery reads the commitlog, so a
        failure is tried again at the next poll."""
        if self.kind != "consumequeue" or self.scheduler is not None or not self._ends_attached:
            return
        b, view = self.builder, self.view
        try:
            store = SchedulerStore(self.store_dir, b.config, b.consume_queues, view)
            self.scheduler = DelayScheduler(store, parse_delay_levels(b.config.message_delay_level))
        except (grpc.RpcError, PeerUnavailable, MqStoreError) as e:
            log.warning("delay_scheduler_not_started", shard=self.shard, error=str(e), action="tried again")
            return
        self.scheduler.start()

    def _stop_scheduler(self) -> None:
        sched, self.scheduler = self.scheduler, None
        if sched is not None:
            try:
                sched.stop()  # (persists delayOffset.json; asks the commitlog where it stands)
            except Exception as e:  # noqa: BLE001 - the next open recovers the progress from the commitlog
                log.warning("delay_scheduler_stop_failed", shard=self.shard, error=str(e))

    def stopped_loops(self) -> dict[str, str]:
        """Background loops that stopped while the builder serves (its delay scheduler)."""
        sched = self.scheduler
        why = sched.stopped if sched is not None else None
        return {"delay_scheduler": why} if why else {}

    def _watch(self) -> None:
        view = self.view
        while not self._stop.wait(self._poll_s):
            self._attach_ends()
            self._start_scheduler()
            try:
                r = view.offsets()
            except (grpc.RpcError, PeerUnavailable):
                continue  # the commitlog is restarting: keep serving reads
            if r.incarnation != view.incarnation:
                log.warning(
                    "commitlog_reopened",
                    kind=self.kind,
                    shard=self.shard,
                    was=view.incarnation,
                    now=r.incarnation,
                    action="recover again against it",
                )
                return

    @property
    def commitlog_min_offset(self) -> int:
        """The commitlog's min offset as retention last announced it (records below
        it may be gone from the segments)."""
        return self._cleaned

    async def clean_below(self, commitlog_min: int, forced_deleted_to: int = 0) -> None:
        """Retention, as the dispatcher tells it: delete own files wholly below the
        commitlog's min offset (once per new min; a failure is tried at the next batch)."""
        if commitlog_min <= self._cleaned:
            return

        def clean() -> None:
            with self._clean_lock:
                b = self.builder
                if b is None or commitlog_min <= self._cleaned:
                    return
                forced = commitlog_min <= forced_deleted_to
                gone = b.clean_below(commitlog_min, forced=forced)
                if isinstance(b, QueueBuilder):  # the consume queues' losses (the index's: file names)
                    self.losses.note(gone)
                self._cleaned, self.cleaned_forced = commitlog_min, forced

        try:
            await self.call(clean)
        except Exception as e:  # noqa: BLE001 - the batch itself is built; cleaning is tried again next batch
            log.error("builder_clean_failed", kind=self.kind, shard=self.shard, error=str(e))

    def _close_builder(self, *, report: bool) -> None:
        self._stop_scheduler()
        with self._swap:
            builder, view, self.builder = self.builder, self.view, None
            if self.phase is BuilderPhase.SERVING:
                self.phase = BuilderPhase.RECOVERING
        if builder is not None:
            if not report:  # the commitlog that would take the report is another open now
                builder._on_durable = None
            builder.close()
        if view is not None:
            view.close()

    def close(self) -> None:
        """Flush everything (reporting the durable offset) and release the files."""
        self._stop.set()
        self.phase = BuilderPhase.CLOSING
        self._thread.join(30)
        try:
            self._close_builder(report=True)
        finally:
            self.phase = BuilderPhase.CLOSED
            self.executor.shutdown(wait=False)

    # ------------------------------------------------------------------ for servicers

    def ready(self):
        """The open builder, or Unavailable saying why not."""
        b = self.builder
        if self.phase is BuilderPhase.SERVING and b is not None:
            return b
        why = f": {self.error}" if self.error else ""
        if self.phase is BuilderPhase.RECOVERING:
            raise Unavailable(f"shard {self.shard}'s {self.kind} builder is recovering against the commitlog{why}")
        raise Unavailable(f"shard {self.shard}'s {self.kind} builder is {self.phase.value.lower()}{why}")

    def check_incarnation(self, incarnation: int) -> None:
        view = self.view
        if view is None or incarnation != view.incarnation:
            raise Aborted(
                f"records read from commitlog incarnation {incarnation}; this {self.kind} builder "
                f"recovered against {view.incarnation if view else 'none yet'}: resume from its progress"
            )

    def put(self, incarnation: int, *args: Any):
        """The builder's ``put`` (blocking) of a batch read from commitlog open
        ``incarnation``, unless a reopen is under way."""
        with self._swap:
            b = self.ready()
            self.check_incarnation(incarnation)
            try:
                out = b.put(*args)
            except (StoreNotWritableError, OSError) as e:  # a full or failing disk: stuck until a put succeeds
                if self.stuck is None:
                    self.stuck = (str(e), int(time.time() * 1000))
                    log.error("builder_stuck", kind=self.kind, shard=self.shard, error=str(e), health="NOT_SERVING")
                elif self.stuck[0] != str(e):
                    self.stuck = (str(e), self.stuck[1])
                raise
            if self.stuck is not None:
                log.info("builder_unstuck", kind=self.kind, shard=self.shard, was=self.stuck[0])
                self.stuck = None
            return out

    async def check_to_offset(self, to_offset: int, incarnation: int = 0, vouch: bytes = b"") -> None:
        """BadRequest if a batch claims records past the commitlog's write position.
        A batch whose ``vouch`` is the commitlog's for (``incarnation``, ``to_offset``)
        (ReadRangeResponse.vouch, passed on by the dispatcher) is within it: no call."""
        view = self.view
        if view is not None and to_offset > view.wrote_offset:
            if vouch and self._auth.vouched(vouch, RANGE_END, incarnation, to_offset):
                return  # (the caller checked the incarnation is the view's)
            await self.call(view.offsets)  # the commitlog grew since the view last asked
            if to_offset > view.wrote_offset:
                raise BadRequest(f"to_offset {to_offset} is past the commitlog's write position {view.wrote_offset}")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    def progress(self) -> common_pb2.BuilderProgress:
        b, v = self.builder, self.view
        serving = self.phase is BuilderPhase.SERVING and b is not None and v is not None
        return common_pb2.BuilderProgress(
            commitlog_incarnation=v.incarnation if serving else 0,
            progress_offset=b.progress_offset if serving else 0,
            durable_offset=b.durable_offset if serving else 0,
            state=self.phase.value,
            error=self.error or "",
            stopped_loops=[f"{name}: {why}" for name, why in self.stopped_loops().items()],
            stuck=self.stuck[0] if self.stuck else "",
            stuck_since_ms=self.stuck[1] if self.stuck else 0,
            recovery_step=self.recovery_step[0] if self.phase is not BuilderPhase.SERVING else "",
            recovery_done=self.recovery_step[1] if self.phase is not BuilderPhase.SERVING else 0,
            recovery_total=self.recovery_step[2] if self.phase is not BuilderPhase.SERVING else 0,
            consumer_losses=[common_pb2.ConsumerLoss(**dataclasses.asdict(r)) for r in self.losses.records()],
        )

    def status(self) -> dict:
        p = self.progress()
        return {
            "kind": self.kind,
            "shard": self.shard,
            "state": p.state,
            "error": p.error,
            "commitlog_incarnation": p.commitlog_incarnation,
            "progress_offset": p.progress_offset,
            "durable_offset": p.durable_offset,
            "stuck": p.stuck,
        }

    def wait_open(self, timeout: float | None = None) -> bool:
        return self.opened.wait(timeout) and self.phase is BuilderPhase.SERVING


__all__ = ["BuilderPhase", "BuilderState"]
