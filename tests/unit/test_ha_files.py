"""Issue 28 item 1: a replica's files in RocketMQ's formats, written crash-safe.

epochFileCheckpoint (CheckpointFile + EpochFileCache's serializer), brokerIdentity
(BrokerMetadata), and the checkpoint's masterFlushedOffset / confirmPhyOffset at
bytes 24 and 32 (StoreCheckpoint). Layouts written by hand from the Java source's rules.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import DecodeError
from mqstore.formats.checkpoint import CHECKPOINT_BYTES, Checkpoint
from mqstore.formats.epoch_file import (
    NO_END,
    BrokerIdentity,
    EpochEntry,
    decode_epoch_file,
    encode_epoch_file,
    java_crc32,
)
from mqstore.store import faults
from mqstore.store.checkpoint_file import read_checkpoint, write_checkpoint
from mqstore.store.ha.files import (
    read_broker_identity,
    read_epoch_entries,
    write_broker_identity,
    write_epoch_entries,
)
from tests.tiers import examples

# CheckpointFile's own example (its class comment and CheckpointFileTest): 7-7000, 8-8000.
ROCKETMQ_EXAMPLE = b"2\n773307083\n7-7000\n8-8000\n"


def test_rocketmq_example_byte_for_byte() -> None:
    entries = [EpochEntry(7, 7000), EpochEntry(8, 8000)]
    assert encode_epoch_file(entries) == ROCKETMQ_EXAMPLE
    assert decode_epoch_file(ROCKETMQ_EXAMPLE) == [EpochEntry(7, 7000, 8000), EpochEntry(8, 8000, NO_END)]


def test_crc_covers_the_entry_lines_with_their_newlines() -> None:
    # UtilAll.crc32: java.util.zip.CRC32 of the UTF-8 entry lines, each with lineSeparator, & 0x7FFFFFFF
    body = b"1-0\n2-4096\n3-1073741824\n"
    crc = zlib.crc32(body) & 0x7FFFFFFF
    raw = b"3\n" + str(crc).encode() + b"\n" + body
    assert encode_epoch_file([EpochEntry(1, 0), EpochEntry(2, 4096), EpochEntry(3, 1 << 30)]) == raw
    assert java_crc32(body) == crc
    assert java_crc32(b"\xff" * 4) == zlib.crc32(b"\xff" * 4) & 0x7FFFFFFF  # a CRC with the top bit set


def test_reader_takes_windows_line_ends_and_crc_zero_unchecked() -> None:
    # BufferedReader.readLine splits on \r\n too; the CRC is of the lines re-joined with \n
    assert decode_epoch_file(ROCKETMQ_EXAMPLE.replace(b"\n", b"\r\n"))[1].start_offset == 8000
    assert len(decode_epoch_file(b"2\n0\n7-7000\n8-8000\n")) == 2  # NOT_CHECK_CRC_MAGIC_CODE


def test_lines_that_are_not_entries_are_skipped_but_counted_in_the_crc() -> None:
    body = b"7-7000\nnot an entry\n8-8000\n"
    raw = b"2\n" + str(java_crc32(body)).encode() + b"\n" + body
    assert [e.epoch for e in decode_epoch_file(raw)] == [7, 8]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"2\n",
        b"3\n773307083\n7-7000\n8-8000\n",  # count disagrees
        b"2\n773307084\n7-7000\n8-8000\n",  # CRC disagrees
        b"2\n773307083\n7-7000\n8-80",  # torn
        b"x\n0\n",
        b"1\n0\n7-70 00\n",  # parseLong refuses blanks
        b"2\n0\n8-8000\n7-7000\n",  # epochs must ascend
        b"\xff\xfe",
    ],
)
def test_damaged_files_are_refused(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_epoch_file(raw)


@st.composite
def epoch_lists(draw) -> list[EpochEntry]:
    """Ascending epochs (int32) with non-decreasing start offsets (int64)."""
    epochs = sorted(draw(st.sets(st.integers(0, (1 << 31) - 1), max_size=12)))
    starts = sorted(draw(st.lists(st.integers(0, (1 << 63) - 1), min_size=len(epochs), max_size=len(epochs))))
    return [EpochEntry(e, s) for e, s in zip(epochs, starts)]


@settings(max_examples=examples(200), deadline=None)
@given(epoch_lists())
def test_round_trip(entries: list[EpochEntry]) -> None:
    raw = encode_epoch_file(entries)
    got = decode_epoch_file(raw)
    assert [(e.epoch, e.start_offset) for e in got] == [(e.epoch, e.start_offset) for e in entries]
    assert all(a.end_offset == b.start_offset for a, b in zip(got, got[1:]))
    assert not got or got[-1].end_offset == NO_END
    assert raw.decode().splitlines()[0] == str(len(entries))


def test_file_write_keeps_the_previous_content_as_bak(tmp_path: Path) -> None:
    write_epoch_entries(tmp_path, [EpochEntry(1, 0)])
    write_epoch_entries(tmp_path, [EpochEntry(1, 0), EpochEntry(2, 500)])
    assert (tmp_path / "epochFileCheckpoint.bak").read_bytes() == encode_epoch_file([EpochEntry(1, 0)])
    assert [e.epoch for e in read_epoch_entries(tmp_path)] == [1, 2]
    assert not (tmp_path / "epochFileCheckpoint.tmp").exists()


def test_read_falls_back_to_bak_when_the_file_is_missing_empty_or_damaged(tmp_path: Path) -> None:
    write_epoch_entries(tmp_path, [EpochEntry(1, 0)])
    write_epoch_entries(tmp_path, [EpochEntry(1, 0), EpochEntry(2, 500)])
    main = tmp_path / "epochFileCheckpoint"
    main.write_bytes(b"2\n12\n1-0\n2-5")  # torn
    assert [e.epoch for e in read_epoch_entries(tmp_path)] == [1]
    main.write_bytes(b"")
    assert [e.epoch for e in read_epoch_entries(tmp_path)] == [1]
    main.unlink()
    assert [e.epoch for e in read_epoch_entries(tmp_path)] == [1]
    assert read_epoch_entries(tmp_path / "nothing") == []


def test_an_emptied_cache_stays_empty_through_the_bak(tmp_path: Path) -> None:
    """CheckpointFile reads an empty file's .bak: after every epoch was truncated the
    old ones must not come back through it (here or in RocketMQ)."""
    write_epoch_entries(tmp_path, [EpochEntry(1, 0), EpochEntry(2, 500)])
    write_epoch_entries(tmp_path, [])
    assert read_epoch_entries(tmp_path) == []
    assert decode_epoch_file((tmp_path / "epochFileCheckpoint.bak").read_bytes()) == []


def test_a_failed_write_leaves_the_old_entries(tmp_path: Path) -> None:
    write_epoch_entries(tmp_path, [EpochEntry(1, 0)])
    faults.install("ha.file.write=EIO")
    try:
        with pytest.raises(OSError):
            write_epoch_entries(tmp_path, [EpochEntry(1, 0), EpochEntry(2, 9)])
    finally:
        faults.install(None)
    assert [e.epoch for e in read_epoch_entries(tmp_path)] == [1]
    assert not (tmp_path / "epochFileCheckpoint.tmp").exists()


# ---------------------------------------------------------------- brokerIdentity


def test_broker_identity_layout() -> None:
    # BrokerMetadata.encodeToStr: cluster#brokerName#brokerId, no newline
    ident = BrokerIdentity("DefaultCluster", "broker-a", 2)
    assert ident.encode() == b"DefaultCluster#broker-a#2"
    assert BrokerIdentity.decode(b"DefaultCluster#broker-a#2") == ident
    temp = BrokerIdentity("c", "b", 7, "check-1")  # TempBrokerMetadata adds the register check code
    assert temp.encode() == b"c#b#7#check-1"
    assert BrokerIdentity.decode(b"c#b#7#check-1", temp=True) == temp


@pytest.mark.parametrize("raw", [b"", b"c#b", b"c#b#x", b"#b#1"])
def test_broker_identity_refuses_damage(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        BrokerIdentity.decode(raw)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.text(st.characters(blacklist_characters="#", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    st.text(st.characters(blacklist_characters="#", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    st.integers(0, 1 << 62),
)
def test_broker_identity_round_trip(cluster: str, name: str, broker_id: int) -> None:
    ident = BrokerIdentity(cluster, name, broker_id)
    assert BrokerIdentity.decode(ident.encode()) == ident


def test_broker_identity_file(tmp_path: Path) -> None:
    assert read_broker_identity(tmp_path) is None
    write_broker_identity(tmp_path, BrokerIdentity("c", "shard-0", 1))
    assert (tmp_path / "brokerIdentity").read_bytes() == b"c#shard-0#1"
    assert read_broker_identity(tmp_path) == BrokerIdentity("c", "shard-0", 1)


# ---------------------------------------------------------------- checkpoint bytes 24 and 32


def test_checkpoint_ha_fields_at_bytes_24_and_32() -> None:
    # StoreCheckpoint.flush: putLong(24, masterFlushedOffset), putLong(32, confirmPhyOffset), big-endian
    raw = Checkpoint(master_flushed_offset=0x0102030405060708, confirm_phy_offset=0x1112131415161718).encode()
    assert len(raw) == CHECKPOINT_BYTES
    assert raw[24:32] == bytes.fromhex("0102030405060708")
    assert raw[32:40] == bytes.fromhex("1112131415161718")
    assert raw[:24] == bytes(24) and raw[40:] == bytes(CHECKPOINT_BYTES - 40)
    hand = struct.pack(">qqqqq", 1, 2, 3, 4, 5) + bytes(CHECKPOINT_BYTES - 40)
    cp = Checkpoint.decode(hand)
    assert (cp.master_flushed_offset, cp.confirm_phy_offset) == (4, 5)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, (1 << 63) - 1), min_size=5, max_size=5), st.integers(0, (1 << 63) - 1))
def test_changing_one_ha_field_keeps_the_others(values: list[int], new: int) -> None:
    import dataclasses

    cp = Checkpoint(
        physic_msg_timestamp=values[0],
        logics_msg_timestamp=values[1],
        index_msg_timestamp=values[2],
        master_flushed_offset=values[3],
        confirm_phy_offset=values[4],
    )
    raw = cp.encode()
    changed = dataclasses.replace(Checkpoint.decode(raw), confirm_phy_offset=new).encode()
    assert changed[:32] == raw[:32] and changed[40:] == raw[40:]
    assert struct.unpack(">q", changed[32:40])[0] == new


def test_commitlog_writes_the_ha_fields_without_disturbing_the_rest(tmp_path: Path) -> None:
    from mqstore.store import CommitLog, MessageBatch, StoreConfig

    with CommitLog(tmp_path, StoreConfig(segment_bytes=1 << 16)) as cl:
        cl.append(MessageBatch(topics="T", bodies=[b"x" * 100] * 3, queue_ids=0))
        cl.note_derived_progress(logics_timestamp=11, index_timestamp=7)
        cl.set_master_flushed_offset(4242)
        cl.set_confirm_offset(100)
    cp = read_checkpoint(tmp_path)
    assert cp.master_flushed_offset == 4242
    assert cp.confirm_phy_offset == 100  # a replica's confirm offset, not the flushed offset
    assert (cp.logics_msg_timestamp, cp.index_msg_timestamp) == (11, 7)
    assert cp.physic_msg_timestamp > 0
    write_checkpoint(tmp_path, cp)
    assert read_checkpoint(tmp_path) == cp


def test_rocketmqs_own_checkpoint_keeps_its_other_fields_when_confirm_moves(tmp_path: Path) -> None:
    """tests/golden/checkpoint_v5 (written by RocketMQ 5.3.3's StoreCheckpoint): the
    HA fields read as RocketMQ wrote them; a new confirmPhyOffset changes bytes 32..40 only."""
    import dataclasses
    import json

    golden = Path(__file__).resolve().parents[1] / "golden"
    raw = (golden / "checkpoint_v5").read_bytes()
    want = json.loads((golden / "rocketmq_vectors.json").read_text())["checkpoint"]
    cp = Checkpoint.decode(raw)
    assert (cp.master_flushed_offset, cp.confirm_phy_offset) == (want["masterFlushedOffset"], want["confirmPhyOffset"])
    (tmp_path / "checkpoint").write_bytes(raw)
    write_checkpoint(tmp_path, dataclasses.replace(read_checkpoint(tmp_path), confirm_phy_offset=5))
    new = (tmp_path / "checkpoint").read_bytes()
    assert new[:32] == raw[:32] and new[40:] == raw[40:] and new[32:40] == (5).to_bytes(8, "big")
