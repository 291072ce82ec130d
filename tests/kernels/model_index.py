"""The reference models of the index put: ``IndexFileView.put_hashes`` as it was
written in numpy before the Cython kernel (mqstore/kernels/_dispatch.pyx
``index_put``) took its loop over, kept here verbatim (a function of the view, named
``model_put_hashes``), and IndexService's ``_repeated`` (``model_repeated``; the
kernel ``repeated_in_order`` took it over for entries in commitlog order).
tests/kernels/test_index_kernel.py requires the file bytes after the kernel's puts
and the repeat masks to equal the models'. Not used in production.
"""

from __future__ import annotations

import numpy as np

from mqstore.formats.index_file import _HEADER, _INT_MAX, INDEX_ENTRY_BYTES, INDEX_ENTRY_DTYPE, INDEX_HEADER_BYTES


def model_put_hashes(self, key_hashes, phy_offsets, store_timestamps, *, before_header=None) -> int:
    hashes = np.asarray(key_hashes, np.int64)
    phys = np.asarray(phy_offsets, np.int64)
    times = np.asarray(store_timestamps, np.int64)
    if len(hashes) and (hashes.min() < 0 or hashes.max() > _INT_MAX):
        raise ValueError("key hashes must lie in [0, 2**31-1] (index_key_hash)")
    buf, n_slots = self._buf, self._hash_slots
    begin_ts, _, begin_phy, _, slot_count, count = _HEADER.unpack_from(buf, 0)
    if count <= 0:
        count = 1
    m = min(len(hashes), max(0, self._max_entries - count))
    if m == 0:
        return 0
    hashes, phys, times = hashes[:m], phys[:m], times[:m]
    # Chains: group the batch by slot, keeping put order inside each group.
    slots = hashes % n_slots
    shift = m.bit_length()
    if (n_slots - 1).bit_length() + shift < 63:  # sort (slot, position) packed in one int64: a vectorised
        packed = (slots << shift) | np.arange(m)  # sort, and as stable as argsort(kind="stable")
        packed.sort()
        order, sorted_slots = packed & ((1 << shift) - 1), packed >> shift
    else:
        order = np.argsort(slots, kind="stable")
        sorted_slots = slots[order]
    starts = np.empty(m, bool)
    starts[0] = True
    np.not_equal(sorted_slots[1:], sorted_slots[:-1], out=starts[1:])
    ends = np.empty(m, bool)
    ends[-1] = True
    ends[:-1] = starts[1:]
    group_slots = sorted_slots[starts]
    prev_sorted = np.empty(m, np.int64)
    prev_sorted[1:] = count + order[:-1]  # the entry before in the same group...
    table = np.frombuffer(buf, ">i4", n_slots, INDEX_HEADER_BYTES)
    old = table[group_slots].astype(np.int64)
    first_numbers = count + order[starts]
    old[(old <= 0) | (old > first_numbers)] = 0  # putKey: a slot value <= 0 or > index_count means empty
    prev_sorted[starts] = old  # ...or, for a group's first entry, what the slot held
    prev = np.empty(m, np.int64)
    prev[order] = prev_sorted
    # time_diff against the current begin_timestamp (the first-entry quirk).
    begins = np.full(m, begin_ts, np.int64)
    if count <= 1:
        begins[1:] = times[0]
        begin_ts, begin_phy = int(times[0]), int(phys[0])
    diffs = (times - begins) // 1000  # int64 wraps like Java long; negatives clamp to 0 either way
    time_diffs = np.where(begins <= 0, 0, np.clip(diffs, 0, _INT_MAX))
    new = np.empty(m, INDEX_ENTRY_DTYPE)
    new["key_hash"] = hashes
    new["phy_offset"] = phys
    new["time_diff"] = time_diffs
    new["prev"] = prev
    at = self._entries_at + count * INDEX_ENTRY_BYTES
    dst = np.frombuffer(buf, INDEX_ENTRY_DTYPE, m, at)
    dst[:] = new
    table[group_slots] = count + order[ends]  # each slot: its group's newest entry
    del dst, table  # release the buffer exports (an mmap refuses to close while one exists)
    if before_header is not None:
        before_header()
    slot_count += int(np.count_nonzero(old == 0))
    _HEADER.pack_into(buf, 0, begin_ts, int(times[-1]), begin_phy, int(phys[-1]), slot_count, count + m)
    return m


def model_repeated(hashes: np.ndarray, phys: np.ndarray, held: np.ndarray, end: int) -> np.ndarray:
    """Per entry: is its (key hash, offset) pair indexed already, in ``held`` (the
    hashes the files hold for the record at ``end``) or earlier in this batch?"""
    n = len(phys)
    dup = np.zeros(n, bool)
    if len(held):
        dup |= (phys == end) & np.isin(hashes, held)
    if n < 2:
        return dup
    step = np.diff(phys)
    if (step < 0).any():  # not in commitlog order: sort by both
        order = np.lexsort((np.arange(n), hashes, phys))
    elif step.all():
        return dup  # one entry per record
    else:  # records in order: (record number, hash) packed in one int64, a stable sort keeps put order
        record = np.concatenate(([0], np.cumsum(step != 0)))
        order = np.argsort((record << 31) | hashes, kind="stable")
    k_phys, k_hash = phys[order], hashes[order]
    same = (k_phys[1:] == k_phys[:-1]) & (k_hash[1:] == k_hash[:-1])
    dup[order[1:][same]] = True  # equal pairs are adjacent, the one put first stays
    return dup
