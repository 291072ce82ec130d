"""Reference models of mqstore.kernels._files.

make_queue_files: what ConsumeQueue.make_files does for one queue (a directory, its
parent when missing, and a sparse file of the queue file size, or one already there
with no bytes or that size), item by item with os calls; the status is 0 or the errno
(-1: a file of another size).

write_queue_runs: what ConsumeQueue._write does for a run inside an existing file (an
open, one pwrite, a close), item by item; the status is 0 or the errno."""

from __future__ import annotations

import errno
import os


def model_make_queue_files(dirs: list[str], paths: list[str], size: int) -> list[int]:
    out = []
    for d, p in zip(dirs, paths, strict=True):
        try:
            try:
                os.mkdir(d)
            except FileNotFoundError:
                os.makedirs(d, exist_ok=True)
            except FileExistsError:
                pass
            try:
                fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                fd = os.open(p, os.O_RDWR)
                if os.fstat(fd).st_size not in (0, size):
                    os.close(fd)
                    out.append(-1)
                    continue
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
        except OSError as e:
            out.append(e.errno or errno.EIO)
            continue
        out.append(0)
    return out


def model_write_queue_runs(paths: list[str], at: list[int], data: bytes, lo: list[int], hi: list[int]) -> list[int]:
    out = []
    for p, a, start, stop in zip(paths, at, lo, hi, strict=True):
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as e:
            out.append(e.errno or errno.EIO)
            continue
        try:
            os.pwrite(fd, data[start:stop], a)
        except OSError as e:
            out.append(e.errno or errno.EIO)
            continue
        finally:
            os.close(fd)
        out.append(0)
    return out
