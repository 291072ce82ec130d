# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Dense topic ids: every topic name a store has seen gets the next small integer, and
a batch's names are turned into ids in one compiled pass.

Per id the table keeps the name, the encoded topic field (formats.message.topic_field,
None until the name was checked) and a byte of flags the store sets once a check
passed (store/topic_table.py: LEGAL, SENDABLE). ``lookup`` gives each name of a batch
its id with one dict lookup in C per change of name (a run of the same str object
costs a pointer compare), and counts the names that are unknown or lack a flag, so the
caller runs its Python checks only for a batch with a new or changed topic. Ids are
never reused nor removed: a forgotten topic only loses its flags.

Thread-safety: methods hold the GIL and never call back into Python code for str names,
so a lookup and an ``add`` do not interleave; flags are re-read through ``self`` after
every dict operation (an odd name's ``__eq__`` could let another thread grow them).
The reference model is tests/kernels/model_topics.py.
"""

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memset


cdef extern from "Python.h":
    int PyUnicode_IS_ASCII(object s)
    void *PyUnicode_DATA(object s)
    object PyBytes_FromStringAndSize(const char *v, Py_ssize_t n)
    char *PyBytes_AS_STRING(object o)


cdef inline bint _name_char(unsigned char c) noexcept nogil:
    """[%|a-zA-Z0-9_-]: RocketMQ's topic characters (formats/names.py)."""
    return (
        (c >= 97 and c <= 122) or (c >= 65 and c <= 90) or (c >= 48 and c <= 57)
        or c == 37 or c == 124 or c == 95 or c == 45
    )


def legal_fields(list names):
    """Each name's topic field (formats.message.topic_field) if it is a legal topic
    name (formats.names.topic_error: 1 to 127 of ``[%|a-zA-Z0-9_-]``, 255 after
    ``%RETRY%`` or ``%DLQ%``), else None: the caller's check_topic then says why. One
    compiled pass for a batch's new topics."""
    cdef Py_ssize_t i, j, n, limit
    cdef const unsigned char *c
    cdef unsigned char *o
    out = [None] * len(names)
    for i in range(len(names)):
        v = names[i]
        if type(v) is not str or not PyUnicode_IS_ASCII(v):
            continue
        n = len(<str>v)
        c = <const unsigned char *>PyUnicode_DATA(v)
        limit = 255 if (v.startswith("%RETRY%") or v.startswith("%DLQ%")) else 127
        if n == 0 or n > limit:
            continue
        for j in range(n):
            if not _name_char(c[j]):
                break
        else:
            field = PyBytes_FromStringAndSize(NULL, n + (1 if n <= 127 else 2))
            o = <unsigned char *>PyBytes_AS_STRING(field)
            if n <= 127:
                o[0] = <unsigned char>n
                o += 1
            else:
                o[0] = <unsigned char>(n >> 8)
                o[1] = <unsigned char>(n & 0xFF)
                o += 2
            for j in range(n):
                o[j] = c[j]
            out[i] = field
    return out


cdef struct Seen:
    PyObject *name  # a str object (a reference held), or NULL
    int64_t tid


cdef enum:
    MAX_SEEN = 1 << 18  # slots of the identity cache at most (4 MiB)


cdef inline Py_ssize_t _seen_slot(PyObject *p, Py_ssize_t cap) noexcept nogil:
    return <Py_ssize_t>(((<uint64_t>p >> 4) * <uint64_t>0x9E3779B97F4A7C15ULL) >> 40) & (cap - 1)


cdef class TopicIds:
    """Names <-> dense ids, with flags and topic fields per id; see the module docstring."""

    cdef dict index
    cdef readonly list names  # by id
    cdef readonly list fields  # by id: the encoded topic field, None until set
    cdef unsigned char *flags
    cdef Py_ssize_t cap
    # Identity cache: str objects seen by lookup -> id, so a name object given again
    # (a producer's own topic strings) costs one probe, not a dict lookup that reads the
    # str, the dict entry and the id's int object. Each slot holds a reference to its
    # str, so an address is never that of another object while cached.
    cdef Seen *seen
    cdef Py_ssize_t seen_cap

    def __cinit__(self):
        self.index = {}
        self.names = []
        self.fields = []
        self.cap = 0
        self.flags = NULL
        self.seen = NULL
        self.seen_cap = 0

    def __dealloc__(self):
        free(self.flags)
        self._drop_seen()

    cdef void _drop_seen(self):
        cdef Py_ssize_t i
        if self.seen != NULL:
            for i in range(self.seen_cap):
                Py_XDECREF(self.seen[i].name)
            free(self.seen)
        self.seen = NULL
        self.seen_cap = 0

    cdef int _size_seen(self) except -1:
        """A cache of at least twice as many slots as names (up to MAX_SEEN); a new
        one starts empty."""
        cdef Py_ssize_t want = 1024
        while want < 2 * len(self.names) and want < MAX_SEEN:
            want *= 2
        if want <= self.seen_cap:
            return 0
        self._drop_seen()
        self.seen = <Seen *>calloc(want, sizeof(Seen))
        if self.seen == NULL:
            raise MemoryError()
        self.seen_cap = want
        return 0

    def __len__(self):
        return len(self.names)

    def add(self, str name):
        """The id of ``name``, given the next one if it has none (no flags, no field)."""
        cdef Py_ssize_t n
        cdef unsigned char *grown
        tid = self.index.get(name)
        if tid is not None:
            return tid
        n = len(self.names)
        if n >= self.cap:
            grown = <unsigned char *>realloc(self.flags, max(64, 2 * self.cap))
            if grown == NULL:
                raise MemoryError()
            memset(grown + self.cap, 0, max(64, 2 * self.cap) - self.cap)
            self.flags, self.cap = grown, max(64, 2 * self.cap)
        self.names.append(name)
        self.fields.append(None)
        self.index[name] = n  # last: an id is looked up only once its row exists
        return n

    def add_all(self, list names, list fields, unsigned char bits):
        """``add`` each of ``names``, then set its field (``fields[i]``, None: left as
        is) and the flags ``bits``: a batch's new topics in one call."""
        cdef Py_ssize_t i
        cdef int64_t tid
        if len(fields) != len(names):
            raise ValueError("one field per name")
        for i in range(len(names)):
            tid = self.add(names[i])
            if fields[i] is not None and self.fields[tid] is None:  # set once: see set_field
                self.fields[tid] = fields[i]
            self.flags[tid] |= bits

    def get(self, name):
        """The id of ``name``, or -1."""
        tid = self.index.get(name)
        return -1 if tid is None else tid

    def flags_of(self, int64_t tid):
        if not 0 <= tid < len(self.names):
            raise IndexError(f"topic id {tid} unknown")
        return self.flags[tid]

    def set_flags(self, int64_t tid, unsigned char bits):
        if not 0 <= tid < len(self.names):
            raise IndexError(f"topic id {tid} unknown")
        self.flags[tid] |= bits

    def clear_flags(self, int64_t tid, unsigned char bits):
        if not 0 <= tid < len(self.names):
            raise IndexError(f"topic id {tid} unknown")
        self.flags[tid] &= ~bits

    def set_field(self, int64_t tid, bytes field):
        """Set id ``tid``'s topic field if it has none. A field is a function of the
        name, so it is set once and never replaced: another producer's batch may be
        encoding from it (the encoder points into the bytes object, without the GIL),
        and replacing it would free those bytes under that batch (garbage topics in
        acknowledged records, as two producers admitting the same new topic did)."""
        if not 0 <= tid < len(self.names):
            raise IndexError(f"topic id {tid} unknown")
        if self.fields[tid] is None:
            self.fields[tid] = field

    def find(self, name, unsigned char need):
        """The id of ``name`` if it has every flag of ``need``, else -1."""
        tid = self.index.get(name)
        if tid is None:
            return -1
        return tid if (self.flags[<int64_t>tid] & need) == need else -1

    def lookup(self, list values, int64_t[::1] out not None, unsigned char need, unsigned char[::1] common=None):
        """``out[i]``: the id of ``values[i]``, -1 where it has none or lacks a flag of
        ``need``. Returns how many are -1. ``common[0]``, if given: the flags every
        value's id has (0 if one has no id)."""
        cdef Py_ssize_t n = len(values), i, misses = 0, k
        cdef unsigned char every = 0xFF
        cdef int64_t tid = -1
        cdef object last = None
        cdef object v
        cdef PyObject *p
        if out.shape[0] != n:
            raise ValueError("out must have one entry per value")
        self._size_seen()
        for i in range(n):
            v = values[i]
            if v is not last or i == 0:
                last = v
                p = <PyObject *>v
                k = _seen_slot(p, self.seen_cap)
                if self.seen[k].name == p:
                    tid = self.seen[k].tid
                else:
                    t = self.index.get(v)
                    if t is None:
                        tid = -1
                    else:
                        tid = <int64_t>t
                        if type(v) is str:  # immutable: its id is for good
                            Py_INCREF(v)
                            Py_XDECREF(self.seen[k].name)
                            self.seen[k].name = p
                            self.seen[k].tid = tid
                if tid >= 0:
                    every &= self.flags[tid]
                    if (self.flags[tid] & need) != need:
                        tid = -1
                else:
                    every = 0
            if tid < 0:
                misses += 1
            out[i] = tid
        if common is not None:
            common[0] = every
        return misses
