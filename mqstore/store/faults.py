"""Named fault points of the store, for tests that inject failures.

Store code calls ``hit("name")`` at each point where a failure matters (before an
fdatasync, while a file is allocated, between two steps of a multi-step write...).
Normally nothing is installed and ``hit`` is one global lookup. A test installs a
plan, in-process with ``install`` or in a child process through the environment
variable ``MQSTORE_FAULTS`` (read once, at import), and the chosen point then either
raises an OSError with the given errno or kills the process with SIGKILL.

Plan syntax, comma-separated rules::

    <point>=<action>[@<nth>][x<times>]

    action  kill | EIO | ENOSPC | EROFS | any errno name
    nth     the first hit that fires (default 1)
    times   how many hits fire from there (default 1; 0 = every one after)

    MQSTORE_FAULTS="commitlog.sync=EIO@3"         the third commitlog sync fails
    MQSTORE_FAULTS="cq.write=kill@10"             SIGKILL at the tenth consume-queue write
    MQSTORE_FAULTS="segment.create=ENOSPCx0"      every segment allocation fails

``hits()`` tells a test how often each point was reached (only while a plan is
installed), so a harness can enumerate the points a workload passes through.

The file layer's points (each is hit just before the real call, with the file or
directory as ``path``; what the store does when it fails is in README "Faults"):

    point              where                                          the real call
    commitlog.sync     mapped_file.Segment.sync of a commitlog        msync(MS_SYNC) of a range: group commit,
                       segment (flush.py via SegmentQueue.sync_range,  periodic flush, close, recovery's sync
                       segments.truncate_after)
    segment.create     mapped_file.create_sized_file, for a new       posix_fallocate / ftruncate, rename
                       commitlog segment (segments.create_next)
    index.sync         mapped_file.Segment.sync of an index file      msync of the whole file
    index.create       mapped_file.create_sized_file, new index file  posix_fallocate / ftruncate, rename
    index.reserve      mapped_file.Segment.reserve: blocks of an      posix_fallocate of the range
                       index file, before a put writes into them
    cq.sync            file_pool.PooledFile.sync                      fdatasync of a consume-queue file
    cq.create          file_pool.PooledFile.create                    create + size a consume-queue file
    syncfs             mapped_file.sync_file_system                   syncfs(2) (consume queues, >64 dirty)
    dir.fsync          mapped_file.fsync_dir                          fsync of a directory
    checkpoint.write   checkpoint_file.write_checkpoint               write + fdatasync of checkpoint.tmp
    config.write       json_files.write_config_json,                  write + fsync of <file>.tmp
                       layout.py (config/mqstore.json)

Other points, between the steps of a write (kill points for crash tests, each
described where it is hit): ``commitlog.written``, ``segment.rollover``,
``commitlog.flushed_before_checkpoint``, ``checkpoint.write.tmp``,
``config.write.tmp``, ``config.write.bak``, ``cq.write``, ``cq.write_runs`` (before each
compiled write of many queues' runs: an errno fails those runs as their pwrite would),
``index.put``,
``retention.delete``, and with consume queues in RocksDB ``rocks.write``,
``rocks.offsets_written``, ``rocks.units_flushed``; a replica's files (store/ha/)
``ha.file.write`` (an errno fails the epoch file's or brokerIdentity's write),
``ha.file.tmp``, ``ha.file.bak``, and the steps of a truncation ``ha.truncate.marker``,
``ha.truncate.epochs``, ``ha.truncate.checkpoint``, ``ha.truncate.commitlog``,
``ha.truncate.done`` (ha/truncation.py); and ``recovery.scan_segment`` (counts
segments read).

Power-loss test mode (``power_loss.py``): ``enable_power_loss(store, image)`` in the
writing process (or ``MQSTORE_POWER_STORE`` + ``MQSTORE_POWER_IMAGE`` in its
environment) makes every successful sync copy what it covered into ``image``;
after a kill -9 of the writer, ``power_cut(store, image)`` leaves the store as a
power cut would. The file layer reports syncs through ``synced``, ``dir_synced``
and ``fs_synced`` and new files through ``created``, which cost one global lookup
while the mode is off.
"""

from __future__ import annotations

import errno as errno_mod
import os
import signal
import threading
from dataclasses import dataclass

ENV = "MQSTORE_FAULTS"
POWER_STORE_ENV = "MQSTORE_POWER_STORE"
POWER_IMAGE_ENV = "MQSTORE_POWER_IMAGE"


@dataclass
class Rule:
    point: str
    action: str  # "kill" or an errno name
    nth: int = 1
    times: int = 1  # 0: every hit from nth on

    def fires(self, count: int) -> bool:
        return count >= self.nth and (self.times == 0 or count < self.nth + self.times)


_plan: dict[str, Rule] | None = None
_counts: dict[str, int] = {}
_lock = threading.Lock()


def parse(spec: str) -> dict[str, Rule]:
    """Rules from the plan syntax in the module docstring; ValueError names a bad rule."""
    rules: dict[str, Rule] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        point, sep, rest = part.partition("=")
        if not sep or not point or not rest:
            raise ValueError(f"fault rule {part!r}: expected <point>=<action>[@<nth>][x<times>]")
        action, times = rest, "1"
        if "x" in rest.split("@")[-1]:
            rest, _, times = rest.rpartition("x")
            action = rest
        action, _, nth = action.partition("@")
        if action != "kill" and not isinstance(getattr(errno_mod, action, None), int):
            raise ValueError(f"fault rule {part!r}: {action!r} is neither kill nor an errno name")
        try:
            rules[point] = Rule(point, action, int(nth or 1), int(times))
        except ValueError:
            raise ValueError(f"fault rule {part!r}: nth and times are integers") from None
    return rules


def install(spec: str | dict[str, Rule] | None) -> None:
    """Install a plan (None or "" removes it) and reset the hit counts."""
    global _plan
    with _lock:
        _plan = (parse(spec) if isinstance(spec, str) else spec) or None
        _counts.clear()


def hits() -> dict[str, int]:
    """How often each point was reached since the plan was installed."""
    with _lock:
        return dict(_counts)


def active() -> bool:
    """True while a plan or the power-loss mode is installed: code that does many
    file operations at once in compiled code (no fault point, no record of files
    created) does them one by one then."""
    return _plan is not None or _power is not None


def armed(point: str) -> bool:
    """True while the installed plan has a rule for ``point``: code that splits one
    operation in two only to give a test a point between the halves (a torn write)
    asks first, so without a plan it runs unsplit."""
    plan = _plan
    return plan is not None and point in plan


def hit(point: str, path: object = None) -> None:
    """A fault point: does nothing unless an installed rule says this hit fails."""
    if _plan is None:
        return
    with _lock:
        count = _counts[point] = _counts.get(point, 0) + 1
        rule = _plan.get(point)
    if rule is None or not rule.fires(count):
        return
    if rule.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    code = getattr(errno_mod, rule.action)
    raise OSError(code, f"injected {rule.action} at {point}", *(() if path is None else (str(path),)))


# ---------------------------------------------------------------------- power-loss mode

_power = None  # a power_loss.PowerImage while the mode is on


def enable_power_loss(store_dir: str | os.PathLike, image_dir: str | os.PathLike) -> None:
    """From now on every sync of a file under ``store_dir`` copies what it covered
    into ``image_dir`` (see power_loss.py). The image starts as a copy of the store."""
    global _power
    from mqstore.store.power_loss import PowerImage

    _power = PowerImage(store_dir, image_dir)


def disable_power_loss() -> None:
    global _power
    _power = None


def power_cut(store_dir: str | os.PathLike, image_dir: str | os.PathLike) -> None:
    """Leave ``store_dir`` as a power cut would have: only what syncs covered."""
    from mqstore.store.power_loss import power_cut as cut

    cut(store_dir, image_dir)


def created(what: object) -> None:
    """A file (path or open descriptor) was just created (power-loss mode: its inode
    number may be one a deleted file had)."""
    if _power is not None:
        _power.created(what)


def synced(path: object, start: int = 0, end: int | None = None) -> None:
    """A sync of bytes [start, end) of ``path`` (all of it by default) returned."""
    if _power is not None:
        _power.file_synced(path, start, end)


def dir_synced(path: object) -> None:
    """An fsync of directory ``path`` returned."""
    if _power is not None:
        _power.dir_synced(path)


def fs_synced(path: object) -> None:
    """A syncfs of the file system holding ``path`` returned."""
    if _power is not None:
        _power.fs_synced(path)


if os.environ.get(ENV):
    install(os.environ[ENV])
if os.environ.get(POWER_STORE_ENV) and os.environ.get(POWER_IMAGE_ENV):
    enable_power_loss(os.environ[POWER_STORE_ENV], os.environ[POWER_IMAGE_ENV])


__all__ = [
    "ENV",
    "POWER_IMAGE_ENV",
    "POWER_STORE_ENV",
    "Rule",
    "armed",
    "created",
    "dir_synced",
    "disable_power_loss",
    "enable_power_loss",
    "fs_synced",
    "hit",
    "hits",
    "install",
    "parse",
    "power_cut",
    "synced",
]
