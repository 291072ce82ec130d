"""Reference model of mqstore.kernels._files.make_queue_files: what
ConsumeQueue.make_files does for one queue (a directory, its parent when missing, and a
sparse file of the queue file size, or one already there with no bytes or that size),
item by item with os calls; the status is 0 or the errno (-1: a file of another size)."""

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
