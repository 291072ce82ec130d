"""The format layer: RocketMQ's on-disk bytes <-> Python values. No I/O policy here."""

from mqstore.formats.checkpoint import CHECKPOINT_BYTES, Checkpoint
from mqstore.formats.consume_queue import CqUnit, decode_units, encode_units, unit_position
from mqstore.formats.crc import body_crc
from mqstore.formats.index_file import IndexFileView, IndexHeader, index_file_size, index_key_hashes
from mqstore.formats.javahash import index_key_hash, java_string_hash, tags_code
from mqstore.formats.message import (
    BLANK_MAGIC,
    BLANK_RECORD_BYTES,
    MAGIC_V1,
    MAGIC_V2,
    MessageRecord,
    PreparedRecords,
    ScanOutcome,
    ScanResult,
    SysFlag,
    blank_record,
    decode_record,
    record_size,
    scan_records,
)
from mqstore.formats.msgid import (
    Host,
    UniqKeyGenerator,
    build_offset_msg_id,
    decode_host,
    encode_host,
    parse_offset_msg_id,
)
from mqstore.formats.names import check_topic, file_name_to_offset, offset_to_file_name
from mqstore.formats.properties import parse_properties, serialize_properties, split_keys

__all__ = [
    "BLANK_MAGIC",
    "BLANK_RECORD_BYTES",
    "CHECKPOINT_BYTES",
    "Checkpoint",
    "Host",
    "MAGIC_V1",
    "MAGIC_V2",
    "MessageRecord",
    "PreparedRecords",
    "ScanOutcome",
    "ScanResult",
    "SysFlag",
    "UniqKeyGenerator",
    "blank_record",
    "body_crc",
    "build_offset_msg_id",
    "check_topic",
    "decode_host",
    "decode_record",
    "encode_host",
    "file_name_to_offset",
    "index_key_hash",
    "java_string_hash",
    "offset_to_file_name",
    "parse_offset_msg_id",
    "parse_properties",
    "record_size",
    "scan_records",
    "serialize_properties",
    "split_keys",
    "tags_code",
    "IndexFileView",
    "IndexHeader",
    "index_file_size",
    "index_key_hashes",
    "CqUnit",
    "decode_units",
    "encode_units",
    "unit_position",
]
