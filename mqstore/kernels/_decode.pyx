# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Record decode for pull answers and for the Spark data source (issue 15).

Three passes over records known to start at given positions of one buffer:

* ``locate`` (no GIL): validates each record exactly as ``formats.message.decode_record``
  accepts it (it stops at the first one decode_record would refuse, whose error the
  caller then gets from decode_record itself) and writes its fixed fields and the
  places of its variable ones (hosts, body, topic, properties) as int64 columns;
* ``records`` (with the GIL, it makes Python objects): ``MessageRecord`` tuples from
  those columns (a host or topic equal to the previous record's is the same object);
* ``arrow_fill`` (no GIL): the Arrow buffers of the data source's variable-width
  columns (body, topic, properties as a string or parsed into a map, TAGS / KEYS /
  UNIQ_KEY, the offset msgId) and each record's two host fields, copied in one pass.

The reference models they are held to are tests/kernels/model_decode.py.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_New, PyDict_SetItem
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset


cdef extern from "big_endian.h" nogil:
    int16_t mq_be16(const unsigned char *p)
    int32_t mq_be32(const unsigned char *p)
    int64_t mq_be64(const unsigned char *p)


cdef extern from "utf8.h" nogil:
    int mq_utf8_ok(const unsigned char *p, int64_t n)


cdef extern from "Python.h":
    PyObject *PyType_GenericAlloc(PyTypeObject *t, Py_ssize_t n) except NULL
    void PyTuple_SET_ITEM(object t, Py_ssize_t i, object v)


cdef extern from "crc32_fold.h" nogil:
    int mq_crc_fold_init()
    uint32_t mq_crc32(uint32_t crc, const unsigned char *buf, size_t len)

mq_crc_fold_init()  # once, with the GIL: the CPU check the CRC's folding depends on


cdef enum:
    MAGIC_V1 = -626843481  # 0xDAA320A7
    MAGIC_V2 = -626843477  # 0xDAA320AB
    CRC_MASK = 0x7FFFFFFF
    N_COLS = 22
    HOST_SLOT = 21  # one byte of length (8 or 20), then the host bytes, zero-padded

FORMAT = (MAGIC_V1, MAGIC_V2, CRC_MASK)

# Rows of ``cols`` (one column per record): the fixed fields, then where the variable ones are.
cpdef enum:
    COL_TOTAL_SIZE = 0
    COL_MAGIC = 1
    COL_BODY_CRC = 2
    COL_QUEUE_ID = 3
    COL_FLAG = 4
    COL_QUEUE_OFFSET = 5
    COL_PHYSICAL_OFFSET = 6
    COL_SYSFLAG = 7
    COL_BORN_TIMESTAMP = 8
    COL_BORN_HOST_AT = 9
    COL_BORN_HOST_LEN = 10
    COL_STORE_TIMESTAMP = 11
    COL_STORE_HOST_AT = 12
    COL_STORE_HOST_LEN = 13
    COL_RECONSUME_TIMES = 14
    COL_PREPARED_TRANSACTION_OFFSET = 15
    COL_BODY_AT = 16
    COL_BODY_LEN = 17
    COL_TOPIC_AT = 18
    COL_TOPIC_LEN = 19
    COL_PROPS_AT = 20
    COL_PROPS_LEN = 21

COLUMNS = N_COLS
HOST_BYTES = HOST_SLOT


cdef inline bint _locate_one(
    const unsigned char *b, int64_t end, int64_t pos, bint check_crc, int64_t *row
) noexcept nogil:
    """decode_record's acceptance, field by field: True and ``row`` filled, or False."""
    if pos < 0 or pos + 48 > end:
        return False
    cdef int32_t total = mq_be32(b + pos)
    cdef int32_t magic = mq_be32(b + pos + 4)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return False
    if total < 0 or pos + total > end:
        return False
    cdef int64_t rec_end = pos + total
    cdef int32_t sysflag = mq_be32(b + pos + 36)
    cdef int64_t bl = 20 if sysflag & 0x10 else 8
    cdef int64_t sl = 20 if sysflag & 0x20 else 8
    cdef int64_t p = pos + 48
    cdef int64_t born_at = p
    p += bl
    if p + 8 > rec_end:
        return False
    cdef int64_t store_ts = mq_be64(b + p)
    p += 8
    cdef int64_t store_at = p
    p += sl + 12
    if p + 4 > rec_end:
        return False
    cdef int64_t body_len = mq_be32(b + p)
    p += 4
    if body_len < 0 or p + body_len > rec_end:
        return False
    cdef int64_t body_at = p
    p += body_len
    cdef int64_t topic_len
    if magic == MAGIC_V2:
        if p + 2 > rec_end:
            return False
        topic_len = mq_be16(b + p)
        p += 2
    else:
        if p + 1 > rec_end:
            return False
        topic_len = <int8_t>b[p]
        p += 1
    if topic_len < 0 or p + topic_len + 2 > rec_end:
        return False
    cdef int64_t topic_at = p
    p += topic_len
    cdef int64_t props_len = mq_be16(b + p)
    p += 2
    if props_len < 0 or p + props_len != rec_end:
        return False
    if check_crc and body_len > 0:
        if <int64_t>(mq_crc32(0, b + body_at, <size_t>body_len) & CRC_MASK) != <int64_t>mq_be32(b + pos + 8):
            return False
    row[COL_TOTAL_SIZE] = total
    row[COL_MAGIC] = magic
    row[COL_BODY_CRC] = mq_be32(b + pos + 8)
    row[COL_QUEUE_ID] = mq_be32(b + pos + 12)
    row[COL_FLAG] = mq_be32(b + pos + 16)
    row[COL_QUEUE_OFFSET] = mq_be64(b + pos + 20)
    row[COL_PHYSICAL_OFFSET] = mq_be64(b + pos + 28)
    row[COL_SYSFLAG] = sysflag
    row[COL_BORN_TIMESTAMP] = mq_be64(b + pos + 40)
    row[COL_BORN_HOST_AT] = born_at
    row[COL_BORN_HOST_LEN] = bl
    row[COL_STORE_TIMESTAMP] = store_ts
    row[COL_STORE_HOST_AT] = store_at
    row[COL_STORE_HOST_LEN] = sl
    row[COL_RECONSUME_TIMES] = mq_be32(b + store_at + sl)
    row[COL_PREPARED_TRANSACTION_OFFSET] = mq_be64(b + store_at + sl + 4)
    row[COL_BODY_AT] = body_at
    row[COL_BODY_LEN] = body_len
    row[COL_TOPIC_AT] = topic_at
    row[COL_TOPIC_LEN] = topic_len
    row[COL_PROPS_AT] = p
    row[COL_PROPS_LEN] = props_len
    return True


def locate(const unsigned char[::1] buf, const int64_t[::1] positions, bint check_crc, int64_t[:, ::1] cols not None):
    """Validate and locate the records at ``positions``; returns how many were decoded
    before the first that decode_record refuses (``len(positions)``: all). Their
    columns go to ``cols[:, i]`` (rows COL_*)."""
    cdef int64_t n = positions.shape[0]
    if cols.shape[0] < N_COLS or cols.shape[1] < n:
        raise ValueError("cols is smaller than N_COLS x len(positions)")
    cdef int64_t end = buf.shape[0]
    cdef const unsigned char *b = &buf[0] if end else NULL
    cdef int64_t stride = cols.shape[1]
    cdef int64_t *cp = &cols[0, 0] if n else NULL
    cdef int64_t row[N_COLS]
    cdef int64_t i, j
    with nogil:
        for i in range(n):
            if b == NULL or not _locate_one(b, end, positions[i], check_crc, row):
                break
            for j in range(N_COLS):
                cp[j * stride + i] = row[j]
        else:
            i = n
    return i


cdef inline int64_t _find(const unsigned char *p, int64_t a, int64_t e, int c) noexcept nogil:
    """The first index of byte ``c`` in ``p[a:e]``, or ``e`` (memchr: word at a time)."""
    if a >= e:
        return e
    cdef const unsigned char *hit = <const unsigned char *>memchr(p + a, c, <size_t>(e - a))
    return e if hit == NULL else hit - p


cdef inline object _text(const unsigned char *p, int64_t n):
    """Java's new String(bytes, UTF_8) as Python's ``decode("utf-8", "replace")``."""
    return PyUnicode_DecodeUTF8(<const char *>p, n, "replace")


cdef str _TAGS = "TAGS", _KEYS = "KEYS", _UNIQ_KEY = "UNIQ_KEY"


cdef inline object _name(const unsigned char *p, int64_t n):
    """A property name; the three the store sets are the same str objects every time."""
    if n == 4 and memcmp(p, b"TAGS", 4) == 0:
        return _TAGS
    if n == 4 and memcmp(p, b"KEYS", 4) == 0:
        return _KEYS
    if n == 8 and memcmp(p, b"UNIQ_KEY", 8) == 0:
        return _UNIQ_KEY
    return _text(p, n)


cdef object _properties(const unsigned char *p, int64_t n):
    """parse_properties(props.decode("utf-8", "replace")), from the bytes: entries
    split at 0x02, name and value at the first 0x01, both non-empty, the last wins.
    (Both separators are ASCII, which no replaced sequence contains.)"""
    cdef dict out = PyDict_New()
    cdef int64_t a = 0, e, s
    while a <= n:
        e = _find(p, a, n, 2)
        s = _find(p, a, e, 1)
        if a < s < e - 1:
            PyDict_SetItem(out, _name(p + a, s - a), _text(p + s + 1, e - s - 1))
        a = e + 1
    return out


cdef inline void _set(object t, Py_ssize_t i, object v):
    Py_INCREF(v)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(t, i, v)


def records(
    const unsigned char[::1] buf,
    const int64_t[:, ::1] cols,
    Py_ssize_t n,
    object record_type,
    object host_of,
):
    """``record_type`` (MessageRecord) tuples of the first ``n`` located records;
    ``host_of(bytes)`` makes a host (called once per run of equal hosts)."""
    cdef const unsigned char *b = &buf[0] if buf.shape[0] else NULL
    cdef list out = PyList_New(n)
    cdef Py_ssize_t i
    cdef int64_t ba, bl, sa, sl, ta, tl
    cdef int64_t pba = -1, pbl = 0, psa = -1, psl = 0, pta = -1, ptl = 0
    cdef object born = None, store = None, topic = None, rec
    for i in range(n):
        ba, bl = cols[COL_BORN_HOST_AT, i], cols[COL_BORN_HOST_LEN, i]
        if pba < 0 or bl != pbl or memcmp(b + ba, b + pba, bl) != 0:
            born = host_of(PyBytes_FromStringAndSize(<const char *>b + ba, bl))
            pba, pbl = ba, bl
        sa, sl = cols[COL_STORE_HOST_AT, i], cols[COL_STORE_HOST_LEN, i]
        if psa < 0 or sl != psl or memcmp(b + sa, b + psa, sl) != 0:
            store = host_of(PyBytes_FromStringAndSize(<const char *>b + sa, sl))
            psa, psl = sa, sl
        ta, tl = cols[COL_TOPIC_AT, i], cols[COL_TOPIC_LEN, i]
        if pta < 0 or tl != ptl or memcmp(b + ta, b + pta, tl) != 0:
            topic = _text(b + ta, tl)
            pta, ptl = ta, tl
        # The record tuple allocated as its own type (namedtuple's __new__ would copy a tuple).
        rec = <object>PyType_GenericAlloc(<PyTypeObject *>record_type, 17)
        Py_DECREF(rec)  # the alloc's reference, which <object> took over and counted again
        _set(rec, 0, cols[COL_TOTAL_SIZE, i])
        _set(rec, 1, cols[COL_MAGIC, i])
        _set(rec, 2, cols[COL_BODY_CRC, i])
        _set(rec, 3, cols[COL_QUEUE_ID, i])
        _set(rec, 4, cols[COL_FLAG, i])
        _set(rec, 5, cols[COL_QUEUE_OFFSET, i])
        _set(rec, 6, cols[COL_PHYSICAL_OFFSET, i])
        _set(rec, 7, cols[COL_SYSFLAG, i])
        _set(rec, 8, cols[COL_BORN_TIMESTAMP, i])
        _set(rec, 9, born)
        _set(rec, 10, cols[COL_STORE_TIMESTAMP, i])
        _set(rec, 11, store)
        _set(rec, 12, cols[COL_RECONSUME_TIMES, i])
        _set(rec, 13, cols[COL_PREPARED_TRANSACTION_OFFSET, i])
        _set(rec, 14, PyBytes_FromStringAndSize(<const char *>b + cols[COL_BODY_AT, i], cols[COL_BODY_LEN, i]))
        _set(rec, 15, topic)
        _set(rec, 16, _properties(b + cols[COL_PROPS_AT, i], cols[COL_PROPS_LEN, i]))
        Py_INCREF(rec)
        PyList_SET_ITEM(out, i, rec)
    return out


def utf8_bad(const unsigned char[::1] src, const int64_t[::1] at, const int64_t[::1] length, uint8_t[::1] out):
    """``out[i]`` = 1 where ``src[at[i] : at[i] + length[i]]`` is not well-formed UTF-8; the count."""
    cdef int64_t n = at.shape[0], i, bad = 0
    cdef const unsigned char *b = &src[0] if src.shape[0] else NULL
    with nogil:
        for i in range(n):
            if length[i] and not mq_utf8_ok(b + at[i], length[i]):
                out[i] = 1
                bad += 1
            else:
                out[i] = 0
    return bad


cdef const char *_HEX = b"0123456789ABCDEF"


cdef inline int64_t _put(uint8_t *dst, int64_t at, const unsigned char *src, int64_t n) noexcept nogil:
    if n > 0:
        memcpy(dst + at, src, n)
    return at + n


cdef inline void _host_slot(uint8_t *slot, const unsigned char *host, int64_t n) noexcept nogil:
    """A host slot: the length byte, the host's ``n`` bytes (8 or 20), zeros after."""
    slot[0] = <uint8_t>n
    memcpy(slot + 1, host, n)
    memset(slot + 1 + n, 0, HOST_SLOT - 1 - n)


cdef inline bint _is(const unsigned char *p, int64_t n, const char *name, int64_t m) noexcept nogil:
    return n == m and memcmp(p, name, m) == 0


def arrow_fill(
    const unsigned char[::1] buf,
    const int64_t[:, ::1] cols,
    const unsigned char[::1] tsrc,
    const int64_t[::1] t_at,
    const int64_t[::1] t_len,
    const unsigned char[::1] psrc,
    const int64_t[::1] p_at,
    const int64_t[::1] p_len,
    bint as_map,
    int32_t[:, ::1] offs not None,
    uint8_t[::1] body not None,
    uint8_t[::1] topic not None,
    uint8_t[::1] props not None,
    uint8_t[:, ::1] special not None,
    int32_t[::1] entry_offs not None,
    int32_t[::1] name_offs not None,
    uint8_t[::1] names not None,
    int32_t[::1] value_offs not None,
    uint8_t[::1] values not None,
    uint8_t[:, ::1] valid not None,
    uint8_t[::1] msg_ids not None,
    uint8_t[:, :, ::1] hosts not None,
):
    """Fill the Arrow buffers of ``n = len(t_at)`` located records.

    Topics and properties are read from ``tsrc`` / ``psrc`` at ``t_at``/``t_len`` and
    ``p_at``/``p_len`` (the record bytes, or replaced text for records whose bytes are
    not UTF-8); everything else from ``buf`` at ``cols``. ``offs`` rows: 0 body, 1
    topic, 2 properties string (unless ``as_map``), 3-5 TAGS / KEYS / UNIQ_KEY (data in
    ``special[0..2]``), 6 the msgId; ``valid[0..2]`` their validity bytes. The map: ``entry_offs`` per record, name
    and value offsets and data per entry (parse_properties' rules). ``hosts[0|1, i]``
    the born / store host slot (length byte, then the bytes). Returns
    ``(body, topic, props, tags, keys, uniq, entries, names, values, msg_ids)`` used."""
    cdef int64_t n = t_at.shape[0]
    cdef const unsigned char *b = &buf[0] if buf.shape[0] else NULL
    cdef const unsigned char *tb = &tsrc[0] if tsrc.shape[0] else NULL
    cdef const unsigned char *pb = &psrc[0] if psrc.shape[0] else NULL
    cdef int64_t i, a, e, s, q, k, ha, hl
    cdef int64_t nb = 0, nt = 0, npr = 0, ne = 0, nn = 0, nv = 0, nm = 0, n_tag = 0, n_key = 0, n_uq = 0
    cdef int64_t tag_a, tag_l, key_a, key_l, uq_a, uq_l
    cdef const unsigned char *pp
    cdef uint64_t phys
    cdef int32_t *o_body = &offs[0, 0]
    cdef int32_t *o_topic = &offs[1, 0]
    cdef int32_t *o_props = &offs[2, 0]
    cdef int32_t *o_tags = &offs[3, 0]
    cdef int32_t *o_keys = &offs[4, 0]
    cdef int32_t *o_uniq = &offs[5, 0]
    cdef int32_t *o_msg = &offs[6, 0]
    with nogil:
        o_body[0] = o_topic[0] = o_props[0] = o_msg[0] = o_tags[0] = o_keys[0] = o_uniq[0] = 0
        entry_offs[0] = name_offs[0] = value_offs[0] = 0
        for i in range(n):
            nb = _put(&body[0], nb, b + cols[COL_BODY_AT, i], cols[COL_BODY_LEN, i])
            o_body[i + 1] = <int32_t>nb
            nt = _put(&topic[0], nt, tb + t_at[i], t_len[i])
            o_topic[i + 1] = <int32_t>nt
            pp = pb + p_at[i]
            q = p_len[i]
            if not as_map:
                npr = _put(&props[0], npr, pp, q)
                o_props[i + 1] = <int32_t>npr
            tag_a = key_a = uq_a = -1
            tag_l = key_l = uq_l = 0
            a = 0
            while a <= q:
                e = _find(pp, a, q, 2)
                s = _find(pp, a, e, 1)
                if a < s < e - 1:  # name [a, s), value (s, e), both non-empty
                    if as_map:
                        nn = _put(&names[0], nn, pp + a, s - a)
                        ne += 1
                        name_offs[ne] = <int32_t>nn
                        nv = _put(&values[0], nv, pp + s + 1, e - s - 1)
                        value_offs[ne] = <int32_t>nv
                    if _is(pp + a, s - a, b"TAGS", 4):
                        tag_a, tag_l = s + 1, e - s - 1
                    elif _is(pp + a, s - a, b"KEYS", 4):
                        key_a, key_l = s + 1, e - s - 1
                    elif _is(pp + a, s - a, b"UNIQ_KEY", 8):
                        uq_a, uq_l = s + 1, e - s - 1
                a = e + 1
            entry_offs[i + 1] = <int32_t>ne
            valid[0, i] = tag_a >= 0
            if tag_a >= 0:
                n_tag = _put(&special[0, 0], n_tag, pp + tag_a, tag_l)
            o_tags[i + 1] = <int32_t>n_tag
            valid[1, i] = key_a >= 0
            if key_a >= 0:
                n_key = _put(&special[1, 0], n_key, pp + key_a, key_l)
            o_keys[i + 1] = <int32_t>n_key
            valid[2, i] = uq_a >= 0
            if uq_a >= 0:
                n_uq = _put(&special[2, 0], n_uq, pp + uq_a, uq_l)
            o_uniq[i + 1] = <int32_t>n_uq
            # hosts and the offset msgId (store host hex, then the physical offset's 16 digits)
            _host_slot(&hosts[0, i, 0], b + cols[COL_BORN_HOST_AT, i], cols[COL_BORN_HOST_LEN, i])
            ha, hl = cols[COL_STORE_HOST_AT, i], cols[COL_STORE_HOST_LEN, i]
            _host_slot(&hosts[1, i, 0], b + ha, hl)
            for k in range(hl):
                msg_ids[nm] = _HEX[b[ha + k] >> 4]
                msg_ids[nm + 1] = _HEX[b[ha + k] & 15]
                nm += 2
            phys = <uint64_t>cols[COL_PHYSICAL_OFFSET, i]
            for k in range(15, -1, -1):
                msg_ids[nm + k] = _HEX[phys & 15]
                phys >>= 4
            nm += 16
            o_msg[i + 1] = <int32_t>nm
    return nb, nt, npr, n_tag, n_key, n_uq, ne, nn, nv, nm


def gather(const unsigned char[::1] src, const int64_t[::1] starts, const int64_t[::1] sizes, int64_t[::1] offsets):
    """The pieces ``src[starts[i] : starts[i] + sizes[i]]`` (each clipped to ``src`` as
    a Python slice is) copied end to end into one new bytes object; ``offsets`` (n + 1)
    gets where each piece starts in it and, last, its length. A pull's raw records
    leave the store this way: one buffer, no bytes object per record."""
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t end = src.shape[0], total = 0, a, b
    if sizes.shape[0] != n or offsets.shape[0] != n + 1:
        raise ValueError(f"gather: {n} starts, {sizes.shape[0]} sizes, {offsets.shape[0]} offsets (n + 1 wanted)")
    with nogil:  # first the clipped lengths, so the output is allocated once
        offsets[0] = 0
        for i in range(n):
            a = min(max(starts[i], 0), end)
            b = min(max(starts[i] + max(sizes[i], 0), a), end)
            total += b - a
            offsets[i + 1] = total
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef char *dst = out
    cdef const unsigned char *s = &src[0] if end else NULL
    with nogil:
        for i in range(n):
            a = min(max(starts[i], 0), end)
            if offsets[i + 1] > offsets[i]:
                memcpy(dst + offsets[i], s + a, offsets[i + 1] - offsets[i])
    return out
