# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Process-wide ids of topic byte strings, for ``mqstore.formats.message._fields_of``.

At 10,000 topics round-robin every 8 MiB chunk the dispatcher scans holds 10,000
distinct topics; numbering them per chunk and then finding each one's name, IndexFile
prefix hash and consume-queue table row by name was Python work per distinct topic
per chunk, most of the dispatcher's time. ``TopicByteIds`` gives each distinct topic byte
string one id for the life of the process (0, 1, 2, ... in order of first appearance),
so callers keep what they know of a topic in arrays by id and a chunk costs them only
numpy gathers. One pass over the records, without the GIL: a record whose topic is the
previous record's takes its id; others are looked up in an open-addressing table
(compared byte for byte against the bytes kept for each id), which doubles when half
full. The reference model it must equal is tests/kernels/model_intern.py.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset


cdef extern from "topic_hash.h" nogil:
    uint64_t mq_topic_hash(const unsigned char *p, int64_t n)


cdef class TopicByteIds:
    """Ids of topic byte strings, given in order of first appearance and never taken
    back. One call at a time (the caller holds a lock: a second concurrent call raises
    RuntimeError); ``name`` and ``len`` may be read meanwhile under the same lock."""

    cdef int64_t *table  # slot -> id, -1: empty
    cdef int64_t cap  # slots, a power of two
    cdef int64_t count  # ids given
    cdef int64_t id_cap  # room in the per-id arrays
    cdef int64_t *where  # id -> position of its bytes in blob
    cdef int64_t *length  # id -> its byte length
    cdef int64_t *stamp  # id -> the call that last met it
    cdef int64_t *local  # id -> its code in that call
    cdef unsigned char *blob
    cdef int64_t blob_used, blob_cap
    cdef int64_t calls
    cdef bint busy

    def __cinit__(self):
        self.cap, self.id_cap, self.blob_cap = 1024, 512, 1 << 16
        self.table = <int64_t *>malloc(self.cap * sizeof(int64_t))
        self.where = <int64_t *>malloc(self.id_cap * sizeof(int64_t))
        self.length = <int64_t *>malloc(self.id_cap * sizeof(int64_t))
        self.stamp = <int64_t *>malloc(self.id_cap * sizeof(int64_t))
        self.local = <int64_t *>malloc(self.id_cap * sizeof(int64_t))
        self.blob = <unsigned char *>malloc(self.blob_cap)
        if not (self.table and self.where and self.length and self.stamp and self.local and self.blob):
            raise MemoryError()
        memset(self.table, 0xFF, self.cap * sizeof(int64_t))

    def __dealloc__(self):
        free(self.table)
        free(self.where)
        free(self.length)
        free(self.stamp)
        free(self.local)
        free(self.blob)

    def __len__(self):
        return self.count

    def name(self, int64_t i) -> bytes:
        """The bytes of the topic with id ``i``."""
        if i < 0 or i >= self.count:
            raise IndexError(i)
        return self.blob[self.where[i] : self.where[i] + self.length[i]]

    cdef int _add(self, const unsigned char *p, int64_t ln, int64_t slot) noexcept nogil:
        """Give the topic ``p[:ln]`` (absent; ``slot`` is the empty slot its probe ended
        at) the next id. Returns 0, or -1 if out of memory (nothing changed then)."""
        cdef int64_t g = self.count, c, s, i
        cdef int64_t *grown
        cdef unsigned char *more
        if g == self.id_cap:
            c = self.id_cap * 2
            grown = <int64_t *>realloc(self.where, c * sizeof(int64_t))
            if grown == NULL:
                return -1
            self.where = grown
            grown = <int64_t *>realloc(self.length, c * sizeof(int64_t))
            if grown == NULL:
                return -1
            self.length = grown
            grown = <int64_t *>realloc(self.stamp, c * sizeof(int64_t))
            if grown == NULL:
                return -1
            self.stamp = grown
            grown = <int64_t *>realloc(self.local, c * sizeof(int64_t))
            if grown == NULL:
                return -1
            self.local = grown
            self.id_cap = c
        if self.blob_used + ln > self.blob_cap:
            c = self.blob_cap * 2
            while self.blob_used + ln > c:
                c *= 2
            more = <unsigned char *>realloc(self.blob, c)
            if more == NULL:
                return -1
            self.blob, self.blob_cap = more, c
        if (g + 1) * 2 > self.cap:  # past half full: double, and find the new slot again
            c = self.cap * 2
            grown = <int64_t *>malloc(c * sizeof(int64_t))
            if grown == NULL:
                return -1
            memset(grown, 0xFF, c * sizeof(int64_t))
            for i in range(g):
                s = <int64_t>(mq_topic_hash(self.blob + self.where[i], self.length[i]) & <uint64_t>(c - 1))
                while grown[s] >= 0:
                    s = (s + 1) & (c - 1)
                grown[s] = i
            free(self.table)
            self.table, self.cap = grown, c
            slot = <int64_t>(mq_topic_hash(p, ln) & <uint64_t>(c - 1))
            while self.table[slot] >= 0:
                slot = (slot + 1) & (c - 1)
        memcpy(self.blob + self.blob_used, p, ln)
        self.where[g], self.length[g], self.stamp[g] = self.blob_used, ln, -1
        self.blob_used += ln
        self.table[slot] = g
        self.count = g + 1
        return 0

    def codes(
        self,
        const unsigned char[::1] buf,
        const int64_t[::1] at not None,
        const int64_t[::1] length not None,
        int64_t[::1] codes not None,
        int64_t[::1] ids not None,
    ):
        """For the topics ``buf[at[i] : at[i] + length[i]]``: ``codes[i]`` numbers record
        i's topic among this call's distinct topics (in order of first appearance, as
        ``_scan.topic_codes`` does), ``ids[c]`` is the id of distinct topic c (new topics
        get the next ids). Returns how many distinct topics there are."""
        cdef int64_t n = at.shape[0]
        if length.shape[0] != n or codes.shape[0] < n or ids.shape[0] < n:
            raise ValueError("column lengths differ")
        if n == 0:
            return 0
        if self.busy:
            raise RuntimeError("TopicByteIds.codes called while another call runs: the caller holds a lock")
        cdef const unsigned char *b = &buf[0]
        cdef const int64_t *ap = &at[0]
        cdef const int64_t *lp = &length[0]
        cdef int64_t *cp = &codes[0]
        cdef int64_t *ip = &ids[0]
        cdef int64_t i, g, slot, ln, mask, call, k = 0, prev_at = -1, prev_len = -1, prev_code = -1
        cdef const unsigned char *p
        cdef bint failed = False
        for i in range(n):  # every topic inside the buffer (the scan located them; checked all the same)
            if ap[i] < 0 or lp[i] < 0 or ap[i] + lp[i] > buf.shape[0]:
                raise ValueError(f"topic {i} lies outside the buffer")
        self.busy = True
        self.calls += 1
        call = self.calls
        with nogil:
            for i in range(n):
                p = b + ap[i]
                ln = lp[i]
                if ln == prev_len and memcmp(p, b + prev_at, ln) == 0:
                    cp[i] = prev_code
                    continue
                mask = self.cap - 1
                slot = <int64_t>(mq_topic_hash(p, ln) & <uint64_t>mask)
                while True:
                    g = self.table[slot]
                    if g < 0:
                        if self._add(p, ln, slot) < 0:
                            failed = True
                        g = self.count - 1
                        break
                    if self.length[g] == ln and memcmp(self.blob + self.where[g], p, ln) == 0:
                        break
                    slot = (slot + 1) & mask
                if failed:
                    break
                if self.stamp[g] != call:
                    self.stamp[g], self.local[g] = call, k
                    ip[k] = g
                    k += 1
                cp[i] = self.local[g]
                prev_at, prev_len, prev_code = ap[i], ln, cp[i]
        self.busy = False
        if failed:
            raise MemoryError("TopicByteIds: out of memory")
        return k
