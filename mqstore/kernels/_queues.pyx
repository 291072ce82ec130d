# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The CommitLog's per-topic state under the put lock, by dense topic id
(kernels/_topics.pyx TopicIds, one id space with the store's topic table): the next
queue offset of every (topic, queue id) (RocketMQ's topicQueueTable) and the
round-robin counter and queue count of automatic queue ids.

Each topic owns a run of slots in one flat array, slot ``base[topic] + queue id``
(a run grows, moving to the end, when a higher queue id comes), so a record's queue is
found by two array reads, whatever the number of topics. ``assign`` gives each record
of a batch the next offset of its queue without the GIL (a slot's first record in a
batch is found by a stamp per slot, not a hash) and stages the new ends; ``commit``
applies them once the records are written (a failed write commits nothing). What it
replaced (a dict keyed by (topic, queue id) tuples) is the reference model
tests/kernels/model_queues.py.
"""

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc, realloc

import numpy as np

cdef extern from *:
    """
    #include <stdint.h>
    #define MQ_ABSENT INT64_MIN
    """
    int64_t MQ_ABSENT


cdef enum:
    QID_LIMIT = 1 << 20  # queue ids are 0 .. 65,535 (StoreConfig.max_queue_id), with room
    AUTO_QUEUE = -1


cdef int _grow64(int64_t **p, int64_t old, int64_t new, int64_t fill) noexcept nogil:
    """Reallocate ``*p`` from ``old`` to ``new`` entries, the new ones ``fill``; -1 if out of memory."""
    cdef int64_t *q = <int64_t *>realloc(p[0], new * sizeof(int64_t))
    cdef int64_t i
    if q == NULL:
        return -1
    for i in range(old, new):
        q[i] = fill
    p[0] = q
    return 0


cdef class QueueOffsets:
    """Next queue offsets by (topic id, queue id), and the automatic queue picks; see
    the module docstring. One caller at a time (the put lock)."""

    cdef object ids  # a TopicIds: names <-> dense ids
    # per topic id
    cdef int64_t *base  # first slot of the topic's run; -1: none yet
    cdef int64_t *width  # slots in the run
    cdef int64_t *nums  # queues automatic ids spread over; 0: the default
    cdef int64_t *rr  # round-robin counter of automatic ids
    cdef int64_t tcap
    # per slot
    cdef int64_t *vals  # next offset; MQ_ABSENT: never set
    cdef int64_t *stamp  # the assign that last touched the slot
    cdef int64_t slots, scap
    cdef int64_t count, epoch
    # staged by assign, applied by commit
    cdef int64_t *staged_slots
    cdef int64_t *staged_vals
    cdef int64_t staged, staged_cap

    def __cinit__(self, *args, **kwargs):
        self.base = self.width = self.nums = self.rr = NULL
        self.vals = self.stamp = self.staged_slots = self.staged_vals = NULL
        self.tcap = self.slots = self.scap = self.count = self.epoch = self.staged = self.staged_cap = 0

    def __init__(self, items=None, ids=None):
        """``items``: a mapping of (topic, queue id) -> next offset to start from;
        ``ids``: the TopicIds whose ids the batches give (a new one if None)."""
        if ids is None:
            from mqstore.kernels._topics import TopicIds

            ids = TopicIds()
        self.ids = ids
        if items:
            for (topic, queue_id), nxt in items.items():
                self.raise_to(topic, queue_id, nxt)

    def __dealloc__(self):
        free(self.base)
        free(self.width)
        free(self.nums)
        free(self.rr)
        free(self.vals)
        free(self.stamp)
        free(self.staged_slots)
        free(self.staged_vals)

    cdef int _cover_topic(self, int64_t tid) noexcept nogil:
        """Per-topic arrays long enough for ``tid``; -1 if out of memory."""
        cdef int64_t new
        if tid < self.tcap:
            return 0
        new = max(64, 2 * self.tcap, tid + 1)
        if (_grow64(&self.base, self.tcap, new, -1) < 0 or _grow64(&self.width, self.tcap, new, 0) < 0
                or _grow64(&self.nums, self.tcap, new, 0) < 0 or _grow64(&self.rr, self.tcap, new, 0) < 0):
            return -1
        self.tcap = new
        return 0

    cdef int64_t _slot(self, int64_t tid, int64_t qid) noexcept nogil:
        """The slot of (tid, qid), its run made or moved as needed; -1 if out of memory.
        The caller checked 0 <= qid < QID_LIMIT and tid >= 0."""
        cdef int64_t w, new_w, start, i, new_cap
        if self._cover_topic(tid) < 0:
            return -1
        w = self.width[tid]
        if qid < w:
            return self.base[tid] + qid
        new_w = max(4, 2 * w, qid + 1)
        if self.slots + new_w > self.scap:
            new_cap = max(1024, 2 * self.scap, self.slots + new_w)
            if _grow64(&self.vals, self.scap, new_cap, MQ_ABSENT) < 0 or _grow64(&self.stamp, self.scap, new_cap, -1) < 0:
                return -1
            self.scap = new_cap
        start = self.slots
        for i in range(w):
            self.vals[start + i] = self.vals[self.base[tid] + i]
            self.stamp[start + i] = self.stamp[self.base[tid] + i]
        for i in range(w, new_w):
            self.vals[start + i] = MQ_ABSENT
            self.stamp[start + i] = -1
        for i in range(self.staged):  # a staged end follows its slot
            if self.base[tid] <= self.staged_slots[i] < self.base[tid] + w:
                self.staged_slots[i] += start - self.base[tid]
        self.base[tid] = start
        self.width[tid] = new_w
        self.slots += new_w
        return start + qid

    cdef int64_t _tid(self, str topic):
        return self.ids.add(topic)

    def __len__(self):
        return self.count

    def get(self, str topic, int64_t queue_id, int64_t default=0):
        """The next queue offset of ``(topic, queue_id)`` (``default`` if never used)."""
        cdef int64_t tid = self.ids.get(topic)
        if tid < 0 or tid >= self.tcap or not 0 <= queue_id < self.width[tid]:
            return default
        v = self.vals[self.base[tid] + queue_id]
        return default if v == MQ_ABSENT else v

    def raise_to(self, str topic, int64_t queue_id, int64_t nxt):
        """Raise the next offset of ``(topic, queue_id)`` to at least ``nxt``."""
        if not 0 <= queue_id < QID_LIMIT:
            raise ValueError(f"queue id {queue_id} out of range")
        cdef int64_t s = self._slot(self._tid(topic), queue_id)
        if s < 0:
            raise MemoryError()
        if self.vals[s] == MQ_ABSENT:
            self.count += 1
        elif self.vals[s] >= nxt:
            return
        self.vals[s] = nxt

    def items(self):
        """``[((topic, queue id), next offset), ...]`` in no particular order."""
        cdef int64_t t, q
        names = self.ids.names
        out = []
        for t in range(min(self.tcap, len(names))):
            for q in range(self.width[t]):
                if self.vals[self.base[t] + q] != MQ_ABSENT:
                    out.append(((names[t], q), self.vals[self.base[t] + q]))
        return out

    def set_queue_nums(self, int64_t tid, int64_t nums):
        """How many queues automatic ids of topic ``tid`` spread over (0: the default)."""
        if tid < 0 or nums < 0:
            raise ValueError("topic id and queue nums must be >= 0")
        if self._cover_topic(tid) < 0:
            raise MemoryError()
        self.nums[tid] = nums

    def pick(self, const int64_t[:] tids, int64_t tid, const int64_t[:] queue_ids, int64_t default_nums):
        """Queue ids with the automatic ones (AUTO_QUEUE) picked round robin over each
        topic's queues (RocketMQ's per-topic counter; ``tids[i]`` the record's topic id,
        tids None: every record is of ``tid``): a new array, or None if no record
        asked for a pick."""
        cdef Py_ssize_t n = queue_ids.shape[0], i, first = -1
        cdef int64_t t = tid, k
        if tids is not None and tids.shape[0] != n:
            raise ValueError("columns of different lengths")
        for i in range(n):
            if queue_ids[i] == AUTO_QUEUE:
                first = i
                break
        if first < 0:
            return None
        cdef int64_t ntopics = len(self.ids)
        out_arr = np.empty(n, np.int64)
        cdef int64_t[::1] out = out_arr
        cdef bint has_tids = tids is not None, bad = False
        with nogil:
            for i in range(n):
                if queue_ids[i] != AUTO_QUEUE:
                    out[i] = queue_ids[i]
                    continue
                if has_tids:
                    t = tids[i]
                if not 0 <= t < ntopics or self._cover_topic(t) < 0:
                    bad = True
                    break
                k = self.nums[t] if self.nums[t] > 0 else default_nums
                out[i] = self.rr[t] % k
                self.rr[t] += 1
        if bad:
            raise ValueError(f"record {i}: topic id {t} out of range (or out of memory)")
        return out_arr

    def assign(self, const int64_t[:] tids, int64_t tid, const int64_t[:] queue_ids,
               const unsigned char[:] advances, int64_t[::1] out not None):
        """Queue offsets of a batch: each record that ``advances`` (None: every one) gets
        the next offset of its queue (topic id ``tids[i]``, tids None: ``tid`` for
        every record; queue id ``queue_ids[i]``) in arrival order, the others 0, into
        ``out``. The new ends are staged for :meth:`commit` (a later ``assign``
        replaces them). Queue ids must be 0 .. 2**20 - 1 (the caller checked them)."""
        cdef Py_ssize_t n = queue_ids.shape[0], i
        if out.shape[0] != n or (tids is not None and tids.shape[0] != n):
            raise ValueError("columns of different lengths")
        if advances is not None and advances.shape[0] != n:
            raise ValueError("columns of different lengths")
        if n > self.staged_cap:
            free(self.staged_slots)
            free(self.staged_vals)
            self.staged_cap = n
            self.staged_slots = <int64_t *>malloc(n * sizeof(int64_t))
            self.staged_vals = <int64_t *>malloc(n * sizeof(int64_t))
            if self.staged_slots == NULL or self.staged_vals == NULL:
                self.staged_cap = 0
                raise MemoryError()
        cdef int64_t ntopics = len(self.ids)
        cdef int64_t s, t = tid, qid, groups = 0, v
        cdef bint has_tids = tids is not None, has_adv = advances is not None
        cdef int bad = 0
        self.staged = 0
        self.epoch += 1
        with nogil:
            for i in range(n):
                if has_adv and not advances[i]:
                    out[i] = 0
                    continue
                if has_tids:
                    t = tids[i]
                qid = queue_ids[i]
                if not (0 <= t < ntopics and 0 <= qid < QID_LIMIT):
                    bad = 1
                    break
                s = self._slot(t, qid)
                if s < 0:
                    bad = 2
                    break
                if self.stamp[s] != self.epoch:  # the batch's first record of this queue
                    self.stamp[s] = self.epoch
                    self.staged_slots[groups] = s
                    self.staged_vals[groups] = self.vals[s]  # the end before the batch, for now
                    self.staged = groups = groups + 1
                    if self.vals[s] == MQ_ABSENT:
                        self.vals[s] = 0
                out[i] = self.vals[s]
                self.vals[s] += 1
            # Stage the new ends and put the old ones back: nothing shows before commit.
            for i in range(groups):
                s = self.staged_slots[i]
                v = self.vals[s]
                self.vals[s] = self.staged_vals[i]
                self.staged_vals[i] = v
        if bad:
            self.staged = 0
            if bad == 2:
                raise MemoryError()
            raise ValueError(f"record {i}: topic id or queue id out of range")
        return groups

    def commit(self):
        """Apply what the last :meth:`assign` staged (once the batch is written)."""
        cdef int64_t i, s
        with nogil:
            for i in range(self.staged):
                s = self.staged_slots[i]
                if self.vals[s] == MQ_ABSENT:
                    self.count += 1
                self.vals[s] = self.staged_vals[i]
            self.staged = 0
