"""The front with an ACL (serve --acl), over real gRPC on loopback (LocalStack, no
Ray): RocketMQ 5 signatures, Pub/Sub rules on topics and groups, prefixes, Deny,
admins; the admin RPCs and the ``mqstore acl`` commands, the credentials of every
``--server`` command (flags and environment)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import grpc
import pytest

from mqstore.rpc.v1 import common_pb2, front_pb2
from mqstore.services.query.acl import auth_metadata
from mqstore.services.query.client import FrontClient
from mqstore.services.startup.local import LocalStack
from tests.services.helpers import small_config, wait_dispatched

C = grpc.StatusCode
ROOT, PROD, CONS, TIE = (
    ("root", "root-secret-1"),
    ("prod", "prod-secret-1"),
    ("cons", "cons-secret-1"),
    ("tie", "tie-secret-1"),
)
ACL = {
    "users": [{"access_key": "root", "secret_key": ROOT[1], "admin": True}]
    + [{"access_key": u, "secret_key": s} for u, s in (PROD, CONS, TIE)],
    "rules": [
        {"user": "prod", "resource": "Topic:Order*", "actions": ["Pub"], "decision": "Allow"},
        {"user": "prod", "resource": "Topic:OrderAudit", "actions": ["Pub"], "decision": "Deny"},
        {"user": "cons", "resource": "Topic:Order*", "actions": ["Sub"], "decision": "Allow"},
        {"user": "cons", "resource": "Group:cg-*", "actions": ["Sub"], "decision": "Allow"},
        {"user": "tie", "resource": "Topic:Tie", "actions": ["Pub", "Sub"], "decision": "Allow"},
        {"user": "tie", "resource": "Topic:Tie", "actions": ["Sub"], "decision": "Deny"},
    ],
}


@pytest.fixture(scope="module")
def acl_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("acl") / "acl.json"
    f.write_text(json.dumps(ACL))
    f.chmod(0o600)
    return f


@pytest.fixture(scope="module")
def stack(tmp_path_factory, acl_file):
    st = LocalStack(tmp_path_factory.mktemp("store"), small_config(), acl=acl_file)
    assert st.wait_ready(60)
    yield st
    st.close()


def client(stack, user: tuple[str, str] | None) -> FrontClient:
    ak, sk = user if user else (None, None)
    return FrontClient(stack.front_endpoint, access_key=ak, secret_key=sk)


@pytest.fixture(scope="module")
def root(stack):
    with client(stack, ROOT) as c:
        yield c


def fails(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


def test_unsigned_unknown_and_wrong_secret_are_unauthenticated(stack, monkeypatch):
    monkeypatch.delenv("MQSTORE_ACCESS_KEY", raising=False)
    monkeypatch.delenv("MQSTORE_SECRET_KEY", raising=False)
    with (
        client(stack, None) as anon,
        client(stack, ("nobody", "whatever-1")) as unknown,
        client(stack, ("prod", "not-the-secret")) as wrong,
    ):
        for c in (anon, unknown, wrong):
            for call in (
                lambda: c.send("Orders", [b"x"]),
                lambda: c.pull("Orders", 0, 0),
                c.store_status,
                lambda: c.update_topic("Orders"),
                c.list_users,
            ):
                assert fails(call)[0] is C.UNAUTHENTICATED
        assert "not signed" in fails(lambda: anon.send("Orders", [b"x"]))[1]
        assert "unknown access key 'nobody'" in fails(unknown.store_status)[1]
        assert "signature does not match for access key 'prod'" in fails(wrong.store_status)[1]
    # headers by hand: a stale date-time, a signature over another date-time
    with client(stack, None) as raw:
        old = auth_metadata("prod", PROD[1], now=0)
        assert (
            "from the server's clock"
            in fails(lambda: raw.stub.StoreStatus(front_pb2.StoreStatusRequest(), metadata=old))[1]
        )
        a, d = auth_metadata("prod", PROD[1])[0], auth_metadata("prod", PROD[1], now=1e9)[1]
        code, msg = fails(lambda: raw.stub.StoreStatus(front_pb2.StoreStatusRequest(), metadata=[a, d]))
        assert code is C.UNAUTHENTICATED and "signature does not match" in msg
    with pytest.raises(ValueError, match="both an access key and a secret key"):  # half a credential: refused locally
        FrontClient(stack.front_endpoint, access_key="x")


def test_pub_needs_pub_and_a_refused_batch_writes_nothing(stack, root):
    with client(stack, PROD) as prod, client(stack, CONS) as cons:
        ok = prod.send("Orders", [b"o1", b"o2"], queue_ids=0)
        assert list(ok.statuses) == [common_pb2.PUT_OK] * 2
        assert list(prod.send("OrderLines", [b"l1"], queue_ids=0).statuses) == [common_pb2.PUT_OK]  # prefix Order*
        code, msg = fails(lambda: prod.send("Payments", [b"p"], queue_ids=0))
        assert code is C.PERMISSION_DENIED
        assert msg == "user 'prod' may not Pub on Topic:Payments (no rule allows it)"
        # a batch with one refused topic is refused whole, before anything is written
        mixed = ["Orders", "Payments", "Orders"]
        assert fails(lambda: prod.send(mixed, [b"a", b"b", b"c"], queue_ids=0))[0] is C.PERMISSION_DENIED
        code, msg = fails(lambda: cons.send("Orders", [b"x"], queue_ids=0))  # Sub only
        assert code is C.PERMISSION_DENIED and "user 'cons' may not Pub on Topic:Orders" in msg
    wait_dispatched(root)
    assert [r.body for r in root.pull("Orders", 0, 0).records] == [b"o1", b"o2"]
    assert fails(lambda: root.topic_status("Payments"))[0] is C.NOT_FOUND  # no queue was ever written


def test_sub_needs_sub_on_every_read(stack, root):
    sent = root.send("Orders", [b"s1"], queue_ids=1, keys="k-sub")
    pay = root.send("Payments", [b"p1"], queue_ids=0, keys="k-pay")
    wait_dispatched(root)
    with client(stack, CONS) as cons, client(stack, PROD) as prod:
        assert [r.body for r in cons.pull("Orders", 1, 0).records] == [b"s1"]
        assert [r.body for r in cons.query_by_key("Orders", "k-sub")] == [b"s1"]
        assert [r.body for r in cons.query_by_msg_id(sent.msg_ids[0])] == [b"s1"]
        assert [r.body for r in cons.query_by_unique_key("Orders", sent.unique_keys[0])] == [b"s1"]
        assert [r.body for r in cons.query_by_offset("Orders", 1, 0)] == [b"s1"]
        assert cons.offset_by_time("Orders", 1, 0) == 0 and cons.topic_status("Orders")
        for call in (
            lambda: prod.pull("Orders", 1, 0),  # Pub only
            lambda: cons.pull("Payments", 0, 0),
            lambda: cons.pull("MyOrders", 0, 0),  # a prefix matches the start only
            lambda: cons.query_by_key("Payments", "k-pay"),
            lambda: cons.query_by_unique_key("Payments", pay.unique_keys[0]),
            lambda: cons.query_by_offset("Payments", 0, 0),
            lambda: cons.offset_by_time("Payments", 0, 0),
            lambda: cons.topic_status("Payments"),
        ):
            assert fails(call)[0] is C.PERMISSION_DENIED
        # by msgId: the record's topic decides, and nothing of it is told: the answer to no record
        code, msg = fails(lambda: cons.query_by_msg_id(pay.msg_ids[0]))
        assert code is C.NOT_FOUND and "p1" not in msg and "Payments" not in msg
        assert len(prod.store_status()) == 1  # any signed user


def test_deny_beats_allow(stack):
    with client(stack, PROD) as prod, client(stack, TIE) as tie:
        code, msg = fails(lambda: prod.send("OrderAudit", [b"x"], queue_ids=0))  # literal Deny over prefix Allow
        assert code is C.PERMISSION_DENIED and "(denied by rule Topic:OrderAudit)" in msg
        assert list(tie.send("Tie", [b"t"], queue_ids=0).statuses) == [common_pb2.PUT_OK]  # Allow Pub, Sub
        code, msg = fails(lambda: tie.pull("Tie", 0, 0))  # Allow and Deny on Topic:Tie for Sub: Deny wins
        assert code is C.PERMISSION_DENIED and "may not Sub on Topic:Tie (denied by rule Topic:Tie)" in msg


def test_topic_changes_need_an_admin(stack, root):
    with client(stack, PROD) as prod:
        code, msg = fails(lambda: prod.update_topic("Orders", write_queue_nums=8))
        assert code is C.PERMISSION_DENIED and msg == "user 'prod' is not an admin: changing a topic needs one"
    assert root.update_topic("Orders", read_queue_nums=4, write_queue_nums=4).write_queue_nums == 4


def test_offsets_need_sub_on_group_and_topic_and_admins_move_any(stack, root):
    root.send("Orders", [b"g1", b"g2", b"g3"], queue_ids=2)
    wait_dispatched(root)
    with client(stack, CONS) as cons:
        cons.commit_offset("cg-1", "Orders", 2, 2)
        assert cons.fetch_offset("cg-1", "Orders", 2) == 2
        assert [(r.topic, r.queue_id) for r in cons.consumer_progress("cg-1")] == [("Orders", 2)]
        for call in (
            lambda: cons.commit_offset("other", "Orders", 2, 3),  # another group
            lambda: cons.fetch_offset("other", "Orders", 2),
            lambda: cons.consumer_progress("other"),
            lambda: cons.commit_offset("cg-1", "Payments", 0, 0),
        ):  # a topic it may not Sub
            assert fails(call)[0] is C.PERMISSION_DENIED
        assert "may not Sub on Group:other" in fails(lambda: cons.commit_offset("other", "Orders", 2, 3))[1]
    root.commit_offset("cg-1", "Orders", 2, 3)  # an admin moves another group's offsets
    root.commit_offset("other", "Orders", 2, 1)
    assert root.fetch_offset("cg-1", "Orders", 2) == 3 and root.fetch_offset("other", "Orders", 2) == 1


def test_admin_rpcs_change_and_persist_the_acl(stack, root, acl_file):
    with client(stack, PROD) as prod:
        for call in (
            prod.list_users,
            prod.list_rules,
            lambda: prod.add_user("x", "x-secret-1"),
            lambda: prod.add_rule("prod", "*", ["Pub"]),
            lambda: prod.remove_user("cons"),
        ):
            code, msg = fails(call)
            assert code is C.PERMISSION_DENIED and "is not an admin" in msg
    users = root.list_users()
    assert [(u.access_key, u.admin) for u in users][:2] == [("root", True), ("prod", False)]
    assert all(f.name != "secret_key" for f in front_pb2.AclUser.DESCRIPTOR.fields)  # listing carries no secret

    assert root.add_user("dave", "dave-secret-1").replaced is False
    assert fails(lambda: root.add_user("dave", "other-secret"))[0] is C.ALREADY_EXISTS
    assert fails(lambda: root.add_user("bad user", "xxxxxxxxx"))[0] is C.INVALID_ARGUMENT
    with client(stack, ("dave", "dave-secret-1")) as dave:
        assert fails(lambda: dave.send("Logs", [b"x"], queue_ids=0))[0] is C.PERMISSION_DENIED
        r = root.add_rule("dave", "Topic:Log*", ["Pub"])
        assert (r.rule.resource, list(r.rule.actions), r.rule.decision, r.replaced) == (
            "Topic:Log*",
            ["Pub"],
            "Allow",
            False,
        )
        assert list(dave.send("Logs", [b"x"], queue_ids=0).statuses) == [common_pb2.PUT_OK]
        assert fails(lambda: root.add_rule("dave", "Queue:x", ["Pub"]))[0] is C.INVALID_ARGUMENT
        assert fails(lambda: root.add_rule("nobody", "*", ["Pub"]))[0] is C.NOT_FOUND
        assert [r.resource for r in root.list_rules("dave")] == ["Topic:Log*"]
        saved = json.loads(acl_file.read_text())  # written before the answer
        assert {"user": "dave", "resource": "Topic:Log*", "actions": ["Pub"], "decision": "Allow"} in saved["rules"]
        assert {"access_key": "dave", "secret_key": "dave-secret-1", "admin": False} in saved["users"]
        assert stat.S_IMODE(os.stat(acl_file).st_mode) == 0o600

        assert [r.resource for r in root.remove_rule("dave", "Topic:Log*")] == ["Topic:Log*"]
        assert fails(lambda: dave.send("Logs", [b"x"], queue_ids=0))[0] is C.PERMISSION_DENIED
        assert fails(lambda: root.remove_rule("dave", "Topic:Log*"))[0] is C.NOT_FOUND
        assert root.remove_user("dave") == 0
        assert fails(dave.store_status)[0] is C.UNAUTHENTICATED
    assert "dave" not in acl_file.read_text()
    code, msg = fails(lambda: root.remove_user("root"))
    assert code is C.FAILED_PRECONDITION and "no admin" in msg


def test_without_an_acl_every_call_is_anonymous_and_there_is_no_acl_to_change(tmp_path):
    with LocalStack(tmp_path, small_config()) as st, client(st, None) as anon, client(st, PROD) as signed:
        assert st.wait_ready(60)
        assert list(anon.send("Payments", [b"a"], queue_ids=0).statuses) == [common_pb2.PUT_OK]
        assert list(signed.send("Payments", [b"b"], queue_ids=0).statuses) == [common_pb2.PUT_OK]  # headers ignored
        assert anon.update_topic("Payments").topic == "Payments"
        code, msg = fails(anon.list_users)
        assert (code, msg) == (C.FAILED_PRECONDITION, "this front has no ACL (start it with serve --acl FILE)")


# ------------------------------------------------------------------ the command line


def mq(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("MQSTORE_ACCESS_KEY", "MQSTORE_SECRET_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "mqstore.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
    )


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_cli_credentials_from_flags_and_environment(stack, root):
    root.send("Orders", [b"cli"], queue_ids=3)
    wait_dispatched(root)
    server = ["--server", stack.front_endpoint]
    p = mq("pull", "--topic", "Orders", "--queue", "3", "--offset", "0", *server)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1].startswith(
        "mqstore: error: UNAUTHENTICATED: the request is not signed"
    )
    p = mq(
        "pull",
        "--topic",
        "Orders",
        "--queue",
        "3",
        "--offset",
        "0",
        *server,
        "--access-key",
        "cons",
        "--secret-key",
        CONS[1],
    )
    assert p.returncode == 0, p.stderr
    assert [json.loads(x)["body"] for x in p.stdout.splitlines()] == ["cli"]
    env = {"MQSTORE_ACCESS_KEY": "prod", "MQSTORE_SECRET_KEY": PROD[1]}
    p = mq("send", "--topic", "Orders", "--queue", "3", *server, "e1", env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == "PUT_OK", p.stderr
    p = mq("topic-status", "--topic", "Orders", *server, env=env)  # prod may not Sub
    assert p.returncode == 1 and "PERMISSION_DENIED: user 'prod' may not Sub on Topic:Orders" in p.stderr
    p = mq("update-topic", "--topic", "Orders", *server, "--access-key", "root", env={"MQSTORE_SECRET_KEY": ROOT[1]})
    assert p.returncode == 0, p.stderr


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_cli_acl_commands_through_the_server(stack, acl_file):
    admin = ["--server", stack.front_endpoint]
    env = {"MQSTORE_ACCESS_KEY": "root", "MQSTORE_SECRET_KEY": ROOT[1]}
    p = mq("acl", "add-user", "erin", *admin, env=env)
    assert p.returncode == 0, p.stderr
    erin = json.loads(p.stdout)
    assert erin["access_key"] == "erin" and len(erin["secret_key"]) >= 24 and erin["admin"] is False
    p = mq("acl", "add-rule", "erin", "Group:e*", "--action", "Sub", *admin, env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["replaced"] is False, p.stderr
    p = mq("acl", "list-rules", "--user", "erin", "--format", "json", *admin, env=env)
    assert [json.loads(x) for x in p.stdout.splitlines()] == [
        {"user": "erin", "resource": "Group:e*", "actions": ["Sub"], "decision": "Allow"}
    ]
    p = mq("acl", "list-users", *admin, env=env)
    assert p.returncode == 0 and "erin" in p.stdout and erin["secret_key"] not in p.stdout and ROOT[1] not in p.stdout
    with FrontClient(stack.front_endpoint, access_key="erin", secret_key=erin["secret_key"]) as c:
        assert c.consumer_progress("e-group") == []
        p = mq("acl", "remove-rule", "erin", "Group:e*", *admin, env=env)
        assert p.returncode == 0 and json.loads(p.stdout)["resource"] == "Group:e*", p.stderr
        assert fails(lambda: c.consumer_progress("e-group"))[0] is C.PERMISSION_DENIED
        p = mq("acl", "remove-user", "erin", *admin, env=env)
        assert p.returncode == 0 and json.loads(p.stdout) == {"access_key": "erin", "rules_removed": 0}
        assert fails(lambda: c.consumer_progress("e-group"))[0] is C.UNAUTHENTICATED
    p = mq("acl", "list-users", *admin, env={"MQSTORE_ACCESS_KEY": "prod", "MQSTORE_SECRET_KEY": PROD[1]})
    assert p.returncode == 1 and "PERMISSION_DENIED: user 'prod' is not an admin" in p.stderr
    p = mq("acl", "remove-user", "root", *admin, env=env)
    assert p.returncode == 1 and "FAILED_PRECONDITION" in p.stderr
    assert "erin" not in acl_file.read_text()


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/README.md)
def test_cli_acl_commands_on_a_file(tmp_path):
    f = tmp_path / "new" / "acl.json"
    p = mq("acl", "add-user", "root", "--admin", "--file", str(f))
    assert p.returncode == 0, p.stderr
    secret = json.loads(p.stdout)["secret_key"]
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    p = mq("acl", "add-user", "app", "--file", str(f), env={"MQSTORE_USER_SECRET": "app-secret-1"})
    assert p.returncode == 0 and json.loads(p.stdout)["secret_key"] == "app-secret-1"
    for args in (
        ["Topic:Orders", "--action", "Pub", "--action", "Sub"],
        ["Topic:Orders", "--action", "Sub", "--decision", "Deny"],
    ):
        assert mq("acl", "add-rule", "app", *args, "--file", str(f)).returncode == 0
    p = mq("acl", "list-rules", "--file", str(f))
    assert p.returncode == 0 and "Pub,Sub" in p.stdout and "Deny" in p.stdout
    p = mq("acl", "add-rule", "nobody", "*", "--action", "Pub", "--file", str(f))
    assert p.returncode == 1 and p.stderr.strip() == "mqstore: error: NOT_FOUND: no user 'nobody' (add the user first)"
    p = mq("acl", "remove-rule", "app", "Topic:Orders", "--decision", "Deny", "--file", str(f))
    assert p.returncode == 0 and json.loads(p.stdout)["decision"] == "Deny"
    doc = json.loads(f.read_text())
    assert doc["users"][0] == {"access_key": "root", "secret_key": secret, "admin": True}
    assert doc["rules"] == [{"user": "app", "resource": "Topic:Orders", "actions": ["Pub", "Sub"], "decision": "Allow"}]
    p = mq("acl", "list-users", "--file", str(tmp_path / "missing.json"))
    assert p.returncode == 1 and "does not exist" in p.stderr
    p = mq("acl", "list-users")
    assert p.returncode == 2 and "give --file" in p.stderr


def test_every_server_command_takes_credentials_and_acl_commands_have_help():
    import typer
    from typer.testing import CliRunner

    from mqstore.cli.main import app

    def walk(cmd, path=()):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, (*path, name))

    with_server = []
    for path, cmd in walk(typer.main.get_command(app)):
        params = {p.name: p for p in cmd.params}
        if "server" in params:
            with_server.append(" ".join(path))
            assert params["access_key"].envvar == "MQSTORE_ACCESS_KEY", path
            assert params["secret_key"].envvar == "MQSTORE_SECRET_KEY", path
    assert {"send", "pull", "status", "update-topic", "bench append", "acl add-rule"} <= set(with_server)
    runner = CliRunner()
    for name in ("", "list-users", "add-user", "remove-user", "list-rules", "add-rule", "remove-rule"):
        r = runner.invoke(app, ["acl", *([name] if name else []), "--help"])
        assert r.exit_code == 0 and "Usage" in r.output, (name, r.output)
