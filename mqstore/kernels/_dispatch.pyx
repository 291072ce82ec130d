# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Dispatch extraction (mqstore/store/dispatch.py): one pass over a scanned chunk's
properties strings finds TAGS, KEYS and UNIQ_KEY (Java's parse rules, the last valid
entry wins) and hashes TAGS (Java ``String.hashCode`` over UTF-16 units); a second
pass turns KEYS (split at spaces) and UNIQ_KEY into IndexFile entries (``topic#key``
hashes, abs, MIN_VALUE -> 0), in RocketMQ's order. Both write into caller-owned int64
arrays and run without the GIL.

Text is hashed from its UTF-8 bytes: ASCII directly, well-formed UTF-8 decoded to
UTF-16 units here. A range that is not well-formed UTF-8 is flagged instead: Python
decodes it with ``errors="replace"`` and hashes that (rare; its replacement rules are
Python's). The reference models these must equal are tests/kernels/model_dispatch.py.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef enum:
    TRANSACTION_TYPE_MASK = 0xC
    TRANSACTION_ROLLBACK = 0xC
    MAX_NAMES = 16

# For the package to check against mqstore.formats.message.
FORMAT = (TRANSACTION_TYPE_MASK, TRANSACTION_ROLLBACK)


cdef inline int _utf8_hash(const unsigned char *p, int64_t n, uint32_t *h) noexcept nogil:
    """h = 31*h + unit over the UTF-16 units of the UTF-8 text p[0:n]; -1 (h
    meaningless) if it is not well-formed UTF-8 (Unicode table 3-7, as Python's
    strict decoder)."""
    cdef uint32_t x = h[0]
    cdef int64_t i = 0
    cdef uint32_t c, c1, c2, c3, cp
    while i < n:
        # Four ASCII bytes at once: x*31^4 + c0*31^3 + c1*31^2 + c2*31 + c3 (one step
        # of the dependency chain instead of four; uint32 arithmetic wraps like Java's).
        while i + 4 <= n and ((p[i] | p[i + 1] | p[i + 2] | p[i + 3]) & 0x80) == 0:
            x = x * 923521 + p[i] * 29791 + p[i + 1] * 961 + p[i + 2] * 31 + p[i + 3]
            i += 4
        if i >= n:
            break
        c = p[i]
        if c < 0x80:
            x = x * 31 + c
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return -1
        if c < 0xE0:
            if i + 1 >= n:
                return -1
            c1 = p[i + 1]
            if c1 & 0xC0 != 0x80:
                return -1
            x = x * 31 + (((c & 0x1F) << 6) | (c1 & 0x3F))
            i += 2
            continue
        if c < 0xF0:
            if i + 2 >= n:
                return -1
            c1 = p[i + 1]
            c2 = p[i + 2]
            if c1 & 0xC0 != 0x80 or c2 & 0xC0 != 0x80:
                return -1
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
                return -1
            x = x * 31 + (((c & 0x0F) << 12) | ((c1 & 0x3F) << 6) | (c2 & 0x3F))
            i += 3
            continue
        if i + 3 >= n:
            return -1
        c1 = p[i + 1]
        c2 = p[i + 2]
        c3 = p[i + 3]
        if c1 & 0xC0 != 0x80 or c2 & 0xC0 != 0x80 or c3 & 0xC0 != 0x80:
            return -1
        if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
            return -1
        cp = (((c & 0x07) << 18) | ((c1 & 0x3F) << 12) | ((c2 & 0x3F) << 6) | (c3 & 0x3F)) - 0x10000
        x = x * 31 + (0xD800 + (cp >> 10))
        x = x * 31 + (0xDC00 + (cp & 0x3FF))
        i += 4
    h[0] = x
    return 0


cdef inline void _locate(
    const unsigned char *p,
    int64_t base,
    int64_t n,
    const unsigned char *names,
    const int64_t *name_at,
    int64_t n_names,
    int64_t *vs,
    int64_t *ve,
) noexcept nogil:
    """The value of each name in the properties string p[0:n] (at ``base`` in the
    buffer): vs[k], ve[k] (buffer positions) of the last valid entry named
    names[name_at[k]:name_at[k+1]], left as they are where there is none."""
    cdef int64_t s = 0, e, sep, j, k, nl
    cdef bint same
    while s < n:
        e = s
        sep = -1
        while e < n and p[e] != 2:
            if sep < 0 and p[e] == 1:
                sep = e
            e += 1
        # entry [s, e): valid if its first \x01 has a byte before and after it
        if sep > s and sep < e - 1:
            nl = sep - s
            for k in range(n_names):
                if name_at[k + 1] - name_at[k] != nl:
                    continue
                same = True
                for j in range(nl):
                    if p[s + j] != names[name_at[k] + j]:
                        same = False
                        break
                if same:
                    vs[k] = base + sep + 1
                    ve[k] = base + e
        s = e + 1


def _names(names):
    joined = b"".join(names)
    if len(names) > MAX_NAMES:
        raise ValueError(f"at most {MAX_NAMES} property names at once")
    at, total = [0], 0
    for nm in names:
        if not nm:
            raise ValueError("property names are not empty")
        total += len(nm)
        at.append(total)
    return joined, at


def locate(
    const unsigned char[::1] buf,
    const int64_t[::1] at not None,
    const int64_t[::1] lens not None,
    names,
    int64_t[:, ::1] starts not None,
    int64_t[:, ::1] ends not None,
):
    """``formats.properties.locate_properties``: for each name k and record i,
    starts[k, i], ends[k, i] = the value's range in ``buf`` (-1, -1 without one).
    ``buf[at[i] : at[i] + lens[i]]`` is record i's properties string."""
    cdef int64_t n = at.shape[0], n_buf = buf.shape[0], i, k
    joined, name_at_list = _names(names)
    cdef int64_t n_names = len(name_at_list) - 1
    if lens.shape[0] != n or starts.shape[0] < n_names or ends.shape[0] < n_names:
        raise ValueError("column lengths differ")
    if n_names and (starts.shape[1] < n or ends.shape[1] < n):
        raise ValueError("output columns are shorter than the input")
    for i in range(n):
        if at[i] < 0 or lens[i] < 0 or at[i] + lens[i] > n_buf:
            raise ValueError(f"properties [{at[i]}, {at[i] + lens[i]}) of record {i} lie outside the buffer")
    cdef const unsigned char *nm = joined
    cdef int64_t name_at[MAX_NAMES + 1]
    for k in range(n_names + 1):
        name_at[k] = name_at_list[k]
    cdef const unsigned char *b = &buf[0] if n_buf else NULL
    cdef int64_t vs[MAX_NAMES]
    cdef int64_t ve[MAX_NAMES]
    with nogil:
        for i in range(n):
            for k in range(n_names):
                vs[k] = -1
                ve[k] = -1
            if lens[i]:
                _locate(b + at[i], at[i], lens[i], nm, name_at, n_names, vs, ve)
            for k in range(n_names):
                starts[k, i] = vs[k]
                ends[k, i] = ve[k]


def extract(
    const unsigned char[::1] buf,
    const int64_t[::1] at not None,
    const int64_t[::1] lens not None,
    int64_t[:, ::1] cols not None,
    int64_t[::1] tags_codes not None,
    uint8_t[::1] tags_bad not None,
):
    """The dispatcher's pass: rows of ``cols`` (6 x n) get TAGS, KEYS and UNIQ_KEY
    as (start, end) pairs (-1 without), ``tags_codes`` the Java hash of TAGS (0
    without); ``tags_bad[i]`` is 1 where TAGS is not well-formed UTF-8 (the caller
    hashes its decoded text). Returns how many are flagged."""
    cdef int64_t n = at.shape[0], n_buf = buf.shape[0], i, k
    if lens.shape[0] != n or cols.shape[0] < 6 or cols.shape[1] < n or tags_codes.shape[0] < n or tags_bad.shape[0] < n:
        raise ValueError("column lengths differ")
    for i in range(n):
        if at[i] < 0 or lens[i] < 0 or at[i] + lens[i] > n_buf:
            raise ValueError(f"properties [{at[i]}, {at[i] + lens[i]}) of record {i} lie outside the buffer")
    cdef const unsigned char *nm = b"TAGSKEYSUNIQ_KEY"
    cdef int64_t name_at[4]
    name_at[0] = 0
    name_at[1] = 4
    name_at[2] = 8
    name_at[3] = 16
    cdef const unsigned char *b = &buf[0] if n_buf else NULL
    cdef int64_t vs[3]
    cdef int64_t ve[3]
    cdef uint32_t h
    cdef int64_t bad = 0
    with nogil:
        for i in range(n):
            for k in range(3):
                vs[k] = -1
                ve[k] = -1
            if lens[i]:
                _locate(b + at[i], at[i], lens[i], nm, name_at, 3, vs, ve)
            for k in range(3):
                cols[2 * k, i] = vs[k]
                cols[2 * k + 1, i] = ve[k]
            h = 0
            tags_bad[i] = 0
            if vs[0] >= 0 and _utf8_hash(b + vs[0], ve[0] - vs[0], &h) < 0:
                tags_bad[i] = 1
                bad += 1
                h = 0
            tags_codes[i] = <int32_t>h
    return bad


cdef inline int64_t _key_hash(uint32_t h) noexcept nogil:
    cdef int32_t v = <int32_t>h
    if v == -2147483647 - 1:
        return 0
    return -<int64_t>v if v < 0 else v


cdef struct Entries:
    int64_t *hashes
    int64_t *records
    int64_t *starts
    int64_t *ends
    uint8_t *bad


cdef inline int64_t _emit(
    const unsigned char *b, int64_t i, int64_t ka, int64_t ke, int64_t ua, int64_t ue, uint32_t prefix,
    Entries *out, int64_t k,
) noexcept nogil:
    """Record i's entries from entry k on (UNIQ_KEY, then each non-empty KEYS
    element); returns the next entry number."""
    cdef int64_t j, s
    cdef uint32_t h
    if ua >= 0:
        h = prefix
        out.bad[k] = _utf8_hash(b + ua, ue - ua, &h) < 0
        out.hashes[k] = _key_hash(h)
        out.records[k] = i
        out.starts[k] = ua
        out.ends[k] = ue
        k += 1
    if ka >= 0:
        s = ka
        for j in range(ka, ke + 1):
            if j == ke or b[j] == 0x20:
                if j > s:
                    h = prefix
                    out.bad[k] = _utf8_hash(b + s, j - s, &h) < 0
                    out.hashes[k] = _key_hash(h)
                    out.records[k] = i
                    out.starts[k] = s
                    out.ends[k] = j
                    k += 1
                s = j + 1
    return k


def index_entries(
    const unsigned char[::1] buf,
    const int64_t[::1] keys_at not None,
    const int64_t[::1] keys_end not None,
    const int64_t[::1] uniq_at not None,
    const int64_t[::1] uniq_end not None,
    const int64_t[::1] sysflags not None,
    const int64_t[::1] topic_codes not None,
    const int64_t[::1] prefixes not None,
    int64_t[::1] hashes not None,
    int64_t[::1] records not None,
    int64_t[::1] starts not None,
    int64_t[::1] ends not None,
    uint8_t[::1] bad not None,
):
    """IndexFile entries of records whose transaction type is not ROLLBACK, in
    RocketMQ's order: per record ``topic#UNIQ_KEY``, then ``topic#k`` for each
    non-empty element of KEYS split at spaces. ``prefixes[c]`` is the Java hash of
    topic c's ``"topic#"``. Writes entry j's index key hash, record number and key
    range; ``bad[j]`` = 1 where the key is not well-formed UTF-8 (its hash is then
    for the caller to make). Returns the number of entries, or -1 - (a bound on the
    entries needed) when the output arrays are too short (nothing usable written)."""
    cdef int64_t n = keys_at.shape[0], n_buf = buf.shape[0], n_pre = prefixes.shape[0]
    cdef int64_t cap = hashes.shape[0], i, need = 0
    if not (keys_end.shape[0] == uniq_at.shape[0] == uniq_end.shape[0] == sysflags.shape[0] == topic_codes.shape[0] == n):
        raise ValueError("column lengths differ")
    if records.shape[0] < cap or starts.shape[0] < cap or ends.shape[0] < cap or bad.shape[0] < cap:
        raise ValueError("output arrays are shorter than hashes")
    for i in range(n):
        if (keys_at[i] >= 0 and (keys_end[i] < keys_at[i] or keys_end[i] > n_buf)) or (
            uniq_at[i] >= 0 and (uniq_end[i] < uniq_at[i] or uniq_end[i] > n_buf)
        ):
            raise ValueError(f"KEYS or UNIQ_KEY of record {i} lie outside the buffer")
        if (keys_at[i] >= 0 or uniq_at[i] >= 0) and not 0 <= topic_codes[i] < n_pre:
            raise ValueError(f"topic code {topic_codes[i]} of record {i} has no prefix hash")
        if keys_at[i] >= 0:
            need += (keys_end[i] - keys_at[i] + 1) // 2
        if uniq_at[i] >= 0:
            need += 1
    if need > cap:
        return -1 - need
    cdef const unsigned char *b = &buf[0] if n_buf else NULL
    cdef int64_t k = 0
    cdef Entries out
    out.hashes = out.records = out.starts = out.ends = NULL
    out.bad = NULL
    if cap:
        out.hashes, out.records, out.starts, out.ends, out.bad = &hashes[0], &records[0], &starts[0], &ends[0], &bad[0]
    with nogil:
        for i in range(n):
            if sysflags[i] & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK:
                continue
            if keys_at[i] >= 0 or uniq_at[i] >= 0:
                k = _emit(b, i, keys_at[i], keys_end[i], uniq_at[i], uniq_end[i], <uint32_t>prefixes[topic_codes[i]], &out, k)
    return k


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline int32_t mq_get_be32(const unsigned char *p) {
        uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v);
    }
    static inline void mq_put_be32(unsigned char *p, int32_t x) {
        uint32_t v = __builtin_bswap32((uint32_t)x); memcpy(p, &v, 4);
    }
    static inline void mq_put_be64(unsigned char *p, int64_t x) {
        uint64_t v = __builtin_bswap64((uint64_t)x); memcpy(p, &v, 8);
    }
    static inline void mq_prefetch_w(const void *p) { __builtin_prefetch(p, 1, 0); }
    """
    int32_t mq_get_be32(const unsigned char *p) nogil
    void mq_put_be32(unsigned char *p, int32_t x) nogil
    void mq_put_be64(unsigned char *p, int64_t x) nogil
    void mq_prefetch_w(const void *p) nogil


cdef enum:
    INDEX_HEADER_BYTES = 40
    INDEX_SLOT_BYTES = 4
    INDEX_ENTRY_BYTES = 20
    INT_MAX = 2147483647
    PREFETCH_AHEAD = 16  # slots are random reads in a table of megabytes: ask for them early

INDEX_FORMAT = (INDEX_HEADER_BYTES, INDEX_SLOT_BYTES, INDEX_ENTRY_BYTES)


def index_put(
    unsigned char[::1] buf,
    int64_t hash_slots,
    int64_t count,
    int64_t begin_ts,
    const int64_t[::1] hashes not None,
    const int64_t[::1] phys not None,
    const int64_t[::1] times not None,
):
    """RocketMQ IndexFile.putKey for each entry in order, into an index file's bytes
    (``buf``: header, ``hash_slots`` slots, entries), without the GIL: entry number
    ``count + j`` gets (hash, offset, time_diff, prev) and its slot points at it.
    ``count`` is the header's index_count (>= 1), ``begin_ts`` its begin_timestamp;
    the caller checked the room and the hashes (0 <= hash <= 2**31-1) and writes the
    header. In an empty file (count 1) the first entry's time_diff is against the
    ``begin_ts`` given and the rest against the first entry's time (the quirk).
    Returns how many entries took a slot that held none (the header's
    hash_slot_count grows by it)."""
    cdef int64_t m = hashes.shape[0], j, slot_at, at, prev, diff, t
    if phys.shape[0] != m or times.shape[0] != m:
        raise ValueError("column lengths differ")
    if hash_slots <= 0 or count < 1:
        raise ValueError("hash_slots must be > 0 and count >= 1")
    cdef int64_t entries_at = INDEX_HEADER_BYTES + hash_slots * INDEX_SLOT_BYTES
    if entries_at + (count + m) * INDEX_ENTRY_BYTES > buf.shape[0]:
        raise ValueError("the entries do not fit the buffer")
    for j in range(m):
        if hashes[j] < 0 or hashes[j] > INT_MAX:
            raise ValueError("key hashes must lie in [0, 2**31-1] (index_key_hash)")
    cdef unsigned char *b = &buf[0]
    cdef int64_t new_slots = 0, begin = begin_ts
    with nogil:
        for j in range(min(m, PREFETCH_AHEAD)):
            mq_prefetch_w(b + INDEX_HEADER_BYTES + (hashes[j] % hash_slots) * INDEX_SLOT_BYTES)
        for j in range(m):
            if j + PREFETCH_AHEAD < m:
                mq_prefetch_w(b + INDEX_HEADER_BYTES + (hashes[j + PREFETCH_AHEAD] % hash_slots) * INDEX_SLOT_BYTES)
            slot_at = INDEX_HEADER_BYTES + (hashes[j] % hash_slots) * INDEX_SLOT_BYTES
            prev = mq_get_be32(b + slot_at)
            if prev <= 0 or prev > count:
                prev = 0
            if begin <= 0:
                t = 0
            else:
                diff = <int64_t>(<uint64_t>times[j] - <uint64_t>begin)  # wraps like Java long
                t = 0 if diff < 0 else diff // 1000
                if t > INT_MAX:
                    t = INT_MAX
            at = entries_at + count * INDEX_ENTRY_BYTES
            mq_put_be32(b + at, <int32_t>hashes[j])
            mq_put_be64(b + at + 4, phys[j])
            mq_put_be32(b + at + 12, <int32_t>t)
            mq_put_be32(b + at + 16, <int32_t>prev)
            mq_put_be32(b + slot_at, <int32_t>count)
            if count <= 1:
                begin = times[j]
            if prev == 0:
                new_slots += 1
            count += 1
    return new_slots


cdef enum:
    SMALL_GROUP = 64  # entries of one record compared pairwise up to this many


def repeated_in_order(const int64_t[::1] hashes not None, const int64_t[::1] phys not None, uint8_t[::1] dup not None):
    """For index entries in commitlog order (``phys`` never decreasing): ``dup[j]`` = 1
    where an earlier entry of the same record (same offset) has the same key hash,
    without the GIL. Returns 0, or -1 (``dup`` unusable) when ``phys`` decreases
    somewhere or a record has more than 64 entries: the caller sorts instead."""
    cdef int64_t n = hashes.shape[0], i, j, k, start = 0
    if phys.shape[0] != n or dup.shape[0] < n:
        raise ValueError("column lengths differ")
    cdef int rc = 0
    with nogil:
        i = 0
        while i < n:
            j = i + 1
            while j < n and phys[j] == phys[i]:
                j += 1
            if j < n and phys[j] < phys[i]:
                rc = -1
                break
            if j - i > SMALL_GROUP:
                rc = -1
                break
            dup[i] = 0
            for k in range(i + 1, j):
                dup[k] = 0
                for start in range(i, k):
                    if hashes[start] == hashes[k]:
                        dup[k] = 1
                        break
            i = j
    return rc


def extract_all(
    const unsigned char[::1] buf,
    const int64_t[::1] at not None,
    const int64_t[::1] lens not None,
    const int64_t[::1] sysflags not None,
    const int64_t[::1] topic_codes not None,
    const int64_t[::1] prefixes not None,
    int64_t[:, ::1] cols not None,
    int64_t[::1] tags_codes not None,
    uint8_t[::1] tags_bad not None,
    int64_t[::1] hashes not None,
    int64_t[::1] records not None,
    int64_t[::1] starts not None,
    int64_t[::1] ends not None,
    uint8_t[::1] bad not None,
    int64_t first,
    int64_t k,
):
    """``extract`` and ``index_entries`` in one pass, each record's properties read
    once: from record ``first`` on, with ``k`` entries already written, until the
    entry arrays cannot take a whole record's entries. Returns ``(next record, next
    entry, tags flagged)``; call again from there with longer arrays (the entries
    written so far copied) while the next record is below the count."""
    cdef int64_t n = at.shape[0], n_buf = buf.shape[0], n_pre = prefixes.shape[0], cap = hashes.shape[0], i, m
    if not (lens.shape[0] == sysflags.shape[0] == topic_codes.shape[0] == n):
        raise ValueError("column lengths differ")
    if cols.shape[0] < 6 or cols.shape[1] < n or tags_codes.shape[0] < n or tags_bad.shape[0] < n:
        raise ValueError("output columns are shorter than the input")
    if records.shape[0] < cap or starts.shape[0] < cap or ends.shape[0] < cap or bad.shape[0] < cap:
        raise ValueError("output arrays are shorter than hashes")
    if first < 0 or k < 0 or k > cap:
        raise ValueError("first and k must be >= 0, k at most the arrays' length")
    for i in range(first, n):
        if at[i] < 0 or lens[i] < 0 or at[i] + lens[i] > n_buf:
            raise ValueError(f"properties [{at[i]}, {at[i] + lens[i]}) of record {i} lie outside the buffer")
        if not 0 <= topic_codes[i] < n_pre:
            raise ValueError(f"topic code {topic_codes[i]} of record {i} has no prefix hash")
    cdef const unsigned char *nm = b"TAGSKEYSUNIQ_KEY"
    cdef int64_t name_at[4]
    name_at[0] = 0
    name_at[1] = 4
    name_at[2] = 8
    name_at[3] = 16
    cdef const unsigned char *b = &buf[0] if n_buf else NULL
    cdef int64_t vs[3]
    cdef int64_t ve[3]
    cdef uint32_t h
    cdef int64_t flagged = 0
    cdef Entries out
    out.hashes = out.records = out.starts = out.ends = NULL
    out.bad = NULL
    if cap:
        out.hashes, out.records, out.starts, out.ends, out.bad = &hashes[0], &records[0], &starts[0], &ends[0], &bad[0]
    with nogil:
        i = first
        while i < n:
            vs[0] = vs[1] = vs[2] = -1
            ve[0] = ve[1] = ve[2] = -1
            if lens[i]:
                _locate(b + at[i], at[i], lens[i], nm, name_at, 3, vs, ve)
            if sysflags[i] & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK and (vs[1] >= 0 or vs[2] >= 0):
                m = (1 if vs[2] >= 0 else 0) + ((ve[1] - vs[1] + 1) // 2 if vs[1] >= 0 else 0)
                if k + m > cap:
                    break  # the caller grows the arrays and goes on from record i
                k = _emit(b, i, vs[1], ve[1], vs[2], ve[2], <uint32_t>prefixes[topic_codes[i]], &out, k)
            cols[0, i] = vs[0]
            cols[1, i] = ve[0]
            cols[2, i] = vs[1]
            cols[3, i] = ve[1]
            cols[4, i] = vs[2]
            cols[5, i] = ve[2]
            h = 0
            tags_bad[i] = 0
            if vs[0] >= 0 and _utf8_hash(b + vs[0], ve[0] - vs[0], &h) < 0:
                tags_bad[i] = 1
                flagged += 1
                h = 0
            tags_codes[i] = <int32_t>h
            i += 1
    return i, k, flagged
