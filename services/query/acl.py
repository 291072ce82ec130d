"""Users and permissions of the front (RocketMQ 5.3's ACL 2.0 model) and the request
signature its clients send (RocketMQ 5's, so the RocketMQ-client work reuses both).

The file (``serve --acl FILE``; JSON, written with mode 0600)::

    {"users": [{"access_key": "admin", "secret_key": "...", "admin": true},
               {"access_key": "app1", "secret_key": "..."}],
     "rules": [{"user": "app1", "resource": "Topic:Order*", "actions": ["Pub", "Sub"], "decision": "Allow"},
               {"user": "app1", "resource": "Group:app1-", "actions": ["Sub"], "decision": "Allow"}]}

Resources: ``Topic:<name>``, ``Group:<name>`` (literal), ``Topic:<prefix>*``,
``Group:<prefix>*`` (prefix), ``Topic:*``, ``Group:*`` (any of the type), ``*``
(anything). Actions: ``Pub`` (send to a topic) and ``Sub`` (read a topic, use a
group). One rule per (user, resource, decision): adding one for the same three
replaces it, so a user may hold an Allow and a Deny on the same resource.

Matching (RocketMQ's AclAuthorizationHandler): among the user's rules whose resource
matches and whose actions hold the action, the most specific wins: a typed resource
over ``*``, literal over prefix over any, a longer prefix over a shorter one; on a
tie Deny wins. No matching rule: deny. An admin user (RocketMQ's Super) is allowed
everything, including topic changes, other groups' offsets and the ACL itself.

Signature (RocketMQ 5 clients; protocol notes section 8): two request headers::

    authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>
    x-mq-date-time: 20250102T030405Z            (yyyyMMdd'T'HHmmss'Z')

``Signature`` = hex HMAC-SHA1(key = secret key, data = the raw x-mq-date-time value),
compared in constant time and case-insensitively (Java clients send upper-case hex);
the access key is the ``Credential`` up to any ``/``. RocketMQ checks no clock skew
(its clients send local time labelled Z); mqstore refuses a date-time more than
``max_skew_s`` (a day) away from its clock, which bounds replay without refusing
those clients.

Who calls: the front's event loop reads (``authenticate``, ``authorize``) without a
lock (the state is an immutable snapshot, replaced whole); the changes (admin RPCs,
``mqstore acl --file``) run one at a time under a lock and persist the file first.

Several processes share one file (``serve --fronts N`` on one machine, ``mqstore acl
--file`` while serving): a change holds an exclusive lock (flock on the file's
directory) and applies to the file as it is then (re-read if another process wrote it), so no
change is lost; a reader re-reads a changed file at most ``FRESH_S`` after the change
(checked on ``authenticate``, one stat a second). A file that no longer parses is
logged and the last good state kept. Fronts on other nodes (``--front-placement
spread``) each read their own node's file: change it on every node.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import hashlib
import hmac
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import structlog

from mqstore.errors import ConfigError
from mqstore.formats.names import topic_error
from mqstore.services.common.errors import (
    BadRequest,
    NotFound,
    PermissionDenied,
    Precondition,
    RpcError,
    Unauthenticated,
)

log = structlog.get_logger(__name__)
FRESH_S = 1.0  # a file changed by another process (another front, `mqstore acl --file`) is re-read this soon
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
ENV_ACCESS_KEY = "MQSTORE_ACCESS_KEY"
ENV_SECRET_KEY = "MQSTORE_SECRET_KEY"
MAX_SKEW_S = 24 * 3600.0
_ACCESS_KEY_RE = re.compile(r"[A-Za-z0-9_.@%|-]{1,128}")
_NAME_RE = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
_HINT = f"give --access-key/--secret-key or {ENV_ACCESS_KEY}/{ENV_SECRET_KEY}"


class Action(str, enum.Enum):
    """What a rule allows or denies on a resource."""

    PUB = "Pub"
    SUB = "Sub"


class Decision(str, enum.Enum):
    """A rule's answer."""

    ALLOW = "Allow"
    DENY = "Deny"


TOPIC = "Topic"
GROUP = "Group"
ANY = "*"


@dataclass(frozen=True)
class Resource:
    """A rule's resource: ``kind`` is "Topic", "Group" or "*" (anything); ``name``
    the literal name or the prefix; ``prefix`` True for ``Name*`` (and for
    ``Topic:*``, the empty prefix)."""

    kind: str
    name: str = ""
    prefix: bool = False

    @classmethod
    def parse(cls, text: str) -> Resource:
        """``Topic:Orders``, ``Topic:Order*``, ``Topic:*``, ``Group:...`` or ``*``
        (BadRequest otherwise)."""
        if text == ANY:
            return cls(ANY, "", True)
        kind, sep, name = text.partition(":")
        if not sep or kind not in (TOPIC, GROUP):
            raise BadRequest(f"resource {text!r} is not Topic:<name>, Group:<name> (a name, Prefix* or *) or *")
        prefix = name.endswith("*")
        stem = name[:-1] if prefix else name
        # Topic names follow the store's rule (RocketMQ 5: %RETRY% / %DLQ% topics up to 255 characters).
        if (stem or not prefix) and not (_NAME_RE.fullmatch(stem) or (kind == TOPIC and topic_error(stem) is None)):
            raise BadRequest(
                f"resource {text!r}: the name must be 1-127 of [%|a-zA-Z0-9_-] (a topic starting with "
                f"%RETRY% or %DLQ%: up to 255), optionally ending in *"
            )
        return cls(kind, stem, prefix)

    def __str__(self) -> str:
        if self.kind == ANY:
            return ANY
        return f"{self.kind}:{self.name}{'*' if self.prefix else ''}"

    def matches(self, kind: str, name: str) -> bool:
        if self.kind == ANY:
            return True
        if self.kind != kind:
            return False
        return name.startswith(self.name) if self.prefix else name == self.name

    @property
    def rank(self) -> tuple[int, int, int]:
        """Higher is more specific: typed over ``*``, literal (2) over prefix (1)
        over any (0), then the longer prefix."""
        pattern = 2 if not self.prefix else (1 if self.name else 0)
        return (self.kind != ANY, pattern, len(self.name))


@dataclass(frozen=True)
class User:
    """A user: the access key names it, the secret key signs its requests (never
    in repr or in any listing)."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.access_key, str) or not _ACCESS_KEY_RE.fullmatch(self.access_key):
            raise BadRequest(f"access key {self.access_key!r} must be 1-128 of [A-Za-z0-9_.@%|-]")
        if not isinstance(self.secret_key, str) or not 8 <= len(self.secret_key) <= 256:
            raise BadRequest(f"the secret key of {self.access_key!r} must be 8 to 256 characters")
        if not isinstance(self.admin, bool):
            raise BadRequest(f"admin of {self.access_key!r} must be true or false")


@dataclass(frozen=True)
class Rule:
    """``decision`` for ``actions`` of ``user`` on ``resource``."""

    user: str
    resource: Resource
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW

    @classmethod
    def of(cls, user: str, resource: str, actions: Iterable[str], decision: str = "Allow") -> Rule:
        """From the file's (and the wire's) strings; BadRequest names what is wrong."""
        acts = list(actions)
        if not acts:
            raise BadRequest(f"rule {user}/{resource}: give at least one action (Pub, Sub)")
        try:
            parsed = frozenset(Action(a) for a in acts)
        except ValueError:
            raise BadRequest(f"rule {user}/{resource}: actions {acts} must be Pub or Sub") from None
        try:
            dec = Decision(decision)
        except ValueError:
            raise BadRequest(f"rule {user}/{resource}: decision {decision!r} must be Allow or Deny") from None
        return cls(user, Resource.parse(resource), parsed, dec)

    def to_json(self) -> dict:
        return {
            "user": self.user,
            "resource": str(self.resource),
            "actions": sorted(a.value for a in self.actions),
            "decision": self.decision.value,
        }


# Decisions kept per state (a send over thousands of topics looks each up, not the
# rules); a state past this many starts its cache again.
_MAX_DECISIONS = 200_000


@dataclass(frozen=True)
class _State:
    users: dict[str, User]
    rules: dict[tuple[str, Resource, Decision], Rule]  # in insertion order
    # (access key, action, kind, name) -> decide()'s answer; dies with the state,
    # so a change of users or rules is seen at once.
    decisions: dict = field(default_factory=dict, compare=False, repr=False)
    # (access key, action, kind) -> the names allowed so far (authorize_all's set test)
    allowed: dict = field(default_factory=dict, compare=False, repr=False)


def sign(secret_key: str, date_time: str) -> str:
    """Lower-case hex HMAC-SHA1 of the date-time value with the secret key."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def date_time_now(now: float | None = None) -> str:
    """The ``x-mq-date-time`` value for ``now`` (seconds since the epoch; default:
    the clock), in UTC."""
    t = time.time() if now is None else now
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime(DATE_TIME_FORMAT)


def auth_metadata(access_key: str, secret_key: str, now: float | None = None) -> tuple[tuple[str, str], ...]:
    """The two headers a signed request carries (a fresh date-time each call)."""
    stamp = date_time_now(now)
    header = f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME}, Signature={sign(secret_key, stamp)}"
    return ((AUTHORIZATION, header), (DATE_TIME, stamp))


def parse_authorization(header: str) -> tuple[str, bytes]:
    """(access key, signature bytes) of an ``authorization`` value (Unauthenticated
    when it is malformed)."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise Unauthenticated(f"authorization must start with {ALGORITHM}, not {algorithm[:40]!r}")
    fields = {}
    for part in rest.split(","):
        k, eq, v = part.strip().partition("=")
        if eq:
            fields[k.strip()] = v.strip()
    if "Credential" not in fields or "Signature" not in fields:
        raise Unauthenticated("authorization lacks Credential or Signature")
    try:
        signature = bytes.fromhex(fields["Signature"])
    except ValueError:
        raise Unauthenticated("the signature is not hex") from None
    return fields["Credential"].split("/", 1)[0], signature


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Acl:
    """The users and rules of one front (see the module docstring). ``path``: the
    file changes are persisted to (None: in memory only). ``clock`` and
    ``max_skew_s`` (None: no check) bound the request date-time."""

    def __init__(
        self,
        users: Iterable[User] = (),
        rules: Iterable[Rule] = (),
        *,
        path: str | os.PathLike | None = None,
        clock: Callable[[], float] = time.time,
        max_skew_s: float | None = MAX_SKEW_S,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._clock = clock
        self._max_skew_s = max_skew_s
        self._lock = threading.Lock()
        self._state = _check(_State({}, {}), users, rules)
        self.fresh_s = FRESH_S
        self._seen = _file_signature(self.path)  # the file as last read or written here
        self._checked = time.monotonic()

    # ------------------------------------------------------------------ the file

    @classmethod
    def load(cls, path: str | os.PathLike, **kw) -> Acl:
        """The ACL in ``path`` (ConfigError naming the file and the problem)."""
        p = Path(path)
        try:
            doc = json.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"ACL file {p} does not exist (mqstore acl add-user --file {p} ... makes one)") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"ACL file {p} can not be read: {e}") from None
        try:
            if not isinstance(doc, dict) or set(doc) - {"users", "rules"}:
                raise BadRequest('the file must be {"users": [...], "rules": [...]}')
            users = [User(**_fields(u, {"access_key", "secret_key"}, {"admin"})) for u in doc.get("users", [])]
            rules = [Rule.of(**_fields(r, {"user", "resource", "actions"}, {"decision"})) for r in doc.get("rules", [])]
            return cls(users, rules, path=p, **kw)
        except (RpcError, ConfigError, TypeError) as e:
            raise ConfigError(f"ACL file {p}: {e}") from None

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the file if another process changed it since this ACL last read or
        wrote it (looked at most every ``fresh_s`` unless ``force``); True if the state
        was replaced. A file that does not parse (or is gone) is logged and the current
        state kept."""
        if self.path is None:
            return False
        now = time.monotonic()
        if not force and now - self._checked < self.fresh_s:
            return False
        self._checked = now
        sig = _file_signature(self.path)
        if sig is None or sig == self._seen:
            return False
        self._seen = sig
        try:
            fresh = Acl.load(self.path)
        except ConfigError as e:
            log.warning("acl_file_not_reloaded", path=str(self.path), error=str(e))
            return False
        self._state = fresh._state
        log.info("acl_file_reloaded", path=str(self.path), users=len(fresh._state.users))
        return True

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """One change at a time: this process's lock, then the file's directory's
        (other processes), on the file as it is now."""
        with self._lock, _file_lock(self.path):
            self.refresh(force=True)
            yield

    def to_json(self) -> dict:
        """The file's content (secrets included)."""
        return _to_json(self._state)

    def _commit(self, state: _State) -> None:
        """Persist ``state`` (atomically: temp file, fsync, rename, fsync the
        directory; mode 0600), then serve it."""
        if self.path is not None:
            try:
                _write_atomic(self.path, json.dumps(_to_json(state), indent=2) + "\n")
            except OSError as e:
                raise RpcError(f"can not write the ACL file {self.path}: {e}") from None
            self._seen = _file_signature(self.path)
        self._state = state

    # ------------------------------------------------------------------ reading

    @property
    def users(self) -> tuple[User, ...]:
        return tuple(self._state.users.values())

    def rules(self, user: str | None = None) -> tuple[Rule, ...]:
        return tuple(r for r in self._state.rules.values() if user is None or r.user == user)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> User:
        """The user who signed a request with these headers (Unauthenticated
        otherwise: no or malformed header, unknown user, bad signature, a date-time
        too far from the clock)."""
        if self.path is not None and time.monotonic() - self._checked >= self.fresh_s:
            self.refresh()
        headers = {k.lower(): _text(v) for k, v in metadata or ()}
        header = headers.get(AUTHORIZATION)
        if not header:
            raise Unauthenticated(
                f"the request is not signed: this server requires an access key and a secret key ({_HINT})"
            )
        access_key, signature = parse_authorization(header)
        stamp = headers.get(DATE_TIME)
        if not stamp:
            raise Unauthenticated(f"the request has no {DATE_TIME} header (it is what the signature covers)")
        user = self._state.users.get(access_key)
        if user is None:
            raise Unauthenticated(f"unknown access key {access_key!r}")
        expected = hmac.new(user.secret_key.encode(), stamp.encode(), hashlib.sha1).digest()
        if not hmac.compare_digest(expected, signature):
            raise Unauthenticated(f"the signature does not match for access key {access_key!r} (wrong secret key?)")
        if self._max_skew_s is not None:
            try:
                t = dt.datetime.strptime(stamp, DATE_TIME_FORMAT).replace(tzinfo=dt.timezone.utc).timestamp()
            except ValueError:
                raise Unauthenticated(f"{DATE_TIME} {stamp[:40]!r} is not yyyyMMdd'T'HHmmss'Z'") from None
            if abs(t - self._clock()) > self._max_skew_s:
                raise Unauthenticated(
                    f"{DATE_TIME} {stamp!r} is more than {self._max_skew_s:.0f} s from the server's clock"
                )
        return user

    def decide(self, user: User, action: Action, kind: str, name: str) -> tuple[bool, Rule | None]:
        """(allowed, the rule that decided: None for an admin or when none matched)."""
        if user.admin:
            return True, None
        state = self._state
        key = (user.access_key, action, kind, name)
        known = state.decisions.get(key)
        if known is None:
            known = self._decide(state, user, action, kind, name)
            if len(state.decisions) >= _MAX_DECISIONS:
                state.decisions.clear()
            state.decisions[key] = known
        return known

    @staticmethod
    def _decide(state: _State, user: User, action: Action, kind: str, name: str) -> tuple[bool, Rule | None]:
        best: Rule | None = None
        best_key = None
        for rule in state.rules.values():
            if rule.user != user.access_key or action not in rule.actions or not rule.resource.matches(kind, name):
                continue
            key = (rule.resource.rank, rule.decision is Decision.DENY)
            if best_key is None or key > best_key:
                best, best_key = rule, key
        return best is not None and best.decision is Decision.ALLOW, best

    def authorize(self, user: User, action: Action, kind: str, name: str) -> None:
        """PermissionDenied unless ``user`` may ``action`` on ``kind:name``."""
        allowed, rule = self.decide(user, action, kind, name)
        if not allowed:
            why = f"denied by rule {rule.resource}" if rule is not None else "no rule allows it"
            raise PermissionDenied(f"user {user.access_key!r} may not {action.value} on {kind}:{name} ({why})")

    def authorize_all(self, user: User, action: Action, kind: str, names: Iterable[str]) -> None:
        """``authorize`` for every name (the first refused raises): names allowed
        before are one set test in C, the rest are decided one by one."""
        if user.admin:
            return
        state = self._state
        allowed = state.allowed.setdefault((user.access_key, action, kind), set())
        names = names if isinstance(names, (list, tuple, set)) else list(names)
        if allowed.issuperset(names):
            return
        for name in names:
            if name not in allowed:
                self.authorize(user, action, kind, name)
                if len(allowed) >= _MAX_DECISIONS:
                    allowed.clear()
                allowed.add(name)

    def require_admin(self, user: User, what: str) -> None:
        if not user.admin:
            raise PermissionDenied(f"user {user.access_key!r} is not an admin: {what} needs one")

    # ------------------------------------------------------------------ changes

    def add_user(self, user: User, *, replace: bool = False) -> bool:
        """Add ``user`` (or replace it with ``replace``); True if it replaced one.
        Refuses to leave the ACL without an admin (once it has one)."""
        with self._changing():
            s = self._state
            existed = user.access_key in s.users
            if existed and not replace:
                raise RpcError(
                    f"user {user.access_key!r} exists (replace it to change its secret or admin flag)",
                    grpc.StatusCode.ALREADY_EXISTS,
                )
            users = {**s.users, user.access_key: user}
            _keep_an_admin(s.users, users)
            self._commit(_State(users, s.rules))
            return existed

    def remove_user(self, access_key: str) -> int:
        """Remove a user and its rules; returns how many rules went."""
        with self._changing():
            s = self._state
            if access_key not in s.users:
                raise NotFound(f"no user {access_key!r}")
            users = {k: u for k, u in s.users.items() if k != access_key}
            _keep_an_admin(s.users, users)
            rules = {k: r for k, r in s.rules.items() if r.user != access_key}
            self._commit(_State(users, rules))
            return len(s.rules) - len(rules)

    def add_rule(self, rule: Rule) -> bool:
        """Add a rule, replacing the user's rule with the same resource and
        decision; True if it replaced one."""
        with self._changing():
            s = self._state
            if rule.user not in s.users:
                raise NotFound(f"no user {rule.user!r} (add the user first)")
            key = (rule.user, rule.resource, rule.decision)
            self._commit(_State(s.users, {**s.rules, key: rule}))
            return key in s.rules

    def remove_rule(self, user: str, resource: str, decision: str | None = None) -> list[Rule]:
        """Remove the user's rules on ``resource`` (only the one with ``decision``
        if given); returns them (NotFound if there is none)."""
        res = Resource.parse(resource)
        dec = None if decision is None else Rule.of(user, resource, ["Pub"], decision).decision
        with self._changing():
            s = self._state
            gone = [r for r in s.rules.values() if r.user == user and r.resource == res and dec in (None, r.decision)]
            if not gone:
                raise NotFound(f"user {user!r} has no {dec.value + ' ' if dec else ''}rule on {res}")
            self._commit(_State(s.users, {k: r for k, r in s.rules.items() if r not in gone}))
            return gone


def _to_json(s: _State) -> dict:
    return {
        "users": [{"access_key": u.access_key, "secret_key": u.secret_key, "admin": u.admin} for u in s.users.values()],
        "rules": [r.to_json() for r in s.rules.values()],
    }


def _check(state: _State, users: Iterable[User], rules: Iterable[Rule]) -> _State:
    out_users = dict(state.users)
    for u in users:
        if u.access_key in out_users:
            raise ConfigError(f"user {u.access_key!r} appears twice")
        out_users[u.access_key] = u
    out_rules = dict(state.rules)
    for r in rules:
        if r.user not in out_users:
            raise ConfigError(f"a rule names user {r.user!r}, which is not in users")
        if (r.user, r.resource, r.decision) in out_rules:
            raise ConfigError(f"user {r.user!r} has two {r.decision.value} rules on {r.resource}")
        out_rules[(r.user, r.resource, r.decision)] = r
    return _State(out_users, out_rules)


def _keep_an_admin(before: dict[str, User], after: dict[str, User]) -> None:
    if any(u.admin for u in before.values()) and not any(u.admin for u in after.values()):
        raise Precondition("that would leave no admin user (nobody could change the ACL any more)")


def _fields(obj, required: set[str], optional: set[str]) -> dict:
    if not isinstance(obj, dict):
        raise BadRequest(f"{obj!r} is not an object")
    missing, extra = required - set(obj), set(obj) - required - optional
    if missing or extra:
        shown = {k: v for k, v in obj.items() if k != "secret_key"}
        raise BadRequest(f"{shown}: missing {sorted(missing)}, unknown {sorted(extra)}")
    return obj


def _file_signature(path: Path | None) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of the file (None: none): a rename or a write changes it."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


@contextlib.contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    """An exclusive flock on the file's directory (the file itself is replaced by each
    write, so it can not carry the lock; no lock file is left behind); nothing
    without a path."""
    if path is None:
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing lets the lock go


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


__all__ = [
    "ALGORITHM",
    "ANY",
    "AUTHORIZATION",
    "Acl",
    "Action",
    "DATE_TIME",
    "Decision",
    "ENV_ACCESS_KEY",
    "ENV_SECRET_KEY",
    "GROUP",
    "Resource",
    "Rule",
    "TOPIC",
    "User",
    "auth_metadata",
    "date_time_now",
    "parse_authorization",
    "sign",
]
