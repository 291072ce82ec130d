"""``mqstore verify`` and ``mqstore repair`` on real stores with seeded damage.

One small store (a few segments, queue files and index files) is written once;
each test damages a copy the way users' stores get damaged, checks that verify
names the damage (exit 1), that repair brings the store back to a clean verify,
and that every valid message can still be pulled exactly as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mqstore.errors import StoreLockedError
from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE
from mqstore.formats.message import MAGIC_V1, MessageRecord
from mqstore.store import ConsumerOffsets, Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.reader import CommitLogReader
from mqstore.store.repair import repair_store
from mqstore.store.verify import verify_store

CFG = StoreConfig(
    segment_bytes=256 * 1024, consume_queue_file_bytes=20 * 50, index_hash_slots=512, index_max_entries=2048
)
MESSAGES = 2000
BODY_AT = 88  # a V1 record with IPv4 hosts: the body starts after the 88-byte head

Pulled = dict[tuple[str, int, int], tuple]


def pull_everything(store_dir: Path) -> Pulled:
    """Every message every queue serves, keyed by (topic, queue, queue offset)."""
    out: Pulled = {}
    with MessageStore(store_dir, background_dispatch=False) as s:
        for topic, qid in s.consume_queues.keys():
            offset = 0
            while True:
                res = s.pull(topic, qid, offset, max_count=500)
                for r in res.records:
                    out[(topic, qid, r.queue_offset)] = (r.physical_offset, r.body, r.tags, r.keys, r.unique_key)
                if res.next_offset >= res.max_offset:
                    break
                offset = res.next_offset
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Pulled]:
    path = tmp_path_factory.mktemp("pristine") / "store"
    rng = np.random.default_rng(7)
    with MessageStore(path, CFG) as s:
        for i in range(MESSAGES // 50):
            s.append(
                MessageBatch.of(
                    [
                        Message(
                            f"T{j % 3}",
                            rng.bytes(60 + (i * 7 + j) % 200),
                            queue_id=j % 4,
                            tags=f"Tag{j % 5}",
                            keys=[f"k{i}-{j}", f"order{i}"],
                        )
                        for j in range(50)
                    ]
                )
            )
        s.commit_offset("g1", "T0", 0, 5)
    return path, pull_everything(path)


@pytest.fixture
def store(pristine: tuple[Path, Pulled], tmp_path: Path) -> Path:
    shutil.copytree(pristine[0], tmp_path / "store")
    return tmp_path / "store"


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def cli(*args: str) -> subprocess.CompletedProcess:
    """The real command in a subprocess (its exit status, stdout and stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args], capture_output=True, text=True, timeout=120, check=False
    )


# ---------------------------------------------------------------- damage


def records(store: Path) -> list[MessageRecord]:
    return list(CommitLogReader(store).records())


def patch_commitlog(store: Path, offset: int, data: bytes) -> None:
    seg = store / "commitlog" / f"{offset - offset % CFG.segment_bytes:020d}"
    with open(seg, "r+b") as f:
        f.seek(offset % CFG.segment_bytes)
        f.write(data)


def flip_body_byte(store: Path, rec: MessageRecord) -> None:
    at = rec.physical_offset + BODY_AT + 3
    patch_commitlog(store, at, bytes([rec.body[3] ^ 0x5A]))


def queue_files(store: Path, topic: str, qid: int) -> list[Path]:
    return sorted((store / "consumequeue" / topic / str(qid)).iterdir())


def patch_unit(store: Path, topic: str, qid: int, queue_offset: int, field: str, value: int) -> None:
    byte = queue_offset * UNIT_SIZE
    path = store / "consumequeue" / topic / str(qid) / f"{byte - byte % CFG.consume_queue_file_bytes:020d}"
    data = bytearray(path.read_bytes())
    pos = byte % CFG.consume_queue_file_bytes
    unit = np.frombuffer(bytes(data[pos : pos + UNIT_SIZE]), UNIT_DTYPE).copy()
    unit[field] = value
    data[pos : pos + UNIT_SIZE] = unit.tobytes()
    path.write_bytes(bytes(data))


def read_unit(store: Path, topic: str, qid: int, queue_offset: int) -> np.void:
    byte = queue_offset * UNIT_SIZE
    path = store / "consumequeue" / topic / str(qid) / f"{byte - byte % CFG.consume_queue_file_bytes:020d}"
    pos = byte % CFG.consume_queue_file_bytes
    return np.frombuffer(path.read_bytes()[pos : pos + UNIT_SIZE], UNIT_DTYPE)[0]


def crc_of_last_record(store: Path) -> set[int]:
    last = records(store)[-1]
    flip_body_byte(store, last)
    return {last.physical_offset}


def zeroed_queue_tail(store: Path) -> set[int]:
    last = queue_files(store, "T1", 1)[-1]
    data = bytearray(last.read_bytes())
    used = int(np.count_nonzero(np.frombuffer(bytes(data), UNIT_DTYPE)["size"] > 0)) * UNIT_SIZE
    data[used - 3 * UNIT_SIZE : used] = bytes(3 * UNIT_SIZE)  # the queue's last 3 units are gone
    last.write_bytes(bytes(data))
    return set()


def overwritten_unit(store: Path) -> set[int]:
    other = read_unit(store, "T2", 3, 7)
    for name in ("commitlog_offset", "size", "tags_code"):
        patch_unit(store, "T2", 3, 20, name, int(other[name]))  # unit 20 now repeats unit 7
    return set()


def wrong_tags_code(store: Path) -> set[int]:
    patch_unit(store, "T0", 2, 11, "tags_code", 12345)
    return set()


def wrong_unit_size(store: Path) -> set[int]:
    unit = read_unit(store, "T1", 0, 4)
    patch_unit(store, "T1", 0, 4, "size", int(unit["size"]) + 1)
    return set()


def consumer_offset_past_end(store: Path) -> set[int]:
    offsets = ConsumerOffsets(store)
    offsets.commit("g1", "T0", 0, 10**6)
    offsets.commit("g2", "T2", 1, 10**5)
    offsets.persist()
    return set()


def torn_tail_with_garbage(store: Path) -> set[int]:
    last = records(store)[-1]
    end = last.physical_offset + last.total_size
    patch_commitlog(store, end, b"\x00\x00\x01\x00" + b"\xde\xad\xbe\xef" * 300)  # no magic: not a record
    return set()


DAMAGE: list[tuple[Callable[[Path], set[int]], str]] = [
    (crc_of_last_record, "commitlog_crc"),
    (zeroed_queue_tail, "cq_unit_missing"),
    (overwritten_unit, "cq_wrong_record"),
    (wrong_tags_code, "cq_tags_mismatch"),
    (wrong_unit_size, "cq_size_mismatch"),
    (consumer_offset_past_end, "consumer_offset_past_end"),
    (torn_tail_with_garbage, "commitlog_garbage"),
]


# ---------------------------------------------------------------- tests


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_clean_store_verifies_clean(pristine: tuple[Path, Pulled]) -> None:
    path, pulled = pristine
    before = file_hashes(path)
    report = verify_store(path, index_keys="full")
    assert report.ok and report.findings == []
    assert report.messages == MESSAGES == len(pulled)
    assert report.counts["units"] == MESSAGES and report.counts["queues"] == 12
    assert report.counts["index_keys_checked"] == 3 * MESSAGES  # UNIQ_KEY and two KEYS per message
    assert report.counts["segments"] > 1 and report.counts["index_files"] > 1
    res = cli("verify", "--store", str(path), "--format", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["ok"] is True and out["findings"] == [] and out["messages"] == MESSAGES and out["bytes"] > 0
    assert set(out) == {"ok", "findings", "counts", "messages", "bytes", "seconds"}
    res = cli("verify", "--store", str(path))
    assert res.returncode == 0 and "OK: 0 errors, 0 warnings" in res.stdout
    assert file_hashes(path) == before  # read-only


def test_not_a_store_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a store")
    for command, path in (("verify", tmp_path / "nothing"), ("repair", tmp_path / "file")):
        p = cli(command, "--store", str(path))
        assert p.returncode == 1
        assert p.stderr.startswith("mqstore: error: no store at") and len(p.stderr.strip().splitlines()) == 1
        assert "Traceback" not in p.stderr


@pytest.mark.parametrize(("damage", "kind"), DAMAGE, ids=[d.__name__ for d, _ in DAMAGE])
@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_damage_is_found_and_repaired(store: Path, pristine: tuple[Path, Pulled], damage, kind: str) -> None:
    lost = damage(store)
    report = verify_store(store)
    assert not report.ok
    assert report.of_kind(kind), [f.to_json() for f in report.findings]
    res = cli("verify", "--store", str(store), "--format", "json")
    assert res.returncode == 1 and kind in {f["kind"] for f in json.loads(res.stdout)["findings"]}
    result = repair_store(store)
    assert result.ok and result.done
    after = verify_store(store, index_keys="full")
    assert after.ok and after.findings == [], [f.to_json() for f in after.findings]
    want = {k: v for k, v in pristine[1].items() if v[0] not in lost}
    assert pull_everything(store) == want


def test_repair_clamps_consumer_offsets_to_the_queue_end(store: Path) -> None:
    consumer_offset_past_end(store)
    res = cli("repair", "--store", str(store))
    assert res.returncode == 0, res.stderr
    assert "set group 'g1'" in res.stdout and "OK: 0 errors, 0 warnings" in res.stdout
    with MessageStore(store, background_dispatch=False) as s:
        progress = {(p.topic, p.queue_id): p for p in s.consumer_progress("g1")}
        assert progress[("T0", 0)].consumer_offset == progress[("T0", 0)].broker_offset > 0
        (g2,) = s.consumer_progress("g2")
        assert g2.consumer_offset == g2.broker_offset


def test_dry_run_changes_no_byte(store: Path) -> None:
    wrong_tags_code(store)
    torn_tail_with_garbage(store)
    before = file_hashes(store)
    res = cli("repair", "--store", str(store), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "would" in res.stdout and "cut the commitlog" in res.stdout and "consumequeue/T0/2" in res.stdout
    assert file_hashes(store) == before
    assert not any(p.name.startswith("repair-") for p in store.iterdir())


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_corrupt_record_mid_log_is_cut_only_when_asked(store: Path, pristine: tuple[Path, Pulled]) -> None:
    victim = records(store)[MESSAGES // 3]
    offsets = ConsumerOffsets(store)
    offsets.commit("g3", "T1", 2, 150)  # near the end of its queue: past it once the commitlog is cut
    offsets.persist()
    flip_body_byte(store, victim)
    report = verify_store(store)
    (crc,) = report.of_kind("commitlog_crc")
    assert "valid records resume" in crc.detail
    assert report.damage.commitlog_cut == victim.physical_offset
    assert report.damage.records_after_cut == MESSAGES - MESSAGES // 3 - 1
    # Units after the corrupt record still point at real records: only the commitlog is damaged.
    assert {f.kind for f in report.findings} == {"commitlog_crc"}
    before = file_hashes(store)
    res = cli("repair", "--store", str(store))
    assert res.returncode == 1
    assert res.stderr.startswith("mqstore: error: repair refused") and "--truncate-corrupt" in res.stderr
    assert file_hashes(store) == before
    res = cli("repair", "--store", str(store), "--truncate-corrupt")
    assert res.returncode == 0, res.stderr
    assert "set group 'g3'" in res.stdout
    assert verify_store(store, index_keys="full").findings == []
    assert pull_everything(store) == {k: v for k, v in pristine[1].items() if v[0] < victim.physical_offset}
    (attic,) = [p for p in store.iterdir() if p.name.startswith("repair-")]
    kept = sorted((attic / "commitlog").iterdir())
    assert kept and int(kept[0].name) <= victim.physical_offset


def test_torn_append_is_a_warning_and_repair_cuts_it(store: Path, pristine: tuple[Path, Pulled]) -> None:
    last = records(store)[-1]
    end = last.physical_offset + last.total_size
    # A crash mid-append: the run's first TOTALSIZE still 0, its magic and some bytes written.
    patch_commitlog(store, end, (0).to_bytes(4, "big") + (MAGIC_V1 & 0xFFFFFFFF).to_bytes(4, "big") + os.urandom(500))
    report = verify_store(store)
    assert report.ok and [f.kind for f in report.findings] == ["commitlog_torn_tail"]
    assert repair_store(store).ok
    assert verify_store(store).findings == []
    assert pull_everything(store) == pristine[1]


def test_running_store_is_read_but_not_repaired(store: Path) -> None:
    with MessageStore(store, CFG) as s:
        s.append(MessageBatch(topics="T0", bodies=[b"x" * 50] * 40, queue_ids=1, tags="TagX"))
        report = verify_store(store)
        assert report.ok, [f.to_json() for f in report.findings]
        assert report.of_kind("store_running")
        with pytest.raises(StoreLockedError, match="stop it before repairing"):
            repair_store(store)
        res = cli("repair", "--store", str(store), "--dry-run")
        assert res.returncode == 1 and "stop it before repairing" in res.stderr and "Traceback" not in res.stderr
