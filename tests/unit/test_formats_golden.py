"""The format layer against vectors computed by RocketMQ's own Java classes."""

from __future__ import annotations

import ipaddress
import zlib

import numpy as np
import pytest

from mqstore.formats import (
    Checkpoint,
    Host,
    PreparedRecords,
    ScanOutcome,
    body_crc,
    build_offset_msg_id,
    decode_record,
    encode_host,
    file_name_to_offset,
    index_key_hash,
    java_string_hash,
    offset_to_file_name,
    parse_offset_msg_id,
    parse_properties,
    scan_records,
    serialize_properties,
    tags_code,
)
from mqstore.formats.message import topic_field
from mqstore.formats.properties import crc32_property
from tests.conftest import GOLDEN_DIR


def java_host(s: str) -> Host:
    addr, port = s.rsplit("|", 1)
    return Host(str(ipaddress.ip_address(addr)), int(port))


def test_every_golden_message_decodes_as_java_does(golden: dict) -> None:
    for vec in golden["messages"]:
        raw = bytes.fromhex(vec["hex"])
        want = vec["decoded_by_java"]
        rec = decode_record(raw, 0)
        assert rec.total_size == want["storeSize"] == len(raw)
        assert rec.body_crc == want["bodyCRC"]
        assert rec.queue_id == want["queueId"]
        assert rec.flag == want["flag"]
        assert rec.queue_offset == want["queueOffset"]
        assert rec.physical_offset == want["commitLogOffset"]
        assert rec.sysflag == want["sysFlag"]
        assert rec.born_timestamp == want["bornTimestamp"]
        assert rec.born_host == java_host(want["bornHost"])
        assert rec.store_timestamp == want["storeTimestamp"]
        assert rec.store_host == java_host(want["storeHost"])
        assert rec.reconsume_times == want["reconsumeTimes"]
        assert rec.prepared_transaction_offset == want["preparedTransactionOffset"]
        assert rec.body.hex() == want["bodyHex"]
        assert rec.topic == want["topic"]
        assert rec.properties == (want["properties"] or {})
        assert rec.msg_id == want["msgId"]


def _props_as_java_wrote_them(raw: bytes, rec) -> bytes:
    """The properties bytes as stored, so re-encoding keeps Java's HashMap order."""
    return raw[len(raw) - len(serialize_properties(rec.properties).encode()) :]


def test_every_golden_message_encodes_byte_for_byte(golden: dict) -> None:
    for vec in golden["messages"]:
        raw = bytes.fromhex(vec["hex"])
        rec = decode_record(raw, 0)
        batch = PreparedRecords(
            topics=[topic_field(rec.topic)],
            bodies=[rec.body],
            properties=[_props_as_java_wrote_them(raw, rec)],
            flags=rec.flag,
            sysflags=rec.sysflag,
            born_timestamps=rec.born_timestamp,
            born_hosts=[encode_host(rec.born_host)],
            store_host=encode_host(rec.store_host),
            reconsume_times=rec.reconsume_times,
            prepared_transaction_offsets=rec.prepared_transaction_offset,
        )
        out = batch.render(
            0,
            1,
            physical_offsets=np.array([rec.physical_offset]),
            queue_ids=np.array([rec.queue_id]),
            queue_offsets=np.array([rec.queue_offset]),
            store_timestamp=rec.store_timestamp,
        )
        assert out == raw, vec["name"]


def test_golden_messages_scan_as_one_valid_run(golden: dict) -> None:
    raws = [bytes.fromhex(v["hex"]) for v in golden["messages"]]
    buf = b"".join(raws) + bytes(64)
    res = scan_records(buf, 0, len(buf))
    assert res.sizes.tolist() == [len(r) for r in raws]
    assert res.outcome is ScanOutcome.INVALID  # zeros after the last record
    assert res.stop == sum(map(len, raws))


def test_msg_ids(golden: dict) -> None:
    for vec in golden["msg_ids"]:
        host = java_host(vec["host"])
        assert build_offset_msg_id(host, vec["offset"]) == vec["msgId"]
        assert parse_offset_msg_id(vec["msgId"]) == (host, vec["decoded_offset"])


def test_hashes(golden: dict) -> None:
    for vec in golden["hashes"]:
        assert java_string_hash(vec["s"]) == vec["java_hashCode"], vec["s"]
        assert index_key_hash(vec["s"]) == vec["indexKeyHash"], vec["s"]
        assert index_key_hash(vec["s"]) % 5_000_000 == vec["slot_5000000"]
        assert tags_code(vec["s"]) == vec["tagsCode"]


def test_properties_parse(golden: dict) -> None:
    for vec in golden["properties_parse"]:
        assert parse_properties(vec["s"]) == vec["parsed"], repr(vec["s"])


def test_properties_serialize(golden: dict) -> None:
    vec = golden["properties_serialize"]
    assert serialize_properties([tuple(p) for p in vec["input_in_order"]]) == vec["output"]


def test_crc(golden: dict) -> None:
    for vec in golden["crc"]:
        if "createCrc32_of" in vec:
            assert crc32_property(vec["createCrc32_of"]).hex() == vec["bytes_hex"]
            continue
        data = bytes.fromhex(vec["hex"])
        assert zlib.crc32(data) == vec["crc32_unsigned"]
        assert body_crc(data) == vec["UtilAll_crc32"]


def test_file_names(golden: dict) -> None:
    names = golden["file_names"]
    assert offset_to_file_name(0) == names["offset2FileName_0"]
    assert offset_to_file_name(1 << 30) == names["offset2FileName_1GiB"]
    assert offset_to_file_name(6_000_000) == names["offset2FileName_cq_6000000"]
    assert file_name_to_offset(names["offset2FileName_1GiB"]) == 1 << 30


def test_checkpoint_file(golden: dict) -> None:
    raw = (GOLDEN_DIR / "checkpoint_v5").read_bytes()
    want = golden["checkpoint"]
    cp = Checkpoint.decode(raw)
    assert cp.physic_msg_timestamp == want["physicMsgTimestamp"]
    assert cp.logics_msg_timestamp == want["logicsMsgTimestamp"]
    assert cp.index_msg_timestamp == want["indexMsgTimestamp"]
    assert cp.master_flushed_offset == want["masterFlushedOffset"]
    assert cp.confirm_phy_offset == want["confirmPhyOffset"]
    assert cp.min_timestamp() == want["getMinTimestamp"]
    assert cp.min_timestamp_index() == want["getMinTimestampIndex"]
    assert cp.encode() == raw


@pytest.mark.parametrize("bad", ["", "XYZ", "0A00000500002A9F00000000000004D", "G" * 32])
def test_bad_msg_ids_are_clear_errors(bad: str) -> None:
    from mqstore.errors import DecodeError

    with pytest.raises(DecodeError):
        parse_offset_msg_id(bad)


def _as_v2(v1: bytes) -> bytes:
    """Rewrite a V1 record (IPv4 hosts) as V2: magic 0xDAA320AB, 2-byte topic length."""
    rec = decode_record(v1, 0)
    body_end = 88 + len(rec.body)
    topic_len = v1[body_end]
    out = bytearray(v1[:body_end] + topic_len.to_bytes(2, "big") + v1[body_end + 1 :])
    out[0:4] = len(out).to_bytes(4, "big")
    out[4:8] = (0xDAA320AB).to_bytes(4, "big")
    return bytes(out)


def test_v2_records_are_read_like_v1(golden: dict) -> None:
    from mqstore.formats import MAGIC_V2

    v1 = bytes.fromhex(golden["messages"][0]["hex"])
    v2 = _as_v2(v1)
    a, b = decode_record(v1, 0), decode_record(v2, 0)
    assert b.magic == MAGIC_V2 and b.total_size == a.total_size + 1
    assert (b.topic, b.body, b.properties, b.queue_offset, b.store_timestamp) == (
        a.topic,
        a.body,
        a.properties,
        a.queue_offset,
        a.store_timestamp,
    )
    buf = v1 + v2 + v1 + bytes(16)
    res = scan_records(buf, 0, len(buf))
    assert res.sizes.tolist() == [len(v1), len(v2), len(v1)]


def test_bad_utf8_in_topic_or_properties_reads_as_java_does() -> None:
    """Java decodes with new String(bytes, UTF_8): bad bytes become U+FFFD, no error."""
    h = encode_host(Host("1.2.3.4", 5))
    rec = PreparedRecords(
        topics=[b"\x02T\xff"],
        bodies=[b"x"],
        properties=[b"K\x01\xfe\x02"],
        flags=0,
        sysflags=0,
        born_timestamps=0,
        born_hosts=[h],
        store_host=h,
    ).render(
        0, 1, physical_offsets=np.array([0]), queue_ids=np.array([0]), queue_offsets=np.array([0]), store_timestamp=0
    )
    got = decode_record(rec)
    assert got.topic == "T\ufffd" and got.properties == {"K": "\ufffd"}
