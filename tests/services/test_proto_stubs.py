"""The committed stubs in mqstore/rpc/v1 and mqstore/rpc/rocketmq_v2 are what
scripts/gen_proto.sh makes from proto/, every field, message, enum value and RPC of the
contracts is documented, and the RocketMQ file is the same wire format as the official
client's apache.rocketmq.v2."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted((ROOT / "proto" / "mqstore" / "v1").glob("*.proto"))
ROCKETMQ_PROTOS = sorted((ROOT / "proto" / "mqstore" / "rocketmq" / "v2").glob("*.proto"))


def test_regenerating_the_stubs_changes_nothing(tmp_path):
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path / "v1"), str(tmp_path / "rocketmq_v2")],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    for name in ("v1", "rocketmq_v2"):
        out, committed = tmp_path / name, ROOT / "mqstore" / "rpc" / name
        generated = sorted(p.name for p in out.iterdir())
        assert generated == sorted(
            p.name for p in committed.iterdir() if p.suffix in (".py", ".pyi") and p.name != "__init__.py"
        )
        match, mismatch, errors = filecmp.cmpfiles(out, committed, generated, shallow=False)
        assert not mismatch and not errors, f"stale stubs (run bash scripts/gen_proto.sh): {mismatch + errors}"


def test_every_declaration_is_documented():
    decl = re.compile(
        r"^\s*(rpc |message |enum |service |(repeated |optional )?[\w.<>, ]+ \w+ = \d+;|[A-Z_0-9]+ = \d+;)"
    )
    undocumented = []
    for path in PROTOS + ROCKETMQ_PROTOS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"\s*message (\w+)", line)
            if m and m.group(1).endswith(("Request", "Response")):
                continue  # documented by the RPC that takes or returns it
            if decl.match(line) and not lines[i - 1].strip().startswith("//"):
                undocumented.append(f"{path.name}:{i + 1}: {line.strip()}")
    assert not undocumented, "\n".join(undocumented)


def test_the_contracts_live_in_their_own_package():
    from mqstore.rpc.v1 import common_pb2, front_pb2

    assert front_pb2.DESCRIPTOR.package == "mqstore.v1"
    assert common_pb2.DESCRIPTOR.name == "mqstore/v1/common.proto"  # no clash with apache.rocketmq.v2
    assert all(p.read_text().count("package mqstore.v1;") == 1 for p in PROTOS)


def test_the_rocketmq_messages_are_the_official_clients_wire_format():
    """Every message and enum of our RocketMQ file has the official client's field
    numbers, types, labels and enum numbers (its generated apache.rocketmq.v2)."""
    from mqstore.rpc.rocketmq_v2 import messaging_pb2
    from tests import rocketmq_client

    rocketmq_client.load()  # its log folder under a test HOME
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    ours = messaging_pb2.DESCRIPTOR
    assert ours.package == "mqstore.rocketmq.v2" and ours.name == "mqstore/rocketmq/v2/messaging.proto"
    theirs = {**definition_pb2.DESCRIPTOR.message_types_by_name, **service_pb2.DESCRIPTOR.message_types_by_name}
    their_enums = {**definition_pb2.DESCRIPTOR.enum_types_by_name, **service_pb2.DESCRIPTOR.enum_types_by_name}

    def shape(message):
        return {
            f.name: (f.number, f.type, f.is_repeated, f.message_type.name if f.message_type else None)
            for f in message.fields
        }

    checked = 0
    for name, message in ours.message_types_by_name.items():
        assert name in theirs, name
        mine, official = shape(message), shape(theirs[name])
        assert not set(official) - set(mine), f"{name} lacks {set(official) - set(mine)}"
        assert {k: mine[k] for k in official} == official, name  # fields newer than the client's are extra
        checked += 1
    for name, enum in ours.enum_types_by_name.items():
        official = {v.name: v.number for v in their_enums[name].values}
        assert official.items() <= {v.name: v.number for v in enum.values}.items(), name
    assert checked >= 40
