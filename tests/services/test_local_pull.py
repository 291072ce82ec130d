"""Raw pulls on the shard's node (services/index/local_pull.py): record bytes read
from read-only maps of the commitlog's segments equal the stored records, and units
whose segment retention removed are skipped, as the commitlog's Read skips them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mqstore.services.index.local_pull import LocalPulls
from mqstore.store.commitlog import CommitLog
from mqstore.store.config import StoreConfig
from mqstore.store.messages import MessageBatch


def test_reads_records_from_the_maps_and_skips_removed_segments(tmp_path: Path) -> None:
    cl = CommitLog(tmp_path, StoreConfig(segment_bytes=64 << 10, preallocate_segments=False))
    res = cl.append(MessageBatch("T", [b"%04d" % i + b"." * 1000 for i in range(200)], queue_ids=0))
    offsets, sizes = res.physical_offsets, res.sizes
    stored = cl.read_raw(offsets, sizes)
    cl.close()
    pulls, view = LocalPulls(tmp_path), object()
    found, records = pulls.read_raw(view, 0, offsets, sizes)
    assert found.tolist() == offsets.tolist() and list(records) == list(stored)
    first = tmp_path / "commitlog" / f"{0:020d}"
    first.unlink()  # retention removed the oldest segment; the builder's units still point there
    found, records = LocalPulls(tmp_path).read_raw(view, 0, offsets, sizes)
    kept = offsets >= 64 << 10
    assert found.tolist() == offsets[kept].tolist()
    assert list(records) == [r for r, k in zip(stored, kept.tolist()) if k]
    # the maps already made stay readable (an unlinked file stays mapped) until retention is announced
    found, _ = pulls.read_raw(view, 0, offsets, sizes)
    assert found.tolist() == offsets.tolist()
    found, _ = pulls.read_raw(view, 64 << 10, offsets, sizes)
    assert found.tolist() == offsets[kept].tolist()
    assert np.all(np.diff(found) > 0)
