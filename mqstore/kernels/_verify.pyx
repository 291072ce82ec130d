# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Verify's index checks (mqstore/store/verify/index.py), each one pass without the GIL:

``index_chains`` replays RocketMQ's putKey over an index file's entries (each entry's
``prev`` must be the slot's previous entry, each slot must hold its newest entry) in
O(entries + slots), where sorting the entries by slot cost O(n log n) and a dozen
temporary arrays; ``keys_present`` matches the (commitlog offset, key hash) pairs a
store's records call for against the entries, both in commitlog order.

Byte layout read here (mqstore/formats/index_file.py; all big-endian): a 40-byte
header, ``hash_slots`` int32 slots, then 20-byte entries (key_hash int32, phy_offset
int64, time_diff int32, prev int32), entry 0 unused. The reference models these must
equal are tests/kernels/model_verify.py.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport calloc, free

cdef enum:
    HEADER_BYTES = 40
    SLOT_BYTES = 4
    ENTRY_BYTES = 20

FORMAT = (HEADER_BYTES, SLOT_BYTES, ENTRY_BYTES)  # for the package to check against the formats


cdef inline int32_t _be32(const uint8_t *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int64_t _be64(const uint8_t *p) noexcept nogil:
    return (<int64_t>_be32(p) << 32) | <uint32_t>_be32(p + 4)


def index_chains(const uint8_t[::1] buf, int64_t hash_slots, int64_t n):
    """Check the chains of an index file's bytes ``buf`` holding ``n`` entries (1..n).

    Returns (chain_starts, negative_hashes, order_break, bad_prev, first_bad_prev,
    want_prev, bad_slots, first_bad_slot, slot_value, want_slot):
    chain_starts: entries with prev 0; negative_hashes: entries with a key hash < 0
    (their slot is taken as 0); order_break: the first entry (0-based, >= 1) whose
    phy_offset is below the one before, -1 if none; bad_prev: entries whose prev is
    not the previous entry of their slot in put order, the first of them (0-based, -1
    if none) and what its prev should be; bad_slots: slots not holding their newest
    entry (0 for a slot no entry took), the first of them (-1 if none), its value and
    the one it should hold."""
    if hash_slots <= 0 or n < 0:
        raise ValueError("hash_slots must be > 0 and n >= 0")
    cdef int64_t entries_at = HEADER_BYTES + hash_slots * SLOT_BYTES
    if entries_at + (n + 1) * ENTRY_BYTES > buf.shape[0]:
        raise ValueError(f"{n} entries and {hash_slots} slots do not fit {buf.shape[0]} bytes")
    cdef int32_t *last = <int32_t *>calloc(hash_slots, sizeof(int32_t))
    if last == NULL:
        raise MemoryError()
    cdef const uint8_t *b = &buf[0]
    cdef const uint8_t *e
    cdef int64_t i, slot, phy, prev_phy = 0
    cdef int32_t h, prev, value
    cdef int64_t starts = 0, negatives = 0, order_break = -1
    cdef int64_t bad_prev = 0, first_bad_prev = -1, want_prev = 0
    cdef int64_t bad_slots = 0, first_bad_slot = -1, slot_value = 0, want_slot = 0
    with nogil:
        for i in range(n):
            e = b + entries_at + (i + 1) * ENTRY_BYTES
            h = _be32(e)
            phy = _be64(e + 4)
            prev = _be32(e + 16)
            if prev == 0:
                starts += 1
            if h < 0:
                negatives += 1
                slot = 0
            else:
                slot = h % hash_slots
            if i and phy < prev_phy and order_break < 0:
                order_break = i
            prev_phy = phy
            if prev != last[slot]:
                if bad_prev == 0:
                    first_bad_prev, want_prev = i, last[slot]
                bad_prev += 1
            last[slot] = <int32_t>(i + 1)
        for slot in range(hash_slots):
            value = _be32(b + HEADER_BYTES + slot * SLOT_BYTES)
            if value != last[slot]:
                if bad_slots == 0:
                    first_bad_slot, slot_value, want_slot = slot, value, last[slot]
                bad_slots += 1
    free(last)
    return (
        starts, negatives, order_break, bad_prev, first_bad_prev, want_prev,
        bad_slots, first_bad_slot, slot_value, want_slot,
    )


def keys_present(
    const int64_t[::1] have_phys not None,
    const int64_t[::1] have_hashes not None,
    const int64_t[::1] want_phys not None,
    const int64_t[::1] want_hashes not None,
    uint8_t[::1] present not None,
):
    """present[j] = 1 if some i has (have_phys[i], have_hashes[i]) == (want_phys[j],
    want_hashes[j]), else 0. Both sides must be sorted by phys (ascending; any order
    of hashes within one offset): one merge over them."""
    cdef int64_t n = have_phys.shape[0], m = want_phys.shape[0]
    if have_hashes.shape[0] != n or want_hashes.shape[0] != m or present.shape[0] != m:
        raise ValueError("column lengths differ")
    cdef int64_t i = 0, j, k, p, found = 0
    with nogil:
        for j in range(m):
            p = want_phys[j]
            while i < n and have_phys[i] < p:
                i += 1
            present[j] = 0
            k = i
            while k < n and have_phys[k] == p:
                if have_hashes[k] == want_hashes[j]:
                    present[j] = 1
                    found += 1
                    break
                k += 1
    return found


def repeated_pairs(const int64_t[::1] phys not None, const int64_t[::1] hashes not None, int64_t[::1] out not None):
    """For entries sorted by phys (ascending), write into ``out`` the offset of every
    entry whose (phys, hash) pair an earlier entry already has: a pair held k times
    gives k - 1 offsets. Returns how many were written (``out`` holds len(phys))."""
    cdef int64_t n = phys.shape[0], a = 0, b, i, j, found = 0
    if hashes.shape[0] != n or out.shape[0] < n:
        raise ValueError("column lengths differ")
    with nogil:
        while a < n:
            b = a + 1
            while b < n and phys[b] == phys[a]:
                b += 1
            for i in range(a + 1, b):  # a record's keys: a handful, compared pairwise
                for j in range(a, i):
                    if hashes[j] == hashes[i]:
                        out[found] = phys[i]
                        found += 1
                        break
            a = b
    return found


def starts_found(const int64_t[::1] starts not None, const int64_t[::1] phys not None, uint8_t[::1] found not None):
    """found[i] = 1 if phys[i] is one of ``starts`` (the record starts, ascending), for
    ``phys`` ascending too: one merge. Returns how many were found."""
    cdef int64_t n = phys.shape[0], m = starts.shape[0], i, k = 0, hits = 0
    if found.shape[0] != n:
        raise ValueError("column lengths differ")
    with nogil:
        for i in range(n):
            while k < m and starts[k] < phys[i]:
                k += 1
            found[i] = k < m and starts[k] == phys[i]
            hits += found[i]
    return hits
