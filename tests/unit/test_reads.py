"""store/reads.py against a plain in-memory model of one shard's ports: every pull
status, where the next pull starts, the tag-filter budget over several pages, the
pre-blank test, key answers merged over shards, and NotFoundError. Both engines
run these generators (tests/equivalence checks them over real files and gRPC)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from mqstore.errors import InvalidArgumentError, LimitExceededError, NotFoundError, TopicPermissionError
from mqstore.formats.consume_queue import PRE_BLANK_SIZE
from mqstore.formats.javahash import tags_code
from mqstore.store import reads
from mqstore.store.reads import PullStatus, QueueRange, UnitsPage


@dataclass
class Rec:
    topic: str
    physical_offset: int
    tags: str
    keys: str = ""
    unique_key: str = ""
    store_timestamp: int = 0

    @property
    def msg_id(self) -> str:
        return f"{'AB' * 8}{self.physical_offset:016X}"


class ModelPorts:
    """One queue per topic, queue id 0; record i of a queue at commitlog offset
    1000 * (queue offset + 1); ``min_offset`` units were deleted; ``blank`` leading
    units are pre-blank fillers. Counts the port calls."""

    def __init__(
        self, tags: list[str], *, topic: str = "T", min_offset: int = 0, blank: int = 0, perm: int | None = None
    ):
        self.topic, self.min_offset, self.perm_bits = topic, max(min_offset, blank), perm
        self.records = {
            1000 * (i + 1): Rec(
                topic, 1000 * (i + 1), t, keys=f"k{i % 3}", unique_key=f"U{i}", store_timestamp=10_000 + i
            )
            for i, t in enumerate(tags)
        }
        self.blank = blank
        self.deleted: set[int] = set()  # commitlog offsets retention took under a pull
        self.calls: list[str] = []

    @property
    def max_offset(self) -> int:
        return len(self.records)

    def perm(self, topic):
        return self.perm_bits

    def units(self, topic, qid, offset, n) -> UnitsPage:
        self.calls.append("units")
        none = np.zeros(0, np.int64)
        if topic != self.topic or qid != 0:
            return UnitsPage(False, 0, 0, 0, none, none, none)
        lo, hi = self.min_offset, self.max_offset
        start = min(max(offset, lo), hi)
        rows = range(start, min(start + n, hi))
        phys = np.array([0 if i < self.blank else 1000 * (i + 1) for i in rows], np.int64)
        sizes = np.array([PRE_BLANK_SIZE if i < self.blank else 100 for i in rows], np.int64)
        codes = np.array(
            [0 if i < self.blank else tags_code(self.records[1000 * (i + 1)].tags) for i in rows], np.int64
        )
        return UnitsPage(True, start, lo, hi, phys, sizes, codes)

    def read(self, offsets, sizes, raw):
        self.calls.append("read")
        found = [
            o
            for o in offsets.tolist()
            if o in self.records and o not in self.deleted and o >= 1000 * (self.min_offset + 1)
        ]
        return np.array(found, np.int64), [f"raw{o}".encode() if raw else self.records[o] for o in found]

    def ranges(self, topic):
        if topic != self.topic:
            return []
        return [QueueRange(topic, 0, self.min_offset, self.max_offset, 1000 * self.max_offset if self.records else -1)]

    def keys(self, topic, key, max_num, begin, end):
        hits = [o for o, r in sorted(self.records.items(), reverse=True) if key in (r.keys, r.unique_key)]
        return hits[:max_num]


def pull(shard, offset, **kw) -> reads.PullAnswer:
    return reads.drive(reads.pull("T", 0, offset, **kw), shard)


def offsets_of(answer) -> list[int]:
    return [r.physical_offset // 1000 - 1 for r in answer.records]


# ---------------------------------------------------------------------- statuses


def test_every_pull_status():
    s = ModelPorts(["A"] * 10, min_offset=3)
    cases = {
        PullStatus.FOUND: (pull(s, 5, max_count=2), [5, 6], 7),
        PullStatus.OFFSET_TOO_SMALL: (pull(s, 1), [], 3),
        PullStatus.NO_NEW_MESSAGE: (pull(s, 10), [], 10),
        PullStatus.OFFSET_OVERFLOW: (pull(s, 12), [], 10),
        PullStatus.NO_MATCHED_MESSAGE: (pull(s, 3, tags={"B"}), [], 10),
        PullStatus.NO_MESSAGE_IN_QUEUE: (reads.drive(reads.pull("Other", 0, 4), s), [], 0),
    }
    for status, (a, got, nxt) in cases.items():
        assert (a.status, offsets_of(a), a.next_offset) == (status, got, nxt), status
        if status is not PullStatus.NO_MESSAGE_IN_QUEUE:
            assert (a.min_offset, a.max_offset) == (3, 10)


def test_a_full_page_goes_on_after_the_last_message_taken():
    s = ModelPorts(["A", "B"] * 20)
    a = pull(s, 0, max_count=3, tags={"B"})
    assert offsets_of(a) == [1, 3, 5] and a.next_offset == 6
    assert offsets_of(pull(s, a.next_offset, max_count=3, tags={"B"})) == [7, 9, 11]


def test_a_tag_filter_finds_every_match_over_several_pages():
    """Matches 300 units apart: one page (256 units) holds at most one; the pull
    reads on until it has them all or has passed over TAG_SCAN_UNITS units."""
    tags = ["A"] * 1500
    for i in (10, 310, 610, 910):
        tags[i] = "Rare"
    s = ModelPorts(tags)
    a = pull(s, 0, max_count=32, tags={"Rare"})
    assert offsets_of(a) == [10, 310, 610, 910] and a.status is PullStatus.FOUND
    assert a.next_offset == 1500 and s.calls.count("units") == 6


def test_a_tag_filter_answers_after_its_budget():
    tags = ["A"] * (reads.TAG_SCAN_UNITS + 600)
    tags[-1] = "Rare"
    s = ModelPorts(tags)
    a = pull(s, 0, max_count=1, tags={"Rare"})
    assert (a.status, a.records, a.next_offset) == (PullStatus.NO_MATCHED_MESSAGE, [], reads.TAG_SCAN_UNITS)
    b = pull(s, a.next_offset, max_count=1, tags={"Rare"})
    assert offsets_of(b) == [len(tags) - 1]


def test_tags_codes_collide_but_the_exact_tag_decides():
    """tagsCode is a hash: a decoded pull checks the TAGS string too; a raw pull
    filters by code only (the client checks), as RocketMQ's broker."""
    s = ModelPorts(["Aa", "BB", "Aa"])  # Java's String.hashCode("Aa") == hashCode("BB")
    assert tags_code("Aa") == tags_code("BB")
    assert offsets_of(pull(s, 0, tags={"Aa"})) == [0, 2]
    raw = pull(s, 0, tags_codes={tags_code("Aa")}, raw=True)
    assert raw.records == [b"raw1000", b"raw2000", b"raw3000"] and raw.next_offset == 3


def test_pre_blank_units_hold_no_message():
    s = ModelPorts(["A"] * 6, blank=2)
    assert offsets_of(pull(s, 0)) == []  # the min offset is past them
    page = s.units("T", 0, 0, 10)
    assert page.first_offset == 2 and reads.real_units(page).all()
    both = UnitsPage(
        True, 0, 0, 3, np.array([0, 0, 0]), np.array([PRE_BLANK_SIZE, 9, PRE_BLANK_SIZE]), np.array([0, 0, 7])
    )
    assert reads.real_units(both).tolist() == [False, True, True]  # all three fields, not the size alone


def test_records_deleted_under_a_pull_are_passed_over():
    s = ModelPorts(["A"] * 8)
    s.deleted.add(3000)
    a = pull(s, 0, max_count=8)
    assert offsets_of(a) == [0, 1, 3, 4, 5, 6, 7] and a.next_offset == 8


def test_a_topic_without_read_perm_is_refused():
    with pytest.raises(TopicPermissionError):
        pull(ModelPorts(["A"], perm=2), 0)
    assert offsets_of(pull(ModelPorts(["A"], perm=6), 0)) == [0]


@pytest.mark.parametrize(
    "kw,error",
    [
        (dict(offset=-1), InvalidArgumentError),
        (dict(max_count=0), InvalidArgumentError),
        (dict(max_count=10_001), LimitExceededError),
        (dict(queue_id=65_536), InvalidArgumentError),
        (dict(topic="bad topic"), Exception),
        (dict(max_count=True), InvalidArgumentError),
    ],
)
def test_bad_pulls_fail_before_any_port_call(kw, error):
    s = ModelPorts(["A"])
    args = dict(topic="T", queue_id=0, offset=0) | {k: v for k, v in kw.items() if k in ("topic", "queue_id", "offset")}
    with pytest.raises(error):
        reads.drive(reads.pull(args["topic"], args["queue_id"], args["offset"], max_count=kw.get("max_count", 32)), s)
    assert s.calls == []


def test_tag_expressions():
    assert reads.parse_tag_expression(None) is None and reads.parse_tag_expression(" * ") is None
    assert reads.parse_tag_expression("A || B ||C") == {"A", "B", "C"}
    with pytest.raises(InvalidArgumentError, match="TagA"):
        reads.parse_tag_expression("A || ")


# ---------------------------------------------------------------------- single records


def test_by_queue_offset():
    s = ModelPorts(["A"] * 5, min_offset=1)
    assert reads.drive(reads.by_queue_offset("T", 0, 3), s).physical_offset == 4000
    for off, why in ((0, r"\[1, 5\)"), (5, r"\[1, 5\)")):
        with pytest.raises(NotFoundError, match=why):
            reads.drive(reads.by_queue_offset("T", 0, off), s)
    blank = ModelPorts(["A"] * 3, blank=1)
    blank.min_offset = 0  # a queue RocketMQ filled with pre-blank units starts at them
    with pytest.raises(NotFoundError, match="pre-blank"):
        reads.drive(reads.by_queue_offset("T", 0, 0), blank)


def test_by_msg_id_must_name_the_record_it_finds():
    s = ModelPorts(["A"] * 3)
    rec = s.records[2000]
    assert reads.drive(reads.by_msg_id(rec.msg_id.lower(), 2000), s) is rec
    other_host = "C0A80001" + "0000" * 2 + f"{2000:016X}"
    with pytest.raises(NotFoundError):
        reads.drive(reads.by_msg_id(other_host, 2000), s)
    with pytest.raises(NotFoundError):
        reads.drive(reads.by_msg_id(rec.msg_id[:-16] + f"{9000:016X}", 9000), s)


# ---------------------------------------------------------------------- keys, merged over shards


def test_key_answers_merge_newest_first_over_shards():
    a, b = ModelPorts(["A"] * 9), ModelPorts(["A"] * 9)
    for r in b.records.values():
        r.store_timestamp += 3  # b's record i is as new as a's record i + 3
    parts = [(i, reads.drive(reads.by_key("T", "k1", max_num=64), s)) for i, s in enumerate((a, b))]
    merged = reads.newest_first(parts, 64, "T", "k1")
    times = [r.store_timestamp for r in merged]
    assert times == sorted(times, reverse=True) and len(merged) == 6
    tie = [(r.store_timestamp, r in b.records.values()) for r in merged if r.store_timestamp == 10_007]
    assert tie == [(10_007, True), (10_007, False)]  # equal times: the higher shard first, as the front always did
    assert len(reads.newest_first(parts, 2, "T", "k1")) == 2


def test_key_hits_are_checked_against_the_record():
    s = ModelPorts(["A"] * 6)
    s.records[2000].topic = "Other"  # a hash hit of another topic
    found = reads.drive(reads.by_key("T", "k1", max_num=64), s)
    assert sorted(r.physical_offset for r in found) == [5000]
    assert [r.unique_key for r in reads.drive(reads.by_key("T", "U4", unique=True), s)] == ["U4"]
    assert reads.drive(reads.by_key("T", "k1", begin=10_005, end=10_010), s) == []


def test_no_key_found_and_bad_key_queries():
    with pytest.raises(NotFoundError, match="has key 'x'"):
        reads.newest_first([(0, [])], 32, "T", "x")
    with pytest.raises(NotFoundError, match="UNIQ_KEY"):
        reads.newest_first([], 32, "T", "x", unique=True)
    for kw in (dict(max_num=65), dict(begin=5, end=4), dict(key="")):
        with pytest.raises(InvalidArgumentError):
            reads.drive(reads.by_key("T", kw.pop("key", "k"), **kw), ModelPorts([]))


# ---------------------------------------------------------------------- topic status


def test_topic_status_and_an_unknown_topic():
    s = ModelPorts(["A"] * 4, min_offset=1)
    (q,) = reads.merge_topic_status("T", [reads.drive(reads.topic_status("T", 3), s)])
    assert (q.queue_id, q.min_offset, q.max_offset, q.last_store_timestamp, q.shard) == (0, 1, 4, 10_003, 3)
    with pytest.raises(NotFoundError, match="no queues"):
        reads.merge_topic_status("U", [reads.drive(reads.topic_status("U"), s)])
