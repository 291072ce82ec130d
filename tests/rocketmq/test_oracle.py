"""EndTransaction on the RocketMQ port tells nothing of what lies at an offset (issue 25,
item 1), at the wire level with the official client's own stubs and signed headers: a
user with Pub on its own topic only sends transaction ids naming another user's open
transaction, another user's record and the inside of it, the zeros after a segment's
last record, offsets past the end, another store host, no shard, or nothing parseable,
and gets one INVALID_TRANSACTION_ID, the same code and text byte for byte, with and
without ``--acl``; the other user's transaction is untouched by them and ends as usual."""

from __future__ import annotations

import json
import uuid

import pytest

from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests import rocketmq_client
from tests.services.helpers import small_config, wait_dispatched

pytestmark = pytest.mark.slow

rocketmq_client.load()  # before the client's modules: it fixes its log folder at import

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as d  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as s  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: E402
from rocketmq.v5.util.signature import Signature  # noqa: E402

ROOT, ALICE, BOB = ("root", "root-secret-1"), ("alice", "alice-secret-1"), ("bob", "bob-secret-1")
ACL = {
    "users": [{"access_key": "root", "secret_key": ROOT[1], "admin": True}]
    + [{"access_key": u, "secret_key": k} for u, k in (ALICE, BOB)],
    "rules": [
        {"user": "alice", "resource": "Topic:AliceTx", "actions": ["Pub"], "decision": "Allow"},
        {"user": "bob", "resource": "Topic:Bob*", "actions": ["Pub", "Sub"], "decision": "Allow"},
    ],
}
SEGMENT = small_config().segment_bytes
SECRET = b"bob's secret body "
TIMEOUT = 10


def message_id() -> str:
    return "01" + uuid.uuid4().hex.upper()[:32]


def tx_message(topic: str, body: bytes, msg_id: str) -> d.Message:
    m = d.Message(topic=d.Resource(name=topic), body=body)
    sp = m.system_properties
    sp.message_id = msg_id
    sp.message_type = d.TRANSACTION
    sp.body_encoding = d.IDENTITY
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.GetCurrentTime()
    return m


def metadata(endpoint: str, user: tuple[str, str] | None) -> list:
    """The official client's signed headers for ``user`` (None: empty credentials)."""
    rmq = rocketmq_client.load()
    ak, sk = user or ("", "")
    config = rmq.ClientConfiguration(endpoint, rmq.Credentials(ak, sk))
    return Signature.metadata(config, f"oracle-{ak or 'anon'}@{uuid.uuid4().hex[:8]}")


def end(stub, meta, topic: str, msg_id: str, transaction_id: str, resolution=d.COMMIT) -> d.Status:
    req = s.EndTransactionRequest(
        topic=d.Resource(name=topic),
        message_id=msg_id,
        transaction_id=transaction_id,
        resolution=resolution,
        source=d.SOURCE_CLIENT,
    )
    return stub.EndTransaction(req, metadata=meta, timeout=TIMEOUT).status


def stack_with(tmp_path, acl: bool):
    kw = {}
    if acl:
        f = tmp_path / "acl.json"
        f.write_text(json.dumps(ACL))
        f.chmod(0o600)
        kw["acl"] = f
    return LocalStack(tmp_path / "store", small_config(), rocketmq_port=0, **kw)


@pytest.mark.parametrize("acl", [True, False], ids=["acl", "anonymous"])
def test_end_transaction_tells_nothing_of_what_lies_at_an_offset(tmp_path, acl):
    with stack_with(tmp_path, acl) as st:
        assert st.wait_ready(60)
        root = FrontClient(st.front_endpoint, **(dict(access_key=ROOT[0], secret_key=ROOT[1]) if acl else {}))
        bob_front = FrontClient(st.front_endpoint, **(dict(access_key=BOB[0], secret_key=BOB[1]) if acl else {}))
        try:
            for topic in ("AliceTx", "BobTx"):
                root.update_topic(topic, message_type="TRANSACTION")
            with grpc.insecure_channel(st.rocketmq_endpoint) as ch:
                stub = service_pb2_grpc.MessagingServiceStub(ch)
                alice = metadata(st.rocketmq_endpoint, ALICE if acl else None)
                bob = metadata(st.rocketmq_endpoint, BOB if acl else None)
                # bob: an open transaction, and records past the first segment's end
                bob_id = message_id()
                res = stub.SendMessage(
                    s.SendMessageRequest(messages=[tx_message("BobTx", SECRET, bob_id)]), metadata=bob, timeout=TIMEOUT
                )
                assert res.status.code == d.OK, res.status
                bob_tx = res.entries[0].transaction_id
                sent = [bob_front.send("BobPlain", [SECRET * 3000], queue_ids=0) for _ in range(24)]
                wait_dispatched(root)
                rec = [(r.physical_offsets[0], r.sizes[0], r.msg_ids[0]) for r in sent]
                last_off, last_size, _ = [r for r in rec if r[0] < SEGMENT][-1]
                blank = last_off + last_size
                assert SEGMENT - blank > 64 and any(r[0] >= SEGMENT for r in rec)
                off, size, plain_id = rec[3]
                prefix = plain_id[:16]
                wrote = max(r[0] + r[1] for r in rec)

                def at(o: int) -> str:
                    return f"{prefix}{o:016X}"

                probes = {
                    "bob's open transaction": bob_tx,
                    "bob's record": plain_id,
                    "inside bob's record": at(off + 1),
                    "at its magic code": at(off + 4),
                    "in its body": at(off + size // 2),
                    "the segment's blank": at(blank),
                    "zeros after the blank": at((blank + SEGMENT) // 2),
                    "past the write position": at(wrote + 4096),
                    "far past the end": at(1 << 40),
                    "another store host": "0A0B0C0D" + bob_tx[8:],
                    "no such shard": bob_tx[:8] + "FFFF" + bob_tx[12:],
                    "garbage": "garbage",
                    "blank": "   ",
                }
                answers = {}
                for name, tid in probes.items():
                    for msg_id in (bob_id, message_id()):  # even with bob's message id
                        for resolution in (d.COMMIT, d.ROLLBACK):
                            st_ = end(stub, alice, "AliceTx", msg_id, tid, resolution)
                            answers[(name, msg_id == bob_id, resolution)] = (st_.code, st_.message)
                assert len(set(answers.values())) == 1, answers  # one answer, byte for byte
                ((code, text),) = set(answers.values())
                assert code == d.INVALID_TRANSACTION_ID
                for leak in ("Bob", "magic", "0x", bob_id, bob_tx, "secret"):
                    assert leak not in text, (leak, text)
                # bob's transaction is untouched and ends as usual; then alice still learns nothing
                assert end(stub, bob, "BobTx", bob_id, bob_tx).code == d.OK
                again = end(stub, bob, "BobTx", bob_id, bob_tx)
                assert (again.code, again.message) == (d.OK, "the transaction was already ended")
                after = end(stub, alice, "AliceTx", bob_id, bob_tx)
                assert (after.code, after.message) == (code, text)
                wait_dispatched(root)
                got = bob_front.query_by_unique_key("BobTx", bob_id)
                assert [r.body for r in got] == [SECRET]  # committed once, by bob
        finally:
            root.close()
            bob_front.close()
