"""A front's answers about the shards themselves: StoreStatus rows, and the stats and
consumer losses its metrics scrape. Every shard at once, every part of a shard at once,
each for a bounded time: a shard that is down, restarting or not placed is a row (or a
None) saying so, never a late answer."""

from __future__ import annotations

import asyncio

import grpc

from mqstore.rpc.v1 import commitlog_pb2, common_pb2
from mqstore.rpc.v1 import front_pb2 as pb
from mqstore.services.common.errors import status_of
from mqstore.services.common.shard_clients import SERVICE_NAMES, Shard
from mqstore.services.common.shard_set import ShardSet

STATUS_BUDGET_S = 1.5  # StoreStatus asks every part of every shard at once, each for at most this


async def shard_stats(
    shards: ShardSet, timeout: float = 2.0
) -> list[tuple[int, commitlog_pb2.GetStatsResponse | None]]:
    """Every shard's GetStats (None where the shard did not answer: a report names
    what is missing instead of failing), in parallel."""
    answers = await shards.fan_out_settled(lambda s: s.commitlog.get_stats(timeout=timeout, retry=False))
    return [(s.shard, None if isinstance(a, BaseException) else a) for s, a in zip(shards, answers)]


async def consumer_losses(shards: ShardSet, timeout: float = 2.0) -> list[tuple[int, list[common_pb2.ConsumerLoss]]]:
    """Every shard's record of unread messages retention deleted (its consume-queue
    builder's GetProgress; none where it did not answer), in parallel."""
    answers = await shards.fan_out_settled(lambda s: s.queues.get_progress(timeout=timeout, retry=False))
    return [(s.shard, [] if isinstance(a, BaseException) else list(a.consumer_losses)) for s, a in zip(shards, answers)]


async def shard_status(s: Shard, budget: float) -> pb.ShardStatus:
    """One shard's row: GetStats of its commitlog, GetProgress of its builders,
    its dispatcher's Status and where its processes are, all asked at once."""

    async def within(aw):
        return await asyncio.wait_for(aw, budget)

    asks = {"cl": within(s.commitlog.get_stats(timeout=budget, retry=False))}
    builders = [
        ("cq", "queue_builder", s.queues.get_progress),
        ("ix", "index_builder", s.index.get_progress),
    ]
    for service, _, progress in builders:
        if service in s.services:
            asks[service] = within(progress(timeout=budget, retry=False))
    if s.has_dispatcher:
        asks["dp"] = within(s.dispatcher_status(timeout=budget))
    asks["where"] = s.placement(budget)
    answers = dict(zip(asks, await asyncio.gather(*asks.values(), return_exceptions=True)))
    where = answers.pop("where")
    where = {} if isinstance(where, BaseException) else where
    missing: list[str] = []  # "commitlog: why" for each part that did not answer

    def why(role: str, e: BaseException) -> str:
        text = f"no answer within {budget:.1f} s" if isinstance(e, TimeoutError) else status_of(e)[1]
        p = where.get(role)
        if p is not None and p.state != "ALIVE":
            text += f" ({p.describe()})"
        missing.append(f"{SERVICE_NAMES[role]}: {text}")
        return text

    st = pb.ShardStatus(shard=s.shard, state="UNAVAILABLE", reput_offset=-1)
    o = answers["cl"]
    if isinstance(o, BaseException):
        code = status_of(o)[0] if not isinstance(o, TimeoutError) else grpc.StatusCode.UNAVAILABLE
        why("cl", o)
    else:
        st.state, st.error, st.incarnation = o.state, o.error, o.incarnation
        st.recovery_phase, st.recovery_percent = o.recovery_phase, o.recovery_percent
        st.min_offset, st.wrote_offset, st.flushed_offset = o.min_offset, o.wrote_offset, o.flushed_offset
        st.confirm_offset, st.dispatched_offset = o.confirm_offset, o.dispatched_offset
        st.writable, st.unwritable_cause = o.writable, o.unwritable_cause
        st.queue_count, st.commitlog_bytes, st.disk_free_bytes = o.queue_count, o.commitlog_bytes, o.disk_free_bytes
        st.clean_shutdown, st.recovery_seconds = o.clean_shutdown, o.recovery_seconds
        st.appended_messages = o.appended_messages
        st.stopped_loops.extend(o.stopped_loops)
        st.write_refusals.CopyFrom(o.write_refusals)
        st.forced_deleted_segments, st.forced_deleted_bytes = o.forced_deleted_segments, o.forced_deleted_bytes
    st.endpoint = s.endpoint
    cl_place = where.get("cl")
    st.node_id = cl_place.node_id if cl_place is not None and cl_place.node_id else s.node_id
    for service, field, _ in builders:
        if service not in answers:
            continue
        p = answers[service]
        if isinstance(p, BaseException):
            p = common_pb2.BuilderProgress(state="UNAVAILABLE", error=why(service, p))
        getattr(st, field).CopyFrom(p)
        st.consumer_losses.extend(p.consumer_losses)  # the consume-queue builder keeps them
        if p.stopped_loops:  # the consume-queue builder's delay scheduler
            st.stopped_loops.extend(p.stopped_loops)
            st.error = "; ".join([st.error, *p.stopped_loops] if st.error else p.stopped_loops)
    d = answers.get("dp")
    if isinstance(d, BaseException):
        why("dp", d)
    elif d is not None:
        st.reput_offset, st.dispatch_lag_bytes = d.dispatched_offset, d.lag_bytes
        ix = st.index_builder
        if d.index_stuck and ix.state and not ix.stuck:  # behind, not advancing: the dispatcher says why
            ix.stuck, ix.stuck_since_ms = d.index_error or "behind the consume queues", d.index_behind_since_ms
    for name, b in (("consume-queue builder", st.queue_builder), ("index builder", st.index_builder)):
        if b.stuck:  # its writes fail (a full disk): named in the row, the shard is not healthy
            st.error = "; ".join(filter(None, [st.error, f"{name} stuck: {b.stuck}"]))
    if isinstance(o, BaseException):  # the row names the shard and every part that is missing
        st.error = f"{code.name}: shard {s.shard} did not answer: " + "; ".join(missing)
    elif missing:
        st.error = "; ".join([st.error, *missing] if st.error else missing)
    return st


__all__ = ["STATUS_BUDGET_S", "consumer_losses", "shard_stats", "shard_status"]
