"""The producer path over dense topic ids (store/topic_table.py, issue 26 item 1): what
it caches of a topic follows the topic's config to the next batch, never admits a name
the checks refuse, and the queue ids and offsets it assigns by id are those of a plain
per-topic, per-queue counter, at many topics per batch."""

from __future__ import annotations

import numpy as np
import pytest

from mqstore import MessageStore, StoreConfig
from mqstore.errors import (
    InvalidMessageError,
    InvalidTopicError,
    MessageTypeError,
    ReservedTopicError,
    TopicPermissionError,
)
from mqstore.store.commitlog import CommitLog
from mqstore.store.encoded_batch import parse_encoded
from mqstore.store.messages import MessageBatch, check_send_topics
from mqstore.store.record_batch import BatchEncoder, encode_for_send
from mqstore.store.topic_table import LEGAL, SENDABLE, TopicTable

CFG = StoreConfig(segment_bytes=4 << 20)


@pytest.fixture
def store(tmp_path):
    s = MessageStore(tmp_path / "s", CFG, background_dispatch=False)
    yield s
    s.close()


def many(topic: str, n: int = 50, **kw) -> MessageBatch:
    """``topic`` among ``n`` other topics, round robin, one message each."""
    topics = [f"Other{i}" for i in range(n)]
    topics.insert(n // 2, topic)
    return MessageBatch(topics=topics, bodies=[b"x"] * len(topics), **kw)


def encoded(store: MessageStore, batch: MessageBatch):
    enc = BatchEncoder(StoreConfig(store_host=store.log.config.store_host), store.log._clock)
    return parse_encoded(encode_for_send(enc, batch).data, store.log.config)


def test_perm_taken_away_refuses_the_next_batch_and_given_back_admits_it(store) -> None:
    store.append(many("Closing"))
    store.append(MessageBatch(topics="Closing", bodies=[b"a"]))
    store.update_topic("Closing", perm=4)  # read only
    for batch in (many("Closing"), MessageBatch(topics="Closing", bodies=[b"a"])):
        with pytest.raises(TopicPermissionError, match="'Closing' is not writable"):
            store.append(batch)
        with pytest.raises(TopicPermissionError, match="'Closing' is not writable"):
            store.log.append_encoded(encoded(store, batch))
    store.update_topic("Closing", perm=6)
    assert len(store.append(many("Closing"))) == 51
    store.update_topic("Closing", perm=2 | 4)
    store.log.topics.create_or_update("Closing", perm=0)  # a change not through update_topic is heard too
    with pytest.raises(TopicPermissionError):
        store.append(MessageBatch(topics="Closing", bodies=[b"a"]))
    assert store.log.topics.delete("Closing")  # no config: every perm
    assert len(store.append(MessageBatch(topics="Closing", bodies=[b"a"]))) == 1


def test_write_queues_lowered_refuse_a_queue_id_past_them(store) -> None:
    store.update_topic("Narrow", write_queue_nums=8)
    assert store.append(many("Narrow", queue_ids=7)).queue_ids.tolist() == [7] * 51
    store.update_topic("Narrow", write_queue_nums=4)
    for batch in (many("Narrow", queue_ids=7), MessageBatch(topics="Narrow", bodies=[b"a"], queue_ids=7)):
        with pytest.raises(InvalidMessageError, match="queue id 7 is past topic 'Narrow''s 4 write queue"):
            store.append(batch)
        with pytest.raises(InvalidMessageError, match="queue id 7 is past topic 'Narrow''s 4 write queue"):
            store.log.append_encoded(encoded(store, batch))
    auto = store.append(MessageBatch(topics="Narrow", bodies=[b"a"] * 8))  # automatic ids: the 4 queues
    assert sorted(set(auto.queue_ids.tolist())) == [0, 1, 2, 3]
    store.append(many("Unset", queue_ids=5))  # no config: any queue
    store.update_topic("Unset", write_queue_nums=2)
    with pytest.raises(InvalidMessageError, match="queue id 5 is past topic 'Unset''s 2 write queue"):
        store.append(many("Unset", queue_ids=5))


def test_a_changed_message_type_applies_to_the_next_batch(store) -> None:
    store.append(many("Kind"))
    store.update_topic("Kind", message_type="FIFO")
    with pytest.raises(MessageTypeError, match="'Kind' takes FIFO messages"):
        store.append(many("Kind"))
    with pytest.raises(MessageTypeError, match="'Kind' takes FIFO messages"):
        store.log.append_encoded(encoded(store, many("Kind")))
    group = {"__SHARDINGKEY": "g"}
    store.append(MessageBatch(topics="Kind", bodies=[b"a"], properties=group))
    store.update_topic("Kind", message_type="NORMAL")
    with pytest.raises(MessageTypeError, match="'Kind' takes NORMAL messages"):
        store.append(MessageBatch(topics="Kind", bodies=[b"a"], properties=group))
    store.append(many("Kind"))


REFUSED = {
    "SCHEDULE_TOPIC_XXXX": ReservedTopicError,  # only the store writes it
    "TBW102": ReservedTopicError,  # a system topic
    "rmq_sys_wheel_timer": ReservedTopicError,
    "bad topic": InvalidTopicError,
    "": InvalidTopicError,
    "a" * 128: InvalidTopicError,
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_names_are_refused_the_same_every_time(store, name) -> None:
    with pytest.raises(REFUSED[name]) as first:
        check_send_topics({"Fine", name})
    store.append(MessageBatch(topics="Fine", bodies=[b"a"]))
    for _ in range(2):  # the second time too: a refused name is never cached
        for batch in (
            MessageBatch(topics=name, bodies=[b"a"]),
            MessageBatch(topics=["Fine", name, "Fine"], bodies=[b"a"] * 3),
        ):
            with pytest.raises(REFUSED[name]) as got:
                store.append(batch)
            assert str(got.value) == str(first.value)
    tid = store.log.topic_table.ids.get(name)
    assert tid < 0 or not store.log.topic_table.ids.flags_of(tid) & SENDABLE


def test_the_store_still_writes_its_own_topics_after_a_producer_was_refused(store) -> None:
    with pytest.raises(ReservedTopicError):
        store.append(MessageBatch(topics="SCHEDULE_TOPIC_XXXX", bodies=[b"a"], queue_ids=0))
    res = store.log.deliver(MessageBatch(topics="SCHEDULE_TOPIC_XXXX", bodies=[b"a"], queue_ids=0))
    assert len(res) == 1
    with pytest.raises(ReservedTopicError):  # and a producer still may not
        store.append(MessageBatch(topics="SCHEDULE_TOPIC_XXXX", bodies=[b"a"], queue_ids=0))


def test_illegal_names_are_refused_by_a_bare_commitlog_every_time(tmp_path) -> None:
    with CommitLog(tmp_path, CFG) as cl:
        cl.append(MessageBatch(topics=["A", "B"], bodies=[b"a", b"b"]))
        for _ in range(2):
            with pytest.raises(InvalidTopicError, match="bad/topic"):
                cl.append(MessageBatch(topics=["A", "bad/topic", "B", "also bad"], bodies=[b"a"] * 4))
            with pytest.raises(InvalidMessageError, match="topics has 2 values for 3 messages"):
                cl.append(MessageBatch(topics=["A", "B"], bodies=[b"a"] * 3))
        assert cl.topic_table.ids.get("bad/topic") < 0


def test_automatic_queue_ids_round_robin_per_topic_across_many_topics(tmp_path) -> None:
    rng = np.random.default_rng(5)
    topics = [f"T{i}" for i in range(500)]
    nums = {t: int(rng.integers(1, 9)) for t in topics[::7]}  # some topics have their own queue count
    counters: dict[str, int] = {}
    with CommitLog(tmp_path, StoreConfig(segment_bytes=4 << 20, default_queue_nums=3)) as cl:
        for t, k in nums.items():
            cl.set_queue_nums(t, k)
        for _ in range(8):
            chosen = [topics[i] for i in rng.integers(0, len(topics), 700)]
            given = rng.integers(-1, 2, 700)  # -1: automatic, mixed with given ids
            res = cl.append(MessageBatch(topics=chosen, bodies=[b"m"] * 700, queue_ids=given))
            want = []
            for t, q in zip(chosen, given.tolist()):
                if q == -1:
                    c = counters.get(t, 0)
                    counters[t] = c + 1
                    q = c % nums.get(t, 3)
                want.append(q)
            assert res.queue_ids.tolist() == want


def test_queue_offsets_across_many_topics_equal_a_counter_and_continue_after_reopen(tmp_path) -> None:
    rng = np.random.default_rng(9)
    topics = [f"Q{i}" for i in range(3000)]
    nxt: dict[tuple[str, int], int] = {}

    def batches(cl, count: int) -> None:
        for _ in range(count):
            n = int(rng.integers(1, 1500))
            chosen = [topics[i] for i in rng.integers(0, len(topics), n)]
            qids = rng.integers(0, 6, n)
            one = rng.random() < 0.2
            if one:
                chosen = chosen[0]
            res = cl.append(MessageBatch(topics=chosen, bodies=[b"o"] * n, queue_ids=qids))
            want = []
            for i, q in enumerate(qids.tolist()):
                key = (chosen if one else chosen[i], q)
                want.append(nxt.get(key, 0))
                nxt[key] = want[-1] + 1
            assert res.queue_offsets.tolist() == want

    with CommitLog(tmp_path, CFG) as cl:
        batches(cl, 12)
        assert cl.queue_count == len(nxt)
    with CommitLog(tmp_path, CFG) as cl:  # rebuilt from the commitlog, by name
        assert all(cl.queue_offset(t, q) == v for (t, q), v in nxt.items())
        batches(cl, 4)


def test_the_table_gives_dense_ids_and_flags_only_what_passed() -> None:
    table = TopicTable()
    ids, tid, _ = table.legal_ids(["A", "B", "A"], 3)
    assert ids.tolist() == [0, 1, 0] and tid == -1
    assert table.legal_ids("B", 7) == (None, 1, 0)
    assert table.ids.fields[1] == b"\x01B"
    assert table.ids.flags_of(0) == LEGAL  # legal, not yet checked for a producer
    calls = []
    found = table.sendable_ids(["B", "C"], calls.append)
    assert found.ids.tolist() == [1, 2] and found.plain  # no configs: NORMAL messages, any queue
    assert table.sendable_ids(["C", "B"], calls.append)[0].tolist() == [2, 1]
    assert calls == [{"B", "C"}]  # checked once
    table.config_changed("C")
    table.sendable_ids("C", calls.append)
    assert calls == [{"B", "C"}, {"C"}]
