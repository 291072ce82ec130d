# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""New consume queues' directories and first files, and many queues' journaled runs
written out, many at a time, without the GIL.

The consume-queue creator thread (ConsumeQueues._make_loop) makes a directory and a
sparse file for each queue the dispatcher meets first: at 10,000 new topics, 40,000
of each. The system calls wait on the disk; made one by one from Python, each queue
also held the GIL for its path handling (pathlib, a context manager, exception
handling), which the producer and the dispatcher then waited for (the cold pass's
largest GIL user). Here the whole batch is one loop of plain system calls; the caller
installs the files it got in its queues. What each item does is what
ConsumeQueue.make_files does one by one (the reference model: tests/kernels/model_files.py).

The write-out of the dispatch journal to many queues (ConsumeQueues._write_direct): at
50,000 topics every queue gets a few units per write-out, and each queue's write from
Python (its lock, the descriptor pool opening one file and closing another, the
pwrite) held the GIL for 20-30 us around 5-10 us of system calls. Here each queue's
run is an open, a pwrite and a close of its last file in one loop (the model:
model_write_queue_runs).
"""

import os

from libc.errno cimport EEXIST, EINTR, ENOENT, ENOSPC, errno
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, strchr
from posix.fcntl cimport O_CLOEXEC, O_CREAT, O_EXCL, O_RDWR, O_WRONLY
from posix.fcntl cimport open as c_open
from posix.stat cimport fstat, mkdir, struct_stat
from posix.unistd cimport close, ftruncate, pwrite


cdef int _make_dir(char *d) noexcept nogil:
    """mkdir ``d`` (and the directories above it when missing, as os.makedirs); 0 if
    it is there, else an errno."""
    cdef char *p
    if mkdir(d, 0o755) == 0 or errno == EEXIST:
        return 0
    if errno != ENOENT:
        return errno
    p = strchr(d + 1, 47)  # each '/' after the first character: the name cut there for a moment
    while p != NULL:
        p[0] = 0
        if mkdir(d, 0o755) != 0 and errno != EEXIST:
            p[0] = 47
            return errno
        p[0] = 47
        p = strchr(p + 1, 47)
    if mkdir(d, 0o755) == 0 or errno == EEXIST:
        return 0
    return errno


cdef int _make_file(const char *path, int64_t size) noexcept nogil:
    """Create ``path`` sparse with ``size`` zero bytes, or take the file there if it
    has no bytes or ``size`` (one made ahead); 0, else an errno (-1: a file of another
    size is there)."""
    cdef int fd = c_open(path, O_RDWR | O_CREAT | O_EXCL, 0o644)
    cdef int e
    cdef struct_stat st
    if fd < 0:
        if errno != EEXIST:
            return errno
        fd = c_open(path, O_RDWR)
        if fd < 0:
            return errno
        if fstat(fd, &st) != 0:
            e = errno
            close(fd)
            return e
        if st.st_size != 0 and st.st_size != size:
            close(fd)
            return -1
        if st.st_size == size:  # taken as it is: a truncate would stamp its mtime (the open checks it)
            close(fd)
            return 0
    if ftruncate(fd, size) != 0:
        e = errno
        close(fd)
        return e
    close(fd)
    return 0


def make_queue_files(list dirs, list paths, int64_t size, int32_t[::1] status not None):
    """For each i: make directory ``dirs[i]`` (its parent too, if missing) and the
    sparse file ``paths[i]`` of ``size`` bytes in it (taking one already there with no
    bytes or ``size`` bytes); ``status[i]``: 0, or the errno that stopped it (-1: a
    file of another size is in the way). Names are str or bytes (os.fsencode)."""
    cdef Py_ssize_t n = len(paths), i
    if len(dirs) != n or status.shape[0] < n:
        raise ValueError("column lengths differ")
    raw_dirs = [os.fsencode(name) for name in dirs]
    raw_paths = [os.fsencode(name) for name in paths]
    cdef char **dp = <char **>malloc(max(n, 1) * sizeof(char *))
    cdef const char **pp = <const char **>malloc(max(n, 1) * sizeof(char *))
    cdef char *copy
    cdef bytes d
    if dp == NULL or pp == NULL:
        free(dp)
        free(pp)
        raise MemoryError()
    for i in range(n):
        dp[i] = NULL
    try:
        for i in range(n):  # writable copies: _make_dir cuts a name at its slashes for a moment
            d = raw_dirs[i]
            copy = <char *>malloc(len(d) + 1)
            if copy == NULL:
                raise MemoryError()
            memcpy(copy, <const char *>d, len(d))
            copy[len(d)] = 0
            dp[i] = copy
            pp[i] = <const char *>raw_paths[i]
        with nogil:
            for i in range(n):
                status[i] = _make_dir(dp[i])
                if status[i] == 0:
                    status[i] = _make_file(pp[i], size)
    finally:
        for i in range(n):
            free(dp[i])
        free(dp)
        free(pp)


cdef int _write_run(const char *path, const unsigned char *data, int64_t n, int64_t at) noexcept nogil:
    """Open the file ``path`` (it must be there: nothing is created), write the ``n``
    bytes of ``data`` at byte ``at`` (all of them: a short write goes on where it
    stopped) and close it; 0, else an errno (ENOSPC for a write that wrote nothing)."""
    cdef int fd = c_open(path, O_WRONLY | O_CLOEXEC)
    cdef int e = 0
    cdef Py_ssize_t got
    if fd < 0:
        return errno
    while n > 0:
        got = pwrite(fd, data, n, at)
        if got < 0:
            if errno == EINTR:
                continue
            e = errno
            break
        if got == 0:
            e = ENOSPC
            break
        data += got
        n -= got
        at += got
    close(fd)
    return e


def write_queue_runs(list paths, int64_t[::1] at not None, const unsigned char[::1] data not None,
                     int64_t[::1] lo not None, int64_t[::1] hi not None, int32_t[::1] status not None):
    """For each i: write bytes ``data[lo[i]:hi[i]]`` at byte ``at[i]`` of the existing
    file ``paths[i]`` (open, pwrite, close); ``status[i]``: 0, or the errno that
    stopped it (bytes before the failure may be written). Names are str or bytes
    (os.fsencode)."""
    cdef Py_ssize_t n = len(paths), i
    if at.shape[0] < n or lo.shape[0] < n or hi.shape[0] < n or status.shape[0] < n:
        raise ValueError("column lengths differ")
    for i in range(n):
        if not 0 <= lo[i] <= hi[i] <= data.shape[0] or at[i] < 0:
            raise ValueError(f"run {i} lies outside the data or before the file's start")
    raw = [os.fsencode(name) for name in paths]
    cdef const char **pp = <const char **>malloc(max(n, 1) * sizeof(char *))
    if pp == NULL:
        raise MemoryError()
    cdef const unsigned char *base = &data[0] if data.shape[0] else NULL
    try:
        for i in range(n):
            pp[i] = <const char *>raw[i]
        with nogil:
            for i in range(n):
                status[i] = _write_run(pp[i], base + lo[i], hi[i] - lo[i], at[i])
    finally:
        free(pp)
