"""Whether the commitlog accepts appends, and why not: the unwritable causes and when
each ends (README "Faults").

    cause          set by                                          ends
    flush_failed   a failed commitlog sync (fdatasync, msync; an   never in this run: a restart
                   ENOSPC from a sync too: data is lost, not only
                   space missing)
    read_only      EROFS from a sync or a write                    never in this run
    io_error       any other failed write                          never in this run
    disk_full      ENOSPC or EDQUOT on a segment allocation or     once space is back: appends retry
                   a write                                         at most once a second
    disk_full      the disk is used to ``warning_ratio`` or more   once it is below ``resume_ratio``
                   (RocketMQ diskSpaceWarningLevelRatio, 0.90)     (RocketMQ: diskSpaceCleanForciblyRatio,
                   by anything, the store's files or not           0.85): the gap keeps it from flapping

The used ratio is df's Use% of the segments' file system (RocketMQ
getDiskPartitionSpaceUsedPercent), looked at once per DISK_PROBE_S by the appends and
by ``cause``. Refusing early is what keeps acknowledged messages: the
store never makes room by deleting segments consumers have not read (retention.py:
that is the opt-in clean_forcibly_enable).

The three sticky causes are final because a failed fsync may have dropped pages the
kernel will never write again (retrying would report success over lost data); a full
disk loses nothing, so it only refuses appends until an allocation succeeds again.
``Writability.cause`` also looks at the free space (once a second) so that a store
reports itself writable as soon as enough is freed, before the next append tries.
Reads go on in every state. The changes are logged: "store_not_writable" (once per
cause) and "store_writable_again" (disk_full only). ``refusals()`` counts the appends
refused and says since when and why (``mqstore status``).

Who calls what: the CommitLog calls ``check``, ``write_failed`` and ``wrote`` under
its put lock, ``flush_failed`` from the flusher's thread; ``cause`` and ``error`` from
anywhere (``cause`` takes the put lock to clear disk_full).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from mqstore.errors import StoreNotWritableError

log = structlog.get_logger(__name__)

DISK_RETRY_S = 1.0  # a full disk: appends try to allocate again at most this often
DISK_PROBE_S = 1.0  # the disk's used ratio is looked at (statvfs) at most this often


def disk_used_ratio(path: str | os.PathLike) -> float:
    """used / (used + usable) of the file system holding ``path`` (df's Use%): RocketMQ's
    UtilAll.getDiskPartitionSpaceUsedPercent, without its rounding up to a whole percent."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    return used / entire if entire > 0 else 1.0


@dataclass(frozen=True)
class WriteRefusals:
    """Appends refused since the process started (``count``); while the store refuses
    them now, since when (``since_ms``, wall clock), ``cause`` and ``reason`` (the
    message appends get); else since_ms 0 and cause/reason ""."""

    count: int
    since_ms: int
    cause: str
    reason: str


def cause_of(err: BaseException, default: str) -> str:
    """The StoreNotWritableError cause for an OSError from the disk."""
    code = getattr(err, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "disk_full"
    if code == errno.EROFS:
        return "read_only"
    return default


def errno_name(err: BaseException) -> str | None:
    """ "ENOSPC" and the like, for log events; None for an error without errno."""
    code = getattr(err, "errno", None)
    return None if code is None else errno.errorcode.get(code, str(code))


class Writability:
    """The writability state of one open commitlog (see the module docstring).

    ``store_dir`` names the store in log events; ``segment_dir`` is where free space
    is measured; ``lock`` is the commitlog's put lock; ``on_sticky`` is told a sticky
    cause once, when it is set (the commitlog then leaves the abort marker on close).
    Appends are refused from ``warning_ratio`` of the disk used until it is below
    ``resume_ratio``; ``disk_usage`` measures it (default: ``disk_used_ratio`` of
    ``segment_dir``)."""

    def __init__(
        self,
        store_dir: Path,
        segment_dir: Path,
        lock: threading.Lock,
        on_sticky: Callable[[str], None],
        *,
        warning_ratio: float = 0.90,
        resume_ratio: float = 0.85,
        disk_usage: Callable[[], float] | None = None,
    ) -> None:
        self._store = str(store_dir)
        self._segment_dir = segment_dir
        self._lock = lock
        self._on_sticky = on_sticky
        self._warning_ratio = warning_ratio
        self._resume_ratio = resume_ratio
        self._disk_usage = disk_usage or (lambda: disk_used_ratio(segment_dir))
        self._pressure: StoreNotWritableError | None = None  # the disk is over the warning ratio
        self._pressure_lock = threading.Lock()  # the probe runs from appends and from ``cause``
        self._pressure_probe_at = 0.0
        self._refused = 0
        self._refusing_since_ms = 0  # wall clock of the first refusal of the current state
        self._not_writable: StoreNotWritableError | None = None  # sticky: a sync or write failed
        self._disk_full: StoreNotWritableError | None = None  # clears once an allocation succeeds
        self._retry_at = 0.0  # appends retry the allocation from then on
        self._probe_at = 0.0  # ``cause`` looks at the free space from then on
        self._need = 0  # bytes the failed allocation or write wanted

    def check(self) -> None:
        """Raise at once (under the put lock) while the store refuses writes; with a
        full disk let one append through per DISK_RETRY_S, as the retry."""
        nw = self._not_writable
        if nw is not None:
            raise self._refuse(StoreNotWritableError(str(nw), cause=nw.cause))
        pressure = self._probe_pressure()
        if pressure is not None:
            raise self._refuse(StoreNotWritableError(str(pressure), cause=pressure.cause))
        full = self._disk_full
        if full is not None:
            now = time.monotonic()
            if now < self._retry_at:
                raise self._refuse(
                    StoreNotWritableError(
                        f"{full}; writes resume once space is freed (tried again at most once a second)",
                        cause="disk_full",
                    )
                )
            self._retry_at = now + DISK_RETRY_S  # this append is the retry

    def _refuse(self, err: StoreNotWritableError) -> StoreNotWritableError:
        self._refused += 1
        if not self._refusing_since_ms:
            self._refusing_since_ms = time.time_ns() // 1_000_000
        return err

    def _probe_pressure(self) -> StoreNotWritableError | None:
        """The disk-usage refusal now, looking at the disk at most once per DISK_PROBE_S:
        set from ``warning_ratio``, cleared below ``resume_ratio``. A probe that fails
        keeps the state it had."""
        now = time.monotonic()
        if now < self._pressure_probe_at:
            return self._pressure
        with self._pressure_lock:
            if now < self._pressure_probe_at:
                return self._pressure
            self._pressure_probe_at = now + DISK_PROBE_S
            try:
                used = float(self._disk_usage())
            except OSError as e:
                log.warning("disk_usage_unknown", store=self._store, error=str(e))
                return self._pressure
            was = self._pressure
            if used >= self._warning_ratio or (was is not None and used >= self._resume_ratio):
                self._pressure = StoreNotWritableError(
                    f"disk {used:.1%} used, over the warning ratio {self._warning_ratio:.0%}"
                    f" (diskSpaceWarningLevelRatio): writes are refused until it is below {self._resume_ratio:.0%};"
                    " nothing of this batch was written",
                    cause="disk_full",
                )
                if was is None:
                    log.error(
                        "store_not_writable",
                        store=self._store,
                        cause="disk_full",
                        disk_usage=round(used, 4),
                        warning_ratio=self._warning_ratio,
                        resume_ratio=self._resume_ratio,
                        action="appends refused until the disk is below resume_ratio; nothing is deleted to make room",
                    )
            elif was is not None:
                self._pressure = None
                self._refusing_since_ms = 0
                log.warning("store_writable_again", store=self._store, cause="disk_full", disk_usage=round(used, 4))
            return self._pressure

    def _set_unwritable(self, cause: str, message: str, err: BaseException | None, *, wrote: int, flushed: int) -> None:
        """Refuse every later append with ``cause`` until a restart (the first sticky
        cause wins); ``wrote`` and ``flushed`` go into the log event."""
        if self._not_writable is not None:
            return
        self._not_writable = StoreNotWritableError(message, cause=cause)
        self._on_sticky(cause)
        log.error(
            "store_not_writable",
            store=self._store,
            cause=cause,
            errno=errno_name(err) if err else None,
            error=message,
            wrote=wrote,
            flushed=flushed,
        )

    def flush_failed(self, err: BaseException, *, wrote: int, flushed: int) -> None:
        """The flusher's fdatasync/msync failed (called in its thread, once)."""
        cause = cause_of(err, "flush_failed")
        if cause == "disk_full":
            cause = "flush_failed"  # ENOSPC from a flush: data is lost, not merely space missing
        self._set_unwritable(
            cause,
            f"commitlog flush failed ({err}); restart the store to write again",
            err,
            wrote=wrote,
            flushed=flushed,
        )

    def write_failed(self, err: BaseException, *, need: int, wrote: int, flushed: int) -> StoreNotWritableError:
        """An append's segment allocation or write failed (under the put lock, after
        the attempt's bytes were zeroed); returns the error to raise. ``need``: the
        bytes free space must reach before disk_full may clear; ``wrote`` and
        ``flushed`` go into the log event."""
        cause = err.cause if isinstance(err, StoreNotWritableError) else cause_of(err, "io_error")
        if cause == "disk_full":
            now = time.monotonic()
            if self._disk_full is None:
                log.error(
                    "store_not_writable",
                    store=self._store,
                    cause="disk_full",
                    errno=errno_name(err.__cause__ or err),
                    error=str(err),
                    wrote=wrote,
                )
            self._disk_full = StoreNotWritableError(f"disk full: {err}", cause="disk_full")
            self._retry_at = self._probe_at = now + DISK_RETRY_S
            self._need = need
            return StoreNotWritableError(f"disk full, batch not written: {err}", cause="disk_full")
        self._set_unwritable(
            cause,
            f"commitlog write failed ({err}); restart the store to write again",
            err,
            wrote=wrote,
            flushed=flushed,
        )
        return StoreNotWritableError(f"write failed, batch not written: {err}", cause=cause)

    def wrote(self) -> None:
        """An append's write succeeded (under the put lock): a full disk has room again."""
        if self._disk_full is not None:
            self._disk_back()

    def _disk_back(self) -> None:
        self._disk_full = None
        if self._pressure is None:
            self._refusing_since_ms = 0
        log.warning("store_writable_again", store=self._store, cause="disk_full")

    def refusals(self) -> WriteRefusals:
        """How many appends were refused, and since when and why the store refuses them now."""
        err = self.error
        if err is None:
            return WriteRefusals(self._refused, 0, "", "")
        since = self._refusing_since_ms or time.time_ns() // 1_000_000  # refusing, no append asked yet
        self._refusing_since_ms = since
        return WriteRefusals(self._refused, since, err.cause, str(err))

    @property
    def cause(self) -> str | None:
        """None when writable; else "flush_failed", "read_only" or "io_error" (until a
        restart) or "disk_full" (until space is back: once a second this checks the
        free space, and the next append retries the allocation)."""
        nw = self._not_writable
        if nw is not None:
            return nw.cause
        if self._probe_pressure() is not None:
            return "disk_full"
        if self._disk_full is None:
            return None
        if time.monotonic() >= self._probe_at:
            try:
                st = os.statvfs(self._segment_dir)
                free = st.f_bavail * st.f_frsize
            except OSError:
                free = 0
            if free >= self._need:
                with self._lock:
                    if self._disk_full is not None:
                        self._retry_at = 0.0
                        self._disk_back()
                return None
            self._probe_at = time.monotonic() + DISK_RETRY_S
        return "disk_full"

    @property
    def error(self) -> StoreNotWritableError | None:
        """The error appends get now (message and cause), or None."""
        if self._not_writable is not None:
            return self._not_writable
        if self.cause != "disk_full":
            return None
        return self._pressure or self._disk_full


__all__ = [
    "DISK_PROBE_S",
    "DISK_RETRY_S",
    "WriteRefusals",
    "Writability",
    "cause_of",
    "disk_used_ratio",
    "errno_name",
]
