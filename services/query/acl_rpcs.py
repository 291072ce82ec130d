"""mqstore's API's users and permissions (query/acl.py) as the FrontService sees
them: who signed a call and whether it may do what it asks (``_caller``, ``_allow``,
``_allow_pub``, ``_admin``: every refusal logged as ``acl_refused``), and the ACL
administration RPCs (admins only). A mixin of ``FrontServicer``, which sets ``acl``
(None: anonymous)."""

from __future__ import annotations

import asyncio

import structlog

from mqstore.rpc.v1 import front_pb2 as pb
from mqstore.services.common.errors import PermissionDenied, Precondition, Unauthenticated, rpc
from mqstore.services.query.acl import TOPIC, Acl, Action, Rule, User

log = structlog.get_logger(__name__)


class AclRpcs:
    """See the module docstring."""

    acl: Acl | None = None

    def _caller(self, context) -> User | None:
        """The user who signed the call (None: the front is anonymous); Unauthenticated otherwise."""
        if self.acl is None:
            return None
        try:
            return self.acl.authenticate(context.invocation_metadata())
        except Unauthenticated as e:
            log.info("acl_refused", peer=context.peer(), code="UNAUTHENTICATED", reason=str(e))
            raise

    def _allow(self, context, *needs: tuple[Action, str, str]) -> User | None:
        """Authenticate, then PermissionDenied unless every (action, kind, name) is allowed."""
        user = self._caller(context)
        try:
            for action, kind, name in needs if user is not None else ():
                self.acl.authorize(user, action, kind, name)
        except PermissionDenied as e:
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", reason=str(e))
            raise
        return user

    def _allow_pub(self, context, topics) -> None:
        """_allow of Pub on every topic of a send (a batch may name thousands)."""
        if self.acl is None:
            return
        user = self._caller(context)
        try:
            self.acl.authorize_all(user, Action.PUB, TOPIC, topics)
        except PermissionDenied as e:
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", reason=str(e))
            raise

    def _admin(self, context, what: str) -> User | None:
        user = self._caller(context)
        if user is not None and not user.admin:
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", user=user.access_key, what=what)
            self.acl.require_admin(user, what)
        return user

    # ------------------------------------------------------------------ ACL administration (admins only)

    def _acl_admin(self, context, what: str) -> tuple[Acl, str]:
        if self.acl is None:
            raise Precondition("this front has no ACL (start it with serve --acl FILE)")
        return self.acl, self._admin(context, what).access_key

    @rpc
    async def ListUsers(self, request: pb.ListUsersRequest, context) -> pb.ListUsersResponse:
        acl, _ = self._acl_admin(context, "listing users")
        return pb.ListUsersResponse(users=[_user_pb(u) for u in acl.users])

    @rpc
    async def AddUser(self, request: pb.AddUserRequest, context) -> pb.AddUserResponse:
        acl, by = self._acl_admin(context, "adding a user")
        user = User(request.access_key, request.secret_key, admin=request.admin)
        replaced = await asyncio.to_thread(acl.add_user, user, replace=request.replace)
        log.info("acl_user_added", by=by, user=user.access_key, admin=user.admin, replaced=replaced)
        return pb.AddUserResponse(user=_user_pb(user), replaced=replaced)

    @rpc
    async def RemoveUser(self, request: pb.RemoveUserRequest, context) -> pb.RemoveUserResponse:
        acl, by = self._acl_admin(context, "removing a user")
        n = await asyncio.to_thread(acl.remove_user, request.access_key)
        log.info("acl_user_removed", by=by, user=request.access_key, rules_removed=n)
        return pb.RemoveUserResponse(rules_removed=n)

    @rpc
    async def ListRules(self, request: pb.ListRulesRequest, context) -> pb.ListRulesResponse:
        acl, _ = self._acl_admin(context, "listing rules")
        return pb.ListRulesResponse(rules=[_rule_pb(r) for r in acl.rules(request.user or None)])

    @rpc
    async def AddRule(self, request: pb.AddRuleRequest, context) -> pb.AddRuleResponse:
        acl, by = self._acl_admin(context, "adding a rule")
        r = request.rule
        rule = Rule.of(r.user, r.resource, r.actions, r.decision or "Allow")
        replaced = await asyncio.to_thread(acl.add_rule, rule)
        log.info("acl_rule_added", by=by, **rule.to_json(), replaced=replaced)
        return pb.AddRuleResponse(rule=_rule_pb(rule), replaced=replaced)

    @rpc
    async def RemoveRule(self, request: pb.RemoveRuleRequest, context) -> pb.RemoveRuleResponse:
        acl, by = self._acl_admin(context, "removing a rule")
        gone = await asyncio.to_thread(acl.remove_rule, request.user, request.resource, request.decision or None)
        log.info("acl_rule_removed", by=by, user=request.user, resource=request.resource, removed=len(gone))
        return pb.RemoveRuleResponse(rules=[_rule_pb(r) for r in gone])


def _user_pb(u: User) -> pb.AclUser:
    return pb.AclUser(access_key=u.access_key, admin=u.admin)  # never the secret


def _rule_pb(r: Rule) -> pb.AclRule:
    return pb.AclRule(**r.to_json())


__all__ = ["AclRpcs"]
