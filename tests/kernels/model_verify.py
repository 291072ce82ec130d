"""Reference models of mqstore.kernels._verify: the numpy index checks verify ran
before the kernels (mqstore/store/verify/index.py), returning what the kernels return."""

from __future__ import annotations

import numpy as np

from mqstore.formats.index_file import INDEX_ENTRY_BYTES, INDEX_ENTRY_DTYPE, INDEX_HEADER_BYTES


def index_chains(buf, hash_slots: int, n: int) -> tuple[int, ...]:
    """As _verify.index_chains: putKey's chains by sorting the entries by slot."""
    at = INDEX_HEADER_BYTES + hash_slots * 4 + INDEX_ENTRY_BYTES
    entries = np.frombuffer(buf, INDEX_ENTRY_DTYPE, n, at)
    numbers = np.arange(1, n + 1)
    hashes = entries["key_hash"].astype(np.int64)
    prev = entries["prev"].astype(np.int64)
    phy = entries["phy_offset"].astype(np.int64)
    drops = np.flatnonzero(np.diff(phy) < 0)
    order_break = int(drops[0]) + 1 if drops.size else -1
    slots = np.where(hashes >= 0, hashes, 0) % hash_slots
    order = np.lexsort((numbers, slots))
    s_sorted = slots[order]
    starts = np.ones(n, bool)
    starts[1:] = s_sorted[1:] != s_sorted[:-1]
    want_prev = np.zeros(n, np.int64)
    want_prev[order[~starts]] = numbers[order][np.flatnonzero(~starts) - 1]
    bad = np.flatnonzero(want_prev != prev)
    table = np.frombuffer(buf, ">i4", hash_slots, INDEX_HEADER_BYTES).astype(np.int64)
    want_table = np.zeros(hash_slots, np.int64)
    ends = np.append(starts[1:], True) if n else starts  # the last entry of each slot group
    want_table[s_sorted[ends]] = numbers[order][ends]
    bad_slots = np.flatnonzero(want_table != table)
    first, slot = (int(bad[0]) if bad.size else -1), (int(bad_slots[0]) if bad_slots.size else -1)
    return (
        int(np.count_nonzero(prev == 0)),
        int((hashes < 0).sum()),
        order_break,
        int(bad.size),
        first,
        int(want_prev[first]) if bad.size else 0,
        int(bad_slots.size),
        slot,
        int(table[slot]) if bad_slots.size else 0,
        int(want_table[slot]) if bad_slots.size else 0,
    )


def keys_present(have_phys, have_hashes, want_phys, want_hashes) -> np.ndarray:
    """As _verify.keys_present (without its sort precondition): set membership of
    (offset, hash) pairs."""
    have = set(zip(np.asarray(have_phys).tolist(), np.asarray(have_hashes).tolist()))
    return np.array([(p, h) in have for p, h in zip(want_phys.tolist(), want_hashes.tolist())], bool)


def repeated_pairs(phys, hashes) -> np.ndarray:
    """As _verify.repeated_pairs: the offset of every entry whose (offset, hash) pair an
    earlier entry has (a pair held k times gives k - 1 offsets), in entry order."""
    seen: set[tuple[int, int]] = set()
    out = []
    for pair in zip(np.asarray(phys).tolist(), np.asarray(hashes).tolist()):
        if pair in seen:
            out.append(pair[0])
        seen.add(pair)
    return np.array(out, np.int64)


def starts_found(starts, phys) -> np.ndarray:
    """As _verify.starts_found: which offsets of ``phys`` are record starts."""
    return np.isin(np.asarray(phys), np.asarray(starts))
