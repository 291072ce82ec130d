# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The record scan of ``mqstore.formats.message.scan_records``: one pass over a
buffer that follows TOTALSIZE and validates each record as it goes (magic V1/V2,
lengths, PHYSICALOFFSET, body CRC: folded with PCLMULQDQ where the CPU has it, crc32_fold.h), writing record starts, sizes and, on request,
the columns RecordFields is made of into caller-owned int64 arrays. The per-record
loop runs without the GIL. The reference model it must equal is tests/kernels/model_scan.py.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset


cdef extern from "big_endian.h" nogil:
    int16_t mq_be16(const unsigned char *p)
    int32_t mq_be32(const unsigned char *p)
    int64_t mq_be64(const unsigned char *p)


cdef extern from "crc32_fold.h" nogil:
    int mq_crc_fold_init()
    uint32_t mq_crc32(uint32_t crc, const unsigned char *buf, size_t len)


mq_crc_fold_init()  # once, with the GIL: the CPU check the CRC's folding depends on


# Values the message format fixes (mqstore/formats/message.py; checked in __init__.py).
cdef enum:
    MAGIC_V1 = -626843481  # 0xDAA320A7
    MAGIC_V2 = -626843477  # 0xDAA320AB
    BLANK_RECORD_BYTES = 8
    MIN_RECORD_BYTES = 91
    CRC_MASK = 0x7FFFFFFF
    N_COLS = 7

# The format constants compiled in, for the package to check against formats.message.
FORMAT = (MAGIC_V1, MAGIC_V2, BLANK_RECORD_BYTES, MIN_RECORD_BYTES, CRC_MASK)

# What ended a call (returned with the count and the stop position).
cpdef enum:
    STOP_CLASSIFY = 0  # the walk ended (or met a BLANK / a bad head) at ``stop``: the caller classifies what lies there
    STOP_LAYOUT = 1  # the record at ``stop`` has fields that disagree with TOTALSIZE or its position
    STOP_CRC = 2  # the record at ``stop`` fails its body CRC
    STOP_FULL = 3  # the output arrays are full: call again from ``stop`` (more records may follow)

# Rows of the ``cols`` array (one column per record).
cpdef enum:
    COL_QUEUE_ID = 0
    COL_QUEUE_OFFSET = 1
    COL_SYSFLAG = 2
    COL_STORE_TIMESTAMP = 3
    COL_TOPIC_AT = 4
    COL_TOPIC_LEN = 5
    COL_PROPS_LEN = 6

COLUMNS = N_COLS


cdef inline int _check(
    const unsigned char *b,
    int64_t at,
    int64_t size,
    bint check_crc,
    bint has_base,
    int64_t base_offset,
    bint want_cols,
    int64_t *row,
) noexcept nogil:
    """Validate the record at ``at`` (``at + size`` is within the data): -1 for a
    bad head (not a message magic, or shorter than a minimal record), STOP_LAYOUT,
    STOP_CRC, or 0 when valid (then ``row`` holds its columns if ``want_cols``)."""
    cdef int32_t magic = mq_be32(b + at + 4)
    if (magic != MAGIC_V1 and magic != MAGIC_V2) or size < MIN_RECORD_BYTES:
        return -1
    cdef bint v2 = magic == MAGIC_V2
    cdef int64_t rec_end = at + size
    cdef int32_t sysflag = mq_be32(b + at + 36)
    cdef int64_t born = 20 if sysflag & 0x10 else 8
    cdef int64_t store = 20 if sysflag & 0x20 else 8
    cdef int64_t body_len_at = at + 68 + born + store
    if body_len_at + 4 > rec_end:
        return STOP_LAYOUT
    cdef int64_t body_len = mq_be32(b + body_len_at)
    cdef int64_t tlb = 2 if v2 else 1
    if body_len < 0 or body_len_at + 4 + body_len + tlb + 2 > rec_end:
        return STOP_LAYOUT
    cdef int64_t topic_len_at = body_len_at + 4 + body_len
    cdef int64_t topic_len
    if v2:
        topic_len = mq_be16(b + topic_len_at)
    else:
        topic_len = <int8_t>b[topic_len_at]
    cdef int64_t props_len_at = topic_len_at + tlb + topic_len
    if topic_len < 0 or props_len_at + 2 > rec_end:
        return STOP_LAYOUT
    cdef int64_t props_len = mq_be16(b + props_len_at)
    if props_len < 0 or props_len_at + 2 + props_len != rec_end:
        return STOP_LAYOUT
    if has_base and mq_be64(b + at + 28) != at + base_offset:
        return STOP_LAYOUT
    if check_crc and body_len > 0:
        if <int64_t>(mq_crc32(0, b + body_len_at + 4, <size_t>body_len) & CRC_MASK) != <int64_t>mq_be32(b + at + 8):
            return STOP_CRC
    if want_cols:
        row[COL_QUEUE_ID] = mq_be32(b + at + 12)
        row[COL_QUEUE_OFFSET] = mq_be64(b + at + 20)
        row[COL_SYSFLAG] = sysflag
        row[COL_STORE_TIMESTAMP] = mq_be64(b + at + 48 + born)
        row[COL_TOPIC_AT] = topic_len_at + tlb
        row[COL_TOPIC_LEN] = topic_len
        row[COL_PROPS_LEN] = props_len
    return 0


def scan(
    const unsigned char[::1] buf,
    Py_ssize_t pos,
    Py_ssize_t end,
    Py_ssize_t limit,
    Py_ssize_t budget,
    bint allow_oversized_first,
    bint check_crc,
    object base_offset,
    int64_t[::1] positions not None,
    int64_t[::1] sizes not None,
    int64_t[:, ::1] cols,
):
    """Walk and validate records from ``pos``; returns ``(count, stop, code)``.

    ``end`` is the end of the data (at most ``len(buf)``), ``limit`` (<= ``end``) where
    the walk stops taking records, ``budget`` how many records it may take (-1: any).
    With ``allow_oversized_first`` a first record that crosses ``limit`` but not ``end``
    is taken (scan_records' rule: at least one record). Records go to ``positions``,
    ``sizes`` and, if ``cols`` is not None, ``cols[:, i]`` (rows COL_*), at most as many
    as ``positions`` holds. ``code`` is one of STOP_*."""
    cdef int64_t n_buf = buf.shape[0]
    if pos < 0 or end > n_buf or limit > end:
        raise ValueError(f"scan range [{pos}, {end}) limit {limit} does not fit a buffer of {n_buf} bytes")
    cdef int64_t cap = positions.shape[0]
    if sizes.shape[0] < cap or (cols is not None and (cols.shape[0] < N_COLS or cols.shape[1] < cap)):
        raise ValueError("output arrays are smaller than positions")
    cdef bint want_cols = cols is not None
    cdef bint has_base = base_offset is not None
    cdef int64_t base = base_offset if has_base else 0
    cdef const unsigned char *b = &buf[0] if n_buf else NULL
    cdef int64_t *pp = &positions[0] if cap else NULL
    cdef int64_t *sp = &sizes[0] if cap else NULL
    cdef int64_t *cp = &cols[0, 0] if want_cols and cap else NULL
    cdef int64_t stride = cols.shape[1] if want_cols else 0
    cdef int64_t row[N_COLS]
    cdef int64_t p = pos, last = end - 8, lim = limit, n_end = end, left = budget
    cdef int64_t k = 0, size = 0, j
    cdef int code = STOP_CLASSIFY, rc
    cdef bint ended = False
    with nogil:
        while p <= last and left != 0:
            if k == cap:
                code = STOP_FULL
                ended = True
                break
            size = mq_be32(b + p)
            if size < BLANK_RECORD_BYTES or p + size > lim:
                break
            rc = _check(b, p, size, check_crc, has_base, base, want_cols, row)
            if rc != 0:
                code = STOP_CLASSIFY if rc < 0 else rc
                ended = True
                break
            pp[k] = p
            sp[k] = size
            if want_cols:
                for j in range(N_COLS):
                    cp[j * stride + k] = row[j]
            k += 1
            p += size
            if left > 0:
                left -= 1
        # At least one record: the first is taken even if it alone crosses ``limit``.
        if not ended and k == 0 and allow_oversized_first and lim < n_end and p <= last and cap > 0:
            size = mq_be32(b + p)
            if size >= BLANK_RECORD_BYTES and p + size <= n_end:
                rc = _check(b, p, size, check_crc, has_base, base, want_cols, row)
                if rc != 0:
                    code = STOP_CLASSIFY if rc < 0 else rc
                else:
                    pp[0] = p
                    sp[0] = size
                    if want_cols:
                        for j in range(N_COLS):
                            cp[j * stride] = row[j]
                    k = 1
                    p += size
    return k, p, code


cdef extern from "topic_hash.h" nogil:
    uint64_t mq_topic_hash(const unsigned char *p, int64_t n)


cdef int64_t *_topic_table(int64_t cap, const unsigned char *b, const int64_t *at, const int64_t *length,
                           const int64_t *first, int64_t distinct) noexcept nogil:
    """An open-addressing table of ``cap`` slots (a power of two) holding topics
    ``0 .. distinct - 1`` (each by the record of its first appearance); NULL if out of memory."""
    cdef int64_t *table = <int64_t *>malloc(cap * sizeof(int64_t))
    cdef int64_t c, slot
    if table == NULL:
        return NULL
    memset(table, 0xFF, cap * sizeof(int64_t))
    for c in range(distinct):
        slot = <int64_t>(mq_topic_hash(b + at[first[c]], length[first[c]]) & <uint64_t>(cap - 1))
        while table[slot] >= 0:
            slot = (slot + 1) & (cap - 1)
        table[slot] = c
    return table


def topic_codes(
    const unsigned char[::1] buf,
    const int64_t[::1] at not None,
    const int64_t[::1] length not None,
    int64_t[::1] codes not None,
    int64_t[::1] first not None,
):
    """Number the distinct topic byte strings ``buf[at[i] : at[i] + length[i]]`` in order
    of first appearance: ``codes[i]`` is record i's number, ``first[c]`` the record
    where topic c first appears. Returns how many there are. One pass: a record whose
    topic is the previous record's takes its number; others are looked up in an
    open-addressing table of first appearances (compared byte for byte), which doubles
    when half full."""
    cdef int64_t n = at.shape[0]
    if length.shape[0] != n or codes.shape[0] < n or first.shape[0] < n:
        raise ValueError("column lengths differ")
    if n == 0:
        return 0
    cdef const unsigned char *b = &buf[0]
    cdef const int64_t *ap = &at[0]
    cdef const int64_t *lp = &length[0]
    cdef int64_t *fp = &first[0]
    cdef int64_t cap = 64
    cdef int64_t i, j, c, slot, ln, distinct = 0, prev_at = -1, prev_len = -1, prev_code = -1
    cdef int64_t *table
    cdef int64_t *grown
    cdef const unsigned char *p
    cdef bint failed = False
    with nogil:
        table = _topic_table(cap, b, ap, lp, fp, 0)
        for i in range(n):
            if table == NULL:
                failed = True
                break
            p = b + ap[i]
            ln = lp[i]
            if ln == prev_len and memcmp(p, b + prev_at, ln) == 0:
                codes[i] = prev_code
                continue
            slot = <int64_t>(mq_topic_hash(p, ln) & <uint64_t>(cap - 1))
            while True:
                c = table[slot]
                if c < 0:  # a new topic
                    c = distinct
                    fp[c] = i
                    table[slot] = c
                    distinct += 1
                    if distinct * 2 > cap:
                        grown = _topic_table(cap * 2, b, ap, lp, fp, distinct)
                        free(table)
                        table = grown
                        cap *= 2
                    break
                j = fp[c]
                if lp[j] == ln and memcmp(b + ap[j], p, ln) == 0:
                    break
                slot = (slot + 1) & (cap - 1)
            codes[i] = c
            prev_at, prev_len, prev_code = ap[i], ln, c
        free(table)
    if failed:
        raise MemoryError()
    return distinct


cdef extern from "utf8.h" nogil:
    int mq_utf8_ok(const unsigned char *p, int64_t n)


# Why ``check_properties`` refused a record.
cpdef enum:
    PROPS_OK = 0
    PROPS_NOT_UTF8 = 1  # the properties string is not well-formed UTF-8
    PROPS_MALFORMED = 2  # a pair without its \x01, an empty name or value, or a \x01 in a value
    PROPS_RESERVED = 3  # a pair names one of ``reserved``

cdef enum:
    MAX_RESERVED = 16


cdef inline int _pairs(
    const unsigned char *p, int64_t n, const unsigned char **names, int64_t *lens, int nres, int *which,
    int nmark, int64_t *mark
) noexcept nogil:
    """One properties string: PROPS_OK or why not (``which``: the reserved name met).
    Names ``nres .. nres + nmark - 1`` are markers: each one met sets its bit in ``mark``."""
    cdef int64_t pos = 0, sep, end, k
    cdef int r
    if not mq_utf8_ok(p, n):
        return PROPS_NOT_UTF8
    while pos < n:
        sep = pos
        while sep < n and p[sep] != 1 and p[sep] != 2:
            sep += 1
        if sep == pos or sep == n or p[sep] != 1:
            return PROPS_MALFORMED
        end = sep + 1
        while end < n and p[end] != 2:
            if p[end] == 1:
                return PROPS_MALFORMED
            end += 1
        if end == sep + 1:
            return PROPS_MALFORMED
        for r in range(nres):
            k = lens[r]
            if k == sep - pos and memcmp(p + pos, names[r], k) == 0:
                which[0] = r
                return PROPS_RESERVED
        for r in range(nres, nres + nmark):
            k = lens[r]
            if k == sep - pos and memcmp(p + pos, names[r], k) == 0:
                mark[0] |= 1 << (r - nres)
        pos = end + 1  # past the \x02 (the last pair may end the string without one)
    return PROPS_OK


def check_properties(
    const unsigned char[::1] buf,
    const int64_t[::1] at not None,
    const int64_t[::1] length not None,
    tuple reserved,
    tuple markers=(),
    int64_t[::1] marks=None,
):
    """Check each record's properties string ``buf[at[i] : at[i] + length[i]]`` as
    the store writes them: well-formed UTF-8, ``name\\x01value\\x02`` pairs (the last
    ``\\x02`` may be missing) with non-empty names and values and no separator inside
    either, no name in ``reserved`` (a tuple of bytes). One pass without the GIL.
    Returns ``(i, why, r)`` for the first record that fails (``why`` a PROPS_*, ``r``
    the index of the reserved name met, else -1), or ``(-1, PROPS_OK, -1)``.
    ``markers`` (names, at most 16 with ``reserved``) and ``marks`` (n values): record
    i's pairs named ``markers[m]`` set bit m of ``marks[i]`` (complete when the call
    answers PROPS_OK), so the caller locates values only in batches that have them."""
    cdef int64_t n = at.shape[0]
    if length.shape[0] != n:
        raise ValueError("column lengths differ")
    if len(reserved) + len(markers) > MAX_RESERVED:
        raise ValueError(f"at most {MAX_RESERVED} reserved and marker names")
    if markers and (marks is None or marks.shape[0] != n):
        raise ValueError("marks must hold one value per record")
    cdef tuple all_names = reserved + markers
    cdef const unsigned char *names[MAX_RESERVED]
    cdef int64_t lens[MAX_RESERVED]
    cdef int nres = len(reserved), nmark = len(markers), r, why = PROPS_OK, which = -1
    cdef int64_t dummy = 0
    cdef int64_t *mp = &marks[0] if nmark and n else &dummy
    for r in range(nres + nmark):
        names[r] = <const unsigned char *>(<bytes>all_names[r])
        lens[r] = len(<bytes>all_names[r])
    cdef int64_t i, bad = -1, n_buf = buf.shape[0]
    for i in range(n):
        if at[i] < 0 or length[i] < 0 or at[i] + length[i] > n_buf:
            raise ValueError(f"properties of record {i} lie outside the buffer")
        if nmark:
            marks[i] = 0
    if n == 0 or n_buf == 0:
        return -1, PROPS_OK, -1
    cdef const unsigned char *b = &buf[0]
    with nogil:
        for i in range(n):
            why = _pairs(b + at[i], length[i], names, lens, nres, &which, nmark, mp + i if nmark else mp)
            if why != PROPS_OK:
                bad = i
                break
    return bad, why, which


# Why ``check_heads`` refused a record.
cpdef enum:
    HEAD_OK = 0
    HEAD_STORE_HOST = 1  # its store host is not of the store's kind (sysflag bit 0x20)
    HEAD_PORT = 2  # its born host port is outside 0..65535
    HEAD_BODY = 3  # its body is longer than max_body
    HEAD_SIZE = 4  # the record is longer than max_size
    HEAD_BORN = 5  # its born timestamp is outside min_born..max_born


def check_heads(
    const unsigned char[::1] buf,
    const int64_t[::1] positions not None,
    const int64_t[::1] sizes not None,
    const int64_t[::1] sysflags not None,
    bint store_v6,
    int64_t max_body,
    int64_t max_size,
    int64_t min_born,
    int64_t max_born,
):
    """Check the head fields of records a client encoded (already walked by ``scan``,
    so every field lies inside its record): store host kind, born host port, born
    timestamp, body and record sizes. Returns ``(i, why, value)`` for the first record
    that fails (``why`` a HEAD_*, ``value`` the port, time or size found), or
    ``(-1, HEAD_OK, 0)``."""
    cdef int64_t n = positions.shape[0], i, at, born, store, value = 0
    cdef int why = HEAD_OK
    if sizes.shape[0] != n or sysflags.shape[0] != n:
        raise ValueError("column lengths differ")
    for i in range(n):
        if positions[i] < 0 or positions[i] + sizes[i] > buf.shape[0] or sizes[i] < MIN_RECORD_BYTES:
            raise ValueError(f"record {i} lies outside the buffer")
    if n == 0:
        return -1, HEAD_OK, 0
    cdef const unsigned char *b = &buf[0]
    with nogil:
        for i in range(n):
            at = positions[i]
            born = 20 if sysflags[i] & 0x10 else 8
            store = 20 if sysflags[i] & 0x20 else 8
            if (store == 20) != store_v6:
                why = HEAD_STORE_HOST
            else:
                value = mq_be32(b + at + 48 + born - 4)
                if value < 0 or value > 65535:
                    why = HEAD_PORT
                elif mq_be64(b + at + 40) < min_born or mq_be64(b + at + 40) > max_born:
                    value = mq_be64(b + at + 40)
                    why = HEAD_BORN
                else:
                    value = mq_be32(b + at + 68 + born + store)
                    if value > max_body:
                        why = HEAD_BODY
                    elif sizes[i] > max_size:
                        value = sizes[i]
                        why = HEAD_SIZE
            if why != HEAD_OK:
                break
    if why == HEAD_OK:
        return -1, HEAD_OK, 0
    return i, why, value
