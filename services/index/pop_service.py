"""Pop consumption on the consume-queue builder's node (ConsumeQueueService Pop,
AckPop, ChangeInvisible, PopToDeadLetter): RocketMQ 5's way of consuming, which the
front's RocketMQ port (services/rocketmq) serves to the official clients.

The rules (what a pop hands out, redelivery, FIFO holds, tags, dead letters, handle
checks) are the core's: mqstore/store/pop_rules.py, over the durable state of
mqstore/store/pop.py (``<shard>/pop/``). This servicer converts requests and
answers, runs the core on the builder's executor, gives it the shard's I/O
(:class:`_ShardIO`: units from the builder's consume queues, records from the local
commitlog maps, dead letters appended through the commitlog, losses to the builder's
ledger) and does the long poll: an empty pop waits for units to arrive, for a
message in flight to come due, or for ``wait_ms``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from mqstore.rpc.v1 import consume_queue_pb2 as pb
from mqstore.services.common.errors import BadRequest
from mqstore.services.index.delay import RemoteLog
from mqstore.services.index.local_pull import LocalPulls
from mqstore.services.index.state import BuilderState
from mqstore.store.builders import QueueBuilder
from mqstore.store.local_ports import units_page
from mqstore.store.loss_ledger import pop_gap
from mqstore.store.messages import MessageBatch
from mqstore.store.pop import AckOutcome, PopState
from mqstore.store.pop_rules import MAX_POP, PopAsk, PopRules, dead_letter_topic
from mqstore.store.reads import UnitsPage

_OUTCOMES = {
    AckOutcome.OK: pb.POP_OK,
    AckOutcome.STALE: pb.POP_STALE,
    AckOutcome.EXPIRED: pb.POP_EXPIRED,
    AckOutcome.FORGED: pb.POP_MALFORMED,  # a tag this shard did not make: not one of its handles
    AckOutcome.MALFORMED: pb.POP_MALFORMED,
}


class _ShardIO:
    """The I/O the pop rules ask for (pop_rules.PopShard), on this node's files."""

    def __init__(self, state: BuilderState, pulls: LocalPulls, builder: QueueBuilder | None) -> None:
        self._state, self._pulls, self._builder = state, pulls, builder

    def units(self, topic: str, queue_id: int, offset: int, max_units: int) -> UnitsPage:
        assert self._builder is not None  # a pop's: it holds the builder it checked
        return units_page(self._builder.consume_queues, topic, queue_id, offset, max_units)

    def records(self, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes | None]:
        if not offsets:
            return []
        order = np.argsort(np.asarray(offsets, np.int64), kind="stable")
        at = np.asarray(offsets, np.int64)[order]
        sz = np.asarray(sizes, np.int64)[order]
        found, raws = self._pulls.read_raw(self._state.view, self._state.commitlog_min_offset, at, sz)
        by_offset = {
            int(o): raws.buffer[int(raws.offsets[k]) : int(raws.offsets[k + 1])].tobytes() for k, o in enumerate(found)
        }
        return [by_offset.get(int(o)) for o in offsets]

    def append_dead_letters(self, batch: MessageBatch) -> None:
        view = self._state.view
        if view is None:
            raise BadRequest("the builder is not open")
        RemoteLog(view).append(batch)  # the delay scheduler's internal append (DeliverDelayed)

    def lost(self, group: str, topic: str, queue_id: int, ranges: Sequence[tuple[int, int]]) -> None:
        forced = self._state.cleaned_forced
        self._state.losses.note([pop_gap(group, topic, queue_id, a, b, forced=forced) for a, b in ranges])


class Popper:
    """The pops of one shard (see the module docstring). Its state opens on first use
    (``<shard>/pop/``) and lives as long as the process: it does not depend on the
    builder's files, so a reopen of the builder keeps it."""

    def __init__(self, state: BuilderState, pulls: LocalPulls) -> None:
        self._state = state
        self._pulls = pulls
        self.rules = PopRules(lambda: PopState(state.store_dir, shard=state.shard), shard=state.shard)
        self._arrived: asyncio.Event | None = None  # replaced on every arrival (waiters hold the old one)

    def close(self) -> None:
        self.rules.close()

    def units_arrived(self) -> None:
        """New units were built (called on the server's loop after PutUnits): wake long polls."""
        ev, self._arrived = self._arrived, None
        if ev is not None:
            ev.set()

    def _arrival(self) -> asyncio.Event:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        return self._arrived

    def _io(self, builder: QueueBuilder | None = None) -> _ShardIO:
        return _ShardIO(self._state, self._pulls, builder)

    async def pop(self, request: pb.PopRequest) -> pb.PopResponse:
        builder: QueueBuilder = self._state.ready()
        ask = PopAsk(
            group=request.group,
            topic=request.topic,
            queue_ids=tuple(request.queue_ids),
            max_messages=request.max_messages,
            invisible_ms=request.invisible_ms,
            wait_ms=request.wait_ms,
            max_attempts=request.max_attempts,
            fifo=request.fifo,
            tag_expression=request.tag_expression,
            dead_letter_queue_id=request.dead_letter_queue_id,
        )
        loop = asyncio.get_running_loop()
        give_up = loop.time() + request.wait_ms / 1000
        aside: list[str] = []  # set aside while waiting: no reason to stop waiting, reported at the end
        while True:
            arrival = self._arrival()  # before looking, so an arrival meanwhile is not missed
            answer = await self._state.call(self.rules.pop, ask, self._io(builder))
            aside += answer.set_aside
            left = give_up - loop.time()
            if answer.messages or answer.dead_lettered or left <= 0:
                return _pop_response(answer.messages, answer.dead_lettered, aside)
            if answer.next_due_ms is not None:
                left = min(left, max(0.0, (answer.next_due_ms - self.rules.clock.now_ms()) / 1000))
            try:
                await asyncio.wait_for(arrival.wait(), timeout=left)
            except TimeoutError:
                pass
            builder = self._state.ready()

    async def ack(self, request: pb.AckPopRequest) -> pb.AckPopResponse:
        self._state.ready()
        done = await self._state.call(self.rules.ack, request.group, request.topic, list(request.receipt_handles))
        return pb.AckPopResponse(outcomes=[_OUTCOMES[o] for o in done])

    async def change(self, request: pb.ChangeInvisibleRequest) -> pb.ChangeInvisibleResponse:
        self._state.ready()
        outcome, new = await self._state.call(
            self.rules.change_invisible, request.group, request.topic, request.receipt_handle, request.invisible_ms
        )
        if new is None:
            return pb.ChangeInvisibleResponse(outcome=_OUTCOMES[outcome])
        return pb.ChangeInvisibleResponse(outcome=pb.POP_OK, receipt_handle=new.encode())

    async def to_dead_letter(self, request: pb.PopToDeadLetterRequest) -> pb.PopToDeadLetterResponse:
        self._state.ready()
        outcome = await self._state.call(
            self.rules.to_dead_letter,
            request.group,
            request.topic,
            request.receipt_handle,
            request.dead_letter_queue_id,
            request.reason,
            self._io(),
        )
        return pb.PopToDeadLetterResponse(outcome=_OUTCOMES[outcome])

    async def call(self, call: pb.PopCall) -> pb.PopAnswer:
        """One call of the front's PopStream: the unary call it stands for (started
        as it arrives; the front's own timer bounds its wait)."""
        kind = call.WhichOneof("call")
        if kind == "ack":
            return pb.PopAnswer(ack=await self.ack(call.ack))
        if kind == "change_invisible":
            return pb.PopAnswer(change_invisible=await self.change(call.change_invisible))
        if kind == "dead_letter":
            return pb.PopAnswer(dead_letter=await self.to_dead_letter(call.dead_letter))
        raise BadRequest("a PopCall carries no call (ack, change_invisible or dead_letter)")


def _pop_response(messages, dead_lettered: int, set_aside: list[str]) -> pb.PopResponse:
    answer = pb.PopResponse(dead_lettered=dead_lettered, set_aside=set_aside)
    for m in messages:
        answer.messages.add(
            queue_id=m.queue_id, queue_offset=m.offset, attempt=m.attempt, receipt_handle=m.receipt_handle,
            size=len(m.record),
        )  # fmt: skip
    answer.records = b"".join(m.record for m in messages)
    return answer


__all__ = ["MAX_POP", "Popper", "dead_letter_topic"]
