"""apache.rocketmq.v2.MessagingService on the front's RocketMQ port: what the
official RocketMQ 5 clients (Java, Python, Node.js, Go, C#, Rust) call: an adapter
over the front's ``ShardSet`` (services/common/shard_set.py: the shards' typed clients,
routing, fan-out, the topic table), the same one mqstore's own API (query/front.py) is
an adapter over, with the same users and rules (one ``Acl``).

Calls and what they do here (protocol notes: ../shared/notes/rocketmq-v2-protocol.md):

    QueryRoute               the topic's queues, READ_WRITE (as its perm allows), on one
                             broker "mqstore" whose endpoints are the access point the client used
                             (spread fronts: every front's address, endpoints.py)
    Telemetry                the client's settings answered merged with the server's (settings.py),
                             the stream held open until the client closes it; transaction
                             check-backs sent on it (transactions.py)
    Heartbeat, NotifyClientTermination   OK (the client's session noted, dropped)
    SendMessage              checked as RocketMQ's proxy checks (convert.check_message), queue
                             picked here (round robin; FIFO: the message group's hash), appended
                             (TRANSACTION: a half message, transactions.py)
    ReceiveMessage           pop from the topic's queues on every shard (ConsumeQueueService.Pop,
                             services/index/pop_service.py), long polling within the deadline
    AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue
                             by receipt handle, on the shard the handle names
    QueryAssignment          one assignment per broker (FIFO: per queue)
    EndTransaction           commit or roll back a half message (transactions.py)
    RecallMessage            UNSUPPORTED (not served yet)
    PullMessage, offsets, lite           not registered: gRPC UNIMPLEMENTED, as RocketMQ's proxy

Every answer carries a protocol status (status.py); nothing a client sends ends a
call with a traceback.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import structlog
from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp

from mqstore.errors import InvalidMessageError
from mqstore.formats.message import decode_records
from mqstore.formats.names import check_topic
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.rpc.v1 import common_pb2
from mqstore.rpc.v1 import consume_queue_pb2 as cq
from mqstore.services.common import deadline
from mqstore.services.common.errors import PermissionDenied, Unauthenticated
from mqstore.services.common.server import Registration
from mqstore.services.common.shard_clients import Shard
from mqstore.services.common.shard_set import ShardSet, TopicRoute
from mqstore.services.index.pop_service import MAX_POP, dead_letter_topic
from mqstore.services.query.acl import GROUP, TOPIC, Acl, Action, User
from mqstore.services.rocketmq import convert, settings
from mqstore.services.rocketmq.coalesce import Coalescer
from mqstore.services.rocketmq.endpoints import FrontAddresses, route_endpoints
from mqstore.services.rocketmq.renewal import Renewals
from mqstore.services.rocketmq.status import Code, ProtocolError, answered, code_of, status
from mqstore.services.rocketmq.transactions import TransactionService
from mqstore.store import message_rules, reads
from mqstore.store.consumer_offsets import check_group
from mqstore.store.pop import ReceiptHandle
from mqstore.store.system_topics import is_system_topic
from mqstore.store.topic_configs import PERM_READ, PERM_WRITE

log = structlog.get_logger(__name__)
SERVICE = "apache.rocketmq.v2.MessagingService"
CLIENT_ID = "x-mq-client-id"
BROKER_NAME = "mqstore"
DEFAULT_MAX_ATTEMPTS = 17  # RocketMQ: a group's retryMaxTimes 16, plus the first delivery
MIN_INVISIBLE_MS = 1_000  # RocketMQ's proxy asks 10 s; shorter ones serve tests and fast retries
MAX_INVISIBLE_MS = 12 * 3600 * 1000
ANSWER_MARGIN_S = 0.5  # a long poll ends this long before the client's deadline
_FIRST = np.zeros(1, np.int64)


class MessagingServicer:
    """See the module docstring. ``shards``: the front's ShardSet; ``acl``: its users
    and rules (None: anonymous); ``max_attempts``: deliveries before a message goes to
    ``%DLQ%<group>``; ``max_body``: the largest body a producer may send."""

    def __init__(
        self,
        shards: ShardSet,
        *,
        acl: Acl | None = None,
        endpoint: tuple[str, int],
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_body: int = 4 << 20,
        metrics=None,
        max_sessions: int = settings.MAX_SESSIONS,
        max_sessions_per_user: int = settings.MAX_SESSIONS_PER_USER,
        fronts: FrontAddresses | None = None,
    ) -> None:
        """``max_sessions``, ``max_sessions_per_user``: client sessions kept in all and
        per user (settings.Sessions; a new client past a bound is TOO_MANY_REQUESTS).
        ``fronts``: the addresses of every front when the fronts are spread over nodes
        (routes name them all; None: routes name the client's access point)."""
        self.shards = shards
        self.acl = acl
        self.endpoint = endpoint  # (host, port) routes name when the client gave no access point
        self.fronts: FrontAddresses | None = fronts  # spread fronts: every front's address (endpoints.py)
        self.max_attempts = max_attempts
        self.max_body = max_body
        self.metrics = metrics
        self.sessions = settings.Sessions(
            max_total=max_sessions, max_per_user=max_sessions_per_user, anonymous=acl is None
        )
        self._rr: dict[str, itertools.count] = {}
        self._receive_rr: dict[tuple[str, str], int] = {}
        self.transactions = TransactionService(  # started and stopped by the host
            shards, producers=self._producers, max_body=max_body, topics=self.sessions.publishing_topics
        )
        self.renewals = Renewals(self._change_invisible, self._last_seen)  # push consumers' messages
        # one-message sends and acks of concurrent clients share calls to a shard (coalesce.py)
        self._appends: Coalescer[common_pb2.MessageColumns] = Coalescer(self._append)
        self._acks: Coalescer[str] = Coalescer(self._ack_pop)

    async def _append(self, shard: int, parts: list[common_pb2.MessageColumns]) -> list[tuple[list, list]]:
        """One AppendBatch of every part's messages; per part (statuses, queue offsets)."""
        cols = parts[0]
        if len(parts) > 1:
            cols = common_pb2.MessageColumns()
            for p in parts:
                cols.MergeFrom(p)  # repeated fields append: the parts' rows one after another
        res = await self.shards[shard].commitlog.append_batch(cols)
        r, out, at = res.result, [], 0
        for p in parts:
            n = len(p.topics)
            out.append((r.statuses[at : at + n], r.queue_offsets[at : at + n]))
            at += n
        return out

    async def _ack_pop(self, key: tuple[int, str, str], handles: list[str]) -> list[int]:
        shard, group, topic = key
        res = await self.shards[shard].queues.ack_pop(
            cq.AckPopRequest(group=group, topic=topic, receipt_handles=handles)
        )
        return list(res.outcomes)

    async def _change_invisible(self, shard: int, request: cq.ChangeInvisibleRequest) -> cq.ChangeInvisibleResponse:
        return await self.shards[shard].queues.change_invisible(request)

    def _producers(self, topic: str) -> list:
        """The sessions that may get ``topic``'s transaction check-backs (transactions.py)."""
        return self.sessions.producers(topic, self.may_publish(topic))

    def _last_seen(self, client: settings.SessionKey) -> float | None:
        session = self.sessions.get(client)
        return None if session is None else session.last_seen

    def registration(self) -> Registration:
        return Registration(_add_messaging, self, SERVICE)

    def observe(self, method: str, code: int) -> None:
        if self.metrics is not None:
            self.metrics.observe_rocketmq(method, _CODE_NAMES.get(code) or str(code))

    # ------------------------------------------------------------------ callers

    def _client(self, context) -> str:
        """The caller's client id. Nothing is noted here: a session is noted only once
        the call is authenticated (``_user``), so refused calls keep nothing."""
        client_id = _client_id(context)
        if client_id is None:
            raise ProtocolError(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID} header is missing")
        settings.check_client_id(client_id)
        return client_id

    def _user(self, context, *, note: bool = True) -> User | None:
        """The authenticated caller (None: the front has no ACL), whose session
        (user, client id) is then noted as heard from (``note``; TOO_MANY_REQUESTS
        past the bounds of settings.Sessions)."""
        acl = self.acl
        user = None
        if acl is not None:
            try:
                user = acl.authenticate(context.invocation_metadata())
            except Unauthenticated as e:
                log.info("acl_refused", port="rocketmq", peer=context.peer(), code="UNAUTHORIZED", reason=str(e))
                raise
        client_id = _client_id(context) if note else None
        if client_id is not None and len(client_id) <= settings.MAX_CLIENT_ID_CHARS:
            self.sessions.seen(_key(client_id, user))
        return user

    def may_publish(self, topic: str):
        """Who may get ``topic``'s transaction check-backs: a test of a session's user
        (Pub on the topic now; None without ACL: everyone)."""
        acl = self.acl
        if acl is None:
            return None

        def allowed(access_key: str) -> bool:
            user = next((u for u in acl.users if u.access_key == access_key), None)
            return user is not None and acl.decide(user, Action.PUB, TOPIC, topic)[0]

        return allowed

    def _allow(self, context, *needs: tuple[Action, str, str]) -> User | None:
        user = self._user(context)
        if user is not None:
            try:
                for action, kind, name in needs:
                    self.acl.authorize(user, action, kind, name)
            except PermissionDenied as e:
                log.info("acl_refused", port="rocketmq", peer=context.peer(), code="FORBIDDEN", reason=str(e))
                raise
        return user

    # ------------------------------------------------------------------ topics

    async def _topic(self, name: str) -> TopicRoute:
        """The topic's route facts, from the front's topic table (shard_set.TopicTable:
        at most 1 s old, changes through this front at once); ILLEGAL_TOPIC for a bad or
        system name."""
        try:
            check_topic(name)
        except InvalidMessageError as e:
            raise ProtocolError(Code.ILLEGAL_TOPIC, str(e)) from None
        _check_not_system(name)
        return (await self.shards.topics.get()).route(name)

    async def _endpoints(self, asked: v2.Endpoints) -> v2.Endpoints:
        """Where routes point (endpoints.py): every front's address when the fronts are
        spread over nodes (``self.fronts``), else the access point the client used (NAT
        and containers keep working, as RocketMQ's proxy does it), or this port's own
        address."""
        fronts = await self.fronts.get() if self.fronts is not None else ()
        return route_endpoints(asked, self.endpoint, fronts)

    def _queue(self, topic: str, qid: int, perm: int, info: TopicRoute, endpoints: v2.Endpoints) -> v2.MessageQueue:
        return v2.MessageQueue(
            topic=v2.Resource(name=topic),
            id=qid,
            permission=perm,
            broker=v2.Broker(name=BROKER_NAME, id=0, endpoints=endpoints),
            accept_message_types=convert.accepted_types(info.message_type),
        )

    # ------------------------------------------------------------------ route, session

    @answered(v2.QueryRouteResponse)
    async def QueryRoute(self, request: v2.QueryRouteRequest, context) -> v2.QueryRouteResponse:
        self._client(context)
        topic = request.topic.name
        user = self._user(context)
        if user is not None and not any(
            self.acl.decide(user, action, TOPIC, topic)[0] for action in (Action.PUB, Action.SUB)
        ):
            raise PermissionDenied(f"user {user.access_key!r} may neither Pub nor Sub on Topic:{topic}")
        info = await self._topic(topic)
        endpoints = await self._endpoints(request.endpoints)
        readable, writable = bool(info.perm & PERM_READ), bool(info.perm & PERM_WRITE)
        queues = []
        for q in range(max(info.read_queues, info.write_queues)):
            r, w = readable and q < info.read_queues, writable and q < info.write_queues
            perm = v2.READ_WRITE if r and w else v2.READ if r else v2.WRITE if w else v2.NONE
            queues.append(self._queue(topic, q, perm, info, endpoints))
        return v2.QueryRouteResponse(status=status(), message_queues=queues)

    async def Telemetry(self, requests: AsyncIterator[v2.TelemetryCommand], context) -> AsyncIterator:
        """Answer every settings command with merged settings; ignore the rest (thread
        dumps, verify results); end when the client half-closes. Commands the server
        sends on its own (transaction check-backs, transactions.py) go through the
        client session's outbox, merged into the stream with the answers."""
        try:
            client_id = self._client(context)
            key = _key(client_id, self._user(context))  # the caller's own session, never another user's
            self.sessions.seen(key).outbox = outbox = asyncio.Queue()
        except Exception as e:  # noqa: BLE001 - refused in the stream's first answer
            code, message = code_of(e)
            self.observe("Telemetry", code)
            yield v2.TelemetryCommand(status=status(code, message))
            return

        async def read() -> None:
            try:
                async for command in requests:
                    if command.WhichOneof("command") != "settings":
                        continue
                    while outbox.qsize() >= settings.MAX_STREAM_PENDING:  # a client that reads no answers
                        await asyncio.sleep(0.05)  # is read no further: its commands wait in gRPC's window
                    try:
                        self.sessions.seen(key).outbox = outbox  # this stream, also after a forget
                        answer = await self._settings(key, command.settings, context)
                    except Exception as e:  # noqa: BLE001 - an answer, never a broken stream
                        code, message = code_of(e)
                        answer = v2.TelemetryCommand(status=status(code, message))
                    self.observe("Telemetry", answer.status.code)
                    outbox.put_nowait(answer)
            except Exception as e:  # noqa: BLE001 - the client went away mid-stream
                log.debug("rocketmq_telemetry_ended", client_id=client_id, user=key.user, error=str(e))
            finally:
                outbox.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (command := await outbox.get()) is not None:
                yield command
        finally:
            reader.cancel()
            session = self.sessions.get(key)
            if session is not None and session.outbox is outbox:
                session.outbox = None

    async def _settings(self, key: settings.SessionKey, s: v2.Settings, context) -> v2.TelemetryCommand:
        self.sessions.check_settings(s)  # bounded before anything of them is kept
        session = self.sessions.seen(key)
        fifo = False
        if s.HasField("publishing"):
            self._allow(context, *((Action.PUB, TOPIC, t.name) for t in s.publishing.topics))
            for t in s.publishing.topics:
                _check_not_system(t.name)
        elif s.HasField("subscription"):
            sub = s.subscription
            needs = [(Action.SUB, GROUP, sub.group.name)] + [
                (Action.SUB, TOPIC, e.topic.name) for e in sub.subscriptions
            ]
            self._allow(context, *needs)
            for e in sub.subscriptions:
                fifo = fifo or (await self._topic(e.topic.name)).fifo
            session.group = sub.group.name
        else:
            raise ProtocolError(Code.BAD_REQUEST, "settings carry neither publishing nor subscription")
        self.sessions.keep_settings(session, s)
        return v2.TelemetryCommand(
            status=status(),
            settings=settings.reply(s, max_body=self.max_body, max_attempts=self.max_attempts, fifo=fifo),
        )

    @answered(v2.HeartbeatResponse)
    async def Heartbeat(self, request: v2.HeartbeatRequest, context) -> v2.HeartbeatResponse:
        self._client(context)
        if request.HasField("group") and request.group.name:
            self._allow(context, (Action.SUB, GROUP, request.group.name))
        else:
            self._user(context)
        return v2.HeartbeatResponse(status=status())

    @answered(v2.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context) -> v2.NotifyClientTerminationResponse:
        key = _key(self._client(context), self._user(context, note=False))  # the caller's own session only
        self.sessions.forget(key)
        await self.renewals.release(key)  # its push consumer's messages: visible again at once
        return v2.NotifyClientTerminationResponse(status=status())

    # ------------------------------------------------------------------ send

    @answered(v2.SendMessageResponse)
    async def SendMessage(self, request: v2.SendMessageRequest, context) -> v2.SendMessageResponse:
        self._client(context)
        if not request.messages:
            raise ProtocolError(Code.MESSAGE_CORRUPTED, "the request has no message")
        topics = list(dict.fromkeys(m.topic.name for m in request.messages))
        self._allow(context, *((Action.PUB, TOPIC, t) for t in topics))
        now = time.time_ns() // 1_000_000
        infos = {t: await self._topic(t) for t in topics}
        for t, info in infos.items():
            if not info.perm & PERM_WRITE:
                raise ProtocolError(Code.FORBIDDEN, f"topic {t!r} is not writable (perm {info.perm})")
        queue_ids = []
        for m in request.messages:
            info = infos[m.topic.name]
            convert.check_message(m, convert.accepted_types(info.message_type), now, self.max_body)
            if m.system_properties.HasField("message_group"):  # FIFO: one group, one queue
                q = message_rules.fifo_queue(m.system_properties.message_group, info.write_queues)
            else:
                q = next(self._rr.setdefault(m.topic.name, itertools.count())) % info.write_queues
            queue_ids.append(q)
        shard_of = [self.shards.shard_of(m.topic.name, q) for m, q in zip(request.messages, queue_ids)]
        entries: list[v2.SendResultEntry | None] = [None] * len(request.messages)

        async def send(shard: int, rows: list[int]) -> None:
            halves = [i for i in rows if request.messages[i].system_properties.message_type == v2.TRANSACTION]
            if halves:  # half messages, not in their topic until committed (transactions.py)
                msgs = [request.messages[i] for i in halves]
                done = await self.transactions.prepare(shard, msgs, [queue_ids[i] for i in halves])
                for i, entry in zip(halves, done):
                    entries[i] = entry
                rows = [i for i in rows if i not in set(halves)]
                if not rows:
                    return
            msgs = [request.messages[i] for i in rows]
            cols = convert.to_columns(msgs, [queue_ids[i] for i in rows], self.max_body)
            ((statuses, offsets),) = await self._appends.submit(shard, [cols])  # shared with concurrent sends
            for k, i in enumerate(rows):
                code = Code.OK if statuses[k] == common_pb2.PUT_OK else Code.MASTER_PERSISTENCE_TIMEOUT
                entries[i] = v2.SendResultEntry(
                    status=status(code, "OK" if code == Code.OK else "flush timed out; the message is written"),
                    message_id=request.messages[i].system_properties.message_id,
                    offset=offsets[k],
                )

        parts: dict[int, list[int]] = {}
        for i, s in enumerate(shard_of):
            parts.setdefault(s, []).append(i)
        outcomes = await asyncio.gather(*(send(s, rows) for s, rows in parts.items()), return_exceptions=True)
        for (s, rows), outcome in zip(parts.items(), outcomes):
            if isinstance(outcome, BaseException):
                if len(parts) == 1:
                    raise outcome
                code, message = code_of(outcome)
                for i in rows:
                    entries[i] = v2.SendResultEntry(
                        status=status(code, message), message_id=request.messages[i].system_properties.message_id
                    )
        codes = {e.status.code for e in entries}
        top = (
            status()
            if codes == {Code.OK}
            else entries[0].status
            if len(codes) == 1
            else status(Code.MULTIPLE_RESULTS, "entries differ")
        )
        return v2.SendMessageResponse(status=top, entries=entries)

    # ------------------------------------------------------------------ receive

    async def ReceiveMessage(self, request: v2.ReceiveMessageRequest, context) -> AsyncIterator:
        """Status first, then the messages, then the delivery timestamp; one status per
        stream, and the stream ends before the client's deadline."""
        deadline.start(context)
        try:
            messages = await self._receive(request, context)
        except Exception as e:  # noqa: BLE001 - an answer, never a traceback
            code, message = code_of(e)
            if code == Code.INTERNAL_SERVER_ERROR:
                log.error("rocketmq_receive_failed", error=message, exc_info=e)
            self.observe("ReceiveMessage", code)
            yield v2.ReceiveMessageResponse(status=status(code, message))
            yield v2.ReceiveMessageResponse(delivery_timestamp=_now())
            return
        if messages:
            self.observe("ReceiveMessage", Code.OK)
            yield v2.ReceiveMessageResponse(status=status())
            for m in messages:
                yield v2.ReceiveMessageResponse(message=m)
        else:
            self.observe("ReceiveMessage", Code.MESSAGE_NOT_FOUND)
            yield v2.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        yield v2.ReceiveMessageResponse(delivery_timestamp=_now())

    async def _receive(self, request: v2.ReceiveMessageRequest, context) -> list[v2.Message]:
        client_id = self._client(context)
        group, topic = request.group.name, request.message_queue.topic.name
        _check_group(group)
        client = _key(client_id, self._allow(context, (Action.SUB, GROUP, group), (Action.SUB, TOPIC, topic)))
        info = await self._topic(topic)
        if not info.perm & PERM_READ:
            raise ProtocolError(Code.FORBIDDEN, f"topic {topic!r} is not readable (perm {info.perm})")
        expr = request.filter_expression
        if expr.type == v2.SQL:
            raise ProtocolError(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not supported; filter by tag")
        try:
            reads.parse_tag_expression(expr.expression)
        except Exception as e:  # noqa: BLE001 - the store's message names the problem
            raise ProtocolError(Code.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
        batch = request.batch_size or settings.RECEIVE_BATCH
        if not 1 <= batch <= MAX_POP:
            raise ProtocolError(Code.BAD_REQUEST, f"batch_size must be in 1..{MAX_POP}, got {request.batch_size}")
        if request.HasField("invisible_duration"):
            invisible_ms = request.invisible_duration.ToMilliseconds()
        elif request.auto_renew:  # the front keeps them invisible while the client lives (renewal.py)
            invisible_ms = self.renewals.invisible_ms
        else:
            raise ProtocolError(Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew")
        if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
            raise ProtocolError(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration must be in {MIN_INVISIBLE_MS // 1000} s..12 h, got {invisible_ms} ms",
            )
        poll_ms = (
            request.long_polling_timeout.ToMilliseconds()
            if request.HasField("long_polling_timeout")
            else settings.LONG_POLLING_S * 1000
        )
        left = context.time_remaining()
        if left is not None:
            poll_ms = min(poll_ms, int((left - ANSWER_MARGIN_S) * 1000))
        poll_ms = max(0, min(poll_ms, 60_000))
        by_shard = self.shards.queues_by_shard(topic, info.read_queues)
        dlq = dead_letter_topic(group)

        def pop_request(shard: int, wait_ms: int) -> cq.PopRequest:
            return cq.PopRequest(
                group=group,
                topic=topic,
                queue_ids=by_shard[shard],
                max_messages=batch,
                invisible_ms=invisible_ms,
                wait_ms=wait_ms,
                tag_expression=expr.expression,
                fifo=info.fifo,
                max_attempts=self.max_attempts,
                dead_letter_queue_id=self.shards.queue_on(dlq, shard),
            )

        async def pop(shard: int, wait_ms: int) -> list[v2.Message]:
            res = await self.shards[shard].queues.pop(pop_request(shard, wait_ms), timeout=wait_ms / 1000 + 10)
            for code in res.set_aside:
                self.count_set_aside(code)
            messages, failed = _messages(res, invisible_ms)
            if failed:
                await self._set_aside(shard, group, topic, failed)
            if request.auto_renew and not request.HasField("invisible_duration"):
                for m in messages:
                    self.renewals.hold(client, group, topic, shard, m.system_properties.receipt_handle)
            return messages

        shards = sorted(by_shard)
        if len(shards) == 1:
            return await pop(shards[0], poll_ms)
        start = self._receive_rr.get((group, topic), 0)
        self._receive_rr[(group, topic)] = start + 1
        order = shards[start % len(shards) :] + shards[: start % len(shards)]
        for s in order:  # a look at each shard without waiting
            found = await pop(s, 0)
            if found:
                return found
        # then every shard waits at once; whatever any of them hands out is answered
        found_all = await asyncio.gather(*(pop(s, poll_ms) for s in order))
        return [m for part in found_all for m in part]

    async def _set_aside(self, shard: int, group: str, topic: str, failed: list[tuple[str, str]]) -> None:
        """Messages the front could not convert (the shard's check let them through: a
        guard, not the rule): each to %DLQ%<group> alone with the reason, so the receive
        answers the others and the failed one never comes back."""
        dlq = self.shards.queue_on(dead_letter_topic(group), shard)
        for handle, reason in failed:
            self.count_set_aside("conversion")
            try:
                await self.shards[shard].queues.pop_to_dead_letter(
                    cq.PopToDeadLetterRequest(
                        group=group, topic=topic, receipt_handle=handle, dead_letter_queue_id=dlq, reason=reason
                    )
                )
            except Exception as e:  # noqa: BLE001 - it comes back when due and is tried again
                log.warning("rocketmq_set_aside_failed", group=group, topic=topic, error=str(e))

    def count_set_aside(self, code: str) -> None:
        if self.metrics is not None:
            self.metrics.set_aside(code)

    # ------------------------------------------------------------------ ack, change, DLQ

    def _shard_of_handle(self, text: str) -> tuple[Shard, ReceiptHandle]:
        try:
            h = ReceiptHandle.parse(text)
        except Exception as e:  # noqa: BLE001 - the handle's parser names what is wrong
            raise ProtocolError(Code.INVALID_RECEIPT_HANDLE, f"malformed receipt handle: {e}") from None
        if not 0 <= h.shard < len(self.shards):
            raise ProtocolError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle names shard {h.shard}")
        return self.shards[h.shard], h

    @answered(v2.AckMessageResponse)
    async def AckMessage(self, request: v2.AckMessageRequest, context) -> v2.AckMessageResponse:
        self._client(context)
        group, topic = request.group.name, request.topic.name
        _check_group(group)
        self._allow(context, (Action.SUB, GROUP, group), (Action.SUB, TOPIC, topic))
        _check_not_system(topic)
        results = [
            v2.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle) for e in request.entries
        ]
        by_shard: dict[int, list[int]] = {}
        handles = [await self.renewals.take(e.receipt_handle) for e in request.entries]
        for i, e in enumerate(request.entries):
            try:
                shard, _ = self._shard_of_handle(handles[i])
            except ProtocolError as pe:
                results[i].status.CopyFrom(status(pe.code, str(pe)))
                continue
            by_shard.setdefault(shard.shard, []).append(i)

        async def ack(s: int, rows: list[int]) -> None:
            outcomes = await self._acks.submit((s, group, topic), [handles[i] for i in rows])
            for i, outcome in zip(rows, outcomes):
                results[i].status.CopyFrom(_outcome_status(outcome))

        await asyncio.gather(*(ack(s, rows) for s, rows in by_shard.items()))
        codes = {r.status.code for r in results}
        top = (
            status()
            if codes <= {Code.OK}
            else results[0].status
            if len(codes) == 1
            else status(Code.MULTIPLE_RESULTS, "entries differ")
        )
        return v2.AckMessageResponse(status=top, entries=results)

    @answered(v2.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context) -> v2.ChangeInvisibleDurationResponse:
        self._client(context)
        group, topic = request.group.name, request.topic.name
        _check_group(group)
        self._allow(context, (Action.SUB, GROUP, group), (Action.SUB, TOPIC, topic))  # as AckMessage
        _check_not_system(topic)
        ms = request.invisible_duration.ToMilliseconds()
        if not 0 <= ms <= MAX_INVISIBLE_MS:
            raise ProtocolError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible_duration must be in 0..12 h, got {ms} ms")
        handle = await self.renewals.take(request.receipt_handle)  # a push consumer's nack: no more renewals
        shard, _ = self._shard_of_handle(handle)
        res = await shard.queues.change_invisible(
            cq.ChangeInvisibleRequest(group=group, topic=topic, receipt_handle=handle, invisible_ms=ms)
        )
        st = _outcome_status(res.outcome)
        return v2.ChangeInvisibleDurationResponse(status=st, receipt_handle=res.receipt_handle)

    @answered(v2.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context) -> v2.ForwardMessageToDeadLetterQueueResponse:
        self._client(context)
        group, topic = request.group.name, request.topic.name
        _check_group(group)
        self._allow(context, (Action.SUB, GROUP, group), (Action.SUB, TOPIC, topic))
        _check_not_system(topic)
        handle = await self.renewals.take(request.receipt_handle)
        shard, _ = self._shard_of_handle(handle)
        res = await shard.queues.pop_to_dead_letter(
            cq.PopToDeadLetterRequest(
                group=group,
                topic=topic,
                receipt_handle=handle,
                dead_letter_queue_id=self.shards.queue_on(dead_letter_topic(group), shard.shard),
            )
        )
        return v2.ForwardMessageToDeadLetterQueueResponse(status=_outcome_status(res.outcome))

    @answered(v2.QueryAssignmentResponse)
    async def QueryAssignment(self, request: v2.QueryAssignmentRequest, context) -> v2.QueryAssignmentResponse:
        self._client(context)
        group, topic = request.group.name, request.topic.name
        _check_group(group)
        self._allow(context, (Action.SUB, GROUP, group), (Action.SUB, TOPIC, topic))
        info = await self._topic(topic)
        if not info.perm & PERM_READ:
            raise ProtocolError(Code.FORBIDDEN, f"topic {topic!r} has no readable queue (perm {info.perm})")
        endpoints = await self._endpoints(request.endpoints)
        ids = range(info.read_queues) if info.fifo else (-1,)
        return v2.QueryAssignmentResponse(
            status=status(),
            assignments=[
                v2.Assignment(message_queue=self._queue(topic, q, v2.READ_WRITE, info, endpoints)) for q in ids
            ],
        )

    # ------------------------------------------------------------------ transactions

    @answered(v2.EndTransactionResponse)
    async def EndTransaction(self, request: v2.EndTransactionRequest, context) -> v2.EndTransactionResponse:
        """Commit or roll back a half message (transactions.py): Pub on the topic."""
        self._client(context)
        topic = request.topic.name
        self._allow(context, (Action.PUB, TOPIC, topic))
        await self._topic(topic)  # a bad or system name: ILLEGAL_TOPIC
        left = context.time_remaining()
        ended = await self.transactions.end(request, wait_s=None if left is None else max(0.0, left - ANSWER_MARGIN_S))
        return v2.EndTransactionResponse(
            status=status() if ended else status(Code.OK, "the transaction was already ended")
        )

    # ------------------------------------------------------------------ not served yet

    @answered(v2.RecallMessageResponse)
    async def RecallMessage(self, request, context) -> v2.RecallMessageResponse:
        self._client(context)
        raise ProtocolError(Code.UNSUPPORTED, "recalling delay messages is not served yet")


_CODE_NAMES = {c: v2.Code.Name(c) for c in v2.Code.values()}


def _client_id(context) -> str | None:
    for k, v in context.invocation_metadata() or ():
        if k == CLIENT_ID and v:
            return v
    return None


def _key(client_id: str, user: User | None) -> settings.SessionKey:
    """The session of ``client_id`` for ``user`` (None: the anonymous user "")."""
    return settings.SessionKey("" if user is None else user.access_key, client_id)


def _check_not_system(topic: str) -> None:
    """ILLEGAL_TOPIC for a system topic, as RocketMQ's proxy answers every call naming one."""
    if is_system_topic(topic):
        raise ProtocolError(Code.ILLEGAL_TOPIC, f"topic {topic!r} is a system topic: clients can not access it")


def _check_group(group: str) -> None:
    try:
        check_group(group)
    except InvalidMessageError as e:
        raise ProtocolError(Code.ILLEGAL_CONSUMER_GROUP, str(e)) from None
    if group.startswith("CID_RMQ_SYS_"):
        raise ProtocolError(Code.ILLEGAL_CONSUMER_GROUP, f"group {group!r} is a system group")


def _outcome_status(outcome: int) -> v2.Status:
    if outcome == cq.POP_OK:
        return status()
    why = {
        cq.POP_STALE: "the receipt handle is not the message's current one (changed, acked or redelivered since)",
        cq.POP_EXPIRED: "the receipt handle expired (the message's invisible time passed)",
        cq.POP_MALFORMED: "the receipt handle is not one of this store's",
    }
    return status(Code.INVALID_RECEIPT_HANDLE, why.get(outcome, "invalid receipt handle"))


def _messages(res: cq.PopResponse, invisible_ms: int) -> tuple[list[v2.Message], list[tuple[str, str]]]:
    """The popped records as v2 messages, and (handle, reason) of each that would not
    convert: one bad record never fails the others."""
    out, failed, at = [], [], 0
    data = res.records
    for p in res.messages:
        raw = data[at : at + p.size]
        at += p.size
        try:
            rec = decode_records(raw, _FIRST, check_crc=False)[0]
            out.append(
                convert.to_message(rec, receipt_handle=p.receipt_handle, attempt=p.attempt, invisible_ms=invisible_ms)
            )
        except Exception as e:  # noqa: BLE001 - set aside alone, whatever went wrong
            log.warning("rocketmq_message_unconvertible", queue=p.queue_id, offset=p.queue_offset, error=str(e))
            failed.append((p.receipt_handle, f"the RocketMQ port could not convert it: {type(e).__name__}: {e}"))
    return out, failed


def _now() -> Timestamp:
    t = Timestamp()
    t.GetCurrentTime()
    return t


_UNARY = {  # method: (request, response)
    "QueryRoute": (v2.QueryRouteRequest, v2.QueryRouteResponse),
    "Heartbeat": (v2.HeartbeatRequest, v2.HeartbeatResponse),
    "SendMessage": (v2.SendMessageRequest, v2.SendMessageResponse),
    "QueryAssignment": (v2.QueryAssignmentRequest, v2.QueryAssignmentResponse),
    "AckMessage": (v2.AckMessageRequest, v2.AckMessageResponse),
    "ForwardMessageToDeadLetterQueue": (
        v2.ForwardMessageToDeadLetterQueueRequest,
        v2.ForwardMessageToDeadLetterQueueResponse,
    ),
    "EndTransaction": (v2.EndTransactionRequest, v2.EndTransactionResponse),
    "NotifyClientTermination": (v2.NotifyClientTerminationRequest, v2.NotifyClientTerminationResponse),
    "ChangeInvisibleDuration": (v2.ChangeInvisibleDurationRequest, v2.ChangeInvisibleDurationResponse),
    "RecallMessage": (v2.RecallMessageRequest, v2.RecallMessageResponse),
}


def _malformed(request_type, e: Exception) -> v2.Status:
    return status(Code.BAD_REQUEST, f"the request is not a {request_type.DESCRIPTOR.name}: {e}")


def _unary(method, request_type, response_type):
    """A handler taking the request's bytes: malformed ones are answered BAD_REQUEST
    in the response's status, like every other refusal (no interceptor per call)."""

    async def handle(raw: bytes, context):
        try:
            request = request_type.FromString(raw)
        except DecodeError as e:
            return response_type(status=_malformed(request_type, e))
        return await method(request, context)

    return grpc.unary_unary_rpc_method_handler(handle, response_serializer=_serialize)


def _add_messaging(servicer: MessagingServicer, server: grpc.aio.Server) -> None:
    """Register the served methods under apache.rocketmq.v2.MessagingService (the
    others are UNIMPLEMENTED, as on RocketMQ's proxy)."""
    handlers: dict[str, Any] = {
        name: _unary(getattr(servicer, name), req, resp) for name, (req, resp) in _UNARY.items()
    }

    async def receive(raw: bytes, context):
        try:
            request = v2.ReceiveMessageRequest.FromString(raw)
        except DecodeError as e:
            yield v2.ReceiveMessageResponse(status=_malformed(v2.ReceiveMessageRequest, e))
            yield v2.ReceiveMessageResponse(delivery_timestamp=_now())
            return
        async for answer in servicer.ReceiveMessage(request, context):
            yield answer

    handlers["ReceiveMessage"] = grpc.unary_stream_rpc_method_handler(receive, response_serializer=_serialize)
    # Telemetry's commands are decoded by gRPC: one it can not decode ends the stream
    # with INVALID_ARGUMENT (the one place RocketMQ's proxy answers with a gRPC error).
    handlers["Telemetry"] = grpc.stream_stream_rpc_method_handler(
        servicer.Telemetry, request_deserializer=v2.TelemetryCommand.FromString, response_serializer=_serialize
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


def _serialize(message) -> bytes:
    return message.SerializeToString()


__all__ = ["DEFAULT_MAX_ATTEMPTS", "SERVICE", "MessagingServicer"]
