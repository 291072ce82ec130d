"""``mqstore reconcile`` (Spark) and the ``mqstore`` data source on real stores.

One small store is written by the store engine (MessageStore: 1 MiB segments, small
consume-queue and index files); each test damages a copy the way stores get
damaged and checks that reconcile names exactly that damage, that --repair writes
what a from-scratch build wrote, and that the repaired store reconciles clean. The
commitlog is walked in 128 KiB chunks, so chunk boundaries fall inside segments.
One SparkSession (local[2]) serves the whole module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE
from mqstore.formats.message import MAGIC_V1, MessageRecord
from mqstore.formats.msgid import Host
from mqstore.store import ConsumerOffsets, Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.reader import CommitLogReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # Spark

CFG = StoreConfig(
    segment_bytes=1 << 20, consume_queue_file_bytes=20 * 100, index_hash_slots=512, index_max_entries=2048
)
MESSAGES = 3600
CHUNK = 128 << 10
BODY_AT = 88  # a V1 record with IPv4 hosts: the body starts after the 88-byte head


@pytest.fixture(scope="module")
def spark():
    from mqstore.jobs.spark import register_datasource, session

    s = session("local[2]", app_name="mqstore-tests", shuffle_partitions=2)
    register_datasource(s)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "store"
    rng = np.random.default_rng(11)
    with MessageStore(path, CFG) as s:
        for i in range(MESSAGES // 60):
            born = Host("::1", 4321) if i == 7 else None  # one batch from an IPv6 producer
            s.append(
                MessageBatch.of(
                    [
                        Message(
                            f"T{j % 3}",
                            rng.bytes(60 + (i * 7 + j) % 400),
                            queue_id=j % 4,
                            tags=f"Tag{j % 5}",
                            keys=[f"k{i}-{j}", f"order{i}"],
                            properties={"shop": f"s{j % 7}"},
                            born_host=born,
                        )
                        for j in range(60)
                    ]
                )
            )
        s.commit_offset("g1", "T0", 0, 5)
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "store")
    return tmp_path / "store"


def file_hashes(root: Path) -> dict[str, bytes]:
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).digest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run(spark, store: Path, out: Path | None = None, **kw):
    from mqstore.jobs.reconcile import reconcile

    return reconcile(spark, store, output=out, chunk_bytes=CHUNK, **kw)


def error_kinds(result) -> dict[str, int]:
    return {k: n for k, n in result.by_kind.items() if result.kind_severity[k] == "error"}


# ---------------------------------------------------------------- damage


def records(store: Path) -> list[MessageRecord]:
    return list(CommitLogReader(store).records())


def patch_commitlog(store: Path, offset: int, data: bytes) -> None:
    seg = store / "commitlog" / f"{offset - offset % CFG.segment_bytes:020d}"
    with open(seg, "r+b") as f:
        f.seek(offset % CFG.segment_bytes)
        f.write(data)


def queue_file(store: Path, topic: str, qid: int, queue_offset: int) -> tuple[Path, int]:
    fb = CFG.consume_queue_file_bytes
    byte = queue_offset * UNIT_SIZE
    return store / "consumequeue" / topic / str(qid) / f"{byte - byte % fb:020d}", byte % fb


def patch_unit(store: Path, topic: str, qid: int, queue_offset: int, field: str, value: int) -> None:
    path, pos = queue_file(store, topic, qid, queue_offset)
    data = bytearray(path.read_bytes())
    unit = np.frombuffer(bytes(data[pos : pos + UNIT_SIZE]), UNIT_DTYPE).copy()
    unit[field] = value
    data[pos : pos + UNIT_SIZE] = unit.tobytes()
    path.write_bytes(bytes(data))


def flipped_body_byte(store: Path) -> None:
    rec = records(store)[MESSAGES // 3]
    patch_commitlog(store, rec.physical_offset + BODY_AT + 3, bytes([rec.body[3] ^ 0x5A]))


def deleted_unit(store: Path) -> None:
    """The last unit of T1:1 is gone (zeroed), its record is not."""
    qdir = store / "consumequeue" / "T1" / "1"
    last = max(qdir.iterdir())
    data = bytearray(last.read_bytes())
    used = int(np.count_nonzero(np.frombuffer(bytes(data), UNIT_DTYPE)["size"] > 0)) * UNIT_SIZE
    data[used - UNIT_SIZE : used] = bytes(UNIT_SIZE)
    last.write_bytes(bytes(data))


def wrong_tags_code(store: Path) -> None:
    patch_unit(store, "T0", 2, 11, "tags_code", 12345)


def missing_index_entry(store: Path) -> None:
    """The index rebuilt by the store core without one record's UNIQ_KEY entry."""
    from mqstore.formats.message import scan_records
    from mqstore.store.commitlog import ScanChunk
    from mqstore.store.dispatch import build_dispatch_batch
    from mqstore.store.index_service import IndexService

    parts = []
    for base, path in CommitLogReader(store).segments:
        data = path.read_bytes()
        res = scan_records(data, 0, len(data), base_offset=base, fields=True)
        parts.append(
            build_dispatch_batch(ScanChunk(res.positions + base, res.sizes, res.fields, data, base)).index_entries()
        )
    hashes, phys, ts = (np.concatenate([p[i] for p in parts]) for i in range(3))
    drop = 3 * (MESSAGES // 2)  # the UNIQ_KEY entry of record MESSAGES // 2
    keep = np.arange(len(phys)) != drop
    shutil.rmtree(store / "index")
    svc = IndexService(store, hash_slots=CFG.index_hash_slots, max_entries=CFG.index_max_entries)
    svc.load(True, 0)
    svc.put((hashes[keep], phys[keep], ts[keep]))
    svc.close()


def consumer_offset_past_end(store: Path) -> None:
    offsets = ConsumerOffsets(store)
    offsets.commit("g1", "T0", 0, 10**6)
    offsets.persist()


def torn_flushed_tail(store: Path) -> None:
    """The last record, which the checkpoint counts as flushed, lost its end."""
    last = records(store)[-1]
    cut = last.physical_offset + BODY_AT + len(last.body) // 2
    patch_commitlog(store, cut, bytes(last.physical_offset + last.total_size - cut))


DAMAGE = [
    (flipped_body_byte, "commitlog_crc"),
    (deleted_unit, "cq_unit_missing"),
    (wrong_tags_code, "cq_tags_mismatch"),
    (missing_index_entry, "index_key_missing"),
    (consumer_offset_past_end, "consumer_offset_past_end"),
    (torn_flushed_tail, "commitlog_torn_tail"),
]


# ---------------------------------------------------------------- tests


def test_session_points_only_the_driver_at_its_log4j_file(spark) -> None:
    """The log4j2 file is written on the driver's machine: an executor on another
    host must not be told to read it; Python workers never import from their
    working directory."""
    conf = spark.sparkContext.getConf()
    assert "log4j2.configurationFile" in conf.get("spark.driver.extraJavaOptions")
    assert "log4j2" not in (conf.get("spark.executor.extraJavaOptions") or "")
    assert conf.get("spark.executorEnv.PYTHONSAFEPATH") == "1"


def test_clean_store_has_no_findings(spark, pristine: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run(spark, pristine, out)
    assert result.ok and result.findings == [], result.findings
    assert result.messages == MESSAGES
    c = result.counts
    assert c["segments"] > 1 and c["chunks"] > c["segments"]
    assert c["units"] == c["units_checked"] == MESSAGES and c["queues"] == 12
    assert c["index_keys_checked"] == 3 * MESSAGES and c["index_files"] > 1
    assert result.flushed_offset == c["data_end"] and result.in_flight["bytes"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["findings"] == 0 and summary["errors"] == 0 and summary["by_kind"] == {}
    assert summary["messages"] == MESSAGES and summary["bytes"] == result.bytes > 0 and summary["seconds"] > 0
    assert pq.read_table(out / "findings").num_rows == 0


@pytest.mark.parametrize(("damage", "kind"), DAMAGE, ids=[d.__name__ for d, _ in DAMAGE])
def test_damage_gives_exactly_its_finding(spark, store: Path, tmp_path: Path, damage, kind: str) -> None:
    damage(store)
    out = tmp_path / "out"
    result = run(spark, store, out)
    assert error_kinds(result) == {kind: 1}, result.findings
    (row,) = result.of_kind(kind)
    assert row[1] == "error" and row[2] and row[3]
    table = pq.read_table(out / "findings").to_pylist()
    assert [r for r in table if r["severity"] == "error"] == [
        {
            "kind": kind,
            "severity": "error",
            "location": row[2],
            "detail": row[3],
            "file": table[0]["file"],
            "position": table[0]["position"],
            "commitlog_offset": row[4] if row[4] >= 0 else None,
        }
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == 1 and summary["by_kind"][kind] == 1


def queue_offset_skipped(store: Path) -> None:
    """A record's QUEUEOFFSET field (no CRC covers it) jumps by one."""
    rec = [r for r in records(store) if (r.topic, r.queue_id) == ("T2", 3)][40]
    patch_commitlog(store, rec.physical_offset + 20, (rec.queue_offset + 1).to_bytes(8, "big"))


def undecodable_record(store: Path) -> None:
    """A record's magic code overwritten in the middle of the log."""
    rec = records(store)[MESSAGES // 2]
    patch_commitlog(store, rec.physical_offset + 4, b"\x00\x11\x22\x33")


@pytest.mark.parametrize(
    ("damage", "kinds"),
    [
        (queue_offset_skipped, {"queue_offset_sequence", "cq_wrong_record"}),
        (
            undecodable_record,
            {"commitlog_corrupt_record", "cq_unit_dangling", "index_entry_dangling", "queue_offset_sequence"},
        ),
    ],
    ids=["queue_offset_skipped", "undecodable_record"],
)
def test_more_damage_is_found(spark, store: Path, damage, kinds: set[str]) -> None:
    damage(store)
    result = run(spark, store)
    assert set(error_kinds(result)) == kinds, result.findings


def test_flipped_body_byte_is_located(spark, store: Path) -> None:
    victim = records(store)[MESSAGES // 3]
    flipped_body_byte(store)
    result = run(spark, store)
    (row,) = result.of_kind("commitlog_crc")
    base = victim.physical_offset - victim.physical_offset % CFG.segment_bytes
    assert row[2] == f"commitlog/{base:020d}@{victim.physical_offset - base}" and row[4] == victim.physical_offset
    assert result.damage.commitlog_cut == victim.physical_offset


def test_append_in_flight_is_not_an_error(spark, store: Path) -> None:
    """Bytes past the checkpoint's flushed offset (an append being written) are in flight."""
    last = records(store)[-1]
    end = last.physical_offset + last.total_size
    patch_commitlog(store, end, (0).to_bytes(4, "big") + (MAGIC_V1 & 0xFFFFFFFF).to_bytes(4, "big") + os.urandom(300))
    result = run(spark, store)
    assert result.ok and list(result.by_kind) == ["in_flight"], result.findings
    (row,) = result.of_kind("in_flight")
    assert row[1] == "info" and row[4] == end == result.flushed_offset


def test_repair_output_equals_a_fresh_build_and_swaps_in_clean(
    spark, store: Path, pristine: Path, tmp_path: Path
) -> None:
    deleted_unit(store)
    wrong_tags_code(store)
    missing_index_entry(store)
    consumer_offset_past_end(store)
    out = tmp_path / "out"
    before = file_hashes(store)
    result = run(spark, store, out, repair=True)
    assert file_hashes(store) == before  # never in place
    assert set(error_kinds(result)) == {
        "cq_unit_missing",
        "cq_tags_mismatch",
        "index_key_missing",
        "consumer_offset_past_end",
    }
    rep = out / "repair"
    assert sorted((q["topic"], q["queue_id"]) for q in result.repair["queues"]) == [("T0", 2), ("T1", 1)]
    for topic, qid in (("T0", 2), ("T1", 1)):  # the dispatcher built the pristine queues from scratch
        want = {p.name: p.read_bytes() for p in (pristine / "consumequeue" / topic / str(qid)).iterdir()}
        got = {p.name: p.read_bytes() for p in (rep / "consumequeue" / topic / str(qid)).iterdir()}
        assert got == want
    want_index = [p.read_bytes() for p in sorted((pristine / "index").iterdir())]
    assert [p.read_bytes() for p in sorted((rep / "index").iterdir())] == want_index
    offsets = json.loads((rep / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert offsets["T0@g1"]["0"] == sum(1 for r in records(pristine) if (r.topic, r.queue_id) == ("T0", 0))
    with open(store / "lock", "rb+") as held:  # as if the store were running
        import fcntl

        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        swap = subprocess.run(["bash", str(rep / "swap.sh")], capture_output=True, text=True, check=False)
        assert swap.returncode == 1 and "stop it first" in swap.stderr
    assert file_hashes(store) == before
    swap = subprocess.run(["bash", str(rep / "swap.sh")], capture_output=True, text=True, check=False)
    assert swap.returncode == 0, swap.stderr
    assert any(p.name.startswith("reconcile-aside-") for p in store.iterdir())
    again = run(spark, store)
    assert again.ok and again.findings == [], again.findings


def test_dataframe_has_one_row_per_message(spark, pristine: Path, tmp_path: Path) -> None:
    chunked = spark.read.format("mqstore").option("chunkBytes", str(CHUNK)).load(str(pristine))
    assert chunked.rdd.getNumPartitions() > 8 and chunked.count() == MESSAGES
    df = spark.read.format("mqstore").load(str(pristine)).cache()  # one partition per segment
    want = {r.physical_offset: r for r in records(pristine)}
    rows = df.collect()
    assert len(rows) == MESSAGES and {r["physical_offset"] for r in rows} == set(want)
    v6 = [r for r in rows if r["born_host"].startswith("[")]
    assert len(v6) == 60 and all(r["born_host"] == "[::1]:4321" for r in v6)
    for r in rows[:: MESSAGES // 200] + rows[-3:] + v6[:3]:
        w = want[r["physical_offset"]]
        assert (r["topic"], r["queue_id"], r["queue_offset"]) == (w.topic, w.queue_id, w.queue_offset)
        assert (r["store_timestamp"], r["born_timestamp"], r["sysflag"], r["flag"], r["body_crc"]) == (
            w.store_timestamp,
            w.born_timestamp,
            w.sysflag,
            w.flag,
            w.body_crc,
        )
        assert (r["tags"], r["keys"], r["unique_key"], r["msg_id"]) == (w.tags, w.keys, w.unique_key, w.msg_id)
        assert dict(r["properties"]) == w.properties and bytes(r["body"]) == w.body
        assert (r["born_host"], r["store_host"], r["total_size"]) == (str(w.born_host), str(w.store_host), w.total_size)
        assert r["segment"] == w.physical_offset - w.physical_offset % CFG.segment_bytes
    df.createOrReplaceTempView("messages")
    per_topic = {
        r["topic"]: r["n"] for r in spark.sql("SELECT topic, count(*) AS n FROM messages GROUP BY topic").collect()
    }
    assert per_topic == {"T0": MESSAGES // 3, "T1": MESSAGES // 3, "T2": MESSAGES // 3}
    df.write.parquet(str(tmp_path / "messages.parquet"))
    assert pq.read_table(tmp_path / "messages.parquet").num_rows == MESSAGES
    df.unpersist()


def test_running_store_is_read_as_it_is(spark, store: Path) -> None:
    with MessageStore(store, CFG) as s:
        s.append(MessageBatch(topics="T0", bodies=[b"x" * 50] * 40, queue_ids=1, tags="TagX"))
        result = run(spark, store)
        assert result.ok, result.findings
        assert result.of_kind("store_running")


def test_checkpoint_without_confirm_offset_uses_its_physic_timestamp(spark, store: Path) -> None:
    """A 4.9-layout checkpoint: flushed is what was stored by its physic timestamp."""
    from mqstore.formats.checkpoint import Checkpoint
    from mqstore.store.checkpoint_file import write_checkpoint

    recs = records(store)
    ts = recs[MESSAGES // 2].store_timestamp
    flushed = max(r.physical_offset + r.total_size for r in recs if r.store_timestamp <= ts)
    write_checkpoint(store, Checkpoint(physic_msg_timestamp=ts, logics_msg_timestamp=ts, index_msg_timestamp=ts))
    result = run(spark, store)
    assert result.ok and result.flushed_offset == flushed, result.findings
    assert result.in_flight["bytes"] == result.counts["data_end"] - flushed > 0
    assert list(result.by_kind) == ["in_flight"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_bad_input_is_one_line_on_stderr(tmp_path: Path, pristine: Path) -> None:
    (tmp_path / "file").write_text("x")
    for args in (
        ["--store", str(tmp_path / "nothing")],
        ["--store", str(pristine), "--output", str(tmp_path / "file")],
        ["--store", str(pristine), "--repair"],
    ):
        p = cli("reconcile", *args)
        assert p.returncode == 1, p
        assert p.stderr.startswith("mqstore: error:") and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_cli_reports_damage_and_exits_1(store: Path, tmp_path: Path) -> None:
    wrong_tags_code(store)
    out = tmp_path / "out"
    p = cli("reconcile", "--store", str(store), "--master", "local[2]", "--output", str(out), "--chunk-mb", "1")
    assert p.returncode == 1, p.stderr
    assert "cq_tags_mismatch" in p.stdout and "NOT OK: 1 errors" in p.stdout
    assert '"reconcile_progress"' in p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["by_kind"] == {"cq_tags_mismatch": 1} and summary["errors"] == 1 and summary["messages"] == MESSAGES


SAME_AS_VERIFY = [d for d, k in DAMAGE if k != "commitlog_torn_tail"] + [queue_offset_skipped, undecodable_record]


@pytest.mark.parametrize("damage", SAME_AS_VERIFY, ids=[d.__name__ for d in SAME_AS_VERIFY])
def test_findings_agree_with_verify(spark, store: Path, damage) -> None:
    """The Spark job and the one-process checker find the same damage (verify's
    listed findings are capped per kind, so kinds and severities are compared)."""
    from mqstore.store.verify import verify_store

    damage(store)
    report = verify_store(store, index_keys="full")
    result = run(spark, store)
    assert {(k, result.kind_severity[k]) for k in result.by_kind} == {
        (f.kind, f.severity.value) for f in report.findings
    }
    assert result.messages == report.messages


def test_dataframe_skips_what_does_not_decode(spark, store: Path) -> None:
    """A bad body is read as it is (checkCrc=true leaves it out); an undecodable record
    is skipped and the records after it are read."""
    later = records(store)[MESSAGES // 2]
    flipped_body_byte(store)
    read = spark.read.format("mqstore").option("chunkBytes", str(CHUNK))
    assert read.load(str(store)).count() == MESSAGES
    assert read.option("checkCrc", "true").load(str(store)).count() == MESSAGES - 1
    patch_commitlog(store, later.physical_offset + 4, b"\x00\x11\x22\x33")
    assert spark.read.format("mqstore").load(str(store)).count() == MESSAGES - 1
