"""The ACL (services/query/acl.py): RocketMQ 5's request signature, ACL 2.0's
matching, the file and its changes. No server: the front's end-to-end checks are in
tests/services/test_front_acl.py."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.errors import ConfigError
from mqstore.services.common.errors import NotFound, PermissionDenied, Precondition, RpcError, Unauthenticated
from mqstore.services.query.acl import (
    Acl,
    Action,
    Decision,
    Resource,
    Rule,
    User,
    auth_metadata,
    date_time_now,
    parse_authorization,
    sign,
)
from tests.tiers import examples

NOW = 1_735_787_045.0  # 2025-01-02T03:04:05Z
PUB, SUB = Action.PUB, Action.SUB


def acl_of(*rules: tuple[str, list[str], str], admin: bool = False, **kw) -> tuple[Acl, User]:
    user = User("app", "app-secret", admin=admin)
    return Acl([user], [Rule.of("app", r, a, d) for r, a, d in rules], clock=lambda: NOW, **kw), user


# ------------------------------------------------------------------ signature


def test_sign_is_hmac_sha1_hex():
    # RFC 2202 test case 2
    assert sign("Jefe", "what do ya want for nothing?") == "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"


def test_headers_look_like_rocketmq_5():
    (k1, auth), (k2, stamp) = auth_metadata("AK1", "secret-key", NOW)
    assert (k1, k2) == ("authorization", "x-mq-date-time")
    assert stamp == "20250102T030405Z" == date_time_now(NOW)
    sig = hmac.new(b"secret-key", stamp.encode(), hashlib.sha1).hexdigest()
    assert auth == f"MQv2-HMAC-SHA1 Credential=AK1, SignedHeaders=x-mq-date-time, Signature={sig}"
    assert parse_authorization(auth) == ("AK1", bytes.fromhex(sig))


keys = st.from_regex(r"[A-Za-z0-9_.@%|-]{1,40}", fullmatch=True)
secrets_ = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=8, max_size=64)


@settings(max_examples=examples(200), deadline=None)
@given(ak=keys, sk=secrets_, t=st.integers(0, 4_000_000_000), upper=st.booleans())
def test_signed_requests_authenticate(ak, sk, t, upper):
    acl = Acl([User(ak, sk)], clock=lambda: t)
    md = auth_metadata(ak, sk, t)
    if upper:  # Java and Node clients send upper-case hex
        auth = md[0][1]
        head, sig = auth.rsplit("=", 1)
        md = ((md[0][0], f"{head}={sig.upper()}"), md[1])
    assert acl.authenticate(md).access_key == ak
    assert acl.authenticate([(k, v.encode()) for k, v in md]).access_key == ak  # values as bytes


@settings(max_examples=examples(100), deadline=None)
@given(sk=secrets_, other=secrets_)
def test_another_secret_never_authenticates(sk, other):
    if other == sk:
        return
    acl = Acl([User("ak", sk)], clock=lambda: NOW)
    with pytest.raises(Unauthenticated, match="signature does not match"):
        acl.authenticate(auth_metadata("ak", other, NOW))


def test_credential_before_the_slash_names_the_user():
    acl, _ = acl_of()
    (_, auth), stamp = auth_metadata("app", "app-secret", NOW)
    auth = auth.replace("Credential=app,", "Credential=app/20250102/cn-hangzhou/rmq,")
    assert acl.authenticate([("authorization", auth), stamp]).access_key == "app"


@pytest.mark.parametrize(
    "metadata, message",
    [
        ([], "not signed"),
        ([("x-mq-date-time", "20250102T030405Z")], "not signed"),
        ([("authorization", "Basic abc")], "must start with MQv2-HMAC-SHA1"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential=app")], "lacks Credential or Signature"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential=app, Signature=xyz"), ("x-mq-date-time", "1")], "not hex"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential=app, Signature=00")], "no x-mq-date-time"),
        (auth_metadata("nobody", "app-secret", NOW), "unknown access key 'nobody'"),
        (auth_metadata("app", "wrong-secret", NOW), "signature does not match for access key 'app'"),
        (auth_metadata("app", "app-secret", NOW - 2 * 86400), "from the server's clock"),
    ],
)
def test_unauthenticated(metadata, message):
    acl, _ = acl_of()
    with pytest.raises(Unauthenticated, match=message) as e:
        acl.authenticate(metadata)
    assert e.value.code is grpc.StatusCode.UNAUTHENTICATED


def test_local_time_labelled_z_is_accepted_and_the_skew_check_can_be_off():
    acl, _ = acl_of()
    assert acl.authenticate(auth_metadata("app", "app-secret", NOW + 14 * 3600)).access_key == "app"  # UTC+14 "Z"
    stamp = "not a date"
    md = [
        ("authorization", f"MQv2-HMAC-SHA1 Credential=app, Signature={sign('app-secret', stamp)}"),
        ("x-mq-date-time", stamp),
    ]
    with pytest.raises(Unauthenticated, match="is not yyyyMMdd"):
        acl.authenticate(md)
    loose, _ = acl_of(max_skew_s=None)  # RocketMQ's own behaviour: the raw value is what is signed
    assert loose.authenticate(md).access_key == "app"


# ------------------------------------------------------------------ matching


def allowed(acl: Acl, user: User, action: Action, resource: str) -> bool:
    kind, name = resource.split(":", 1)
    return acl.decide(user, action, kind, name)[0]


def test_no_rule_means_deny_and_an_admin_may_do_anything():
    acl, user = acl_of()
    assert not allowed(acl, user, PUB, "Topic:Orders")
    with pytest.raises(PermissionDenied, match=r"user 'app' may not Pub on Topic:Orders \(no rule allows it\)"):
        acl.authorize(user, PUB, "Topic", "Orders")
    admin_acl, admin = acl_of(("Topic:Orders", ["Pub"], "Deny"), admin=True)
    assert allowed(admin_acl, admin, PUB, "Topic:Orders") and allowed(admin_acl, admin, SUB, "Group:any")


def test_actions_are_separate():
    acl, user = acl_of(("Topic:Orders", ["Pub"], "Allow"), ("Group:g1", ["Sub"], "Allow"))
    assert allowed(acl, user, PUB, "Topic:Orders") and not allowed(acl, user, SUB, "Topic:Orders")
    assert allowed(acl, user, SUB, "Group:g1") and not allowed(acl, user, SUB, "Topic:g1")  # kinds are separate


def test_literal_and_prefixes():
    acl, user = acl_of(("Topic:Order*", ["Pub"], "Allow"))
    assert allowed(acl, user, PUB, "Topic:Orders") and allowed(acl, user, PUB, "Topic:Order")
    assert not allowed(acl, user, PUB, "Topic:Orde") and not allowed(acl, user, PUB, "Topic:MyOrders")


def test_most_specific_wins():
    acl, user = acl_of(
        ("*", ["Pub", "Sub"], "Allow"),
        ("Topic:*", ["Pub"], "Deny"),
        ("Topic:Or*", ["Pub"], "Allow"),
        ("Topic:Order*", ["Pub"], "Deny"),
        ("Topic:OrderLog", ["Pub"], "Allow"),
    )
    assert allowed(acl, user, SUB, "Topic:X")  # only * matches Sub
    assert not allowed(acl, user, PUB, "Topic:X")  # Topic:* over *
    assert allowed(acl, user, PUB, "Topic:Orange")  # Or* over Topic:*
    assert not allowed(acl, user, PUB, "Topic:Orders")  # the longer prefix
    assert allowed(acl, user, PUB, "Topic:OrderLog")  # literal over every prefix
    assert allowed(acl, user, PUB, "Group:g")  # * covers groups (Topic:* does not)
    with pytest.raises(PermissionDenied, match=r"Pub on Topic:Orders \(denied by rule Topic:Order\*\)"):
        acl.authorize(user, PUB, "Topic", "Orders")


def test_deny_beats_allow_on_a_tie():
    acl, user = acl_of(("Topic:Orders", ["Pub", "Sub"], "Allow"), ("Topic:Orders", ["Sub"], "Deny"))
    assert allowed(acl, user, PUB, "Topic:Orders") and not allowed(acl, user, SUB, "Topic:Orders")
    acl, user = acl_of(("Topic:O*", ["Sub"], "Deny"), ("Topic:O*", ["Sub"], "Allow"))
    assert not allowed(acl, user, SUB, "Topic:Orders")


def test_decisions_are_kept_until_users_or_rules_change():
    """A send over thousands of topics asks once per topic: the answer is kept, and a
    change (a rule added or removed, a user replaced) is seen by the next question."""
    acl, user = acl_of(("Topic:Bench*", ["Pub"], "Allow"))
    assert all(acl.decide(user, PUB, "Topic", f"BenchTopic{i}")[0] for i in range(3_000))
    acl.add_rule(Rule.of("app", "Topic:BenchTopic7", ["Pub"], "Deny"))
    assert not allowed(acl, user, PUB, "Topic:BenchTopic7") and allowed(acl, user, PUB, "Topic:BenchTopic8")
    acl.remove_rule("app", "Topic:BenchTopic7")
    assert allowed(acl, user, PUB, "Topic:BenchTopic7")
    acl.remove_rule("app", "Topic:Bench*")
    assert not allowed(acl, user, PUB, "Topic:BenchTopic8")
    acl.add_user(User("app", "other-secret", admin=True), replace=True)
    assert not allowed(acl, user, PUB, "Topic:BenchTopic8")  # the caller's own User (not an admin) decides
    assert allowed(acl, User("app", "other-secret", admin=True), PUB, "Topic:BenchTopic8")


def test_authorize_all_refuses_the_first_name_not_allowed_and_sees_changes():
    acl, user = acl_of(("Topic:Bench*", ["Pub"], "Allow"))
    names = [f"BenchTopic{i}" for i in range(2_000)]
    acl.authorize_all(user, PUB, "Topic", names)
    acl.authorize_all(user, PUB, "Topic", iter(names))  # any iterable; the second time from the set
    with pytest.raises(PermissionDenied, match="Pub on Topic:Orders"):
        acl.authorize_all(user, PUB, "Topic", [*names[:5], "Orders", "Other"])
    with pytest.raises(PermissionDenied, match="Sub on Topic:BenchTopic0"):
        acl.authorize_all(user, SUB, "Topic", names)  # the action is part of what was allowed
    acl.add_rule(Rule.of("app", "Topic:BenchTopic1999", ["Pub"], "Deny"))
    with pytest.raises(PermissionDenied, match="BenchTopic1999"):
        acl.authorize_all(user, PUB, "Topic", names)
    admin_acl, admin = acl_of(admin=True)
    admin_acl.authorize_all(admin, PUB, "Topic", ["Anything"])


names = st.from_regex(r"[a-zA-Z0-9_-]{1,12}", fullmatch=True)


@settings(max_examples=examples(300), deadline=None)
@given(
    rules=st.lists(
        st.tuples(st.sampled_from(["Topic", "Group", "*"]), names, st.booleans(), st.sampled_from(["Allow", "Deny"])),
        max_size=8,
    ),
    kind=st.sampled_from(["Topic", "Group"]),
    name=names,
)
def test_matching_against_a_brute_force_model(rules, kind, name):
    parsed = []
    for k, n, prefix, decision in rules:
        text = "*" if k == "*" else f"{k}:{n[: len(n) // 2] + '*' if prefix else n}"
        parsed.append(Rule.of("app", text, ["Sub"], decision))
    user = User("app", "app-secret")
    try:
        acl = Acl([user], parsed)
    except ConfigError:  # the same (resource, decision) twice
        return
    matching = [r for r in parsed if r.resource.matches(kind, name)]

    # model: literal > longer prefix > shorter prefix > typed any > *; then Deny
    def score(r: Rule):
        res = r.resource
        if res.kind == "*":
            return (0, 0, r.decision == Decision.DENY)
        return (1, 10_000 if not res.prefix else len(res.name), r.decision == Decision.DENY)

    want = bool(matching) and max(matching, key=score).decision == Decision.ALLOW
    assert acl.decide(user, SUB, kind, name)[0] == want


@pytest.mark.parametrize("text", ["Topic:", "Topic", "Queue:x", "Topic:a*b", "Topic:a/b", "Group:**", "topic:x", ""])
def test_bad_resources(text):
    with pytest.raises(RpcError) as e:
        Resource.parse(text)
    assert e.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_resource_round_trips():
    for text in ["*", "Topic:*", "Group:*", "Topic:Orders", "Topic:Ord*", "Group:g-1*", "Group:%RETRY%g"]:
        assert str(Resource.parse(text)) == text


def test_long_retry_topics_as_resources():
    """RocketMQ 5 topics starting with %RETRY% or %DLQ% may have up to 255 characters
    (names.check_topic): rules can name them; other names keep the 127 limit."""
    retry = "%RETRY%" + "g" * 193
    for text in [f"Topic:{retry}", f"Topic:{retry[:150]}*", "Topic:%DLQ%" + "d" * 250]:
        assert str(Resource.parse(text)) == text
    acl, user = acl_of((f"Topic:{retry}", ["Sub"], "Allow"))
    assert acl.decide(user, SUB, "Topic", retry)[0] and not acl.decide(user, SUB, "Topic", retry[:-1])[0]
    for text in [
        "Topic:" + "T" * 200,
        "Topic:%RETRY%" + "g" * 249,
        "Group:%RETRY%" + "g" * 193,
        "Topic:%retry%" + "g" * 193,
    ]:
        with pytest.raises(RpcError, match="up to 255") as e:
            Resource.parse(text)
        assert e.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_bad_users_and_rules():
    for bad in [
        dict(access_key="", secret_key="12345678"),
        dict(access_key="a b", secret_key="12345678"),
        dict(access_key="a,b", secret_key="12345678"),
        dict(access_key="ab", secret_key="short"),
    ]:
        with pytest.raises(RpcError):
            User(**bad)
    with pytest.raises(RpcError, match="Pub or Sub"):
        Rule.of("app", "Topic:x", ["Publish"])
    with pytest.raises(RpcError, match="at least one action"):
        Rule.of("app", "Topic:x", [])
    with pytest.raises(RpcError, match="Allow or Deny"):
        Rule.of("app", "Topic:x", ["Pub"], "Maybe")
    assert "app-secret" not in repr(User("app", "app-secret"))


# ------------------------------------------------------------------ the file and its changes


def write(path, doc) -> None:
    path.write_text(json.dumps(doc))


def test_load_save_and_changes(tmp_path):
    f = tmp_path / "acl.json"
    write(
        f,
        {
            "users": [
                {"access_key": "root", "secret_key": "root-secret", "admin": True},
                {"access_key": "app", "secret_key": "app-secret"},
            ],
            "rules": [{"user": "app", "resource": "Topic:Order*", "actions": ["Pub"], "decision": "Allow"}],
        },
    )
    acl = Acl.load(f)
    assert [(u.access_key, u.admin) for u in acl.users] == [("root", True), ("app", False)]
    assert allowed(acl, acl.users[1], PUB, "Topic:Orders")

    assert acl.add_user(User("bob", "bob-secret-1")) is False
    with pytest.raises(RpcError, match="exists") as e:
        acl.add_user(User("bob", "other-secret"))
    assert e.value.code is grpc.StatusCode.ALREADY_EXISTS
    assert acl.add_user(User("bob", "bob-secret-2"), replace=True) is True
    assert acl.add_rule(Rule.of("bob", "Group:g*", ["Sub"])) is False
    assert acl.add_rule(Rule.of("bob", "Group:g*", ["Sub", "Pub"])) is True  # same (resource, decision): replaced
    assert acl.add_rule(Rule.of("bob", "Group:g*", ["Sub"], "Deny")) is False
    with pytest.raises(NotFound, match="no user 'carol'"):
        acl.add_rule(Rule.of("carol", "Topic:x", ["Pub"]))
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name != "acl.json"]  # no temp file left

    again = Acl.load(f)  # every change is in the file
    assert again.to_json() == acl.to_json()
    assert [(str(r.resource), r.decision.value) for r in again.rules("bob")] == [
        ("Group:g*", "Allow"),
        ("Group:g*", "Deny"),
    ]
    assert again.authenticate(auth_metadata("bob", "bob-secret-2")).access_key == "bob"

    assert [r.decision for r in acl.remove_rule("bob", "Group:g*", "Deny")] == [Decision.DENY]
    with pytest.raises(NotFound):
        acl.remove_rule("bob", "Group:g*", "Deny")
    assert acl.remove_user("bob") == 1  # its remaining rule goes with it
    assert [u.access_key for u in Acl.load(f).users] == ["root", "app"] and len(Acl.load(f).rules()) == 1
    with pytest.raises(Precondition, match="no admin"):
        acl.remove_user("root")
    with pytest.raises(Precondition, match="no admin"):
        acl.add_user(User("root", "root-secret"), replace=True)


def test_a_failed_write_changes_nothing(tmp_path):
    f = tmp_path / "acl.json"
    write(f, {"users": [{"access_key": "root", "secret_key": "root-secret", "admin": True}]})
    acl = Acl.load(f)
    f.unlink()
    f.mkdir()  # the rename onto it fails
    with pytest.raises(RpcError, match="can not write the ACL file"):
        acl.add_user(User("bob", "bob-secret"))
    assert [u.access_key for u in acl.users] == ["root"]
    assert [p.name for p in tmp_path.iterdir()] == ["acl.json"]  # the temp file is gone


@pytest.mark.parametrize(
    "doc, message",
    [
        ([], "must be"),
        ({"users": [], "extra": 1}, "must be"),
        ({"users": [{"access_key": "a"}]}, "missing \\['secret_key'\\]"),
        ({"users": [{"access_key": "a", "secret_key": "12345678", "role": "x"}]}, "unknown \\['role'\\]"),
        ({"users": [{"access_key": "a", "secret_key": "12345678"}] * 2}, "appears twice"),
        ({"users": [], "rules": [{"user": "a", "resource": "*", "actions": ["Pub"]}]}, "not in users"),
        ({"users": [{"access_key": "a", "secret_key": "12345678", "admin": "yes"}]}, "true or false"),
    ],
)
def test_bad_files(tmp_path, doc, message):
    f = tmp_path / "acl.json"
    write(f, doc)
    with pytest.raises(ConfigError, match=message) as e:
        Acl.load(f)
    assert str(f) in str(e.value) and "12345678" not in str(e.value)


def test_missing_or_garbled_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        Acl.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="can not be read"):
        Acl.load(tmp_path / "bad.json")
