"""No answer of mqstore's own API tells what lies at a commitlog offset the caller may
not read (issue 25, item 1), over real gRPC on loopback (LocalStack, no Ray): a msgId
whose offset holds a record of a topic the caller may not Sub, the inside of a record,
the zeros after a segment's last record, or nothing at all gets one NOT_FOUND, the same
byte for byte, with and without ``--acl``; no error quotes the store's bytes, topics or
ids; key and unique-key queries of the caller's own topic never reach another topic's
records."""

from __future__ import annotations

import json

import grpc
import pytest

from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import small_config, wait_dispatched

C = grpc.StatusCode
ALICE, BOB = ("alice", "alice-secret-1"), ("bob", "bob-secret-1")
ACL = {
    "users": [{"access_key": "root", "secret_key": "root-secret-1", "admin": True}]
    + [{"access_key": u, "secret_key": s} for u, s in (ALICE, BOB)],
    "rules": [
        {"user": "alice", "resource": "Topic:Alice*", "actions": ["Pub", "Sub"], "decision": "Allow"},
        {"user": "bob", "resource": "Topic:Bob*", "actions": ["Pub", "Sub"], "decision": "Allow"},
    ],
}
SEGMENT = small_config().segment_bytes
SECRET = b"bob's secret body "  # what must never reach alice


def answer(call) -> tuple[grpc.StatusCode, str]:
    """(code, details) of a call that must fail."""
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


def msg_id_at(prefix: str, offset: int) -> str:
    """An offset msgId: a shard's store host (16 hex digits) and a commitlog offset."""
    return f"{prefix}{offset:016X}"


def fill(stack, owner: FrontClient) -> dict:
    """``owner``'s records on BobSecret, past the first segment's end: the probe
    offsets (one record's start, its inside, the segment's end blank and the zeros
    after it, past the write position)."""
    sent = [owner.send("BobSecret", [SECRET * 3000], keys=["bob-key"], queue_ids=0) for _ in range(24)]
    wait_dispatched(owner)
    rec = [(r.physical_offsets[0], r.sizes[0], r.msg_ids[0], r.unique_keys[0]) for r in sent]
    first_segment = [r for r in rec if r[0] < SEGMENT]
    last_off, last_size, _, _ = first_segment[-1]
    blank = last_off + last_size  # the BLANK record that ends segment 0
    assert SEGMENT - blank > 64 and any(r[0] >= SEGMENT for r in rec)
    off, size, msg_id, unique_key = rec[3]
    prefix = msg_id[:16]
    wrote = max(r[0] + r[1] for r in rec)
    probes = {
        "inside the header": off + 1,
        "at the magic code": off + 4,
        "at the body crc": off + 8,
        "in the properties": off + size - 40,
        "in the body": off + size // 2,
        "the segment's blank": blank,
        "the blank's length field": blank + 4,
        "zeros after the blank": (blank + SEGMENT) // 2,
        "past the write position": wrote + 4096,
        "far past the end": 1 << 40,
    }
    return {
        "prefix": prefix,
        "record": msg_id,
        "unique_key": unique_key,
        "probes": {name: msg_id_at(prefix, o) for name, o in probes.items()}
        | {"another store host": "0A0B0C0D00002A9F" + msg_id[16:]},
    }


def assert_tells_nothing(code: grpc.StatusCode, details: str) -> None:
    assert code is C.NOT_FOUND, details
    for leak in ("Bob", "magic", "0x", SECRET.decode()[:6], "bob-key"):
        assert leak not in details, (leak, details)


@pytest.fixture(scope="module")
def acl_stack(tmp_path_factory):
    f = tmp_path_factory.mktemp("acl") / "acl.json"
    f.write_text(json.dumps(ACL))
    f.chmod(0o600)
    with LocalStack(tmp_path_factory.mktemp("store"), small_config(), acl=f) as st:
        assert st.wait_ready(60)
        yield st


@pytest.fixture(scope="module")
def anon_stack(tmp_path_factory):
    with LocalStack(tmp_path_factory.mktemp("anon"), small_config()) as st:
        assert st.wait_ready(60)
        yield st


def test_msg_id_answers_do_not_depend_on_what_lies_at_the_offset_with_acl(acl_stack):
    with (
        FrontClient(acl_stack.front_endpoint, access_key=BOB[0], secret_key=BOB[1]) as bob,
        FrontClient(acl_stack.front_endpoint, access_key=ALICE[0], secret_key=ALICE[1]) as alice,
    ):
        seen = fill(acl_stack, bob)
        mine = alice.send("AliceTopic", [b"alice's own"], queue_ids=0)
        wait_dispatched(alice)
        assert [r.body for r in alice.query_by_msg_id(mine.msg_ids[0])] == [b"alice's own"]  # her own: read
        assert bob.query_by_msg_id(seen["record"])[0].body.startswith(SECRET)  # bob's own: read
        answers = {name: answer(lambda m=m: alice.query_by_msg_id(m)) for name, m in seen["probes"].items()}
        answers["bob's record itself"] = answer(lambda: alice.query_by_msg_id(seen["record"]))
        for name, (code, details) in answers.items():
            assert_tells_nothing(code, details)
        assert len(set(answers.values())) == 1, answers  # one answer, byte for byte
        # bob's keys through alice's own topic: as a key nobody has
        none = answer(lambda: alice.query_by_unique_key("AliceTopic", "0" * 32))
        got = answer(lambda: alice.query_by_unique_key("AliceTopic", seen["unique_key"]))
        assert got[0] is none[0] is C.NOT_FOUND and SECRET.decode()[:6] not in got[1]
        assert answer(lambda: alice.query_by_key("AliceTopic", "bob-key"))[0] is C.NOT_FOUND


def test_msg_id_answers_do_not_depend_on_what_lies_at_the_offset_without_acl(anon_stack):
    with FrontClient(anon_stack.front_endpoint) as c:
        seen = fill(anon_stack, c)
        answers = {name: answer(lambda m=m: c.query_by_msg_id(m)) for name, m in seen["probes"].items()}
        for code, details in answers.values():
            assert_tells_nothing(code, details)
        assert len(set(answers.values())) == 1, answers
        assert c.query_by_msg_id(seen["record"])[0].body.startswith(SECRET)  # anonymous: anyone reads it
