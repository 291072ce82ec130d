"""The store's ``lock`` and ``abort`` files (RocketMQ DefaultMessageStore).

``lock``: an exclusive advisory lock held while a process has the store open, so a
second process gets StoreLockedError instead of a corrupted commitlog.
``abort``: a marker that exists while the store runs. Finding it at open means
the last run did not shut down cleanly, and recovery must be the abnormal kind. It
holds the boot it was made in (RocketMQ's is empty): a crash in the same boot was
a process's death, not the machine's (``marker_boot``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from mqstore.errors import StoreLockedError
from mqstore.store import faults
from mqstore.store.mapped_file import fsync_dir

LOCK_FILE = "lock"
ABORT_FILE = "abort"
_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


class StoreLock:
    """Holds ``<store>/lock`` for the lifetime of one open store (``name``: another
    lock file of the directory, e.g. a builder's own, see ``builder_files``)."""

    def __init__(self, store_dir: Path, name: str = LOCK_FILE) -> None:
        self._path = store_dir / name
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        faults.created(self._fd)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise StoreLockedError(
                f"{store_dir} is already open in another process (lock file {self._path} is held)"
            ) from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, b"lock")

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def lock_holder(store_dir: Path, name: str = LOCK_FILE) -> int | None:
    """The pid of a process that holds ``<store>/lock`` (``name``: another lock file of
    the directory; 0 if it is held from another pid namespace), or None if nobody
    does, or it cannot be told.

    Reads Linux's ``/proc/locks`` instead of trying the lock: a tool that only reads
    (verify) must never take it, not even for an instant, or a store starting at
    that moment would fail to open."""
    try:
        st = os.stat(store_dir / name)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        fields = line.replace("->", " ").split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                return int(fields[4])
        except ValueError:
            continue
    return None


def describe_holder(store_dir: Path) -> str | None:
    """Who holds the store's lock or a builder's (``builder_files``), for a message:
    ``"pid 4242 (ray::CommitLogActor)"``, ``"a process of another pid namespace"``;
    None if nobody holds any. Read-only, as ``lock_holder``."""
    for name in (LOCK_FILE, *(builder_files(kind)[0] for kind in BUILDER_KINDS)):
        pid = lock_holder(store_dir, name)
        if pid is None:
            continue
        if pid == 0:
            return f"a process of another pid namespace (lock file {store_dir / name})"
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        return f"pid {pid}" + (f" ({cmd[:120]})" if cmd else "") + f", lock file {store_dir / name}"
    return None


def last_exit_was_clean(store_dir: Path, name: str = ABORT_FILE) -> bool:
    """Read the abort marker once, at open: absent means a clean shutdown."""
    return not (store_dir / name).exists()


def boot_id() -> str | None:
    """This boot of the machine (Linux: changes at every boot), None where unknown."""
    try:
        with open(_BOOT_ID_FILE) as f:
            return f.read().strip() or None
    except OSError:
        return None


def create_abort_marker(store_dir: Path, name: str = ABORT_FILE) -> None:
    """The marker, holding the boot it was made in (``marker_boot``; RocketMQ's is
    empty and only its existence counts, which stays so)."""
    (store_dir / name).write_text(boot_id() or "")
    faults.created(store_dir / name)
    fsync_dir(store_dir)


def marker_boot(store_dir: Path, name: str = ABORT_FILE) -> str | None:
    """The boot a marker left by a crash was made in (read at open, before the open
    makes its own), None if unknown (empty, RocketMQ's, unreadable, or lost with
    its unsynced content in a power cut). The same boot as now means the machine
    did not restart since: the process died, the page cache kept every byte it
    wrote (ConsumeQueues.recover relies on it)."""
    try:
        return (store_dir / name).read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def remove_abort_marker(store_dir: Path, name: str = ABORT_FILE) -> None:
    (store_dir / name).unlink(missing_ok=True)
    fsync_dir(store_dir)


def builder_files(kind: str) -> tuple[str, str]:
    """(lock, abort marker) of a derived-file builder running in a process of its own
    (``kind``: "consumequeue" or "index"): it owns its files under its own lock, and
    its marker tells whether it stopped cleanly, apart from the commitlog's. Files at
    the store's root that RocketMQ ignores."""
    return f"{LOCK_FILE}.{kind}", f"{ABORT_FILE}.{kind}"


BUILDER_KINDS = ("consumequeue", "index")


__all__ = [
    "ABORT_FILE",
    "BUILDER_KINDS",
    "boot_id",
    "builder_files",
    "LOCK_FILE",
    "StoreLock",
    "create_abort_marker",
    "describe_holder",
    "last_exit_was_clean",
    "lock_holder",
    "marker_boot",
    "remove_abort_marker",
]
