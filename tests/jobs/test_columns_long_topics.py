"""The Spark data source's worker-side decoder (mqstore.jobs.columns, plain pyarrow:
no Spark session here) on V2 records: RocketMQ 5 ``%RETRY%`` / ``%DLQ%`` topics over
127 characters, mixed with V1 records in one segment."""

from __future__ import annotations

from pathlib import Path

from mqstore.jobs.columns import segment_batches
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore

RETRY = "%RETRY%" + "g" * 193
DLQ = "%DLQ%" + "d" * 250


def test_v2_and_v1_records_become_the_same_columns(tmp_path: Path) -> None:
    topics = [RETRY, "Short", DLQ, RETRY, "T" * 127]
    with MessageStore(tmp_path, StoreConfig(segment_bytes=64 * 1024)) as s:
        res = s.append(
            MessageBatch.of(
                [
                    Message(
                        t,
                        f"body-{i}".encode(),
                        queue_id=i % 2,
                        tags=f"Tag{i}",
                        keys=[f"k{i}"],
                        properties={"p": str(i)},
                    )
                    for i, t in enumerate(topics)
                ]
            )
        )
    (batch,) = segment_batches(tmp_path / "commitlog" / f"{0:020d}", 0)
    cols = batch.to_pydict()
    assert cols["topic"] == topics
    assert cols["body"] == [f"body-{i}".encode() for i in range(len(topics))]
    assert cols["tags"] == [f"Tag{i}" for i in range(len(topics))]
    assert cols["keys"] == [f"k{i}" for i in range(len(topics))]
    assert cols["unique_key"] == res.unique_keys
    assert [dict(p)["p"] for p in cols["properties"]] == [str(i) for i in range(len(topics))]
    assert cols["physical_offset"] == res.physical_offsets.tolist()
    assert cols["total_size"] == res.sizes.tolist()
    assert cols["msg_id"] == res.msg_ids
    assert cols["queue_offset"] == res.queue_offsets.tolist()
