"""Power-loss test mode: a shadow image of a store that holds only what syncs covered.

A kill -9 loses nothing the process wrote (the page cache survives it), so crash
tests alone never show what a power cut would take. In this mode the file layer
reports every successful sync to a ``PowerImage`` (through ``faults.synced``,
``faults.dir_synced``, ``faults.fs_synced``), which copies exactly what the sync made
durable into an image directory outside the store:

    file data sync (msync of a range, fdatasync, fsync)   those bytes of that file
    directory fsync                                       the directory's entries as they are
    syncfs                                                every file and directory

After the writer is killed, ``power_cut`` replaces the store directory with the
image: the files, names and bytes a real power cut would have left if the disk kept
no more than it was told to (the strictest reading of POSIX; real file systems
usually keep more). The model:

* File contents are kept per file, not per name (``data/<id>``, the id made of the
  inode number, the writer's pid and a count), so data synced under one name
  follows a rename made durable later (the ``.tmp`` + rename + directory fsync
  idiom). The file layer reports every file it creates (``faults.created``): a new
  file gets a new id even when the kernel reuses the inode number of a deleted one
  whose old name is still durable (checkpoints replace themselves several times a
  second, so this is common). A file whose name becomes durable before any of its
  data gets its size as it was then, all zeros (a journaled file system commits the
  size with the entry).
* A name exists after the cut only if a fsync of its directory (or a syncfs)
  recorded it: creations, renames and deletions become durable only then. A
  directory nobody fsynced after its creation comes back empty, or not at all.
* The image starts as a copy of the store when the mode is first enabled (what was
  there before the writer started counts as durable).
* Limits: a file created outside the file layer's functions (tests, tools) is not
  reported, so a reused inode number could mix two files' data; a sync is copied
  after it returned, so bytes changed between the two would be copied as changed
  (the store never rewrites synced bytes, except for zeroing cut tails).

Layout of the image directory: ``ROOT`` (the store path), ``data/<id>``, and
``dirs/<quoted relative path>.json`` (the entries: ``{"name": ["f", id] | ["d"]}``).
Every update is a small write or an atomic rename, so a kill -9 of the writer in
the middle of one leaves the image as a power cut in the middle of that sync would.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path
from urllib.parse import quote

_CHUNK = 1 << 20


def _dir_record(image: Path, rel: str) -> Path:
    return image / "dirs" / (quote(rel, safe="") + ".json")


class PowerImage:
    """The shadow image of one store (see the module docstring). Thread-safe."""

    def __init__(self, store_dir: str | Path, image_dir: str | Path) -> None:
        self.root = os.path.realpath(store_dir)
        self.image = Path(image_dir)
        self._lock = threading.Lock()
        self._ids: dict[int, str] = {}  # inode number -> id of the file that has it now
        self._count = 0
        (self.image / "data").mkdir(parents=True, exist_ok=True)
        (self.image / "dirs").mkdir(exist_ok=True)
        marker = self.image / "ROOT"
        if not marker.exists():
            if os.path.isdir(self.root):
                self._sync_tree()
            else:
                self._write_entries(".", {})
            marker.write_text(self.root)

    # ------------------------------------------------------------------ hooks

    def _rel(self, path: object) -> str | None:
        p = os.path.realpath(str(path))
        if p == self.root:
            return "."
        if p.startswith(self.root + os.sep):
            return os.path.relpath(p, self.root)
        return None  # not in the store (an ack log, another store): not modelled

    def created(self, what: object) -> None:
        """A file (path or open descriptor) was just created: whatever its inode
        number held before belongs to another file."""
        try:
            st = os.fstat(what) if isinstance(what, int) else os.stat(str(what))
        except OSError:
            return
        with self._lock:
            self._ids[st.st_ino] = self._new_id(st.st_ino)

    def file_synced(self, path: object, start: int = 0, end: int | None = None) -> None:
        """Bytes [start, end) of ``path`` (all of it by default) are durable now."""
        if self._rel(path) is None:
            return
        with self._lock:
            self._copy_data(str(path), start, end)

    def dir_synced(self, path: object) -> None:
        """The entries of directory ``path`` are durable now."""
        rel = self._rel(path)
        if rel is None:
            return
        with self._lock:
            self._record_dir(str(path), rel)

    def fs_synced(self, path: object) -> None:
        """syncfs: everything in the store is durable now."""
        with self._lock:
            self._sync_tree()

    # ------------------------------------------------------------------ work

    def _new_id(self, ino: int) -> str:
        self._count += 1
        return f"{ino}.{os.getpid()}.{self._count}"

    def _id(self, path: str, ino: int) -> str:
        """The id of the file at ``path`` with inode ``ino``: known, or the one a
        durable entry of that name already has (a file from before this process), or new."""
        fid = self._ids.get(ino)
        if fid is None:
            rel = self._rel(path)
            entry = None
            if rel is not None and rel != ".":
                entry = (_entries(self.image, os.path.dirname(rel) or ".") or {}).get(os.path.basename(rel))
            if entry and entry[0] == "f" and str(entry[1]).split(".")[0] == str(ino):
                fid = str(entry[1])
            else:
                fid = self._new_id(ino)
            self._ids[ino] = fid
        return fid

    def _copy_data(self, path: str, start: int, end: int | None) -> None:
        try:
            src = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            st = os.fstat(src)
            size = st.st_size
            end = size if end is None else min(end, size)
            dst = os.open(self.image / "data" / self._id(path, st.st_ino), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(dst).st_size != size:
                    os.ftruncate(dst, size)
                pos = max(0, start)
                while pos < end:
                    chunk = os.pread(src, min(_CHUNK, end - pos), pos)
                    if not chunk:
                        break
                    os.pwrite(dst, chunk, pos)
                    pos += len(chunk)
            finally:
                os.close(dst)
        finally:
            os.close(src)

    def _record_dir(self, path: str, rel: str) -> dict[str, list]:
        entries: dict[str, list] = {}
        try:
            names = os.listdir(path)
        except FileNotFoundError:
            return entries
        for name in names:
            try:
                st = os.lstat(os.path.join(path, name))
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                entries[name] = ["d"]
            elif stat.S_ISREG(st.st_mode):
                fid = self._id(os.path.join(path, name), st.st_ino)
                entries[name] = ["f", fid]
                data = self.image / "data" / fid
                if not data.exists():  # the name is durable before any of its data: size only
                    with open(data, "wb") as f:
                        f.truncate(st.st_size)
        self._write_entries(rel, entries)
        return entries

    def _write_entries(self, rel: str, entries: dict[str, list]) -> None:
        target = _dir_record(self.image, rel)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps({"path": rel, "entries": entries}))
        os.replace(tmp, target)

    def _sync_tree(self) -> None:
        for dirpath, _dirs, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for name in files:
                self._copy_data(os.path.join(dirpath, name), 0, None)
            self._record_dir(dirpath, rel)


def _entries(image: Path, rel: str) -> dict[str, list] | None:
    try:
        return json.loads(_dir_record(image, rel).read_text())["entries"]
    except FileNotFoundError:
        return None


def power_cut(store_dir: str | Path, image_dir: str | Path) -> None:
    """Replace ``store_dir`` with what its image says survived (call it after the
    writer was killed; nothing may have the store open)."""
    store, image = Path(store_dir), Path(image_dir)
    if _entries(image, ".") is None:
        raise FileNotFoundError(f"{image} holds no power-loss image")
    staging = store.with_name(store.name + ".power-cut")
    shutil.rmtree(staging, ignore_errors=True)

    def build(rel: str, into: Path) -> None:
        into.mkdir()
        for name, entry in (_entries(image, rel) or {}).items():
            child = name if rel == "." else f"{rel}/{name}"
            if entry[0] == "d":
                build(child, into / name)
            else:
                data = image / "data" / str(entry[1])
                if data.exists():
                    shutil.copyfile(data, into / name)
                else:
                    (into / name).touch()

    build(".", staging)
    shutil.rmtree(store, ignore_errors=True)
    os.rename(staging, store)


__all__ = ["PowerImage", "power_cut"]
