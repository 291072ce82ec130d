"""CommitLogService: appends (unary, or multiplexed on the front's AppendStream), reads by offset, ReadRange and its stream Tail for the dispatcher,
watermarks, topic configs, and what the builders recover against
(proto/mqstore/v1/commitlog.proto)."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
from google.protobuf.message import DecodeError

from mqstore.errors import MqStoreError, OffsetError
from mqstore.formats.message import BLANK_MAGIC, record_head
from mqstore.rpc.v1 import commitlog_pb2 as pb
from mqstore.rpc.v1 import commitlog_pb2_grpc, common_pb2
from mqstore.services.commitlog.state import CommitLogPhase, CommitLogState
from mqstore.services.common import validate
from mqstore.services.common.convert import (
    append_result_to_pb,
    columns_to_batch,
    put_status_to_pb,
    record_to_pb,
    topic_config_to_pb,
)
from mqstore.services.common.errors import BadRequest, PermissionDenied, Precondition, TooLarge, rpc
from mqstore.services.common.internal_auth import RANGE_END, InternalAuth
from mqstore.services.common.internal_streams import Credits, OpenStreams, answer_as_done, stream_rpc
from mqstore.services.common.server import Registration
from mqstore.services.query.routing import check_routed
from mqstore.store.encoded_batch import parse_encoded
from mqstore.store.local_ports import read_records
from mqstore.store.log_store import LogStore
from mqstore.store.messages import PutStatus

SERVICE = "mqstore.v1.CommitLogService"
MAX_READ_OFFSETS = 10_000
DEFAULT_RANGE_BYTES = 8 << 20
MAX_RANGE_BYTES = 64 << 20
MAX_CHECK_UNITS = 200_000


class CommitLogServicer(commitlog_pb2_grpc.CommitLogServiceServicer):
    def __init__(self, state: CommitLogState, auth: InternalAuth | None = None) -> None:
        """``auth``: the deployment's secret, to vouch for the ends of the ranges it
        answers (ReadRangeResponse.vouch; without it, none)."""
        self.state = state
        self._auth = auth
        self.streams = OpenStreams()  # ended by the host when it stops

    def registration(self) -> Registration:
        return Registration(commitlog_pb2_grpc.add_CommitLogServiceServicer_to_server, self, SERVICE)

    @rpc
    async def AppendBatch(self, request: pb.AppendBatchRequest, context) -> pb.AppendBatchResponse:
        return await self._append_batch(request)

    async def _append_batch(self, request: pb.AppendBatchRequest, until: float | None = None) -> pb.AppendBatchResponse:
        log_store = self.state.ready()
        res = await self._timed_append(log_store.append, columns_to_batch(request.messages), until=until)
        return pb.AppendBatchResponse(result=append_result_to_pb(res, self.state.shard))

    async def _timed_append(self, append, *args, until: float | None = None):
        """Run an append on an executor thread, wake the waiting ReadRanges, and count it
        in the shard's stats (a FLUSH_DISK_TIMEOUT counts as failed: not proven durable).
        ``until``: the caller's deadline (time.monotonic()); an append that would start
        after it is not written (DEADLINE_EXCEEDED, as a unary call past its deadline)."""
        stats = self.state.stats
        t0 = time.perf_counter()
        try:
            res = await self.state.call(append if until is None else _before(until, append), *args)
        except Exception:
            stats.failed(time.perf_counter() - t0)
            raise
        self.state.notify_appended()
        if res.status is PutStatus.PUT_OK:
            stats.appended(len(res), int(res.sizes.sum()), time.perf_counter() - t0)
        else:
            stats.failed(time.perf_counter() - t0)
        return res

    @rpc
    async def AppendEncoded(self, request: common_pb2.EncodedBatch, context) -> common_pb2.EncodedAppendResult:
        return await self._encoded(request)

    async def _encoded(
        self, request: common_pb2.EncodedBatch, until: float | None = None
    ) -> common_pb2.EncodedAppendResult:
        log_store = self.state.ready()
        if request.shard != self.state.shard:
            raise Precondition(f"the batch is for shard {request.shard}; this is shard {self.state.shard}")
        res = await self._timed_append(self._append_encoded, log_store, request, until=until)
        return common_pb2.EncodedAppendResult(
            status=put_status_to_pb(res.status),
            physical_offsets=res.physical_offsets.astype("<i8").tobytes(),
            queue_ids=res.queue_ids.astype("<i4").tobytes(),
            queue_offsets=res.queue_offsets.astype("<i8").tobytes(),
            store_timestamp=res.store_timestamp,
            msg_id_prefix=res.msg_id_prefix,
            shard=self.state.shard,
        )

    def _append_encoded(self, log_store: LogStore, request: common_pb2.EncodedBatch):
        """Parse, check the batch is for this shard's topics and queues, append (an executor thread)."""
        batch = parse_encoded(request.records, log_store.config)
        declared = request.topics
        # A client names the topics in the order its records first carry them, as the
        # parse does: one list comparison then, a set only when they differ.
        if len(declared) != len(batch.topics) or list(declared) != batch.topics:
            known = set(declared)
            undeclared = [t for t in batch.topics if t not in known]
            if undeclared:
                raise PermissionDenied(f"a record has topic {undeclared[0]!r}, which the batch does not declare")
        if request.shards > 1:
            check_routed(batch, request.shard, request.shards)
        return log_store.append_encoded(batch)

    @rpc
    async def DeliverDelayed(self, request: pb.AppendBatchRequest, context) -> pb.AppendBatchResponse:
        return await self._deliver(request)

    async def _deliver(self, request: pb.AppendBatchRequest, until: float | None = None) -> pb.AppendBatchResponse:
        log_store = self.state.ready()
        deliver = log_store.deliver if until is None else _before(until, log_store.deliver)
        res = await self.state.call(deliver, columns_to_batch(request.messages, exact_born_times=True))
        self.state.notify_appended()
        return pb.AppendBatchResponse(result=append_result_to_pb(res, self.state.shard))

    @stream_rpc
    async def AppendStream(self, requests, context):
        """AppendBatch, AppendEncoded and DeliverDelayed multiplexed on one stream
        (the front's; commitlog.proto): each call handled as it comes and answered
        once done, so concurrent ones share a group commit."""
        async with self.streams.held(context):
            async for answer in answer_as_done(requests, self._append_call, pb.AppendAnswer, pb.AppendStreamResponse):
                yield answer

    async def _append_call(self, call: pb.AppendCall) -> pb.AppendAnswer:
        """One AppendCall: the unary call it stands for, within its timeout."""
        until = time.monotonic() + call.timeout_ms / 1000 if call.timeout_ms > 0 else None
        kind = call.WhichOneof("append")
        if kind == "encoded":
            try:
                request = common_pb2.EncodedBatch.FromString(call.encoded)
            except DecodeError as e:
                raise BadRequest(f"the append is not an EncodedBatch: {e}") from None
            return pb.AppendAnswer(encoded=(await self._encoded(request, until)).SerializeToString())
        if kind == "batch":
            return pb.AppendAnswer(batch=await self._append_batch(call.batch, until))
        if kind == "delayed":
            return pb.AppendAnswer(batch=await self._deliver(call.delayed, until))
        raise BadRequest("an AppendCall carries no append (batch, encoded or delayed)")

    @rpc
    async def Read(self, request: pb.ReadRequest, context) -> pb.ReadResponse:
        log_store = self.state.recovered()
        if len(request.offsets) > MAX_READ_OFFSETS:
            raise TooLarge(f"at most {MAX_READ_OFFSETS} offsets per read, got {len(request.offsets)}")
        if request.sizes and len(request.sizes) != len(request.offsets):
            raise BadRequest(f"sizes has {len(request.sizes)} values for {len(request.offsets)} offsets")
        return await self.state.call(self._read, log_store, request)

    def _read(self, log_store: LogStore, req: pb.ReadRequest) -> pb.ReadResponse:
        sizes = np.asarray(req.sizes, np.int64) if req.raw and req.sizes else None
        offsets, found = read_records(
            log_store.commitlog,
            np.asarray(req.offsets, np.int64),
            sizes,
            req.raw,
            skip_missing=req.skip_missing,
            check_sizes=True,
        )
        out = pb.ReadResponse(offsets=offsets.tolist())
        if req.raw:
            out.raw_data, out.raw_sizes = found.to_wire()
        else:
            out.records.extend(record_to_pb(r, self.state.shard) for r in found)
        return out

    @rpc
    async def ReadRange(self, request: pb.ReadRangeRequest, context) -> pb.ReadRangeResponse:
        log_store = self.state.recovered()
        max_bytes, enough = _range_args(request)
        if request.dispatched_offset:
            log_store.note_dispatched(request.dispatched_offset)
        return await self._visible(request, request.offset, max_bytes, enough)

    async def _visible(self, request: pb.ReadRangeRequest, offset: int, max_bytes: int, enough: int):
        """The records visible from ``offset``, waiting and lingering as ``request`` says."""
        log_store = self.state.recovered()
        deadline = time.monotonic() + request.wait_ms / 1000
        while True:
            res = await self.state.call(self._range, log_store, offset, max_bytes, request.bounds_only)
            now = time.monotonic()
            if res.record_count:
                if res.data_end - res.offset >= enough or not request.linger_ms:
                    return res
                deadline = min(deadline, now + request.linger_ms / 1000)  # lingers from the first records seen
            left = deadline - now
            if left <= 0:
                return res
            appended = await self.state.wait_appended(left)  # every append through this servicer wakes it
            if not appended and res.record_count:
                return res  # lingered out with nothing new: the same range (no second scan)
            log_store = self.state.recovered()

    @stream_rpc
    async def Tail(self, requests, context):
        """ReadRange as a feed (commitlog.proto): one answer per credit granted, each
        from where the last ended; the grants' dispatched offsets are noted."""
        it = requests.__aiter__()
        try:
            first = await it.__anext__()
        except StopAsyncIteration:
            return
        if not first.HasField("start"):
            raise BadRequest("a Tail stream opens with start")
        start = first.start
        max_bytes, enough = _range_args(start)
        credits = Credits()
        self._note_grant(first.dispatched_offset or start.dispatched_offset, first.credit, credits)
        grants = asyncio.get_running_loop().create_task(self._take_grants(it, credits), name="tail-grants")
        offset = start.offset
        try:
            async with self.streams.held(context):
                while await credits.take():
                    res = await self._visible(start, offset, max_bytes, enough)
                    offset = res.next_offset
                    yield res
        finally:
            grants.cancel()

    async def _take_grants(self, it, credits: Credits) -> None:
        """A Tail's later requests, as they come: credits and dispatched offsets."""
        try:
            async for r in it:
                if r.HasField("start"):
                    raise BadRequest("start only in the first request of a Tail stream")
                self._note_grant(r.dispatched_offset, r.credit, credits)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a bad grant (or the store closing) ends the stream with its status
            credits.close(e)
            return
        credits.close()  # the dispatcher is done: the stream ends

    def _note_grant(self, dispatched_offset: int, credit: int, credits: Credits) -> None:
        validate.offset(dispatched_offset, "dispatched_offset")
        if dispatched_offset:
            self.state.recovered().note_dispatched(dispatched_offset)
        credits.grant(credit)

    def _range(self, log_store: LogStore, offset: int, max_bytes: int, bounds_only: bool) -> pb.ReadRangeResponse:
        cl = log_store.commitlog
        limit = log_store.confirm_offset
        wrote = cl.wrote_offset
        if offset > wrote:
            raise BadRequest(f"commitlog offset {offset} is past the write position {wrote}")
        start = max(offset, cl.min_offset)
        if start < limit and start not in (log_store.dispatched_offset, cl.min_offset):
            # An offset the store itself keeps (where dispatch stands, the oldest record)
            # is a record start: bytes there that do not scan are corruption (DATA_LOSS).
            # Anything else may be a caller's mistake: check it first (INVALID_ARGUMENT).
            _check_record_start(cl, start)
        chunk = cl.scan(start, limit=limit, max_bytes=max_bytes, fields=False)  # the dispatcher decodes them
        low, forced = log_store.retention_told  # as retention's last pass left them (told to the builders)
        out = pb.ReadRangeResponse(
            offset=chunk.next_offset,
            next_offset=chunk.next_offset,
            incarnation=self.state.incarnation,
            confirm_offset=limit,
            min_offset=low,
            forced_deleted_to=forced,
        )
        out.data_end = out.offset
        if self._auth is not None:
            out.vouch = self._auth.vouch(RANGE_END, out.incarnation, out.next_offset)
        n = len(chunk.sizes)
        if n:
            first = int(chunk.physical_offsets[0])
            end = int(chunk.physical_offsets[-1] + chunk.sizes[-1])
            out.offset, out.data_end, out.record_count = first, end, n
            if not bounds_only:
                out.data = cl.read_raw(
                    np.array([first], np.int64), np.array([end - first], np.int64)
                ).data  # one gathered piece
        return out

    @rpc
    async def GetOffsets(self, request, context) -> pb.GetOffsetsResponse:
        log_store = self.state.recovered()
        cl = log_store.commitlog
        rec = cl.recovery
        return pb.GetOffsetsResponse(
            min_offset=cl.min_offset,
            wrote_offset=cl.wrote_offset,
            flushed_offset=cl.flushed_offset,
            confirm_offset=log_store.confirm_offset,
            dispatched_offset=log_store.dispatched_offset,
            incarnation=self.state.incarnation,
            flush_mode=self.state.config.flush_mode.value,
            writable=log_store.writable,
            unwritable_cause=log_store.unwritable_cause or "",
            clean_shutdown=rec.clean_shutdown,
            recovery_seconds=rec.seconds,
            msg_id_prefix=self.state.msg_id_prefix,
            forced_deleted_to=log_store.forced_deleted_to,
        )

    @rpc
    async def GetStats(self, request, context) -> pb.GetStatsResponse:
        return self._stats()  # cheap reads, on the loop: it must answer while the executor is busy or gone

    def _stats(self) -> pb.GetStatsResponse:
        sh = self.state
        st = sh.stats
        p = sh.progress
        out = pb.GetStatsResponse(
            state=sh.phase.value,
            error=sh.error or "",
            incarnation=sh.incarnation,
            recovery_phase=p.phase,
            recovery_percent=p.percent,
            recovery_bytes_done=p.bytes_done,
            recovery_bytes_total=p.bytes_total,
            appended_messages=st.appended_messages,
            appended_bytes=st.appended_bytes,
            append_failures=st.append_failures,
            append_seconds=st.append_seconds.to_pb(),
            flush_seconds=st.flush_seconds.to_pb(),
        )
        log_store = sh.log_store
        if sh.phase not in (CommitLogPhase.SERVING, CommitLogPhase.AWAITING_BUILDERS) or log_store is None:
            return out
        try:
            s = log_store.status()
        except MqStoreError:  # closed under us: report the state only
            return out
        rec = s["last_recovery"]
        out.clean_shutdown, out.recovery_seconds = bool(rec["clean_shutdown"]), float(rec["seconds"])
        out.min_offset, out.wrote_offset, out.flushed_offset = s["min_offset"], s["wrote"], s["flushed"]
        out.confirm_offset, out.dispatched_offset = log_store.confirm_offset, log_store.dispatched_offset
        out.writable, out.unwritable_cause = bool(s["writable"]), s["unwritable_cause"] or ""
        out.queue_count, out.commitlog_bytes = s["queues"], s["wrote"] - s["min_offset"]
        stopped = s["stopped_loops"]
        out.stopped_loops.extend(f"{name}: {why}" for name, why in sorted(stopped.items()))
        if stopped and not out.error:  # what `mqstore status` shows per shard
            out.error = "background loop stopped: " + "; ".join(out.stopped_loops)
        loops = s["loops"]
        sched = loops.get("delay_scheduler", {})
        out.delay_delivered, out.delay_skipped = sched.get("delivered", 0), sched.get("skipped", 0)
        out.background_failures = sum(v.get("failures", 0) for v in loops.values())
        out.write_refusals.CopyFrom(common_pb2.WriteRefusals(**s["write_refusals"]))
        kept = loops.get("retention", {})
        out.forced_deleted_segments = kept.get("forced_segments", 0)
        out.forced_deleted_bytes = kept.get("forced_bytes", 0)
        try:
            fs = os.statvfs(sh.store_dir)
            out.disk_free_bytes = fs.f_bavail * fs.f_frsize
        except OSError:
            out.disk_free_bytes = -1
        return out

    @rpc
    async def UpdateTopic(self, request: pb.UpdateTopicRequest, context) -> pb.UpdateTopicResponse:
        log_store = self.state.ready()
        c = request.config
        validate.topic(c.topic)
        # A field not set keeps the topic's value (a new topic: the defaults); perm 0 is a perm.
        given = {f: getattr(c, f) for f in ("read_queue_nums", "write_queue_nums", "perm") if c.HasField(f)}
        tc = await self.state.call(
            log_store.update_topic,
            c.topic,
            **given,
            message_type=c.message_type or None,  # empty: the topic keeps its type (a new one: NORMAL)
        )
        return pb.UpdateTopicResponse(config=topic_config_to_pb(tc))

    @rpc
    async def ListTopics(self, request, context) -> pb.ListTopicsResponse:
        log_store = self.state.recovered()
        configs = sorted(log_store.topics.all().values(), key=lambda tc: tc.topic_name)
        return pb.ListTopicsResponse(configs=[topic_config_to_pb(tc) for tc in configs])

    # ------------------------------------------------------------------ the builders' side of the open

    @rpc
    async def GetRecovery(self, request, context) -> pb.GetRecoveryResponse:
        log_store = self.state.recovered()
        f = await self.state.call(log_store.recovery_facts)
        queues = [
            common_pb2.QueueRange(topic=t, queue_id=q, max_offset=n, shard=self.state.shard)
            for (t, q), n in f.pop("queue_offsets").items()
        ]
        return pb.GetRecoveryResponse(incarnation=self.state.incarnation, queues=queues, **f)

    @rpc
    async def CheckUnits(self, request: pb.CheckUnitsRequest, context) -> pb.CheckUnitsResponse:
        log_store = self.state.recovered()
        r = request
        n = validate.same_lengths(
            physical_offsets=r.physical_offsets,
            sizes=r.sizes,
            queue_ids=r.queue_ids,
            queue_offsets=r.queue_offsets,
            topic_codes=r.topic_codes,
            tags_codes=r.tags_codes,
            check_tags=r.check_tags,
        )
        if n > MAX_CHECK_UNITS:
            raise TooLarge(f"at most {MAX_CHECK_UNITS} units per check, got {n}")
        for t in r.topics:
            validate.topic(t)
        codes = np.asarray(r.topic_codes, np.int64)
        if n and (codes.min() < 0 or codes.max() >= len(r.topics)):
            raise BadRequest(f"topic_codes must index topics (0..{len(r.topics) - 1})")
        ok = await self.state.call(
            log_store.commitlog.units_match,
            np.asarray(r.physical_offsets, np.int64),
            np.asarray(r.sizes, np.int64),
            np.asarray(r.queue_ids, np.int64),
            np.asarray(r.queue_offsets, np.int64),
            topics=list(r.topics),
            topic_index=codes,
            tags_codes=np.asarray(r.tags_codes, np.int64),
            check_tags=np.asarray(r.check_tags, bool),
            check_from=r.check_from,
            deep_from=r.deep_from,
        )
        return pb.CheckUnitsResponse(ok=ok.tolist())

    @rpc
    async def NoteDerived(self, request: pb.NoteDerivedRequest, context) -> pb.NoteDerivedResponse:
        log_store = self.state.recovered()
        validate.offset(request.durable_offset, "durable_offset")
        if request.timestamp < 0:
            raise BadRequest(f"timestamp {request.timestamp} is negative")
        try:
            low = await self.state.call(log_store.note_derived, request.kind, request.durable_offset, request.timestamp)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        return pb.NoteDerivedResponse(durable_offset=low)

    @rpc
    async def AttachQueueEnds(self, request: pb.AttachQueueEndsRequest, context) -> pb.AttachQueueEndsResponse:
        validate.offset(request.progress_offset, "progress_offset")
        ends = {}
        for q in request.queues:
            validate.topic(q.topic)
            ends[(q.topic, validate.queue_id(q.queue_id))] = validate.offset(q.max_offset, "max_offset")
        self.state.attach_queue_ends(request.incarnation, request.progress_offset, ends)
        return pb.AttachQueueEndsResponse()


def _before(until: float, fn):
    """``fn``, refusing to start past ``until`` (time.monotonic()): the caller stopped
    waiting, so nothing is written (TimeoutError: DEADLINE_EXCEEDED)."""

    def start(*args):
        if time.monotonic() > until:
            raise TimeoutError("the append's deadline passed before it started; nothing was written")
        return fn(*args)

    return start


def _range_args(request: pb.ReadRangeRequest) -> tuple[int, int]:
    """(max_bytes, the bytes worth answering without lingering) of a ReadRange (or a
    Tail's start); BadRequest for values out of range."""
    validate.offset(request.offset)
    validate.offset(request.dispatched_offset, "dispatched_offset")
    max_bytes = validate.count(request.max_bytes, default=DEFAULT_RANGE_BYTES, high=MAX_RANGE_BYTES, what="max_bytes")
    if not 0 <= request.wait_ms <= 10_000:
        raise BadRequest(f"wait_ms {request.wait_ms} is out of range (0..10000)")
    if not 0 <= request.linger_ms <= 1_000 or request.min_bytes < 0:
        raise BadRequest(f"linger_ms {request.linger_ms} (0..1000) or min_bytes {request.min_bytes} is out of range")
    return max_bytes, min(request.min_bytes, max_bytes)


def _check_record_start(cl, offset: int) -> None:
    """BadRequest unless a record or a segment's BLANK starts at ``offset`` (a scan
    from inside a record would report the bytes as corrupt: DATA_LOSS for a typo)."""
    try:
        cl.read(offset)
        return
    except OffsetError:
        pass
    try:
        (head,) = cl.read_raw(np.array([offset], np.int64), np.array([8], np.int64))
    except OffsetError as e:
        raise BadRequest(str(e)) from None
    if len(head) == 8 and record_head(head)[1] == BLANK_MAGIC:
        return
    raise BadRequest(f"no record starts at commitlog offset {offset}")


__all__ = ["SERVICE", "CommitLogServicer"]
