"""``mqstore acl``: the users and permissions of a front (``serve --acl FILE``).

Each command works either through a running front's admin RPCs (``--server``,
signed by an admin user: ``--access-key``/``--secret-key`` or MQSTORE_ACCESS_KEY /
MQSTORE_SECRET_KEY) or on the file itself (``--file``): to make the first admin
before ``serve --acl`` starts, or while no front serves the file (a running front
keeps the ACL in memory and writes it whole on its next change). The file's format,
the matching and the signature: services/query/acl.py and the services README.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from mqstore.cli.render import print_table
from mqstore.cli.target import AccessKeyOpt, SecretKeyOpt, TlsCaOpt, remote, server_address
from mqstore.errors import MqStoreError

acl_app = typer.Typer(
    help="Users and permissions of a front (serve --acl FILE): list, add and remove users and rules.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help, as the root's (main.py)
)

FileOpt = Annotated[
    Path | None,
    typer.Option("--file", dir_okay=False, help="Work on this ACL file (instead of --server); add-user creates it."),
]
ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        callback=server_address,
        help="HOST:PORT of a running front (instead of --file; no port: 8080); sign as an admin user.",
    ),
]
UserArg = Annotated[str, typer.Argument(help="The user's access key.")]
ResourceArg = Annotated[
    str, typer.Argument(help="Topic:NAME, Group:NAME, a prefix (Topic:Order*), Topic:*, Group:* or *.")
]


class Format(str, Enum):
    json = "json"
    table = "table"


class DecisionChoice(str, Enum):
    allow = "Allow"
    deny = "Deny"


class ActionChoice(str, Enum):
    pub = "Pub"
    sub = "Sub"


FormatOpt = Annotated[Format, typer.Option("--format", help="json (JSON lines) or table.")]


class AclError(MqStoreError):
    """A change the ACL refused (the CLI prints one line and exits 1)."""


class _FileTarget:
    """The commands' operations on an ACL file (services.acl.Acl); rows as the RPCs return them."""

    def __init__(self, path: Path, create: bool) -> None:
        from mqstore.services.query.acl import Acl

        self.acl = Acl.load(path) if path.exists() or not create else Acl(path=path)

    def list_users(self) -> list[dict]:
        return [{"access_key": u.access_key, "admin": u.admin} for u in self.acl.users]

    def add_user(self, access_key: str, secret_key: str, admin: bool, replace: bool) -> bool:
        from mqstore.services.query.acl import User

        return self.acl.add_user(User(access_key, secret_key, admin=admin), replace=replace)

    def remove_user(self, access_key: str) -> int:
        return self.acl.remove_user(access_key)

    def list_rules(self, user: str) -> list[dict]:
        return [r.to_json() for r in self.acl.rules(user or None)]

    def add_rule(self, user: str, resource: str, actions: list[str], decision: str) -> bool:
        from mqstore.services.query.acl import Rule

        return self.acl.add_rule(Rule.of(user, resource, actions, decision))

    def remove_rule(self, user: str, resource: str, decision: str) -> list[dict]:
        return [r.to_json() for r in self.acl.remove_rule(user, resource, decision or None)]


class _ServerTarget:
    """The same operations through a front's admin RPCs."""

    def __init__(self, client) -> None:
        self.c = client

    def list_users(self) -> list[dict]:
        return [{"access_key": u.access_key, "admin": u.admin} for u in self.c.list_users()]

    def add_user(self, access_key: str, secret_key: str, admin: bool, replace: bool) -> bool:
        return self.c.add_user(access_key, secret_key, admin=admin, replace=replace).replaced

    def remove_user(self, access_key: str) -> int:
        return self.c.remove_user(access_key)

    def list_rules(self, user: str) -> list[dict]:
        return [_rule_dict(r) for r in self.c.list_rules(user)]

    def add_rule(self, user: str, resource: str, actions: list[str], decision: str) -> bool:
        return self.c.add_rule(user, resource, actions, decision).replaced

    def remove_rule(self, user: str, resource: str, decision: str) -> list[dict]:
        return [_rule_dict(r) for r in self.c.remove_rule(user, resource, decision)]


def _rule_dict(r) -> dict:
    return {"user": r.user, "resource": r.resource, "actions": list(r.actions), "decision": r.decision}


@contextlib.contextmanager
def _target(
    file: Path | None,
    server: str | None,
    tls_ca: Path | None,
    access_key: str | None,
    secret_key: str | None,
    *,
    create: bool = False,
) -> Iterator[_FileTarget | _ServerTarget]:
    if (file is None) == (server is None):
        raise typer.BadParameter("give --file ACL.json or --server HOST:PORT (one of them)")
    if server is not None:
        with remote(server, tls_ca, access_key, secret_key) as c:
            yield _ServerTarget(c)
        return
    from mqstore.services.common.errors import RpcError

    try:
        yield _FileTarget(file, create)
    except RpcError as e:  # the same refusals the RPCs answer with, as one line
        raise AclError(f"{e.code.name}: {e}") from None


def _rows(rows: list[dict], fmt: Format) -> None:
    if fmt is Format.table:
        print_table([{k: (",".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in rows])
    else:
        for r in rows:
            typer.echo(json.dumps(r))


@acl_app.command("list-users")
def list_users(
    file: FileOpt = None,
    server: ServerOpt = None,
    tls_ca: TlsCaOpt = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """List the users: access key and whether it is an admin (never a secret)."""
    with _target(file, server, tls_ca, access_key, secret_key) as t:
        _rows(t.list_users(), fmt)


@acl_app.command("add-user")
def add_user(
    user: UserArg,
    user_secret: Annotated[
        str | None,
        typer.Option(
            "--user-secret",
            envvar="MQSTORE_USER_SECRET",
            show_default=False,
            help="The new user's secret key, 8-256 characters (env MQSTORE_USER_SECRET); default: a random one, printed once.",
        ),
    ] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="An admin: allowed everything, topic changes and the ACL included.")
    ] = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="Replace a user with this access key (new secret and admin flag; its rules stay)."
        ),
    ] = False,
    file: FileOpt = None,
    server: ServerOpt = None,
    tls_ca: TlsCaOpt = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
) -> None:
    """Add a user; prints one JSON line with its access key and secret key (keep the secret: it is never shown again)."""
    new_secret = user_secret or secrets.token_urlsafe(24)
    with _target(file, server, tls_ca, access_key, secret_key, create=True) as t:
        replaced = t.add_user(user, new_secret, admin, replace)
    typer.echo(json.dumps({"access_key": user, "secret_key": new_secret, "admin": admin, "replaced": replaced}))


@acl_app.command("remove-user")
def remove_user(
    user: UserArg,
    file: FileOpt = None,
    server: ServerOpt = None,
    tls_ca: TlsCaOpt = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
) -> None:
    """Remove a user and its rules (never the last admin)."""
    with _target(file, server, tls_ca, access_key, secret_key) as t:
        n = t.remove_user(user)
    typer.echo(json.dumps({"access_key": user, "rules_removed": n}))


@acl_app.command("list-rules")
def list_rules(
    user: Annotated[str, typer.Option("--user", help="Only this user's rules.")] = "",
    file: FileOpt = None,
    server: ServerOpt = None,
    tls_ca: TlsCaOpt = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """List the rules: user, resource, actions, decision."""
    with _target(file, server, tls_ca, access_key, secret_key) as t:
        _rows(t.list_rules(user), fmt)


@acl_app.command("add-rule")
def add_rule(
    user: UserArg,
    resource: ResourceArg,
    actions: Annotated[
        list[ActionChoice],
        typer.Option("--action", help="Pub (send to a topic) or Sub (read a topic, use a group); repeat for both."),
    ],
    decision: Annotated[DecisionChoice, typer.Option("--decision", help="Allow or Deny.")] = DecisionChoice.allow,
    file: FileOpt = None,
    server: ServerOpt = None,
    tls_ca: TlsCaOpt = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
) -> None:
    """Allow or deny actions of a user on a resource.

    It replaces the user's rule with the same resource and decision. The most
    specific matching rule decides; Deny wins a tie; no matching rule denies."""
    acts = sorted({a.value for a in actions})
    with _target(file, server, tls_ca, access_key, secret_key) as t:
        replaced = t.add_rule(user, resource, acts, decision.value)
    typer.echo(
        json.dumps(
            {"user": user, "resource": resource, "actions": acts, "decision": decision.value, "replaced": replaced}
        )
    )


@acl_app.command("remove-rule")
def remove_rule(
    user: UserArg,
    resource: ResourceArg,
    decision: Annotated[
        DecisionChoice | None, typer.Option("--decision", help="Only the rule with this decision (default: both).")
    ] = None,
    file: FileOpt = None,
    server: ServerOpt = None,
    tls_ca: TlsCaOpt = None,
    access_key: AccessKeyOpt = None,
    secret_key: SecretKeyOpt = None,
) -> None:
    """Remove a user's rules on a resource; prints each removed rule as a JSON line."""
    with _target(file, server, tls_ca, access_key, secret_key) as t:
        gone = t.remove_rule(user, resource, decision.value if decision else "")
    _rows(gone, Format.json)


def register(app: typer.Typer) -> None:
    app.add_typer(acl_app, name="acl")


__all__ = ["acl_app", "register"]
