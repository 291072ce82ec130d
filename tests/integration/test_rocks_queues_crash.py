"""kill -9 of a writer whose consume queues live in RocksDB (``--store-type
defaultRocksDB``, WAL off): the reopen re-dispatches what the last flush of the
database did not keep, and the store is as consistent as with queue files
(test_crash_dispatch.py's checks: every record has exactly its unit, every unit
points at its record, no acknowledged message is missing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.store.store_type import store_type_on_disk
from mqstore.store.verify import verify_store
from tests.integration.test_crash_dispatch import SEG, check_consistent, kill_bench_append


@pytest.mark.crash
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_kill9_during_append_and_dispatch_into_rocksdb(tmp_path: Path, flush: str) -> None:
    store = tmp_path / "store"
    acked: list[dict] = []
    args = ["--body-size", "150", "--topics", "50", "--queues", "4", "--flush", flush, "--producers", "2"]
    args += ["--batch", "100", "--segment-bytes", str(SEG), "--index-hash-slots", "1000", "--index-max-entries", "4000"]
    for round_ in range(2):
        acked += kill_bench_append(
            store, tmp_path / f"acks-{round_}", [*args, "--store-type", "defaultRocksDB"], min_acks=3000, settle_s=0.3
        )
        assert store_type_on_disk(store) == "defaultRocksDB"
        check_consistent(store, acked if flush == "sync" else [])
        report = verify_store(store)
        assert report.ok, report.findings
