"""The same questions to both engines, on two copies of one store (conftest.py):
``A`` = MessageStore in this process, ``B`` = the served composition through
FrontClient. Answers are normalised to plain values (every record field, offsets,
statuses; an error becomes its gRPC code name, the store's exceptions through the
services' one errors table, with its message) and must be equal.

Both engines answer through store/reads.py (MessageStore over local ports, the
front over gRPC ports), so the only differences left are proto3's: a 0 on the wire
is "unset" (a max count of 0 is the default, an end time of 0 is no end); the two
tests at those points say so.
"""

from __future__ import annotations

import grpc
import pytest

from mqstore.formats.javahash import tags_code
from mqstore.formats.msgid import Host, offset_msg_id_prefix
from mqstore.rpc.v1 import front_pb2
from mqstore.services.common.errors import status_of
from mqstore.services.query.client import raw_records
from mqstore.store.schedule import SCHEDULE_TOPIC
from tests.equivalence.conftest import BLANK, QUEUES, RARE_AT, SPARSE, TOPICS

UNKNOWN_QUEUE = 9  # no topic of the workload has it
ALL_QUEUES = [(t, q) for t in TOPICS for q in range(QUEUES)]
LONG_MAX = (1 << 63) - 1


# ---------------------------------------------------------------------- normalising


def record_of_store(r) -> dict:
    p = dict(r.properties)
    return dict(
        msg_id=r.msg_id,
        topic=r.topic,
        queue_id=r.queue_id,
        queue_offset=r.queue_offset,
        physical_offset=r.physical_offset,
        size=r.total_size,
        body=bytes(r.body),
        properties=p,
        tags=p.get("TAGS", ""),
        keys=p.get("KEYS", ""),
        unique_key=p.get("UNIQ_KEY", ""),
        flag=r.flag,
        sysflag=r.sysflag,
        body_crc=r.body_crc & 0xFFFFFFFF,
        born_timestamp=r.born_timestamp,
        born_host=str(r.born_host),
        store_timestamp=r.store_timestamp,
        store_host=str(r.store_host),
        reconsume_times=r.reconsume_times,
        prepared_transaction_offset=r.prepared_transaction_offset,
    )


def record_of_served(r) -> dict:
    return dict(
        msg_id=r.msg_id,
        topic=r.topic,
        queue_id=r.queue_id,
        queue_offset=r.queue_offset,
        physical_offset=r.physical_offset,
        size=r.size,
        body=bytes(r.body),
        properties=dict(r.properties),
        tags=r.tags,
        keys=r.keys,
        unique_key=r.unique_key,
        flag=r.flag,
        sysflag=r.sysflag,
        body_crc=r.body_crc,
        born_timestamp=r.born_timestamp,
        born_host=r.born_host,
        store_timestamp=r.store_timestamp,
        store_host=r.store_host,
        reconsume_times=r.reconsume_times,
        prepared_transaction_offset=r.prepared_transaction_offset,
    )


def status_name(status) -> str | None:
    """A pull status as its name, whichever engine answered."""
    if status is None or isinstance(status, str):
        return status
    if isinstance(status, int) and not hasattr(status, "name"):
        return front_pb2.PullStatus.Name(status)
    return status.name


def answer(call) -> tuple:
    """("ok", value) or ("error", gRPC code name, message)."""
    try:
        return "ok", call()
    except grpc.RpcError as e:
        return "error", e.code().name, e.details()
    except Exception as e:  # noqa: BLE001 - the store's exceptions, as a server would answer them
        code, message = status_of(e)
        return "error", code.name, message


class InProcess:
    """Copy A: MessageStore's answers, normalised."""

    def __init__(self, store) -> None:
        self.s = store

    def pull(self, topic, qid, offset, *, max_count=32, tags=None):
        r = self.s.pull(topic, qid, offset, max_count=max_count, tags=tags)
        return dict(
            records=[record_of_store(m) for m in r.records],
            next_offset=r.next_offset,
            min_offset=r.min_offset,
            max_offset=r.max_offset,
        )

    def pull_status(self, topic, qid, offset, *, max_count=32, tags=None):
        return status_name(getattr(self.s.pull(topic, qid, offset, max_count=max_count, tags=tags), "status", None))

    def pull_raw(self, topic, qid, offset, *, max_count=32, tags=None):
        codes = None if tags is None else {tags_code(t) for t in tags}
        r = self.s.pull_raw(topic, qid, offset, max_count=max_count, tags_codes=codes)
        return dict(
            raw=[bytes(m) for m in r.messages],
            next_offset=r.next_offset,
            min_offset=r.min_offset,
            max_offset=r.max_offset,
        )

    def by_msg_id(self, msg_id):
        return [record_of_store(self.s.read_msg_id(msg_id))]

    def by_key(self, topic, key, *, begin=0, end=LONG_MAX, max_num=32):
        return [record_of_store(r) for r in self.s.query_by_key(topic, key, begin=begin, end=end, max_num=max_num)]

    def by_unique_key(self, topic, key, *, max_num=32):
        return [record_of_store(r) for r in self.s.query_by_unique_key(topic, key, max_num=max_num)]

    def by_offset(self, topic, qid, offset):
        return [record_of_store(self.s.read_queue_offset(topic, qid, offset))]

    def topic_status(self, topic):
        return [
            (q.topic, q.queue_id, q.min_offset, q.max_offset, q.last_store_timestamp)
            for q in self.s.topic_status(topic)
        ]

    def offset_at_time(self, topic, qid, ts):
        return self.s.offset_at_time(topic, qid, ts)

    def consumer_progress(self, group):
        return [
            (r.topic, r.queue_id, r.broker_offset, r.consumer_offset, r.lag) for r in self.s.consumer_progress(group)
        ]

    def fetch_offset(self, group, topic, qid):
        return self.s.consumer_offsets.fetch(group, topic, qid)  # MS has no fetch of its own (row 17)


class Served:
    """Copy B: the front's answers over gRPC, normalised."""

    def __init__(self, client) -> None:
        self.c = client

    @staticmethod
    def _expr(tags):
        return "" if tags is None else " || ".join(sorted(tags))

    def pull(self, topic, qid, offset, *, max_count=32, tags=None):
        r = self.c.pull(topic, qid, offset, max_messages=max_count, tags=self._expr(tags))
        return dict(
            records=[record_of_served(m) for m in r.records],
            next_offset=r.next_offset,
            min_offset=r.min_offset,
            max_offset=r.max_offset,
        )

    def pull_status(self, topic, qid, offset, *, max_count=32, tags=None):
        return status_name(self.c.pull(topic, qid, offset, max_messages=max_count, tags=self._expr(tags)).status)

    def pull_raw(self, topic, qid, offset, *, max_count=32, tags=None):
        r = self.c.pull(topic, qid, offset, max_messages=max_count, tags=self._expr(tags), raw=True)
        return dict(
            raw=list(raw_records(r)),
            next_offset=r.next_offset,
            min_offset=r.min_offset,
            max_offset=r.max_offset,
        )

    def by_msg_id(self, msg_id):
        return [record_of_served(r) for r in self.c.query_by_msg_id(msg_id)]

    def by_key(self, topic, key, *, begin=0, end=LONG_MAX, max_num=32):
        return [
            record_of_served(r) for r in self.c.query_by_key(topic, key, begin_ms=begin, end_ms=end, max_num=max_num)
        ]

    def by_unique_key(self, topic, key, *, max_num=32):
        return [record_of_served(r) for r in self.c.query_by_unique_key(topic, key, max_num=max_num)]

    def by_offset(self, topic, qid, offset):
        return [record_of_served(r) for r in self.c.query_by_offset(topic, qid, offset)]

    def topic_status(self, topic):
        return [
            (q.topic, q.queue_id, q.min_offset, q.max_offset, q.last_store_timestamp)
            for q in self.c.topic_status(topic)
        ]

    def offset_at_time(self, topic, qid, ts):
        return self.c.offset_by_time(topic, qid, ts)

    def consumer_progress(self, group):
        return [
            (r.topic, r.queue_id, r.broker_offset, r.consumer_offset, r.lag) for r in self.c.consumer_progress(group)
        ]

    def fetch_offset(self, group, topic, qid):
        return self.c.fetch_offset(group, topic, qid)


@pytest.fixture(scope="module", params=["store", "view"])
def a(request, store_a):
    """MessageStore, then ReadView (what `--store` queries read through)."""
    return InProcess(store_a if request.param == "store" else request.getfixturevalue("view_c"))


@pytest.fixture(scope="module")
def b(client_b):
    return Served(client_b)


@pytest.fixture(scope="module")
def live(store_a) -> list:
    """Every record still stored in EqA/EqB/EqC, read off copy A's queues (what the
    key questions should find)."""
    out = []
    for t, q in ALL_QUEUES:
        cq = store_a.consume_queues.find(t, q)
        for u in cq.read_units(cq.min_offset, cq.max_offset - cq.min_offset):
            out.append(store_a.commitlog.read(int(u["commitlog_offset"])))
    return out


def same(a, b, method: str, *args, **kw):
    """Both engines' answers to one question; equal, and returned."""
    got_a = answer(lambda: getattr(a, method)(*args, **kw))
    got_b = answer(lambda: getattr(b, method)(*args, **kw))
    assert got_a == got_b, f"{method}{args} {kw}:\n  store:  {_short(got_a)}\n  served: {_short(got_b)}"
    return got_a


def _short(x, n: int = 600) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def queue_range(a, topic, qid) -> tuple[int, int]:
    cq = a.s.consume_queues.find(topic, qid)
    return cq.min_offset, cq.max_offset


# ---------------------------------------------------------------------- the workload is what both see


def test_the_workload_has_what_the_questions_need(a):
    """Retention ran (queues start above 0), the pre-blank queue starts at 3, the
    delayed messages were delivered: otherwise the questions below ask nothing."""
    assert a.s.commitlog.min_offset > 0
    assert all(queue_range(a, t, q)[0] > 0 for t, q in ALL_QUEUES)
    assert queue_range(a, BLANK, 0) == (3, 8)
    late = [
        r
        for q in range(QUEUES)
        for r in a.s.pull("EqA", q, queue_range(a, "EqA", q)[0], max_count=1000).records
        if r.tags == "Late"
    ]
    assert len(late) == 8 and all("SCHEDULE_SOURCE" in r.properties for r in late)


# ---------------------------------------------------------------------- pull


@pytest.mark.parametrize("topic,qid", ALL_QUEUES + [(SPARSE, 0), (BLANK, 0), (SCHEDULE_TOPIC, 0)])
def test_pull_every_queue_page_by_page(a, b, topic, qid):
    """In range, from the min offset to the max, 50 at a time: records, next offsets."""
    lo, hi = queue_range(a, topic, qid)
    off, pages = lo, 0
    while off < hi:
        ok, page = same(a, b, "pull", topic, qid, off, max_count=50)
        assert ok == "ok" and page["records"] and page["next_offset"] > off
        off, pages = page["next_offset"], pages + 1
    assert off == hi and pages >= 1


@pytest.mark.parametrize("topic,qid", [("EqA", 0), ("EqB", 3), (BLANK, 0)])
@pytest.mark.parametrize("count", [1, 7, 10_000])
def test_pull_in_range_with_counts(a, b, topic, qid, count):
    lo, hi = queue_range(a, topic, qid)
    for off in (lo, (lo + hi) // 2, hi - 1):
        ok, page = same(a, b, "pull", topic, qid, off, max_count=count)
        assert ok == "ok" and page["records"][0]["queue_offset"] == off


@pytest.mark.parametrize("tags", [{"TagA"}, {"TagB", "TagC"}, {"Late"}, {"Nope"}], ids=lambda t: "|".join(sorted(t)))
@pytest.mark.parametrize("count", [3, 32])
def test_pull_with_a_tag_expression(a, b, tags, count):
    """Matches no further apart than the scan budget of either engine."""
    for t, q in [("EqA", 0), ("EqA", 1), ("EqC", 2)]:
        lo, _ = queue_range(a, t, q)
        same(a, b, "pull", t, q, lo, max_count=count, tags=tags)


def test_pull_with_tags_across_more_than_256_units(a, b):
    ok, page = same(a, b, "pull", SPARSE, 0, 0, max_count=32, tags={"Rare"})
    assert ok == "ok" and [r["queue_offset"] for r in page["records"]] == list(RARE_AT)


def test_pull_with_tags_within_256_units(a, b):
    """The first Rare one only is within reach of both budgets."""
    ok, page = same(a, b, "pull", SPARSE, 0, 0, max_count=1, tags={"Rare"})
    assert ok == "ok" and [r["queue_offset"] for r in page["records"]] == [RARE_AT[0]]


@pytest.mark.parametrize("past", [0, 1, 1000])
def test_pull_at_and_past_the_max(a, b, past):
    """No records, next = max (the statuses differ: test_pull_status)."""
    for t, q in [("EqA", 2), (BLANK, 0), (SPARSE, 0)]:
        _, hi = queue_range(a, t, q)
        ok, page = same(a, b, "pull", t, q, hi + past)
        assert ok == "ok" and page["records"] == [] and page["next_offset"] == hi


@pytest.mark.parametrize("topic,qid", [("EqA", 3), ("EqC", 0), (BLANK, 0)])
def test_pull_below_the_min(a, b, topic, qid):
    same(a, b, "pull", topic, qid, 0)


def test_pull_of_an_unknown_queue_at_offset_0(a, b):
    ok, page = same(a, b, "pull", "EqA", UNKNOWN_QUEUE, 0)
    assert ok == "ok" and page == dict(records=[], next_offset=0, min_offset=0, max_offset=0)


def test_pull_of_an_unknown_queue_at_offset_5(a, b):
    same(a, b, "pull", "EqA", UNKNOWN_QUEUE, 5)


def test_pull_more_than_10000(a, b):
    lo, _ = queue_range(a, "EqA", 0)
    same(a, b, "pull", "EqA", 0, lo, max_count=10_001)


PULL_STATUS_CASES = {  # (topic, queue id, offset from (min, max), tags)
    "found": ("EqA", 0, lambda lo, hi: lo, None),
    "no new message": ("EqA", 0, lambda lo, hi: hi, None),
    "offset overflow": ("EqA", 0, lambda lo, hi: hi + 5, None),
    "offset too small": ("EqA", 0, lambda lo, hi: 0, None),
    "no message in queue": ("EqA", UNKNOWN_QUEUE, lambda lo, hi: 0, None),
    "no matched message": ("EqA", 0, lambda lo, hi: lo, {"Nope"}),
}


@pytest.mark.parametrize("case", list(PULL_STATUS_CASES))
def test_pull_status(a, b, case):
    topic, qid, where, tags = PULL_STATUS_CASES[case]
    lo, hi = queue_range(a, "EqA", 0)
    same(a, b, "pull_status", topic, qid, where(lo, hi), tags=tags)


# ---------------------------------------------------------------------- raw pull


@pytest.mark.parametrize("topic,qid", [("EqA", 1), ("EqC", 3), (BLANK, 0)])
@pytest.mark.parametrize("count", [1, 32])
def test_raw_pull_in_range(a, b, topic, qid, count):
    lo, hi = queue_range(a, topic, qid)
    for off in (lo, (lo + hi) // 2, hi - 1, hi):
        same(a, b, "pull_raw", topic, qid, off, max_count=count)


def test_raw_pull_with_tags(a, b):
    lo, _ = queue_range(a, "EqA", 0)
    same(a, b, "pull_raw", "EqA", 0, lo, max_count=8, tags={"TagA"})


# ---------------------------------------------------------------------- query by msgId


def some_records(a, per_queue: int = 3) -> list:
    out = []
    for t, q in ALL_QUEUES + [(SPARSE, 0), (BLANK, 0)]:
        lo, hi = queue_range(a, t, q)
        for off in sorted({lo, (lo + hi) // 2, hi - 1})[:per_queue]:
            out.append(a.s.read_queue_offset(t, q, off))
    return out


def test_query_by_msg_id(a, b):
    recs = some_records(a)
    assert len(recs) > 40
    for r in recs:
        ok, got = same(a, b, "by_msg_id", r.msg_id)
        assert ok == "ok" and got[0]["body"] == r.body


def test_query_by_msg_id_of_another_host(a, b):
    r = some_records(a)[0]
    other = offset_msg_id_prefix(Host("10.0.0.5", 10911)) + r.msg_id[-16:]
    same(a, b, "by_msg_id", other)


def test_query_by_msg_id_past_the_end(a, b):
    r = some_records(a)[0]
    same(a, b, "by_msg_id", r.msg_id[:-16] + f"{a.s.commitlog.wrote_offset + 1000:016X}")


def test_query_by_msg_id_below_the_min(a, b):
    """A record retention deleted (offset 0 was a record start)."""
    r = some_records(a)[0]
    same(a, b, "by_msg_id", r.msg_id[:-16] + f"{0:016X}")


# ---------------------------------------------------------------------- query by key and unique key


def test_query_by_key(a, b, workload, live):
    hits = 0
    for topic in TOPICS:
        for key in workload.keys:
            want = sorted(r.physical_offset for r in live if r.topic == topic and key in r.keys.split(" "))
            assert 0 < len(want) <= 64  # no result is row 11 (test_query_by_an_unknown_key)
            ok, got = same(a, b, "by_key", topic, key, max_num=64)
            assert ok == "ok" and sorted(r["physical_offset"] for r in got) == want
            hits += len(got)
    assert hits > 1000


@pytest.mark.parametrize("max_num", [1, 5, 32])
def test_query_by_key_cut_to_max_num(a, b, workload, max_num):
    for key in workload.keys[:10] + workload.keys[40:]:
        ok, got = same(a, b, "by_key", "EqA", key, max_num=max_num)
        assert ok == "ok" and len(got) <= max_num


def test_query_by_key_in_a_time_range(a, b, live):
    """The index keeps times in whole seconds after its file's begin time; a range
    that starts on such a second is answered exactly (both engines), so the
    answer is also checked against the records themselves."""
    fb = a.s.index._files[-1].view.header.begin_timestamp
    last = max(r.store_timestamp for r in live)
    assert last - fb > 2000, "the workload spans less than 2 s"
    asked = 0
    for begin, end in ((fb + 1000, fb + 1999), (fb + 2000, last), (fb, fb + 1500)):
        for topic in TOPICS:
            for key in ("k1", "k7", "k22", "order-3"):
                want = sorted(
                    r.physical_offset
                    for r in live
                    if r.topic == topic and key in r.keys.split(" ") and begin <= r.store_timestamp <= end
                )
                if not want:  # no result: row 11 (test_query_by_an_unknown_key)
                    continue
                ok, got = same(a, b, "by_key", topic, key, begin=begin, end=end, max_num=64)
                assert ok == "ok" and sorted(r["physical_offset"] for r in got) == want
                asked += 1
    assert asked >= 20


def test_query_by_an_unknown_key(a, b):
    same(a, b, "by_key", "EqA", "no-such-key")


def test_query_by_key_max_num_over_64(a, b):
    same(a, b, "by_key", "EqA", "k1", max_num=100)


def test_query_by_key_end_0_is_no_end_on_the_wire(a, b):
    """proto3 cannot tell an end_ms of 0 from none: over gRPC 0 means no end. In
    process, end=0 asks for messages stored at or before 0: there are none."""
    assert answer(lambda: a.by_key("EqA", "k1", begin=0, end=0))[:2] == ("error", "NOT_FOUND")
    assert answer(lambda: b.by_key("EqA", "k1", begin=0, end=0)) == answer(lambda: a.by_key("EqA", "k1", max_num=32))


def test_query_by_unique_key(a, b, workload, live):
    stored = {(r.topic, r.unique_key): r.physical_offset for r in live}
    given = [tk for tk in workload.unique_keys[::20] if tk in stored]  # not those retention deleted
    assert len(given) > 20
    generated = [
        (r.topic, r.unique_key) for r in some_records(a) if r.topic in TOPICS and not r.unique_key.startswith("U")
    ]
    assert len(generated) > 10  # UNIQ_KEYs the store made
    for topic, key in given + generated:
        ok, got = same(a, b, "by_unique_key", topic, key)
        assert ok == "ok" and [r["physical_offset"] for r in got] == [stored[topic, key]]
    for r in some_records(a):
        ok, got = same(a, b, "by_unique_key", r.topic, r.unique_key)
        assert ok == "ok" and [x["physical_offset"] for x in got] == [r.physical_offset]


# ---------------------------------------------------------------------- query by queue offset


def test_query_by_queue_offset_in_range(a, b):
    for t, q in ALL_QUEUES + [(SPARSE, 0), (BLANK, 0), (SCHEDULE_TOPIC, 1)]:
        lo, hi = queue_range(a, t, q) if a.s.consume_queues.find(t, q) else (0, 0)
        for off in sorted({lo, lo + 1, (lo + hi) // 2, hi - 1}):
            if lo <= off < hi:
                ok, got = same(a, b, "by_offset", t, q, off)
                assert ok == "ok" and got[0]["queue_offset"] == off


@pytest.mark.parametrize("where", ["below the min", "pre-blank", "at the max", "unknown queue"])
def test_query_by_queue_offset_out_of_range(a, b, where):
    t, q, off = {
        "below the min": ("EqA", 0, 0),
        "pre-blank": (BLANK, 0, 1),
        "at the max": ("EqB", 1, queue_range(a, "EqB", 1)[1]),
        "unknown queue": ("EqA", UNKNOWN_QUEUE, 0),
    }[where]
    same(a, b, "by_offset", t, q, off)


# ---------------------------------------------------------------------- topic status, offset by time


@pytest.mark.parametrize("topic", [*TOPICS, SPARSE, BLANK, SCHEDULE_TOPIC])
def test_topic_status(a, b, topic):
    ok, got = same(a, b, "topic_status", topic)
    assert ok == "ok" and got and all(ts > 0 for *_, ts in got)


def test_topic_status_of_an_unknown_topic(a, b):
    same(a, b, "topic_status", "NoSuchTopic")


@pytest.mark.parametrize("topic,qid", [("EqA", 0), ("EqB", 2), ("EqC", 3), (SPARSE, 0), (BLANK, 0)])
def test_offset_by_time(a, b, topic, qid):
    lo, hi = queue_range(a, topic, qid)
    times = sorted({r.store_timestamp for r in a.s.pull(topic, qid, lo, max_count=hi - lo).records})
    probes = {0, times[0] - 1, times[-1] + 1, times[-1] + 3_600_000, LONG_MAX}
    probes |= set(times[:: max(1, len(times) // 12)]) | {t + 1 for t in times[:: max(1, len(times) // 12)]}
    answers = {ts: same(a, b, "offset_at_time", topic, qid, ts) for ts in sorted(probes)}
    assert answers[0] == ("ok", lo) and answers[times[-1] + 1][1] == hi


def test_offset_by_time_of_an_unknown_queue(a, b):
    assert same(a, b, "offset_at_time", "EqA", UNKNOWN_QUEUE, 0) == ("ok", 0)


# ---------------------------------------------------------------------- consumer offsets


@pytest.mark.parametrize("group", ["g1", "g2", "nobody"])
def test_consumer_progress(a, b, workload, group):
    ok, rows = same(a, b, "consumer_progress", group)
    assert ok == "ok" and {(t, q): c for t, q, _, c, _ in rows} == workload.groups.get(group, {})


def test_fetch_offset(a, b, workload):
    asked = 0
    for group in ("g1", "g2", "nobody"):
        for t, q in ALL_QUEUES + [(SPARSE, 0), (BLANK, 0)]:
            ok, off = same(a, b, "fetch_offset", group, t, q)
            assert ok == "ok" and off == workload.groups.get(group, {}).get((t, q), -1)
            asked += 1
    assert asked == 3 * 14


# ---------------------------------------------------------------------- input checks (codes only; row 21: messages differ)


@pytest.mark.parametrize(
    "method,args,kw",
    [
        ("pull", ("EqA", 0, -1), {}),
        ("pull", ("bad topic!", 0, 0), {}),
        ("pull", ("EqA", 70_000, 0), {}),
        ("by_offset", ("EqA", 0, -1), {}),
        ("by_key", ("EqA", ""), {}),
        ("by_msg_id", ("zz",), {}),
        ("topic_status", ("bad topic!",), {}),
        ("offset_at_time", ("EqA", 70_000, 0), {}),
    ],
    ids=lambda x: repr(x)[:40],
)
def test_bad_questions_get_the_same_error(a, b, method, args, kw):
    ok, code, _ = same(a, b, method, *args, **kw)
    assert ok == "error" and code in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED")


def test_a_max_count_of_0_is_the_default_on_the_wire(a, b):
    """proto3 cannot tell 0 from unset: over gRPC a max count of 0 is the default
    (32). In process it is refused."""
    lo, _ = queue_range(a, "EqA", 0)
    assert answer(lambda: a.pull("EqA", 0, lo, max_count=0))[:2] == ("error", "INVALID_ARGUMENT")
    assert answer(lambda: b.pull("EqA", 0, lo, max_count=0)) == answer(lambda: a.pull("EqA", 0, lo, max_count=32))
