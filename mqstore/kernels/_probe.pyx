# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The machine-crash probe of many queues' tails, without the GIL.

After a machine crash the open probes every queue the summary of queue ends lists
where the re-dispatch stops writing it (mqstore/store/queue_tails.py says why a few
syscalls per queue are enough). At 400,000 queues the same syscalls made from
Python took about 40 us a queue, most of it Python around them, and held the GIL
the open's other threads wanted. Here a batch of queues is one loop of plain system
calls (open, lseek SEEK_END, pread of the rest of the page, lseek SEEK_DATA,
close); the reference model is queue_tails.probe (tests/kernels/model_probe.py).
"""

from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.errno cimport ENAMETOOLONG, ENOENT, ENXIO, errno
from libc.stdint cimport int32_t, int64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp
from posix.fcntl cimport AT_FDCWD, O_CLOEXEC, O_DIRECTORY, O_RDONLY, openat
from posix.fcntl cimport open as c_open
from posix.unistd cimport SEEK_END, close, lseek, pread

cdef extern from "<unistd.h>" nogil:
    enum: SEEK_DATA

cdef enum:
    PAGE = 4096
    PATH_BYTES = 4096

# What a queue's probe found (queue_tails.CLEAN, DIRTY, UNFIT); a negative status is
# minus the errno of a call that failed where the model raises.
CLEAN, DIRTY, UNFIT = 0, 1, 2


cdef int32_t _probe(int at, const char *path, int64_t base, int64_t pos, int64_t listed_end, int64_t file_bytes,
                    unsigned char *page) noexcept nogil:
    """queue_tails.probe of the file ``path`` (the one holding byte ``base + pos``;
    relative to the directory ``at``)."""
    cdef int fd = openat(at, path, O_RDONLY | O_CLOEXEC)
    cdef int64_t size, page_end, got
    cdef int32_t out = 0
    if fd < 0:
        if errno == ENOENT:
            return 0 if base >= listed_end else 2
        return -errno
    size = lseek(fd, 0, SEEK_END)
    if size < 0:
        out = -errno
    elif size != file_bytes:
        out = 0 if size == 0 and base >= listed_end else 2
    else:
        page_end = min((pos + PAGE - 1) // PAGE * PAGE, file_bytes)
        if pos < page_end:
            got = pread(fd, page, page_end - pos, pos)
            if got < 0:
                out = -errno
            elif got > 0 and (page[0] != 0 or memcmp(page, page + 1, got - 1) != 0):  # any byte not 0
                out = 1
        if out == 0 and page_end < file_bytes:
            if lseek(fd, page_end, SEEK_DATA) >= 0:
                out = 1
            elif errno != ENXIO:  # ENXIO: only a hole follows
                out = -errno
    close(fd)
    return out


def probe_queue_tails(str root, list topics, int32_t[::1] queue_ids not None, int64_t[::1] stop_bytes not None,
                      int64_t[::1] listed_ends not None, int64_t file_bytes, int32_t[::1] status not None):
    """For each i: probe the queue in ``root/topics[i]/queue_ids[i]`` at logical byte
    ``stop_bytes[i]`` (>= 0) with its row's files ending at ``listed_ends[i]``;
    ``status[i]``: CLEAN, DIRTY, UNFIT as queue_tails.probe returns, or minus the
    errno where it raises. Names are str (their UTF-8 bytes name the files)."""
    cdef Py_ssize_t n = len(topics), i, length
    if file_bytes <= 0 or file_bytes > (1 << 40):
        raise ValueError("file_bytes out of range")
    if queue_ids.shape[0] < n or stop_bytes.shape[0] < n or listed_ends.shape[0] < n or status.shape[0] < n:
        raise ValueError("column lengths differ")
    cdef const char *base_dir = PyUnicode_AsUTF8AndSize(root, &length)
    cdef const char **names = <const char **>malloc(max(n, 1) * sizeof(char *))
    cdef unsigned char *page = <unsigned char *>malloc(PAGE)
    cdef char path[PATH_BYTES]
    cdef int64_t stop, base
    cdef int wrote, at = -1
    if names == NULL or page == NULL:
        free(names)
        free(page)
        raise MemoryError()
    try:
        for i in range(n):  # each str keeps its UTF-8 copy while ``topics`` holds it
            names[i] = PyUnicode_AsUTF8AndSize(topics[i], &length)
            if stop_bytes[i] < 0:
                raise ValueError("a stop byte below 0")
        with nogil:
            # paths from the root's directory: the kernel walks the root's own names once
            at = c_open(base_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) if n else -1
            for i in range(n):
                stop = stop_bytes[i]
                base = stop - stop % file_bytes
                if at >= 0:
                    wrote = snprintf(path, PATH_BYTES, "%s/%d/%020lld", names[i], <int>queue_ids[i], <long long>base)
                else:  # no such directory (or not one): each path whole, as the model opens it
                    wrote = snprintf(path, PATH_BYTES, "%s/%s/%d/%020lld", base_dir, names[i], <int>queue_ids[i],
                                     <long long>base)
                if wrote < 0 or wrote >= PATH_BYTES:
                    status[i] = -ENAMETOOLONG  # as open would say
                else:
                    status[i] = _probe(at if at >= 0 else AT_FDCWD, path, base, stop - base, listed_ends[i],
                                       file_bytes, page)
    finally:
        if at >= 0:
            close(at)
        free(names)
        free(page)
