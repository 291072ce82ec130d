"""``mqstore reconcile`` over a store of type defaultRocksDB (every consume queue in
one RocksDB under consumequeue/, rocks_queues.py): the same messages written into a
store of each type reconcile the same (clean, every unit checked against its
record), and a wrong unit is found in the RocksDB as in a queue file. One
SparkSession (local[2]) for the module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE
from mqstore.formats.rocks_queue import OFFSET_FAMILY, VALUE_DTYPE, encode_value, queue_prefix, unit_key
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.store_type import store_type_on_disk

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # Spark

TYPES = ("default", "defaultRocksDB")
MESSAGES = 1_800
CHUNK = 128 << 10


def config(store_type: str) -> StoreConfig:
    return StoreConfig(
        segment_bytes=1 << 20,
        consume_queue_file_bytes=20 * 100,
        index_hash_slots=512,
        index_max_entries=2048,
        store_type=store_type,
    )


@pytest.fixture(scope="module")
def spark():
    from mqstore.jobs.spark import session

    s = session("local[2]", app_name="mqstore-tests", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture
def stores(tmp_path: Path) -> dict[str, Path]:
    """The same messages in a store of each type."""
    out = {}
    for t in TYPES:
        path = out[t] = tmp_path / t
        with MessageStore(path, config(t)) as s:
            for i in range(MESSAGES // 60):
                s.append(
                    MessageBatch.of(
                        [
                            Message(f"T{j % 3}", bytes(100 + j), queue_id=j % 4, tags=f"Tag{j % 5}", keys=[f"k{i}-{j}"])
                            for j in range(60)
                        ]
                    )
                )
        assert store_type_on_disk(path) == t
    return out


def run(spark, store: Path, **kw):
    from mqstore.jobs.reconcile import reconcile

    return reconcile(spark, store, chunk_bytes=CHUNK, **kw)


def wrong_tags_code(store: Path, topic: str, qid: int, queue_offset: int, tags: int) -> None:
    """One unit's tagsCode changed where the store keeps it: its queue file, or its
    value in the RocksDB."""
    if store_type_on_disk(store) == "default":
        fb = 20 * 100
        byte = queue_offset * UNIT_SIZE
        path = store / "consumequeue" / topic / str(qid) / f"{byte - byte % fb:020d}"
        data = bytearray(path.read_bytes())
        at = byte % fb
        unit = np.frombuffer(bytes(data[at : at + UNIT_SIZE]), UNIT_DTYPE).copy()
        unit["tags_code"] = tags
        data[at : at + UNIT_SIZE] = unit.tobytes()
        path.write_bytes(bytes(data))
        return
    from rocksdict import Options, Rdict

    db = Rdict(
        str(store / "consumequeue"), Options(raw_mode=True), column_families={OFFSET_FAMILY: Options(raw_mode=True)}
    )
    try:
        key = unit_key(queue_prefix(topic, qid), queue_offset)
        v = np.frombuffer(db[key], VALUE_DTYPE)[0]
        db[key] = encode_value(int(v["commitlog_offset"]), int(v["size"]), tags, int(v["store_timestamp"]))
        db.flush()
    finally:
        db.close()


def test_a_rocksdb_store_reconciles_as_the_file_layout(spark, stores: dict[str, Path]) -> None:
    got = {t: run(spark, p) for t, p in stores.items()}
    for t, r in got.items():
        assert r.ok and not r.errors, (t, r.by_kind)
        assert "cq_stray_file" not in r.by_kind  # the database's files are not stray topic directories
        assert r.messages == MESSAGES
        assert r.counts["queues"] == 12 and r.counts["units"] == MESSAGES and r.counts["units_checked"] == MESSAGES
    a, b = got.values()
    assert a.by_kind == b.by_kind
    same = ("records", "queues", "units", "units_checked", "index_entries", "index_keys_checked", "data_end")
    assert {k: a.counts[k] for k in (*same, "resume_offset")} == {k: b.counts[k] for k in (*same, "resume_offset")}


def test_a_wrong_unit_in_the_rocksdb_is_found_as_in_a_queue_file(
    spark, stores: dict[str, Path], tmp_path: Path
) -> None:
    found = {}
    for t, store in stores.items():
        wrong_tags_code(store, "T0", 2, 11, 12345)
        r = run(spark, store, output=tmp_path / f"out-{t}", repair=True)
        found[t] = {(row[0], row[2]) for row in r.findings if row[1] == "error"}
        assert {k for k, _ in found[t]} == {"cq_tags_mismatch"}, r.by_kind
        assert r.damage.bad_queues == {("T0", 2)}
        if t == "defaultRocksDB":  # one database for every queue: the store rebuilds it, not reconcile
            assert not r.repair["queues"] and "defaultRocksDB" in " ".join(r.repair["not_repaired"])
        else:
            assert [q["topic"] for q in r.repair["queues"]] == ["T0"]
    assert found["default"] == found["defaultRocksDB"] == {("cq_tags_mismatch", "consumequeue/T0/2#11")}
