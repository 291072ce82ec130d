"""The committed stubs in mqstore/rpc/v1 are what scripts/gen_proto.sh makes from
proto/, and every field, message, enum value and RPC of the contracts is documented."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted((ROOT / "proto" / "mqstore" / "v1").glob("*.proto"))


def test_regenerating_the_stubs_changes_nothing(tmp_path):
    out = tmp_path / "v1"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(out)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    committed = ROOT / "mqstore" / "rpc" / "v1"
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
    for path in PROTOS:
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
