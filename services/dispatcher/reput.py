"""The reput dispatcher as its own process (RocketMQ ReputMessageService), and its
DispatcherService (proto/mqstore/v1/dispatcher.proto).

``RemoteDispatcher`` tails one shard's commitlog over gRPC, on long-lived streams
opened once per connection (services/common/internal_streams.py: a unary call per
step cost each hop about 0.44 ms of CPU per message at low rates). The commitlog's
Tail stream (feed.py) says which records are visible (up to 8 MiB an answer, waiting
for new ones, as ReadRange does; one answer per credit the dispatcher grants, each
grant carrying the dispatched offset). On the shard's node (the deployment places
it there and gives it the store directory) it asks for their bounds only and reads
them from its own read-only maps of the segments (store.reader.SegmentMaps), so
record bytes do not cross processes; elsewhere the answer brings the bytes. It
decodes them in bulk (``scan_records`` + ``build_dispatch_batch``, the same code as
the in-process loop) and sends the consume-queue columns to the consume-queue builder
(ConsumeQueueService.PutUnitsStream) and the index keys to the index builder
(IndexService.PutKeysStream), both at once. The puts are pipelined: a task
(``_feed``) reads, decodes and sends the next batch while another (``_settle``)
takes the builders' answers in order, up to ``PIPELINE_BATCHES`` unanswered (a
batch after a refused one is refused too: each must start at the builder's
progress). Each put is answered on its stream with the status the unary PutUnits /
PutKeys would have had, so every rule below holds as it did with unary calls; a
stream that breaks fails its puts as UNAVAILABLE (or its status) and is opened again. Topics go to the consume-queue builder as this
process's topic ids (formats.message: given once per process, its *epoch*), each id
named only the first time after each resync (services/index/topic_epochs.py: at 10,000 topics a chunk
named thousands of topics, made into str and looked up by name there, chunk after
chunk). When the consume-queue builder answered, its dispatched offset moves; the
next grant tells the commitlog (``dispatched_offset``: retention and
back-pressure use it).

The index never holds the consume queues back. An index builder that fails a batch
(a full disk: RESOURCE_EXHAUSTED; a restart; anything) or is not ready when dispatch
resumes (still recovering) falls *behind*: the batches go on to the consume queues
alone, and a second task (``_catch_up_index``) asks the index builder for its
progress and feeds it from there, reading the commitlog again (unary ReadRange
and PutKeys: not steady traffic, each call up to 8 MiB), retrying with a
backoff up to 2 s while it fails; once it reaches the batches the consume queues
are given, the index takes them again. Status says it is behind, where it stands,
why and since when (``index_behind``).

Where it resumes: step 4 of the open (mqstore/store/open_protocol.py): at the
consume-queue builder's GetProgress, once it recovered against the commitlog's
current open (its incarnation); the index builder joins from its own progress as
above. So a restart of the dispatcher resends nothing the builders have and skips
nothing either lacks; a builder that restarts refuses the next batch as a gap
(FAILED_PRECONDITION), a commitlog that reopens refuses nothing but has a new
incarnation, which the builders refuse (ABORTED): either makes the dispatcher (or,
for the index, its catch-up) resync. Units or keys sent twice are skipped by the
consume queues and the index.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import numpy as np
import structlog

from mqstore.formats.message import scan_records
from mqstore.rpc.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    consume_queue_pb2,
    consume_queue_pb2_grpc,
    dispatcher_pb2_grpc,
    index_pb2,
    index_pb2_grpc,
)
from mqstore.rpc.v1 import dispatcher_pb2 as pb
from mqstore.services.common.columns import INT32, INT64, pack
from mqstore.services.common.errors import rpc
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import RequestStream, internal_channel
from mqstore.services.common.server import Registration
from mqstore.services.dispatcher.feed import TailFeed
from mqstore.services.index.topic_epochs import MAX_TOPIC_ID
from mqstore.store import open_protocol
from mqstore.store.commitlog import ScanChunk
from mqstore.store.dispatch import DispatchBatch, build_dispatch_batch
from mqstore.store.reader import SegmentMaps

log = structlog.get_logger(__name__)
SERVICE = "mqstore.v1.DispatcherService"
INDEX_STUCK_S = 10.0  # an index behind that long without advancing is reported stuck
PUT_TIMEOUT_S = 60.0  # an answer to a put later than this breaks its stream
PIPELINE_BATCHES = 2  # batches sent to the builders and not answered yet, at most
_RESYNC_CODES = {
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
}


def _failed(e: BaseException) -> asyncio.Future:
    """A future that failed with ``e`` (a request that could not be sent)."""
    f = asyncio.get_running_loop().create_future()
    f.set_exception(e)
    return f


class _Resync(Exception):
    """The shard reopened (or refused a batch): read the resume offset again."""


def _why(e: BaseException) -> str:
    if isinstance(e, grpc.aio.AioRpcError):
        return f"{e.code().name}: {e.details()}"
    return f"{type(e).__name__}: {e}"


class RemoteDispatcher:
    """See the module docstring. The resolvers return the ``host:port`` of the
    shard's commitlog, consume-queue builder and index builder (None: the index is
    disabled), asked again after a peer stops answering (it may come back elsewhere)."""

    def __init__(
        self,
        resolve: Callable[[], Awaitable[str]],
        resolve_queues: Callable[[], Awaitable[str]],
        resolve_index: Callable[[], Awaitable[str]] | None = None,
        *,
        auth: InternalAuth,
        shard: int = 0,
        delays_ms: list[int] | None = None,
        chunk_bytes: int = 8 << 20,
        wait_ms: int = 200,
        store_dir: str | Path | None = None,
        min_bytes: int = 1 << 20,
        linger_ms: int = 10,
    ) -> None:
        """``store_dir``: the shard's store directory, when this process runs on its
        node: records are then read from read-only maps of its segments and only their
        bounds come over ReadRange; without it (or if it is not there) ReadRange
        brings the bytes. ``min_bytes``/``linger_ms``: once records are visible, the
        commitlog waits up to ``linger_ms`` for ``min_bytes`` of them, so under load
        each round takes several appends (three calls per round: ReadRange, PutUnits,
        PutKeys, each with gRPC's fixed cost); an idle store answers a lone append
        within ``linger_ms``."""
        self._resolvers = (resolve, resolve_queues, resolve_index)
        self._store_dir = store_dir
        self._maps: SegmentMaps | None = None  # decided at each resync: the commitlog has made its files by then
        self._auth = auth
        self._md = auth.metadata()  # on every call and stream open (the channels have no interceptor)
        self.shard = shard
        self._delays = delays_ms
        self._chunk = chunk_bytes
        self._wait_ms = wait_ms
        self._min_bytes, self._linger_ms = min_bytes, linger_ms
        self.dispatched_offset = -1
        self.confirm_offset = 0
        self.incarnation = 0
        self.dispatched_records = 0
        self.batches = 0
        self.resyncs = 0
        self.streams_opened = 0  # Tail feeds and put streams opened (one each per connection and resync)
        self.last_error = ""
        self.running = False
        # The index lane (module docstring): behind or in step with the consume queues.
        self.index_behind = False
        self.index_offset = -1  # the index builder's progress, as last seen while behind
        self.index_error = ""
        self.index_behind_since_ms = 0
        self._index_moved_at = 0.0  # monotonic time the index last advanced (or fell behind)
        self._frontier = -1  # to_offset of the last batch the consume queues were sent
        self._catch_up: asyncio.Task | None = None
        # Topics go to the consume-queue builder as this process's ids (the module
        # docstring): the epoch names the id space, ``_told`` (by id) the ids whose
        # names it was sent since the last resync.
        self.topic_epoch = secrets.randbits(62) + 1
        self._told = np.zeros(0, bool)
        self._channels: list[grpc.aio.Channel] | None = None
        self._units_stream: RequestStream | None = None
        self._keys_stream: RequestStream | None = None
        self._task: asyncio.Task | None = None

    @property
    def reads_locally(self) -> bool:
        """True when records come from this node's maps of the segments."""
        return self._maps is not None

    # ------------------------------------------------------------------ lifecycle (on the event loop)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatcher-{self.shard}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self._drop_channel()

    async def _drop_channel(self) -> None:
        await self._close_streams()
        chs, self._channels = self._channels, None
        for ch in chs or ():
            await ch.close()

    async def _close_streams(self, *, units: bool = True) -> None:
        """Close the put streams (``units`` False: the index's alone)."""
        streams = [self._units_stream] if units else []
        streams.append(self._keys_stream)
        if units:
            self._units_stream = None
        self._keys_stream = None
        for st in streams:
            if st is not None:
                await st.close()

    def _stream(self, which: str) -> RequestStream:
        """The open PutUnitsStream ("units") or PutKeysStream ("keys"), opened once per
        connection (again only after it broke: its failure was handled meanwhile)."""
        st = self._units_stream if which == "units" else self._keys_stream
        if st is None or st.broken is not None:
            if which == "units":
                st = RequestStream.open(self._cq.PutUnitsStream, f"PutUnitsStream-{self.shard}", self._md)
                self._units_stream = st
            else:
                st = RequestStream.open(self._ix.PutKeysStream, f"PutKeysStream-{self.shard}", self._md)
                self._keys_stream = st
            self.streams_opened += 1
        return st

    async def _stubs(self):
        if self._channels is None:
            cl, cq, ix = self._resolvers
            chs = [internal_channel(await r(), self._auth) for r in (cl, cq, ix) if r is not None]
            self._channels = chs
            self._cl = commitlog_pb2_grpc.CommitLogServiceStub(chs[0])
            self._cq = consume_queue_pb2_grpc.ConsumeQueueServiceStub(chs[1])
            self._ix = index_pb2_grpc.IndexServiceStub(chs[2]) if len(chs) > 2 else None
        return self._cl, self._cq, self._ix

    async def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything the commitlog confirmed is dispatched (a clean stop:
        the builders then close with everything in), at most ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.running and loop.time() < deadline:
            if self.incarnation and self.dispatched_offset >= self.confirm_offset:
                return True
            await asyncio.sleep(0.05)
        return False

    async def _run(self) -> None:
        self.running = True
        backoff = 0.05
        try:
            while True:
                try:
                    await self._follow()
                except asyncio.CancelledError:
                    raise
                except _Resync as e:
                    self.incarnation = 0
                    self.last_error = str(e)
                    await asyncio.sleep(0.05)  # a builder still recovering: ask again shortly
                    continue
                except grpc.aio.AioRpcError as e:
                    self.last_error = f"{e.code().name}: {e.details()}"
                    self.incarnation = 0
                    if e.code() not in _RESYNC_CODES:
                        await self._drop_channel()  # the shard may have moved: resolve it again
                except Exception as e:
                    self.last_error = f"{type(e).__name__}: {e}"
                    self.incarnation = 0
                    log.error("dispatch_failed", shard=self.shard, error=self.last_error, exc_info=e)
                log.warning("dispatch_retry", shard=self.shard, error=self.last_error, backoff_s=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
        finally:
            self.running = False

    async def _follow(self) -> None:
        """Resync, then tail until something fails (raises)."""
        cl, cq, ix = await self._stubs()
        md = self._md
        offsets = await cl.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10, metadata=md)
        p = await cq.GetProgress(consume_queue_pb2.GetProgressRequest(), timeout=10, metadata=md)
        if p.state != "SERVING" or p.commitlog_incarnation != offsets.incarnation:
            raise _Resync(
                f"the consume-queue builder is not ready for commitlog incarnation {offsets.incarnation} "
                f"(state {p.state}, recovered against {p.commitlog_incarnation})"
            )
        self.incarnation, self.dispatched_offset = (
            offsets.incarnation,
            open_protocol.resume_offset([p.progress_offset]),
        )
        self._frontier = self.dispatched_offset
        self._told = np.zeros(0, bool)  # a builder that restarted knows no names: tell them again
        self.index_behind = False
        if ix is not None and (why := (await self._index_standing(ix))[0]) is not None:
            self._index_fell_behind(cl, why, resuming=True)  # it joins from its own progress when it can
        self.confirm_offset = offsets.confirm_offset
        self.resyncs += 1
        if self._maps is not None:
            self._maps.reset()  # the commitlog may have reopened: recovery may have replaced files
        elif self._store_dir is not None:
            self._maps = _local_maps(self._store_dir, self.shard)
        log.info(
            "dispatch_resumed", shard=self.shard, dispatched_offset=self.dispatched_offset, incarnation=self.incarnation
        )
        start = self._range_request(self.dispatched_offset)
        feed = await TailFeed.open(cl, start, self._wait_ms / 1000 + 30, self._md)
        self.streams_opened += 1
        sent: asyncio.Queue = asyncio.Queue()  # batches sent, not yet answered, oldest first
        slots = asyncio.Semaphore(PIPELINE_BATCHES)
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(self._feed(feed, ix is not None, sent, slots), name=f"dispatch-feed-{self.shard}"),
            loop.create_task(self._settle(cl, sent, slots), name=f"dispatch-settle-{self.shard}"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()  # the first failure (neither ends otherwise)
        finally:
            feed.close()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            while not sent.empty():  # their answers are no one's now: dropped as they come
                _, units, keys = sent.get_nowait()
                units.cancel()
                if keys is not None:
                    keys.cancel()
            await self._stop_catch_up()

    async def _feed(self, feed: TailFeed, with_index: bool, sent: asyncio.Queue, slots: asyncio.Semaphore) -> None:
        """Take the feed's answers and send each batch to the builders (``_settle``
        takes their answers, in order, while the next batch is read and sent)."""
        sent_min = 0  # the commitlog min offset sent to the builders (every batch carries it)
        while True:
            r = await feed.next()
            if r.incarnation != self.incarnation:
                raise _Resync(f"shard reopened (incarnation {r.incarnation}, was {self.incarnation})")
            self.confirm_offset = r.confirm_offset
            idle = r.next_offset == self._frontier and not r.record_count
            await feed.grant(max(self.dispatched_offset, 0))  # the next chunk (or wait), meanwhile
            if idle and r.min_offset <= sent_min:
                continue  # nothing new
            await slots.acquire()  # at most PIPELINE_BATCHES unanswered
            units, keys = self._requests(r, self._frontier)  # (idle: retention moved the start)
            with_keys = with_index and not self.index_behind
            self._frontier = r.next_offset  # (before sending: the index's catch-up compares with it)
            sent_units = await self._stream("units").send(units, PUT_TIMEOUT_S)
            sent_keys = None
            if with_keys:
                try:
                    sent_keys = await self._stream("keys").send(keys, PUT_TIMEOUT_S)
                except grpc.aio.AioRpcError as e:
                    sent_keys = _failed(e)
            sent_min = max(sent_min, r.min_offset)
            sent.put_nowait((r, sent_units, sent_keys))

    async def _settle(self, cl, sent: asyncio.Queue, slots: asyncio.Semaphore) -> None:
        """The builders' answers to the batches sent, in order: the dispatched offset
        moves when the consume queues took a batch (their error ends dispatch: resync);
        an index that failed one falls behind (its stream, if broken, is closed)."""
        told_min = 0  # the commitlog min offset the builders were told
        while True:
            r, units, keys = await sent.get()
            done = await asyncio.gather(units, *([keys] if keys is not None else []), return_exceptions=True)
            if isinstance(done[0], BaseException):
                raise done[0]
            if keys is not None and isinstance(done[1], BaseException) and not self.index_behind:
                # (already behind: a batch sent before it fell was refused as a gap; the catch-up has it)
                self._index_fell_behind(cl, _why(done[1]))  # the consume queues go on without it
                if self._keys_stream is not None and self._keys_stream.broken is not None:
                    await self._close_streams(units=False)
            told_min = max(told_min, r.min_offset)
            if self._maps is not None:
                self._maps.release(told_min)
            self.dispatched_offset = r.next_offset
            self.dispatched_records += r.record_count
            self.batches += 1
            slots.release()

    # ------------------------------------------------------------------ the index lane

    def _index_fell_behind(self, cl, why: str, *, resuming: bool = False) -> None:
        """Feed the consume queues alone from now on and catch the index up behind them
        (``resuming``: at a resync, where an index builder still recovering is normal)."""
        if not self.index_behind:
            self.index_behind, self.index_behind_since_ms = True, int(time.time() * 1000)
            self._index_moved_at = time.monotonic()
            (log.info if resuming else log.warning)(
                "index_behind", shard=self.shard, error=why, action="consume queues fed on; index catches up"
            )
        self.index_error = why
        if self._catch_up is None or self._catch_up.done():
            self._catch_up = asyncio.get_running_loop().create_task(
                self._catch_up_index(cl), name=f"index-catch-up-{self.shard}"
            )

    async def _stop_catch_up(self) -> None:
        task, self._catch_up = self._catch_up, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _index_standing(self, ix) -> tuple[str | None, bool]:
        """(why the index builder can not take the next batch, None if it can; whether
        it is ready to be fed from its own progress): it may not be ready for this
        commitlog open, or lack records below the consume queues' batches."""
        try:
            p = await ix.GetProgress(index_pb2.IndexProgressRequest(), timeout=10, metadata=self._md)
        except grpc.aio.AioRpcError as e:
            return _why(e), False
        if p.progress_offset > self.index_offset:
            self._index_moved_at = time.monotonic()
        self.index_offset = p.progress_offset
        if p.state != "SERVING" or p.commitlog_incarnation != self.incarnation:
            why = (
                f"the index builder is {p.state.lower() or 'not ready'} (recovered against commitlog "
                f"incarnation {p.commitlog_incarnation}, dispatch follows {self.incarnation})"
            )
            return why + (f": {p.error}" if p.error else "") + (
                f"; {p.recovery_step}" if p.recovery_step else ""
            ), False
        if p.progress_offset < self._frontier:
            why = p.stuck or f"at commitlog offset {p.progress_offset}, the consume queues at {self._frontier}"
            return f"the index builder is behind: {why}", True
        return None, True

    async def _reconnect_index(self) -> None:
        """A new channel to the index builder, resolved again (it may have restarted elsewhere)."""
        chs = self._channels
        if chs is None or len(chs) < 3:
            return
        old, chs[2] = chs[2], internal_channel(await self._resolvers[2](), self._auth)
        self._ix = index_pb2_grpc.IndexServiceStub(chs[2])
        await self._close_streams(units=False)  # it was on the old channel
        await old.close()

    async def _catch_up_index(self, cl) -> None:
        """Feed the index builder from its own progress until it reaches the batches
        the consume queues were sent (``_frontier``), then hand it back to the main
        loop; every failure is retried after a backoff (0.05 s doubling to 2 s)."""
        backoff = 0.05
        while True:
            try:
                why, ready = await self._index_standing(self._ix)
                if why is None:  # in step: the next batch takes its keys again
                    self.index_behind, self.index_error, self.index_behind_since_ms = False, "", 0
                    log.info("index_caught_up", shard=self.shard, progress_offset=self.index_offset)
                    return
                if not ready:
                    raise _Resync(why)  # recovering, restarting: ask again after the backoff
                at = max(self.index_offset, 0)
                r = await self._read(cl, at)
                if r.incarnation != self.incarnation:
                    raise _Resync(f"shard reopened (incarnation {r.incarnation}, was {self.incarnation})")
                keys = self._requests(r, at, units=False)[1]
                res = await self._ix.PutKeys(keys, timeout=PUT_TIMEOUT_S, metadata=self._md)
                self.index_offset = res.progress_offset
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a full disk, a restart: reported in status, tried again
                why = _why(e)
                if why != self.index_error:  # (not ready yet, as while it recovers: info)
                    (log.info if isinstance(e, _Resync) else log.warning)(
                        "index_catch_up_failed", shard=self.shard, error=why, retry_s=backoff
                    )
                self.index_error = why
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                if "UNAVAILABLE" in why:
                    try:
                        await self._reconnect_index()
                    except Exception as e:  # noqa: BLE001 - not placed yet: tried again after the next backoff
                        self.index_error = _why(e)

    def _range_request(self, offset: int, *, wait: bool = True) -> commitlog_pb2.ReadRangeRequest:
        return commitlog_pb2.ReadRangeRequest(
            offset=offset,
            max_bytes=self._chunk,
            wait_ms=self._wait_ms if wait else 0,
            dispatched_offset=max(self.dispatched_offset, 0),
            bounds_only=self._maps is not None,
            min_bytes=self._min_bytes if wait else 0,
            linger_ms=self._linger_ms if wait else 0,
        )

    async def _read(self, cl, offset: int) -> commitlog_pb2.ReadRangeResponse:
        """One ReadRange without waiting (the index's catch-up: not steady traffic)."""
        req = self._range_request(offset, wait=False)
        return await cl.ReadRange(req, timeout=self._wait_ms / 1000 + 30, metadata=self._md)

    def _requests(self, r: commitlog_pb2.ReadRangeResponse, frm: int, *, units: bool = True):
        """(PutUnits, PutKeys) of a ReadRange answer from ``frm``; ``units`` False: the
        index's alone (the PutUnits is None, and no topic counts as told)."""
        # The range, its commitlog open, the commitlog's word for its end, and retention's
        # watermark (told to the builders): in both requests.
        rng = dict(
            from_offset=frm,
            to_offset=r.next_offset,
            incarnation=self.incarnation,
            to_offset_vouch=r.vouch,
            commitlog_min_offset=r.min_offset,
        )
        forced = r.forced_deleted_to
        if not r.record_count:  # a BLANK (end of a segment) or retention moved the start: progress only
            return (
                consume_queue_pb2.PutUnitsRequest(forced_deleted_to=forced, **rng),
                index_pb2.PutKeysRequest(**rng),
            )
        if self._maps is None:
            b = decode_range(r.data, 0, len(r.data), r.offset, r.next_offset, self._delays)
        else:
            base, mm = self._maps.segment(r.offset, r.data_end)
            b = decode_range(mm, r.offset - base, r.data_end - base, base, r.next_offset, self._delays)
        if len(b) != r.record_count:
            raise _Resync(f"ReadRange said {r.record_count} records at {r.offset}, {len(b)} decoded")
        put = None
        if units:
            put = consume_queue_pb2.PutUnitsRequest(
                topic_codes=pack(b.topic_codes, INT32),
                queue_ids=pack(b.queue_ids, INT32),
                queue_offsets=pack(b.queue_offsets, INT64),
                physical_offsets=pack(b.physical_offsets, INT64),
                sizes=pack(b.sizes, INT32),
                tags_codes=pack(b.tags_codes, INT64),
                store_timestamps=pack(b.store_timestamps, INT64),
                sysflags=pack(b.sysflags, INT32),
                forced_deleted_to=forced,
                **rng,
            )
            self._name_topics(put, b)
        e = b.index_entries()
        keys = index_pb2.PutKeysRequest(
            key_hashes=pack(e.key_hashes, INT64),
            physical_offsets=pack(e.physical_offsets, INT64),
            store_timestamps=pack(e.store_timestamps, INT64),
            **rng,
        )
        return put, keys

    def _name_topics(self, put: consume_queue_pb2.PutUnitsRequest, b: DispatchBatch) -> None:
        """The batch's topics as this process's ids, with the names of those not told
        since the last resync (every failed put resyncs); by name without ids."""
        ids = b.topic_ids
        if ids is None or (len(ids) and int(ids.max()) > MAX_TOPIC_ID):
            put.topics.extend(b.topics)
            return
        if len(ids) and int(ids.max()) >= len(self._told):
            grown = np.zeros(max(int(ids.max()) + 1, 2 * len(self._told)), bool)
            grown[: len(self._told)] = self._told
            self._told = grown
        new = np.flatnonzero(~self._told[ids])
        put.topic_epoch = self.topic_epoch
        put.topic_ids = pack(ids, INT32)
        if len(new):
            put.named_ids = pack(ids[new], INT32)
            put.topics.extend([b.topics[i] for i in new.tolist()])
            self._told[ids[new]] = True

    @property
    def index_stuck(self) -> bool:
        """Behind and not advancing for INDEX_STUCK_S: the index builder is stuck
        (catching up, however long, is not)."""
        return self.index_behind and time.monotonic() - self._index_moved_at > INDEX_STUCK_S

    def status(self) -> pb.DispatcherStatusResponse:
        return pb.DispatcherStatusResponse(
            dispatched_offset=self.dispatched_offset,
            confirm_offset=self.confirm_offset,
            lag_bytes=max(0, self.confirm_offset - self.dispatched_offset) if self.dispatched_offset >= 0 else 0,
            dispatched_records=self.dispatched_records,
            batches=self.batches,
            running=self.running,
            last_error=self.last_error,
            incarnation=self.incarnation,
            resyncs=self.resyncs,
            index_behind=self.index_behind,
            index_offset=self.index_offset if self.index_behind else 0,
            index_error=self.index_error,
            index_behind_since_ms=self.index_behind_since_ms,
            index_stuck=self.index_stuck,
        )


def decode_range(
    buf, lo: int, hi: int, base_offset: int, next_offset: int, delays_ms: list[int] | None
) -> DispatchBatch:
    """The DispatchBatch of a ReadRange answer: ``buf[lo:hi]`` holds whole records,
    ``buf[0]`` being at commitlog offset ``base_offset`` (the answer's own bytes, or
    the map of the segment holding them)."""
    res = scan_records(buf, lo, hi, check_crc=False, base_offset=base_offset, fields=True)
    chunk = ScanChunk(res.positions + base_offset, res.sizes, res.fields, buf, next_offset)
    return build_dispatch_batch(chunk, delays_ms)


def _local_maps(store_dir: str | Path | None, shard: int) -> SegmentMaps | None:
    if store_dir is None:
        return None
    try:
        maps = SegmentMaps(store_dir)
    except FileNotFoundError as e:  # not on the store's node: the bytes come over ReadRange
        log.info("dispatch_reads", shard=shard, reads="remote", why=str(e))
        return None
    log.info("dispatch_reads", shard=shard, reads="local", commitlog=str(maps.directory))
    return maps


class DispatcherServicer(dispatcher_pb2_grpc.DispatcherServiceServicer):
    def __init__(self, dispatcher: RemoteDispatcher) -> None:
        self.dispatcher = dispatcher

    def registration(self) -> Registration:
        return Registration(dispatcher_pb2_grpc.add_DispatcherServiceServicer_to_server, self, SERVICE)

    @rpc
    async def Status(self, request, context) -> pb.DispatcherStatusResponse:
        return self.dispatcher.status()


__all__ = ["SERVICE", "DispatcherServicer", "RemoteDispatcher", "decode_range"]
