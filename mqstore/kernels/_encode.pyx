# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The append encoder: a batch of messages turned into commitlog records, written
straight into one reusable buffer (the bytes the CommitLog hands to ``pwrite``).

A ``RecordBuffer`` is filled in steps, so the caller (mqstore/store/record_batch.py)
validates in the order it always has: ``properties`` (TAGS, KEYS, UNIQ_KEY and the
user's properties: types and separators), ``bodies`` (one bytes-like object per
record) or ``body_buffer`` (every body in one buffer, by offsets), ``layout`` (record sizes; the
caller checks the limits), then ``encode``, one pass over the batch without the GIL
that writes every record (head fields, body, body CRC, topic, properties) except the
four fields only the put lock knows, which ``patch`` sets (queue id, queue offset,
physical offset, store timestamp). The gather steps keep pointers into the callers'
``bytes`` and ``str`` objects (UTF-8 as CPython caches it), so nothing is copied
twice. The reference model is tests/kernels/model_encode.py (the numpy encoder this
replaced); tests/kernels/test_encode_kernel.py holds the two to equal bytes.

Record layout: mqstore/formats/message.py. Properties: ``name\\x01value\\x02`` per
entry, the user's first (in their order, a TAGS/KEYS/UNIQ_KEY the user gave keeping
its place with the batch's value), then TAGS, KEYS and UNIQ_KEY.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset

from collections.abc import Mapping


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline void mq_put32(unsigned char *p, int64_t v) {
        uint32_t x = __builtin_bswap32((uint32_t)v); memcpy(p, &x, 4);
    }
    static inline void mq_put64(unsigned char *p, int64_t v) {
        uint64_t x = __builtin_bswap64((uint64_t)v); memcpy(p, &x, 8);
    }
    static inline void mq_put16(unsigned char *p, int64_t v) {
        uint16_t x = __builtin_bswap16((uint16_t)v); memcpy(p, &x, 2);
    }
    static inline int mq_has_sep(const unsigned char *p, int64_t n) {
        for (int64_t i = 0; i < n; i++) if (p[i] == 1 || p[i] == 2) return 1;
        return 0;
    }
    static const char mq_hex[] = "0123456789ABCDEF";
    """
    void mq_put32(unsigned char *p, int64_t v) nogil
    void mq_put64(unsigned char *p, int64_t v) nogil
    void mq_put16(unsigned char *p, int64_t v) nogil
    int mq_has_sep(const unsigned char *p, int64_t n) nogil
    const char *mq_hex


cdef extern from "crc32_fold.h" nogil:
    int mq_crc_fold_init()
    uint32_t mq_crc32(uint32_t crc, const unsigned char *buf, size_t len)


cdef extern from "utf8.h" nogil:
    int mq_utf8_ok(const unsigned char *p, int64_t n)


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    Py_ssize_t PyUnicode_GET_LENGTH(object s)


mq_crc_fold_init()

cdef enum:
    MAGIC_V1 = -626843481  # 0xDAA320A7
    MAGIC_V2 = -626843477  # 0xDAA320AB
    CRC_MASK = 0x7FFFFFFF
    MAX_TOPIC_FIELD_V1 = 128  # a 1-byte length and at most 127 bytes: V1
    KIND_PLAIN = 0
    KIND_TAGS = 1
    KIND_KEYS = 2
    KIND_UNIQ = 3
    HAS_TAGS = 1
    HAS_KEYS = 2
    HAS_UNIQ = 4

# Values the message format fixes, for the package to check against formats.message.
FORMAT = (MAGIC_V1, MAGIC_V2, CRC_MASK, MAX_TOPIC_FIELD_V1)
# Rows of the ``cols`` argument of ``encode``.
COLUMNS = ("flags", "sysflags", "born_timestamps", "reconsume_times", "prepared_transaction_offsets")


cdef struct Rec:
    const unsigned char *body
    int64_t body_len
    const unsigned char *tag  # NULL: no TAGS
    int64_t tag_len
    const unsigned char *key  # NULL: no KEYS
    int64_t key_len
    const unsigned char *uniq  # NULL: the generated head + a 4-hex-digit tail
    int64_t uniq_len
    const unsigned char *raw  # properties given whole (PreparedRecords)
    int64_t pair_lo
    int64_t pair_hi
    int64_t user_has  # HAS_* bits: which of TAGS/KEYS/UNIQ_KEY the user's pairs name
    const unsigned char *born
    int64_t born_len
    const unsigned char *topic
    int64_t topic_len  # the whole topic field, its 1 or 2 length bytes included
    int64_t props_len
    int64_t size
    int64_t start


cdef struct Pair:
    const unsigned char *name
    int64_t name_len
    const unsigned char *value  # NULL: a None value (skipped unless replaced)
    int64_t value_len
    int kind


cdef inline int _text(object o, const unsigned char **p, int64_t *n) except -2:
    """A tag, key or unique key: 1 present (``p``, ``n`` set to its UTF-8), 0 absent
    (None, "" or any falsy value, as the Python encoder's ``if t:``), -1 not a str."""
    cdef Py_ssize_t size
    if o is None:
        return 0
    if PyUnicode_Check(o):
        if PyUnicode_GET_LENGTH(o) == 0:
            return 0
        p[0] = <const unsigned char *>PyUnicode_AsUTF8AndSize(o, &size)
        n[0] = size
        return 1
    if not o:
        return 0
    return -1


cdef inline int _packed(
    const unsigned char *base, const int64_t[::1] offsets, Py_ssize_t i, const unsigned char **p, int64_t *n
) noexcept nogil:
    """Value ``i`` of a packed text column (``messages.Texts``, offsets checked by the
    caller): 1 present (``p``, ``n`` set), 0 absent (empty), -1 not well-formed UTF-8."""
    cdef int64_t lo = offsets[i], size = offsets[i + 1] - offsets[i]
    if size == 0:
        return 0
    if not mq_utf8_ok(base + lo, size):
        return -1
    p[0] = base + lo
    n[0] = size
    return 1


cdef inline int64_t _pair_bytes(const unsigned char *value, int64_t name_len, int64_t value_len) noexcept nogil:
    return name_len + value_len + 2


cdef inline unsigned char *_put(unsigned char *q, const char *s, int64_t n) noexcept nogil:
    memcpy(q, s, n)
    return q + n


cdef class RecordBuffer:
    """One batch's records in one buffer (``data``); see the module docstring for the
    steps. Not thread-safe: one append uses it at a time (BatchEncoder pools them)."""

    cdef Rec *recs
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t n
    cdef Pair *pairs
    cdef Py_ssize_t pair_cap
    cdef Py_ssize_t npairs
    cdef Py_buffer *views
    cdef Py_ssize_t view_cap
    cdef Py_ssize_t nviews
    cdef readonly bytearray data
    cdef readonly int64_t total
    cdef list keep  # the objects the pointers point into
    cdef bytes uniq_head
    cdef int64_t uniq_first
    cdef bint encoded
    cdef bint raw_mode  # properties given whole (raw_properties)

    def __cinit__(self):
        self.data = bytearray()
        self.keep = []

    def __dealloc__(self):
        self._release_views()
        free(self.recs)
        free(self.pairs)
        free(self.views)

    cdef void _release_views(self) noexcept:
        cdef Py_ssize_t i
        for i in range(self.nviews):
            PyBuffer_Release(&self.views[i])
        self.nviews = 0

    def start(self, Py_ssize_t n):
        """Begin a batch of ``n`` records (forgets the previous one)."""
        self.release()
        if n > self.cap:
            p = <Rec *>realloc(self.recs, n * sizeof(Rec))
            if p == NULL:
                raise MemoryError()
            self.recs = p
            self.cap = n
        memset(self.recs, 0, n * sizeof(Rec))
        self.n = n
        self.total = 0
        self.encoded = False
        self.raw_mode = False

    def release(self, Py_ssize_t keep_bytes=-1):
        """Drop the references to the batch's objects (the buffer stays for reuse,
        cut to ``keep_bytes`` when it is larger)."""
        self._release_views()
        self.keep = []
        self.npairs = 0
        self.n = 0
        self.uniq_head = None
        if 0 <= keep_bytes < PyByteArray_GET_SIZE(self.data):
            self.data = bytearray()

    cdef int _buffer_of(self, object o, const unsigned char **p, int64_t *n) except -1:
        cdef Py_buffer *v
        if PyBytes_Check(o):
            p[0] = <const unsigned char *>PyBytes_AS_STRING(o)
            n[0] = PyBytes_GET_SIZE(o)
            return 0
        if self.nviews == self.view_cap:
            v = <Py_buffer *>realloc(self.views, (self.view_cap * 2 + 16) * sizeof(Py_buffer))
            if v == NULL:
                raise MemoryError()
            self.views = v
            self.view_cap = self.view_cap * 2 + 16
        PyObject_GetBuffer(o, &self.views[self.nviews], PyBUF_SIMPLE)  # TypeError if not bytes-like
        v = &self.views[self.nviews]
        self.nviews += 1
        p[0] = <const unsigned char *>v.buf
        n[0] = v.len
        return 0

    cdef Pair *_new_pair(self) except NULL:
        cdef Pair *p
        if self.npairs == self.pair_cap:
            p = <Pair *>realloc(self.pairs, (self.pair_cap * 2 + 64) * sizeof(Pair))
            if p == NULL:
                raise MemoryError()
            self.pairs = p
            self.pair_cap = self.pair_cap * 2 + 64
        p = &self.pairs[self.npairs]
        self.npairs += 1
        return p

    def properties(self, tags, keys, bytes uniq_head, int64_t uniq_first, list uniq_given, list user):
        """Gather each record's properties. ``tags`` and ``keys``: a list (one per
        record), a ``(buffer, offsets)`` pair of packed UTF-8 (``messages.Texts``:
        value ``i`` is ``buffer[offsets[i]:offsets[i + 1]]``, empty for none) or one
        value for all; UNIQ_KEYs: ``uniq_given`` (one str per record), or generated
        as ``uniq_head`` + 4 hex digits of ``uniq_first + i`` (mod 2^16); ``user``:
        None or one dict (or None) per record. Returns 0, or -1 when some value is not
        a str (or not UTF-8) or holds a separator (\\x01, \\x02): the caller explains it."""
        cdef Py_ssize_t i, n = self.n
        cdef Rec *r
        cdef bint tag_list = isinstance(tags, list)
        cdef bint key_list = isinstance(keys, list)
        cdef bint tag_packed = type(tags) is tuple
        cdef bint key_packed = type(keys) is tuple
        cdef const unsigned char *tp = NULL
        cdef const unsigned char *kp = NULL
        cdef const int64_t[::1] t_offs = None
        cdef const int64_t[::1] k_offs = None
        cdef int64_t tn = 0, kn = 0, props
        cdef int ts = 0, ks = 0, got
        if (tag_list and len(tags) != n) or (key_list and len(keys) != n):
            raise ValueError("tags and keys must have one value per record")
        if tag_packed:
            t_offs = self._text_column(tags, &tp)
        if key_packed:
            k_offs = self._text_column(keys, &kp)
        if (uniq_given is not None and len(uniq_given) != n) or (user is not None and len(user) != n):
            raise ValueError("unique keys and properties must have one value per record")
        self.keep.append((tags, keys, uniq_given, user))
        self.uniq_head = uniq_head
        self.uniq_first = uniq_first
        if not tag_list and not tag_packed:
            ts = _text(tags, &tp, &tn)
            if ts < 0 or (ts and mq_has_sep(tp, tn)):
                return -1
        if not key_list and not key_packed:
            ks = _text(keys, &kp, &kn)
            if ks < 0 or (ks and mq_has_sep(kp, kn)):
                return -1
        for i in range(n):
            r = &self.recs[i]
            if tag_list or tag_packed:
                got = _packed(tp, t_offs, i, &r.tag, &r.tag_len) if tag_packed else _text(tags[i], &r.tag, &r.tag_len)
                if got < 0 or (got and mq_has_sep(r.tag, r.tag_len)):
                    return -1
            elif ts:
                r.tag, r.tag_len = tp, tn
            if key_list or key_packed:
                got = _packed(kp, k_offs, i, &r.key, &r.key_len) if key_packed else _text(keys[i], &r.key, &r.key_len)
                if got < 0 or (got and mq_has_sep(r.key, r.key_len)):
                    return -1
            elif ks:
                r.key, r.key_len = kp, kn
            if uniq_given is not None:
                u = uniq_given[i]
                if not PyUnicode_Check(u):
                    return -1
                if _text(u, &r.uniq, &r.uniq_len) == 0:  # "" is written as given
                    r.uniq, r.uniq_len = <const unsigned char *>"", 0
                elif mq_has_sep(r.uniq, r.uniq_len):
                    return -1
                props = 10 + r.uniq_len
            else:
                props = 14 + len(uniq_head)
            if user is not None:
                got = self._user_pairs(r, user[i])
                if got < 0:
                    return -1
                props += got
            if r.tag != NULL and not (r.user_has & HAS_TAGS):
                props += 6 + r.tag_len
            if r.key != NULL and not (r.user_has & HAS_KEYS):
                props += 6 + r.key_len
            if r.user_has & HAS_UNIQ:
                props -= 10 + (r.uniq_len if uniq_given is not None else 4 + len(uniq_head))
            r.props_len = props
        return 0

    cdef int64_t _user_pairs(self, Rec *r, object p) except -2:
        """Gather one record's user properties; returns their bytes (the entries the
        batch's TAGS/KEYS/UNIQ_KEY replace counted with the batch's values), -1 if bad."""
        cdef PyObject *kobj
        cdef PyObject *vobj
        cdef Py_ssize_t pos = 0
        cdef Pair *pr
        cdef int64_t total = 0
        cdef int got
        r.pair_lo = self.npairs
        r.pair_hi = self.npairs
        if p is None or not isinstance(p, dict) and not p:
            return 0
        if not isinstance(p, dict):
            if not isinstance(p, Mapping):
                return -1
            p = dict(p)
            self.keep.append(p)
        if not p:
            return 0
        while PyDict_Next(p, &pos, &kobj, &vobj):
            k = <object>kobj
            v = <object>vobj
            if not PyUnicode_Check(k):
                return -1
            pr = self._new_pair()
            got = _text(k, &pr.name, &pr.name_len)
            if got == 0:  # an empty name is written as given ("" + \x01 + value + \x02)
                pr.name, pr.name_len = <const unsigned char *>"", 0
            elif mq_has_sep(pr.name, pr.name_len):
                return -1
            pr.kind = KIND_PLAIN
            if pr.name_len == 4 and memcmp4(pr.name, b"TAGS"):
                r.user_has |= HAS_TAGS
                if r.tag != NULL:
                    pr.kind = KIND_TAGS
            elif pr.name_len == 4 and memcmp4(pr.name, b"KEYS"):
                r.user_has |= HAS_KEYS
                if r.key != NULL:
                    pr.kind = KIND_KEYS
            elif pr.name_len == 8 and memcmp8(pr.name, b"UNIQ_KEY"):
                r.user_has |= HAS_UNIQ
                pr.kind = KIND_UNIQ
            pr.value = NULL
            pr.value_len = 0
            if v is not None:
                if not PyUnicode_Check(v):
                    return -1
                if PyUnicode_GET_LENGTH(v) == 0:
                    pr.value = <const unsigned char *>""
                else:
                    got = _text(v, &pr.value, &pr.value_len)
                    if mq_has_sep(pr.value, pr.value_len):
                        return -1
            if pr.kind == KIND_TAGS:
                total += pr.name_len + 2 + r.tag_len
            elif pr.kind == KIND_KEYS:
                total += pr.name_len + 2 + r.key_len
            elif pr.kind == KIND_UNIQ:
                total += 10 + (r.uniq_len if r.uniq != NULL else 4 + len(self.uniq_head))
            elif pr.value != NULL:
                total += pr.name_len + 2 + pr.value_len
        r.pair_hi = self.npairs
        return total

    def raw_properties(self, props):
        """Each record's properties given whole (bytes-like, one per record)."""
        cdef Py_ssize_t i
        cdef Rec *r
        if len(props) != self.n:
            raise ValueError("properties must have one value per record")
        self.keep.append(props)
        self.raw_mode = True
        for i in range(self.n):
            r = &self.recs[i]
            self._buffer_of(props[i], &r.raw, &r.props_len)

    def bodies(self, bodies):
        """Gather the bodies (bytes-like, one per record); TypeError for anything else."""
        cdef Py_ssize_t i
        cdef Rec *r
        if len(bodies) != self.n:
            raise ValueError("bodies must have one value per record")
        self.keep.append(bodies)
        for i in range(self.n):
            r = &self.recs[i]
            self._buffer_of(bodies[i], &r.body, &r.body_len)

    cdef const int64_t[::1] _text_column(self, tuple column, const unsigned char **base):
        """A packed text column ``(buffer, offsets)``: ``base`` set to the buffer, the
        offsets returned once checked to lie inside it and not decrease (ValueError);
        the column is kept alive until the records are written."""
        cdef int64_t size = 0, i, n = self.n
        cdef const int64_t[::1] offsets = column[1]
        if offsets.shape[0] != n + 1:
            raise ValueError(f"{n} records need {n + 1} text offsets, got {offsets.shape[0]}")
        self._buffer_of(column[0], base, &size)
        for i in range(n):
            if not 0 <= offsets[i] <= offsets[i + 1] <= size:
                raise ValueError(f"text {i}: offsets {offsets[i]}:{offsets[i + 1]} outside {size} bytes or decreasing")
        self.keep.append(column)
        return offsets

    def body_buffer(self, data, const int64_t[::1] offsets):
        """Gather the bodies from one buffer (``messages.Bodies``): record ``i``'s body
        is ``data[offsets[i]:offsets[i + 1]]``, read in place (no object per body).
        ValueError for offsets that decrease or leave the buffer."""
        cdef Py_ssize_t i, n = self.n
        cdef const unsigned char *base = NULL
        cdef int64_t size = 0, lo, hi
        cdef Rec *r
        if offsets.shape[0] != n + 1:
            raise ValueError(f"{n} records need {n + 1} body offsets, got {offsets.shape[0]}")
        self.keep.append((data, offsets))
        self._buffer_of(data, &base, &size)
        for i in range(n):
            lo = offsets[i]
            hi = offsets[i + 1]
            if not 0 <= lo <= hi <= size:
                raise ValueError(f"body {i}: offsets {lo}:{hi} outside the buffer's {size} bytes or decreasing")
            r = &self.recs[i]
            r.body = base + lo
            r.body_len = hi - lo

    def layout(
        self,
        list topic_fields,
        const int64_t[:] topic_codes,
        born_hosts,
        bytes store_host,
        int64_t[::1] sizes,
        int64_t[::1] body_lens,
        int64_t[::1] props_lens,
    ):
        """Record sizes (into ``sizes``, with ``body_lens`` and ``props_lens``) from the
        topic fields (formats.message.topic_field, indexed by ``topic_codes``; None:
        all the first), born hosts (one encoded host for all, or a list of one per
        record) and the store host. Returns ``(bytes of the batch, largest body,
        largest properties, largest record)``."""
        cdef Py_ssize_t i, n = self.n
        cdef Rec *r
        cdef int64_t total = 0, code, max_body = 0, max_props = 0, max_size = 0
        cdef bint host_list = isinstance(born_hosts, list)
        cdef const unsigned char *bp = NULL
        cdef int64_t bn = 0
        cdef int64_t sn = len(store_host)
        cdef Py_ssize_t ntopics = len(topic_fields)
        self.keep.append((topic_fields, born_hosts, store_host))
        if not host_list:
            self._buffer_of(born_hosts, &bp, &bn)
        elif len(born_hosts) != n:
            raise ValueError("born hosts must have one value per record")
        for i in range(n):
            r = &self.recs[i]
            code = 0 if topic_codes is None else topic_codes[i]
            if not 0 <= code < ntopics:
                raise ValueError(f"topic code {code} outside 0..{ntopics - 1}")
            self._buffer_of(topic_fields[code], &r.topic, &r.topic_len)
            if host_list:
                self._buffer_of(born_hosts[i], &r.born, &r.born_len)
            else:
                r.born, r.born_len = bp, bn
            if (r.born_len != 8 and r.born_len != 20) or (sn != 8 and sn != 20):
                raise ValueError("an encoded host has 8 or 20 bytes")
            r.size = 72 + r.born_len + sn + r.body_len + r.topic_len + 2 + r.props_len
            r.start = total
            total += r.size
            sizes[i] = r.size
            body_lens[i] = r.body_len
            props_lens[i] = r.props_len
            max_body = max(max_body, r.body_len)
            max_props = max(max_props, r.props_len)
            max_size = max(max_size, r.size)
        self.total = total
        return total, max_body, max_props, max_size

    def encode(self, const int64_t[:, :] cols, bytes store_host):
        """Write every record into ``data`` (the fields ``patch`` sets are left 0), one
        pass without the GIL. ``cols``: the rows named by ``COLUMNS``, one value per record."""
        cdef Py_ssize_t n = self.n
        if cols.shape[0] != 5 or cols.shape[1] != n:
            raise ValueError(f"cols must be 5 x {n}")
        if PyByteArray_GET_SIZE(self.data) < self.total:
            PyByteArray_Resize(self.data, self.total)
        cdef unsigned char *out = <unsigned char *>PyByteArray_AS_STRING(self.data)
        cdef const unsigned char *sh = <const unsigned char *>PyBytes_AS_STRING(store_host)
        cdef int64_t sn = len(store_host)
        cdef const unsigned char *head = <const unsigned char *>PyBytes_AS_STRING(self.uniq_head) if self.uniq_head is not None else NULL
        cdef int64_t head_len = len(self.uniq_head) if self.uniq_head is not None else 0
        with nogil:
            _encode_all(self.recs, n, self.pairs, out, cols, sh, sn, head, head_len, self.uniq_first, self.raw_mode)
        self.encoded = True

    def adopt(
        self,
        const unsigned char[::1] data,
        const int64_t[::1] positions not None,
        const int64_t[::1] sizes not None,
        const int64_t[::1] sysflags not None,
        bytes store_host,
    ):
        """Take records a client encoded (``data``, records back to back from 0, each
        already validated by the scan kernel) as this buffer's batch: one copy into
        ``data``, every record's STOREHOST set to ``store_host``; ``patch`` sets the
        rest. Each record's sysflag must give the store host's length (bit 0x20)."""
        cdef Py_ssize_t n = positions.shape[0], i
        cdef int64_t total = data.shape[0], sn = len(store_host), at = 0, born
        if sizes.shape[0] != n or sysflags.shape[0] != n:
            raise ValueError("column lengths differ")
        for i in range(n):
            if positions[i] != at or sizes[i] < 80 + sn + (20 if sysflags[i] & 0x10 else 8) or (sn == 20) != bool(sysflags[i] & 0x20):
                raise ValueError(f"record {i} is not where the batch's sizes put it, or not of the store host's kind")
            at += sizes[i]
        if at != total:
            raise ValueError(f"the records take {at} of {total} bytes")
        self.start(n)
        if PyByteArray_GET_SIZE(self.data) < total:
            PyByteArray_Resize(self.data, total)
        cdef unsigned char *out = <unsigned char *>PyByteArray_AS_STRING(self.data)
        cdef const unsigned char *sh = <const unsigned char *>PyBytes_AS_STRING(store_host)
        with nogil:
            if total:
                memcpy(out, &data[0], total)
            for i in range(n):
                born = 20 if sysflags[i] & 0x10 else 8
                self.recs[i].start = positions[i]
                self.recs[i].size = sizes[i]
                self.recs[i].born_len = born
                memcpy(out + positions[i] + 56 + born, sh, sn)
        self.total = total
        self.encoded = True

    def patch(
        self,
        Py_ssize_t lo,
        Py_ssize_t hi,
        const int64_t[:] queue_ids,
        const int64_t[:] queue_offsets,
        const int64_t[:] physical_offsets,
        int64_t store_timestamp,
    ):
        """Set records ``lo:hi``'s TOTALSIZE, queue id, queue offset, physical offset and
        store timestamp (the arrays hold records ``lo:hi``, from index 0)."""
        cdef Py_ssize_t i
        cdef unsigned char *p
        cdef unsigned char *out = <unsigned char *>PyByteArray_AS_STRING(self.data)
        if not (self.encoded and 0 <= lo <= hi <= self.n):
            raise ValueError("patch needs encoded records and 0 <= lo <= hi <= n")
        if queue_ids.shape[0] < hi - lo or queue_offsets.shape[0] < hi - lo or physical_offsets.shape[0] < hi - lo:
            raise ValueError("patch arrays are shorter than the records")
        for i in range(lo, hi):
            p = out + self.recs[i].start
            mq_put32(p, self.recs[i].size)
            mq_put32(p + 12, queue_ids[i - lo])
            mq_put64(p + 20, queue_offsets[i - lo])
            mq_put64(p + 28, physical_offsets[i - lo])
            mq_put64(p + 48 + self.recs[i].born_len, store_timestamp)

    def span(self, Py_ssize_t lo, Py_ssize_t hi):
        """``(start, end)``: where records ``lo:hi`` lie in ``data``."""
        if not 0 <= lo <= hi <= self.n:
            raise ValueError(f"records {lo}:{hi} outside 0:{self.n}")
        if lo == hi:
            return (self.recs[lo].start, self.recs[lo].start) if lo < self.n else (self.total, self.total)
        return self.recs[lo].start, self.recs[hi - 1].start + self.recs[hi - 1].size


cdef inline bint memcmp4(const unsigned char *a, const char *b) noexcept nogil:
    return a[0] == b[0] and a[1] == b[1] and a[2] == b[2] and a[3] == b[3]


cdef inline bint memcmp8(const unsigned char *a, const char *b) noexcept nogil:
    return memcmp4(a, b) and memcmp4(a + 4, b + 4)


cdef inline unsigned char *_uniq(
    unsigned char *q, const Rec *r, const unsigned char *head, int64_t head_len, uint32_t tail
) noexcept nogil:
    if r.uniq != NULL:
        memcpy(q, r.uniq, r.uniq_len)
        return q + r.uniq_len
    memcpy(q, head, head_len)
    q += head_len
    q[0] = mq_hex[(tail >> 12) & 15]
    q[1] = mq_hex[(tail >> 8) & 15]
    q[2] = mq_hex[(tail >> 4) & 15]
    q[3] = mq_hex[tail & 15]
    return q + 4


cdef void _encode_all(
    const Rec *recs,
    Py_ssize_t n,
    const Pair *pairs,
    unsigned char *out,
    const int64_t[:, :] cols,
    const unsigned char *sh,
    int64_t sn,
    const unsigned char *head,
    int64_t head_len,
    int64_t uniq_first,
    bint raw_mode,
) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef const Rec *r
    cdef const Pair *pr
    cdef unsigned char *p
    cdef unsigned char *q
    cdef int64_t sysflag
    cdef uint32_t tail
    for i in range(n):
        r = &recs[i]
        p = out + r.start
        tail = <uint32_t>((uniq_first + i) & 0xFFFF)
        mq_put32(p, r.size)
        mq_put32(p + 4, MAGIC_V2 if r.topic_len > MAX_TOPIC_FIELD_V1 else MAGIC_V1)
        mq_put32(p + 12, 0)
        mq_put32(p + 16, cols[0, i])
        mq_put64(p + 20, 0)
        mq_put64(p + 28, 0)
        sysflag = (cols[1, i] & ~0x30) | (0x10 if r.born_len == 20 else 0) | (0x20 if sn == 20 else 0)
        mq_put32(p + 36, sysflag)
        mq_put64(p + 40, cols[2, i])
        memcpy(p + 48, r.born, r.born_len)
        q = p + 48 + r.born_len
        mq_put64(q, 0)
        memcpy(q + 8, sh, sn)
        q += 8 + sn
        mq_put32(q, cols[3, i])
        mq_put64(q + 4, cols[4, i])
        mq_put32(q + 12, r.body_len)
        q += 16
        if r.body_len:
            memcpy(q, r.body, r.body_len)
            mq_put32(p + 8, mq_crc32(0, q, r.body_len) & CRC_MASK)
        else:
            mq_put32(p + 8, 0)
        q += r.body_len
        memcpy(q, r.topic, r.topic_len)
        q += r.topic_len
        mq_put16(q, r.props_len)
        q += 2
        if raw_mode:
            if r.props_len:
                memcpy(q, r.raw, r.props_len)
            continue
        for j in range(r.pair_lo, r.pair_hi):
            pr = &pairs[j]
            if pr.kind == KIND_PLAIN and pr.value == NULL:
                continue
            memcpy(q, pr.name, pr.name_len)
            q += pr.name_len
            q[0] = 1
            q += 1
            if pr.kind == KIND_TAGS:
                memcpy(q, r.tag, r.tag_len)
                q += r.tag_len
            elif pr.kind == KIND_KEYS:
                memcpy(q, r.key, r.key_len)
                q += r.key_len
            elif pr.kind == KIND_UNIQ:
                q = _uniq(q, r, head, head_len, tail)
            else:
                memcpy(q, pr.value, pr.value_len)
                q += pr.value_len
            q[0] = 2
            q += 1
        if r.tag != NULL and not (r.user_has & HAS_TAGS):
            q = _put(q, "TAGS\x01", 5)
            memcpy(q, r.tag, r.tag_len)
            q += r.tag_len
            q[0] = 2
            q += 1
        if r.key != NULL and not (r.user_has & HAS_KEYS):
            q = _put(q, "KEYS\x01", 5)
            memcpy(q, r.key, r.key_len)
            q += r.key_len
            q[0] = 2
            q += 1
        if not (r.user_has & HAS_UNIQ):
            q = _put(q, "UNIQ_KEY\x01", 9)
            q = _uniq(q, r, head, head_len, tail)
            q[0] = 2
            q += 1


def crc32(data, uint32_t crc=0):
    """zlib's crc32 of ``data`` (bytes-like), as the encoder computes body CRCs (folded
    with PCLMULQDQ where the CPU has it): for the differential test and the bench."""
    cdef const unsigned char[::1] v = data
    cdef uint32_t out
    with nogil:
        out = mq_crc32(crc, &v[0] if v.shape[0] else NULL, v.shape[0])
    return out


def crc_folds():
    """Whether the CPU folds the CRC with PCLMULQDQ (else zlib's table-driven crc32)."""
    return mq_crc_fold_init() > 0


def distinct(list values, int64_t[::1] codes not None):
    """The distinct values of ``values`` in order of first appearance; ``codes[i]`` is
    the number of ``values[i]`` among them (a dict lookup per item, in C: the topics
    of a batch given as a list of names)."""
    cdef Py_ssize_t n = len(values), i
    cdef dict index = {}
    cdef list out = []
    if codes.shape[0] != n:
        raise ValueError("codes must have one entry per value")
    for i in range(n):
        v = values[i]
        c = index.get(v)
        if c is None:
            c = len(out)
            index[v] = c
            out.append(v)
        codes[i] = <int64_t>c
    return out


def place(const int64_t[::1] sizes, int64_t pos, int64_t segment_bytes, int64_t blank_bytes, int64_t[::1] physical):
    """Lay records of ``sizes`` out from commitlog offset ``pos``: a record goes where
    it fits its segment with ``blank_bytes`` to spare, else a BLANK ends the segment and
    it starts the next. Writes each record's offset into ``physical``; returns
    ``(end offset, [offsets of the BLANKs])``."""
    cdef Py_ssize_t i, n = sizes.shape[0]
    cdef int64_t room
    blanks = []
    if physical.shape[0] != n:
        raise ValueError("physical has the wrong length")
    for i in range(n):
        room = segment_bytes - pos % segment_bytes
        if sizes[i] + blank_bytes > room:
            blanks.append(pos)
            pos += room
        physical[i] = pos
        pos += sizes[i]
    return pos, blanks


cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, unsigned int maxchar)
    void *PyUnicode_DATA(object s)


def offset_msg_ids(str prefix, const int64_t[:] offsets):
    """Offset msgIds ``prefix`` + 16 upper-case hex digits of each offset (as
    formats.msgid.build_offset_msg_id writes them), one str each, made in one loop."""
    cdef Py_ssize_t i, k, n = offsets.shape[0]
    cdef bytes head = prefix.encode("ascii")
    cdef Py_ssize_t hn = len(head)
    cdef const char *hp = PyBytes_AS_STRING(head)
    cdef unsigned char *d
    cdef uint64_t v
    out = [None] * n
    for i in range(n):
        s = PyUnicode_New(hn + 16, 127)
        d = <unsigned char *>PyUnicode_DATA(s)
        memcpy(d, hp, hn)
        v = <uint64_t>offsets[i]
        for k in range(15, -1, -1):
            d[hn + k] = mq_hex[v & 15]
            v >>= 4
        out[i] = s
    return out
