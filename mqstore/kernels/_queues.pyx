# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The CommitLog's queue-offset table (the next queue offset of every (topic, queue
id), RocketMQ's topicQueueTable) with a batch's offsets assigned in one pass.

Topics get dense ids (a dict, consulted once per distinct topic of a batch); a queue
is the int64 key ``topic id << 20 | queue id`` in an open-addressing table of keys and
next offsets that doubles when half full. ``assign`` gives each record of a batch the
next offset of its queue without the GIL and stages the new ends; ``commit`` applies
them once the records are written (a failed write commits nothing). What it replaced
(a dict keyed by (topic, queue id) tuples, a tuple and two dict operations per queue
of every batch: at 10,000 topics one per message) is the reference model
tests/kernels/model_queues.py.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import numpy as np


cdef enum:
    QID_BITS = 20  # queue ids are 0 .. 65,535 (StoreConfig.max_queue_id), with room


cdef inline int64_t _slot_of(int64_t key, int64_t cap) noexcept nogil:
    return <int64_t>(((<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL) >> 20) & (cap - 1)


cdef class QueueOffsets:
    """Next queue offsets by (topic, queue id); see the module docstring."""

    cdef int64_t *keys  # -1: empty slot
    cdef int64_t *vals
    cdef int64_t cap, count
    cdef dict topic_ids
    cdef list topic_names
    # staged by assign, applied by commit
    cdef int64_t *staged_keys
    cdef int64_t *staged_vals
    cdef int64_t staged, staged_cap

    def __cinit__(self):
        self.cap = 64
        self.keys = <int64_t *>malloc(self.cap * sizeof(int64_t))
        self.vals = <int64_t *>malloc(self.cap * sizeof(int64_t))
        self.staged_cap = 64
        self.staged_keys = <int64_t *>malloc(self.staged_cap * sizeof(int64_t))
        self.staged_vals = <int64_t *>malloc(self.staged_cap * sizeof(int64_t))
        if not (self.keys and self.vals and self.staged_keys and self.staged_vals):
            raise MemoryError()
        memset(self.keys, 0xFF, self.cap * sizeof(int64_t))
        self.count = 0
        self.staged = 0
        self.topic_ids = {}
        self.topic_names = []

    def __init__(self, items=None):
        """``items``: a mapping of (topic, queue id) -> next offset to start from."""
        if items:
            for (topic, queue_id), nxt in items.items():
                self.raise_to(topic, queue_id, nxt)

    def __dealloc__(self):
        free(self.keys)
        free(self.vals)
        free(self.staged_keys)
        free(self.staged_vals)

    cdef int64_t _tid(self, str topic):
        tid = self.topic_ids.get(topic)
        if tid is None:
            tid = len(self.topic_names)
            self.topic_ids[topic] = tid
            self.topic_names.append(topic)
        return tid

    cdef int64_t _key(self, str topic, int64_t queue_id) except -1:
        if not 0 <= queue_id < (1 << QID_BITS):
            raise ValueError(f"queue id {queue_id} out of range")
        return (self._tid(topic) << QID_BITS) | queue_id

    cdef int64_t _find(self, int64_t key) noexcept nogil:
        """The slot holding ``key``, or the empty slot where it would go."""
        cdef int64_t s = _slot_of(key, self.cap)
        while self.keys[s] >= 0 and self.keys[s] != key:
            s = (s + 1) & (self.cap - 1)
        return s

    cdef int _put(self, int64_t key, int64_t val) noexcept nogil:
        """Set ``key`` to ``val``; -1 if out of memory."""
        cdef int64_t s = self._find(key)
        if self.keys[s] < 0:
            if (self.count + 1) * 2 > self.cap and self._grow() < 0:
                return -1
            s = self._find(key)
            self.keys[s] = key
            self.count += 1
        self.vals[s] = val
        return 0

    cdef int _grow(self) noexcept nogil:
        cdef int64_t old_cap = self.cap, i, s
        cdef int64_t *old_keys = self.keys
        cdef int64_t *old_vals = self.vals
        cdef int64_t *keys = <int64_t *>malloc(old_cap * 2 * sizeof(int64_t))
        cdef int64_t *vals = <int64_t *>malloc(old_cap * 2 * sizeof(int64_t))
        if keys == NULL or vals == NULL:
            free(keys)
            free(vals)
            return -1
        memset(keys, 0xFF, old_cap * 2 * sizeof(int64_t))
        self.keys, self.vals, self.cap = keys, vals, old_cap * 2
        for i in range(old_cap):
            if old_keys[i] >= 0:
                s = self._find(old_keys[i])
                self.keys[s] = old_keys[i]
                self.vals[s] = old_vals[i]
        free(old_keys)
        free(old_vals)
        return 0

    def __len__(self):
        return self.count

    def get(self, str topic, int64_t queue_id, int64_t default=0):
        """The next queue offset of ``(topic, queue_id)`` (``default`` if never used)."""
        cdef int64_t s
        if topic not in self.topic_ids or not 0 <= queue_id < (1 << QID_BITS):
            return default
        s = self._find(self._key(topic, queue_id))
        return self.vals[s] if self.keys[s] >= 0 else default

    def raise_to(self, str topic, int64_t queue_id, int64_t nxt):
        """Raise the next offset of ``(topic, queue_id)`` to at least ``nxt``."""
        cdef int64_t key = self._key(topic, queue_id)
        cdef int64_t s = self._find(key)
        if self.keys[s] >= 0 and self.vals[s] >= nxt:
            return
        if self._put(key, nxt) < 0:
            raise MemoryError()

    def items(self):
        """``[((topic, queue id), next offset), ...]`` in no particular order."""
        cdef int64_t i
        out = []
        for i in range(self.cap):
            if self.keys[i] >= 0:
                out.append(
                    ((self.topic_names[self.keys[i] >> QID_BITS], self.keys[i] & ((1 << QID_BITS) - 1)), self.vals[i])
                )
        return out

    def assign(self, list topics, const int64_t[:] topic_codes, const int64_t[:] queue_ids,
               const unsigned char[:] advances, int64_t[::1] out not None):
        """Queue offsets of a batch: each record that ``advances`` (None: every one) gets
        the next offset of its queue (``topics[topic_codes[i]]``, ``queue_ids[i]``; codes
        None: every record is of ``topics[0]``) in arrival order, the others 0, into
        ``out``. The new ends are staged for :meth:`commit` (a later ``assign``
        replaces them). Queue ids must be 0 .. 2**20 - 1 (the caller checked them)."""
        cdef Py_ssize_t n = queue_ids.shape[0], i
        if out.shape[0] != n or (topic_codes is not None and topic_codes.shape[0] != n):
            raise ValueError("columns of different lengths")
        if advances is not None and advances.shape[0] != n:
            raise ValueError("columns of different lengths")
        cdef int64_t[::1] tids = np.array([self._tid(t) for t in topics] or [0], np.int64)
        cdef int64_t ntopics = len(topics)
        if n > self.staged_cap:
            free(self.staged_keys)
            free(self.staged_vals)
            self.staged_cap = n
            self.staged_keys = <int64_t *>malloc(n * sizeof(int64_t))
            self.staged_vals = <int64_t *>malloc(n * sizeof(int64_t))
            if self.staged_keys == NULL or self.staged_vals == NULL:
                self.staged_cap = 0
                raise MemoryError()
        cdef int64_t bcap = 16
        while bcap < 2 * n:
            bcap *= 2
        cdef int64_t *bslots = <int64_t *>malloc(bcap * sizeof(int64_t))  # batch-local: index into staged
        if bslots == NULL:
            raise MemoryError()
        cdef int64_t key, s, b, groups = 0, code, qid
        cdef bint has_codes = topic_codes is not None, has_adv = advances is not None, bad = False
        with nogil:
            memset(bslots, 0xFF, bcap * sizeof(int64_t))
            for i in range(n):
                if has_adv and not advances[i]:
                    out[i] = 0
                    continue
                code = topic_codes[i] if has_codes else 0
                qid = queue_ids[i]
                if not (0 <= code < ntopics and 0 <= qid < (1 << QID_BITS)):
                    bad = True
                    break
                key = (tids[code] << QID_BITS) | qid
                b = _slot_of(key, bcap)
                while bslots[b] >= 0 and self.staged_keys[bslots[b]] != key:
                    b = (b + 1) & (bcap - 1)
                if bslots[b] < 0:  # the batch's first record of this queue: start at the table's end
                    bslots[b] = groups
                    self.staged_keys[groups] = key
                    s = self._find(key)
                    self.staged_vals[groups] = self.vals[s] if self.keys[s] >= 0 else 0
                    groups += 1
                out[i] = self.staged_vals[bslots[b]]
                self.staged_vals[bslots[b]] += 1
            free(bslots)
        if bad:
            self.staged = 0
            raise ValueError(f"record {i}: topic code or queue id out of range")
        self.staged = groups
        return groups

    def commit(self):
        """Apply what the last :meth:`assign` staged (once the batch is written)."""
        cdef int64_t i
        cdef int rc = 0
        with nogil:
            for i in range(self.staged):
                if self._put(self.staged_keys[i], self.staged_vals[i]) < 0:
                    rc = -1
                    break
            self.staged = 0
        if rc < 0:
            raise MemoryError()
