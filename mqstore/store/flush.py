"""Making appended bytes durable: one background thread per commitlog.

Watermarks (one vocabulary across the store; always flushed <= wrote):
    wrote    end of the bytes copied into the mapped segments (under the put lock)
    flushed  end of the bytes an fdatasync has covered

``FlushService`` runs one of two loops (RocketMQ GroupCommitService / FlushRealTimeService):
  SYNC   group commit: appenders call ``wait_flushed(end)``; the thread wakes, fsyncs
         up to the latest ``wrote`` (covering every appender waiting so far) and wakes
         them all. Concurrent appenders share one fdatasync.
  ASYNC  every ``flush_interval_ms`` fsync if at least ``flush_least_pages`` pages are
         dirty, or everything after ``flush_thorough_interval_ms``.
After a flush the checkpoint's physicMsgTimestamp is written at most every
``checkpoint_interval_ms``. A failed fdatasync is never retried and trusted (after
EIO the kernel may have marked the lost pages clean, so a second fsync would
"succeed"): the service records the error, tells the CommitLog (``on_error``: the
store stops acknowledging writes), wakes every waiter whose bytes are not durable
with that error, and ends; only a restart flushes again. In async mode the
periodic flush failing does the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from mqstore.store import faults
from mqstore.store.config import PAGE_BYTES, FlushMode, StoreConfig

log = structlog.get_logger(__name__)


class FlushService:
    """The flusher thread. Who calls what: appenders call ``wait_flushed``; the
    CommitLog calls ``start`` and ``stop``; only the thread calls ``sync``."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        wrote: Callable[[], tuple[int, int]],
        sync: Callable[[int, int], None],
        on_flushed: Callable[[int, int], None],
        flushed: int,
        monotonic: Callable[[], float],
        on_error: Callable[[BaseException], None] | None = None,
        on_sync_seconds: Callable[[float], None] | None = None,
    ) -> None:
        self._config = config
        self._on_sync_seconds = on_sync_seconds  # how long each sync took (metrics), failed ones too
        self._on_error = on_error  # called once, in the flusher thread, before waiters wake
        self._wrote = wrote  # -> (wrote offset, store timestamp of the last record)
        self._sync = sync  # (from, to): fdatasync the segments holding those bytes
        self._on_flushed = on_flushed  # (offset, store timestamp) after each flush
        self._monotonic = monotonic
        self.flushed_offset = flushed
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._wanted = flushed
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="mqstore-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_flushed(self, end: int, timeout_s: float) -> bool:
        """Block until ``flushed >= end`` (True) or the timeout passes (False).
        Raises the flush error if the disk failed before ``end`` was durable."""
        with self._cond:
            if end > self._wanted:
                self._wanted = end
                self._cond.notify_all()
            ok = self._cond.wait_for(lambda: self.flushed_offset >= end or self.error is not None, timeout_s)
            if self.flushed_offset >= end:
                return True
            if self.error is not None:
                raise self.error
            return ok

    def stop(self) -> None:
        """Flush everything written so far, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        if self.error is None:
            self._flush_now()

    def _flush_now(self) -> None:
        target, ts = self._wrote()
        if target <= self.flushed_offset:
            self._on_flushed(self.flushed_offset, ts)
            return
        t0 = self._monotonic()
        try:
            self._sync(self.flushed_offset, target)
        except Exception as e:  # noqa: BLE001  # OSError from the disk; anything else is treated the same
            self._observe(t0)
            log.error("flush_failed", error=str(e), flushed=self.flushed_offset, target=target)
            if self._on_error is not None:
                self._on_error(e)
            with self._cond:
                self.error = e
                self._cond.notify_all()
            return
        self._observe(t0)
        with self._cond:
            self.flushed_offset = target
            self._cond.notify_all()
        faults.hit("commitlog.flushed_before_checkpoint")  # durable and acknowledged; the checkpoint lags
        self._on_flushed(target, ts)

    def _observe(self, t0: float) -> None:
        if self._on_sync_seconds is not None:
            self._on_sync_seconds(self._monotonic() - t0)

    def _run(self) -> None:
        if self._config.flush_mode is FlushMode.SYNC:
            self._run_group_commit()
        else:
            self._run_periodic()

    def _run_group_commit(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or self._wanted > self.flushed_offset, 0.1)
                if self._stopping or self.error is not None:
                    return
            self._flush_now()

    def _run_periodic(self) -> None:
        cfg = self._config
        interval = cfg.flush_interval_ms / 1000
        least = cfg.flush_least_pages * PAGE_BYTES
        thorough = cfg.flush_thorough_interval_ms / 1000
        last_full = self._monotonic()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or self._wanted > self.flushed_offset, interval)
                if self._stopping or self.error is not None:
                    return
                asked = self._wanted > self.flushed_offset
            now = self._monotonic()
            dirty = self._wrote()[0] - self.flushed_offset
            if asked or (dirty > 0 and (dirty >= least or now - last_full >= thorough)):
                self._flush_now()
                last_full = now


__all__ = ["FlushService"]
