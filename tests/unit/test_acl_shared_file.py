"""One ACL file shared by several processes (``serve --fronts N`` on one machine, or
``mqstore acl --file`` while serving), modelled by several ``Acl`` objects on one file:
a change made through one is seen by the others within ``FRESH_S`` (re-read on
``authenticate``), changes made through different ones all land (each applies to the
file as it is, under the file's lock), and a file that no longer parses keeps the last
good state."""

from __future__ import annotations

import json
import threading

import pytest

from mqstore.services.common.errors import Unauthenticated
from mqstore.services.query.acl import Acl, Rule, User, auth_metadata


@pytest.fixture
def shared(tmp_path):
    path = tmp_path / "acl.json"
    path.write_text(
        json.dumps({"users": [{"access_key": "admin", "secret_key": "admin-secret", "admin": True}], "rules": []})
    )
    a, b = Acl.load(path), Acl.load(path)
    for x in (a, b):
        x.fresh_s = 0.0  # look at the file on every call (the default looks once a second)
    return path, a, b


def test_a_user_added_through_one_front_signs_on_the_other(shared):
    _, a, b = shared
    with pytest.raises(Unauthenticated, match="unknown access key"):
        b.authenticate(auth_metadata("app", "app-secret"))
    a.add_user(User("app", "app-secret"))
    assert b.authenticate(auth_metadata("app", "app-secret")).access_key == "app"
    b.remove_user("app")
    with pytest.raises(Unauthenticated, match="unknown access key"):
        a.authenticate(auth_metadata("app", "app-secret"))


def test_readers_look_at_the_file_at_most_every_fresh_s(shared):
    _, a, b = shared
    b.fresh_s = 3600.0
    b.refresh(force=True)
    a.add_user(User("late", "late-secret"))
    with pytest.raises(Unauthenticated):  # within the bound: the state b had
        b.authenticate(auth_metadata("late", "late-secret"))
    assert b.refresh(force=True)
    assert b.authenticate(auth_metadata("late", "late-secret")).access_key == "late"


def test_changes_through_both_fronts_all_land(shared):
    path, a, b = shared
    a.fresh_s = b.fresh_s = 3600.0  # neither reader looks: only the change path keeps them right

    def add(acl: Acl, prefix: str) -> None:
        for i in range(20):
            acl.add_user(User(f"{prefix}{i}", "user-secret"))
            acl.add_rule(Rule.of(f"{prefix}{i}", "Topic:T*", ["Pub"], "Allow"))

    threads = [threading.Thread(target=add, args=(x, p)) for x, p in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = json.loads(path.read_text())
    assert {u["access_key"] for u in doc["users"]} == {"admin"} | {f"{p}{i}" for p in "ab" for i in range(20)}
    assert len(doc["rules"]) == 40
    for x in (a, b):
        x.refresh(force=True)
        assert len(x.users) == 41 and len(x.rules()) == 40


def test_a_broken_file_keeps_the_last_good_state(shared):
    path, a, _ = shared
    path.write_text("{not json")
    assert not a.refresh(force=True)
    assert a.authenticate(auth_metadata("admin", "admin-secret")).admin
