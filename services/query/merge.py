"""A batch split over shards, and the one answer made of its parts.

``take_rows`` cuts a SendBatch's columns into one shard's part; ``merge_parts`` makes
the client's answer from each part's answer or failure (a partial failure names the
shards that failed and says per message whether it may be stored).
"""

from __future__ import annotations

import grpc
import numpy as np

from mqstore.rpc.v1 import common_pb2
from mqstore.rpc.v1 import front_pb2 as pb
from mqstore.services.common.errors import REFUSED_CODES, BadRequest, RpcError, status_of
from mqstore.services.common.shard_clients import ShardUnreachable


def merge_parts(n: int, qids: np.ndarray, parts: list, answers: list) -> pb.SendBatchResponse:
    """One answer for a batch split over shards: ``parts`` [(shard, rows)] and each
    part's AppendBatchResponse or exception. Every message gets its own status:
    the shard's (PUT_OK, FLUSH_DISK_TIMEOUT), NOT_STORED (its shard was not reached
    or refused the part) or SHARD_FAILED (its shard's answer was lost: it may be
    stored); ``shard_errors`` says why per failed shard. A batch whose parts all
    failed with one status code fails as a whole with it (nothing was stored, or
    as with one shard, nothing is known to be), naming every shard."""
    failed: dict[int, tuple[grpc.StatusCode, str, bool]] = {}  # shard -> (code, message, surely not written)
    for (s, rows), a in zip(parts, answers):
        if not isinstance(a, BaseException) and len(a.result.statuses) != len(rows):
            a = RpcError(f"shard {s} answered {len(a.result.statuses)} statuses for {len(rows)} messages")
        if isinstance(a, BaseException):
            code, message = status_of(a)
            failed[s] = (code, message, isinstance(a, ShardUnreachable) or code in REFUSED_CODES)
    if len(failed) == len(parts):
        codes = {code for code, _, _ in failed.values()}
        if len(parts) == 1:
            raise next(a for a in answers if isinstance(a, BaseException))
        if len(codes) == 1:
            raise RpcError(
                "every shard of the batch failed: " + "; ".join(f"shard {s}: {m}" for s, (_, m, _) in failed.items()),
                codes.pop(),
            )
    out = empty_result(n)
    for (s, rows), a in zip(parts, answers):
        if s in failed:
            status = common_pb2.NOT_STORED if failed[s][2] else common_pb2.SHARD_FAILED
            for i in rows.tolist():
                out.statuses[i], out.shards[i], out.queue_ids[i] = status, s, int(qids[i])
            continue
        r = a.result
        for j, i in enumerate(rows.tolist()):
            out.statuses[i], out.msg_ids[i], out.physical_offsets[i] = (
                r.statuses[j],
                r.msg_ids[j],
                r.physical_offsets[j],
            )
            out.sizes[i], out.queue_ids[i], out.queue_offsets[i] = r.sizes[j], r.queue_ids[j], r.queue_offsets[j]
            out.unique_keys[i], out.store_timestamps[i], out.shards[i] = r.unique_keys[j], r.store_timestamps[j], s
    errors = [
        pb.ShardError(shard=s, code=code.name, message=message) for s, (code, message, _) in sorted(failed.items())
    ]
    return pb.SendBatchResponse(result=out, shard_errors=errors)


def empty_result(n: int) -> common_pb2.AppendResult:
    return common_pb2.AppendResult(
        statuses=[common_pb2.PUT_STATUS_UNSPECIFIED] * n,
        msg_ids=[""] * n,
        physical_offsets=[-1] * n,
        sizes=[0] * n,
        queue_ids=[0] * n,
        queue_offsets=[-1] * n,
        unique_keys=[""] * n,
        store_timestamps=[0] * n,
        shards=[0] * n,
    )


def take_rows(cols: common_pb2.MessageColumns, rows: np.ndarray, n: int) -> common_pb2.MessageColumns:
    """The columns of the messages at ``rows`` (broadcast columns stay broadcast)."""
    if len(cols.unique_keys) not in (0, n):
        raise BadRequest(f"column unique_keys has {len(cols.unique_keys)} values for {n} messages (give 0 or {n})")
    out = common_pb2.MessageColumns()
    picked = rows.tolist()
    for field in common_pb2.MessageColumns.DESCRIPTOR.fields:
        src = getattr(cols, field.name)
        if field.name == "queue_ids":
            out.queue_ids.extend([0] * len(picked))
            continue
        if len(src) == 0:
            continue
        dst = getattr(out, field.name)
        if len(src) == 1 and n != 1:
            dst.append(src[0])
        elif len(src) == n:
            dst.extend([src[i] for i in picked])
        else:
            raise BadRequest(f"column {field.name} has {len(src)} values for {n} messages (give 0, 1 or {n})")
    return out


__all__ = ["empty_result", "merge_parts", "take_rows"]
