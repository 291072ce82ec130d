"""Reference model of mqstore.kernels._probe.probe_queue_tails: queue_tails.probe, the
check of one queue in Python, item by item; the status is its CLEAN, DIRTY or UNFIT,
or minus the errno of the OSError it raises."""

from __future__ import annotations

import errno

from mqstore.store.queue_tails import probe


def model_probe_queue_tails(
    root: str, topics: list[str], queue_ids: list[int], stop_bytes: list[int], listed_ends: list[int], file_bytes: int
) -> list[int]:
    out = []
    for t, q, s, e in zip(topics, queue_ids, stop_bytes, listed_ends, strict=True):
        try:
            out.append(probe(f"{root}/{t}/{q}", s, e, file_bytes))
        except OSError as err:
            out.append(-(err.errno or errno.EIO))
    return out
