"""Config files under <store>/config: crash-safe writes, .bak fallback, fastjson quirks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mqstore.errors import ConfigError, InvalidMessageError, InvalidTopicError, StoreClosedError
from mqstore.store.consumer_offsets import ConsumerOffsets
from mqstore.store.delay_offsets import DelayOffsets, parse_delay_levels
from mqstore.store.json_files import quote_int_keys, read_config_json, write_config_json
from mqstore.store.topic_configs import (
    DataVersion,
    MessageType,
    TopicConfig,
    TopicConfigs,
    accepted_types,
    parse_message_type,
)

OLD = {"offsetTable": {"t@g": {"0": 1}}, "name": "old"}
NEW = {"offsetTable": {"t@g": {"0": 2, "1": 3}}, "name": "nouveau é ✓"}


class FakeClock:
    def __init__(self, ms: int = 1_700_000_000_000) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000


def bak_of(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


# ---------------------------------------------------------------------------
# write_config_json / read_config_json


def test_round_trip_pretty_utf8_and_bak(tmp_path: Path) -> None:
    path = tmp_path / "config" / "x.json"  # parent created on demand
    write_config_json(path, OLD)
    assert read_config_json(path) == OLD
    assert not bak_of(path).exists()
    text = path.read_text("utf-8")
    assert text.startswith('{\n\t"offsetTable":{')  # fastjson PrettyFormat: tabs, no blank after ':'
    write_config_json(path, NEW)
    assert read_config_json(path) == NEW
    assert "nouveau é ✓" in path.read_text("utf-8")  # UTF-8, not \\u escapes
    assert json.loads(bak_of(path).read_text("utf-8")) == OLD
    assert not path.with_name("x.json.tmp").exists()


DAMAGE = {
    "missing": None,
    "empty": b"",
    "blank": b"  \n\t",
    "garbage": b"\x00\x17not json at all",
    "truncated": json.dumps(NEW, indent="\t").encode()[:-7],
    "not_utf8": b'{"offsetTable":"\xff\xfe"}',
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_falls_back_to_bak(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "x.json"
    write_config_json(path, OLD)
    write_config_json(path, NEW)  # .bak now holds OLD
    if DAMAGE[damage] is None:
        path.unlink()
    else:
        path.write_bytes(DAMAGE[damage])
    with capture_logs() as logs:
        assert read_config_json(path) == OLD
    assert {e["event"] for e in logs} >= {"config_file_loaded_from_bak"}
    assert all(e["log_level"] == "warning" for e in logs)
    unusable = [e for e in logs if e["event"] == "config_file_unusable"]
    assert unusable[0]["path"] == str(path) and unusable[0]["reason"]


def test_wrong_shape_counts_as_undecodable(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_config_json(path, OLD)
    write_config_json(path, [1, 2])  # decodable, but not what the parser wants
    assert read_config_json(path, parse=lambda o: o["offsetTable"]) == OLD["offsetTable"]


def test_nothing_usable_gives_none(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    with capture_logs() as logs:
        assert read_config_json(path) is None
    assert logs == []  # a fresh store is not worth a warning
    path.write_bytes(b"{")
    bak_of(path).write_bytes(b"")
    with capture_logs() as logs:
        assert read_config_json(path) is None
    assert {e["path"] for e in logs} == {str(path), str(bak_of(path))}


def test_quote_int_keys_only_where_a_key_is_expected() -> None:
    text = '{"offsetTable":{"t@g":{0:250,1:250, 2 : 7\n\t\t}},"s":"{1:2}","e":"a\\"{3:4},5:6","arr":[1,2]}'
    obj = json.loads(quote_int_keys(text))
    assert obj["offsetTable"]["t@g"] == {"0": 250, "1": 250, "2": 7}
    assert obj["s"] == "{1:2}"
    assert obj["e"] == 'a"{3:4},5:6'
    assert obj["arr"] == [1, 2]
    assert quote_int_keys('{"a":{"0":1}}') == '{"a":{"0":1}}'  # quoted keys stay as they are


def test_string_value_with_int_key_pattern_survives_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    obj = {"offsetTable": {}, "note": "{1:2}", "k": ",7:8"}
    write_config_json(path, obj)
    assert read_config_json(path) == obj


class Crash(Exception):
    pass


def crash_at(monkeypatch: pytest.MonkeyPatch, k: int) -> list[str]:
    """Make the k-th call (0-based) of os.write/fsync/rename/replace raise Crash."""
    calls: list[str] = []
    for name in ("write", "fsync", "rename", "replace"):
        real = getattr(os, name)

        def wrapper(*args, _real=real, _name=name):
            if len(calls) == k:
                calls.append(_name)
                raise Crash(f"crash at step {k} ({_name})")
            calls.append(_name)
            return _real(*args)

        monkeypatch.setattr(os, name, wrapper)
    return calls


@pytest.mark.parametrize("before", ["old_file", "no_file", "garbage_file_good_bak"])
def test_crash_at_every_step_leaves_old_or_new(tmp_path: Path, before: str) -> None:
    steps_seen = set()
    k = 0
    while True:
        d = tmp_path / f"{before}-{k}"
        path = d / "x.json"
        expected_old: object = None
        if before in ("old_file", "garbage_file_good_bak"):
            write_config_json(path, OLD)
            expected_old = OLD
        if before == "garbage_file_good_bak":  # the damaged file must not replace the good .bak
            os.replace(path, bak_of(path))
            path.write_bytes(b"{garbage")
        with pytest.MonkeyPatch.context() as mp:
            calls = crash_at(mp, k)
            try:
                write_config_json(path, NEW)
                crashed = False
            except Crash:
                crashed = True
        assert read_config_json(path) in (expected_old, NEW), (k, calls)
        if not crashed:
            assert read_config_json(path) == NEW
            break
        steps_seen.add(calls[-1])
        write_config_json(path, NEW)  # the next write after a crash works
        assert read_config_json(path) == NEW
        k += 1
    assert {"write", "fsync", "replace"} <= steps_seen
    assert k >= 4


_WRITER = """
import sys
from pathlib import Path
from mqstore.store.json_files import write_config_json
path = Path(sys.argv[1])
i = 0
while True:
    write_config_json(path, {"counter": i, "pad": "x" * 20000})
    i += 1
    if i == 3:
        print("ready", flush=True)
"""


@pytest.mark.crash
def test_sigkill_while_writing_leaves_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "config" / "x.json"
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            time.sleep(0.05 * (round_ + 1))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        obj = read_config_json(path)
        assert isinstance(obj, dict) and obj["counter"] >= 2


# ---------------------------------------------------------------------------
# ConsumerOffsets

ROCKETMQ_CONSUMER_OFFSET = """{
\t"offsetTable":{
\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0
\t\t},
\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:250,3:251
\t\t},
\t\t"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:26
\t\t}
\t}
}"""


def test_consumer_offsets_reads_a_rocketmq_file_with_bare_int_keys(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerOffset.json").write_text(ROCKETMQ_CONSUMER_OFFSET)
    co = ConsumerOffsets(tmp_path)
    g = "please_rename_unique_group_name_4"
    assert co.fetch(g, "TopicTest", 3) == 251
    assert co.fetch(g, "%RETRY%" + g, 0) == 0
    assert co.groups() == ["CID_RMQ_SYS_TRANS", g]
    assert co.offsets(g) == {("%RETRY%" + g, 0): 0, **{("TopicTest", q): 250 + (q == 3) for q in range(4)}}
    co.persist()  # written back as strict JSON; reads the same
    raw = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert raw["offsetTable"]["TopicTest@" + g] == {"0": 250, "1": 250, "2": 250, "3": 251}
    assert ConsumerOffsets(tmp_path).offsets(g) == co.offsets(g)


def test_consumer_offsets_round_trip(tmp_path: Path) -> None:
    co = ConsumerOffsets(tmp_path)
    assert co.fetch("g1", "t", 0) == -1 and co.groups() == []
    co.commit("g1", "t", 0, 10)
    co.commit_many("g1", "t", {1: 11, 2: 12})
    co.commit("g2", "u", 5, 7)
    co.commit("g1", "t", 0, 3)  # a reset may move back
    assert co.fetch("g1", "t", 0) == 3
    assert co.fetch("g1", "t", 9) == -1
    assert co.fetch("g2", "t", 0) == -1
    assert co.groups() == ["g1", "g2"]
    assert co.offsets("g1") == {("t", 0): 3, ("t", 1): 11, ("t", 2): 12}
    co.close()
    co.close()
    with pytest.raises(StoreClosedError):
        co.commit("g1", "t", 0, 1)
    with ConsumerOffsets(tmp_path) as again:
        assert again.offsets("g1") == {("t", 0): 3, ("t", 1): 11, ("t", 2): 12}
        assert again.offsets("g2") == {("u", 5): 7}
        again.commit("g2", "u", 5, 8)
    assert ConsumerOffsets(tmp_path).fetch("g2", "u", 5) == 8


def test_consumer_offsets_keep_unknown_keys_and_top_level_fields(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    write_config_json(path, {"offsetTable": {"weird-key": {"0": 1}, "t@g": {"0": 2}}, "dataVersion": {"counter": 3}})
    co = ConsumerOffsets(tmp_path)
    assert co.groups() == ["g"]
    co.persist()
    raw = read_config_json(path)
    assert raw == {"offsetTable": {"weird-key": {"0": 1}, "t@g": {"0": 2}}, "dataVersion": {"counter": 3}}


def test_consumer_offsets_loads_bak_when_main_is_damaged(tmp_path: Path) -> None:
    co = ConsumerOffsets(tmp_path)
    co.commit("g", "t", 0, 1)
    co.persist()
    co.commit("g", "t", 0, 2)
    co.persist()
    co.path.write_text('{"offsetTable":{"t@g":{0:')  # torn
    assert ConsumerOffsets(tmp_path).fetch("g", "t", 0) == 1
    co.path.write_text('{"offsetTable":{"t@g":{0:"x"}}}')  # wrong shape
    assert ConsumerOffsets(tmp_path).fetch("g", "t", 0) == 1


def test_consumer_offsets_threads(tmp_path: Path) -> None:
    co = ConsumerOffsets(tmp_path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def committer(qid: int) -> None:
        try:
            for off in range(1, 2001):
                co.commit(f"g{qid % 2}", "t", qid, off)
                assert co.fetch(f"g{qid % 2}", "t", qid) >= off  # only this thread writes this queue
        except BaseException as e:
            errors.append(e)

    def persister() -> None:
        try:
            while not stop.is_set():
                co.persist()
                co.groups()
                co.offsets("g0")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=committer, args=(q,)) for q in range(8)]
    bg = [threading.Thread(target=persister) for _ in range(2)]
    for t in threads + bg:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    for t in bg:
        t.join()
    assert errors == []
    co.close()
    reloaded = ConsumerOffsets(tmp_path)
    assert reloaded.offsets("g0") == {("t", q): 2000 for q in range(0, 8, 2)}
    assert reloaded.offsets("g1") == {("t", q): 2000 for q in range(1, 8, 2)}


@pytest.mark.parametrize("group", ["", "g" * 121, "a@b", "a/b", "a.b", "grüppe", "a b"])
def test_bad_group_names(tmp_path: Path, group: str) -> None:
    co = ConsumerOffsets(tmp_path)
    with pytest.raises(InvalidMessageError, match="group"):
        co.commit(group, "t", 0, 1)
    with pytest.raises(InvalidMessageError):
        co.fetch(group, "t", 0)


def test_commit_validation(tmp_path: Path) -> None:
    co = ConsumerOffsets(tmp_path)
    co.commit("g" * 120, "%RETRY%x", 0, 0)  # limits are inclusive
    with pytest.raises(InvalidTopicError):
        co.commit("g", "bad/topic", 0, 1)
    with pytest.raises(InvalidTopicError):
        co.commit("g", "t" * 128, 0, 1)
    for qid, off in [(-1, 0), (65536, 0), (0, -1), (True, 0), (0, 1.5)]:
        with pytest.raises(InvalidMessageError):
            co.commit("g", "t", qid, off)
    with pytest.raises(InvalidMessageError):
        co.commit_many("g", "t", {0: 5, -1: 6})
    assert co.fetch("g", "t", 0) == -1  # the bad batch changed nothing


# ---------------------------------------------------------------------------
# TopicConfigs


def test_topic_configs_create_update_delete(tmp_path: Path) -> None:
    clock = FakeClock()
    tc = TopicConfigs(tmp_path, clock=clock)
    assert tc.get("t") is None and tc.all() == {} and tc.data_version == DataVersion()
    cfg = tc.create_or_update("t")
    assert cfg == TopicConfig(topic_name="t")
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.topic_filter_type) == (4, 4, 6, "SINGLE_TAG")
    assert tc.data_version == DataVersion(1, clock.ms, 0)
    clock.ms += 5
    tc.create_or_update("t", 8, 16, perm=4, order=True, attributes={"+queue.type": "BatchCQ"})
    tc.create_or_update("u")
    assert tc.data_version == DataVersion(3, clock.ms, 0)
    raw = json.loads((tmp_path / "config" / "topics.json").read_text())
    assert raw == {
        "dataVersion": {"counter": 3, "timestamp": clock.ms, "stateVersion": 0},
        "topicConfigTable": {
            "t": {
                "topicName": "t",
                "readQueueNums": 8,
                "writeQueueNums": 16,
                "perm": 4,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": True,
                "attributes": {"+queue.type": "BatchCQ"},
            },
            "u": TopicConfig(topic_name="u").to_json(),
        },
    }
    again = TopicConfigs(tmp_path, clock=clock)
    assert again.all() == tc.all() and again.data_version == tc.data_version
    assert again.get("t").attributes == {"+queue.type": "BatchCQ"}
    assert again.delete("t") is True
    assert again.delete("t") is False
    assert again.data_version.counter == 4
    assert set(TopicConfigs(tmp_path).all()) == {"u"}


def test_topic_configs_read_a_rocketmq_4_9_file(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    long_retry = "%RETRY%" + "g" * 150  # 5.x allows it (up to 255 characters): a topic like any other
    odd = "Odd"  # a filter type we do not know: kept verbatim
    (tmp_path / "config" / "topics.json").write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"timestamp":1690000000000\n\t},\n'
        '\t"topicConfigTable":{\n'
        '\t\t"TBW102":{\n\t\t\t"order":false,\n\t\t\t"perm":7,\n\t\t\t"readQueueNums":8,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TBW102",\n\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":8\n\t\t},\n'
        f'\t\t"{long_retry}":{{"topicName":"{long_retry}","readQueueNums":1,"writeQueueNums":1,"perm":6}},\n'
        f'\t\t"{odd}":{{"topicName":"{odd}","readQueueNums":1,"writeQueueNums":1,"perm":6,"topicFilterType":"NEW_KIND"}}\n'
        "\t}\n}"
    )
    tc = TopicConfigs(tmp_path, clock=FakeClock())
    assert tc.data_version == DataVersion(7, 1690000000000, 0)
    assert tc.get("TBW102") == TopicConfig(topic_name="TBW102", read_queue_nums=8, write_queue_nums=8, perm=7)
    assert tc.get(long_retry) == TopicConfig(topic_name=long_retry, read_queue_nums=1, write_queue_nums=1, perm=6)
    assert list(tc.all()) == ["TBW102", long_retry]
    tc.create_or_update("new")
    raw = read_config_json(tc.path)
    assert raw["topicConfigTable"][long_retry]["readQueueNums"] == 1
    assert raw["topicConfigTable"][odd]["topicFilterType"] == "NEW_KIND"
    assert raw["dataVersion"]["counter"] == 8
    assert tc.delete(long_retry) is True
    assert long_retry not in read_config_json(tc.path)["topicConfigTable"]
    assert tc.delete(odd) is True
    assert odd not in read_config_json(tc.path)["topicConfigTable"]


def test_topic_config_validation(tmp_path: Path) -> None:
    tc = TopicConfigs(tmp_path)
    tc.create_or_update("edge", 1, 65536)
    for kwargs in [dict(read_queue_nums=0), dict(write_queue_nums=65537), dict(perm=16), dict(read_queue_nums=True)]:
        with pytest.raises(ConfigError):
            tc.create_or_update("t", **kwargs)
    with pytest.raises(ConfigError):
        tc.create_or_update("t", topic_filter_type="ANY")
    with pytest.raises(InvalidTopicError):
        tc.create_or_update("")
    with pytest.raises(InvalidTopicError):
        tc.create_or_update("a.b")
    assert set(tc.all()) == {"edge"} and tc.data_version.counter == 1
    with pytest.raises(TypeError):
        tc.get("edge").attributes["x"] = "y"  # frozen all the way down


def test_topic_message_type_round_trip(tmp_path: Path) -> None:
    """RocketMQ 5's message.type attribute: no attribute is NORMAL; set, it is written
    to topics.json (key without mqadmin's '+') and read back; an update without a
    type keeps it and the other attributes; MIXED accepts every concrete type."""
    tc = TopicConfigs(tmp_path, clock=FakeClock())
    plain = tc.create_or_update("plain")
    assert plain.message_type is MessageType.NORMAL and plain.attributes == {}
    assert plain.to_json() == TopicConfig(topic_name="plain").to_json()  # nothing written for the default
    fifo = tc.create_or_update("fifo", 2, 2, message_type="FIFO")
    assert fifo.message_type is MessageType.FIFO and fifo.attributes == {"message.type": "FIFO"}
    tc.create_or_update("mixed", message_type=MessageType.MIXED, attributes={"queue.type": "BatchCQ"})
    raw = read_config_json(tc.path)["topicConfigTable"]
    assert raw["fifo"]["attributes"] == {"message.type": "FIFO"}
    assert raw["mixed"]["attributes"] == {"queue.type": "BatchCQ", "message.type": "MIXED"}
    assert "message.type" not in raw["plain"]["attributes"]
    again = TopicConfigs(tmp_path)
    assert {name: cfg.message_type for name, cfg in again.all().items()} == {
        "plain": MessageType.NORMAL,
        "fifo": MessageType.FIFO,
        "mixed": MessageType.MIXED,
    }
    # An update without a type keeps the topic's type and its other attributes.
    kept = again.create_or_update("mixed", 8, 8, perm=4)
    assert kept.attributes == {"queue.type": "BatchCQ", "message.type": "MIXED"} and kept.perm == 4
    changed = again.create_or_update("mixed", message_type="DELAY")
    assert changed.attributes == {"queue.type": "BatchCQ", "message.type": "DELAY"}
    assert again.create_or_update("mixed", attributes={}).message_type is MessageType.NORMAL  # given: replaced
    assert MessageType.FIFO == "FIFO" and str(MessageType.TRANSACTION) == "TRANSACTION"
    # What each type accepts.
    assert accepted_types(None) == (MessageType.NORMAL,)
    assert accepted_types(again.get("plain")) == (MessageType.NORMAL,)
    assert accepted_types(again.get("fifo")) == (MessageType.FIFO,)
    mixed = TopicConfig(topic_name="m", attributes={"message.type": "MIXED"})
    assert accepted_types(mixed) == (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION)


def test_topic_message_type_refused(tmp_path: Path) -> None:
    """A name that is not a type is a ConfigError naming the topic and the value, and
    changes nothing; in a file written elsewhere (RocketMQ's UNSPECIFIED, PRIORITY)
    the entry is kept verbatim, with a warning, like any entry we can not represent."""
    tc = TopicConfigs(tmp_path)
    tc.create_or_update("t", message_type="FIFO")
    for bad in ("fifo", "UNSPECIFIED", "", 1):
        with pytest.raises(ConfigError, match=r"topic 't'.*NORMAL, FIFO, DELAY, TRANSACTION, MIXED, got"):
            tc.create_or_update("t", message_type=bad)
    with pytest.raises(ConfigError, match="'PRIORITY'"):
        tc.create_or_update("t", attributes={"message.type": "PRIORITY"})
    with pytest.raises(ConfigError, match=r"topic 'x'.*got 'LITE'"):
        TopicConfig(topic_name="x", attributes={"message.type": "LITE"})
    with pytest.raises(ConfigError, match="got 'nope'"):
        parse_message_type("nope")
    assert tc.get("t").message_type is MessageType.FIFO and tc.data_version.counter == 1
    raw = read_config_json(tc.path)
    raw["topicConfigTable"]["odd"] = {"topicName": "odd", "perm": 6, "attributes": {"message.type": "PRIORITY"}}
    write_config_json(tc.path, raw)
    with capture_logs() as logs:
        again = TopicConfigs(tmp_path)
    assert set(again.all()) == {"t"}
    (warning,) = [e for e in logs if e["event"] == "topic_config_kept_verbatim"]
    assert warning["topic"] == "odd" and "topic 'odd'" in warning["reason"] and "'PRIORITY'" in warning["reason"]
    again.create_or_update("u")
    assert read_config_json(tc.path)["topicConfigTable"]["odd"]["attributes"] == {"message.type": "PRIORITY"}


def test_topic_configs_unchanged_when_the_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tc = TopicConfigs(tmp_path)
    tc.create_or_update("t")

    def boom(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        tc.create_or_update("u")
    with pytest.raises(OSError):
        tc.delete("t")
    assert set(tc.all()) == {"t"} and tc.data_version.counter == 1


# ---------------------------------------------------------------------------
# DelayOffsets and delay levels


def test_delay_offsets_read_rocketmq_file_and_round_trip(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "delayOffset.json").write_text('{\n\t"offsetTable":{1:1234,2:0,18:9\n\t}\n}')
    do = DelayOffsets(tmp_path)
    assert (do.get(1), do.get(2), do.get(3), do.get(18)) == (1234, 0, 0, 9)
    do.set(3, 77)
    do.persist()
    again = DelayOffsets(tmp_path)
    assert again.all() == {1: 1234, 2: 0, 3: 77, 18: 9}
    for level, off in [(0, 1), (-1, 1), (1, -1), (True, 1)]:
        with pytest.raises(InvalidMessageError):
            again.set(level, off)
    with pytest.raises(InvalidMessageError):
        again.get(0)


def test_delay_offsets_fresh_store(tmp_path: Path) -> None:
    do = DelayOffsets(tmp_path)
    assert do.get(5) == 0
    do.set(5, 3)
    do.close()
    assert DelayOffsets(tmp_path).get(5) == 3


def test_parse_delay_levels_default() -> None:
    levels = parse_delay_levels()
    assert len(levels) == 18
    assert levels[0] == 1_000 and levels[-1] == 7_200_000
    assert levels[:4] == [1_000, 5_000, 10_000, 30_000] and levels[4] == 60_000
    assert levels == sorted(levels)


def test_parse_delay_levels_units_and_spacing() -> None:
    assert parse_delay_levels("  2s\t3m\n4h 1d ") == [2_000, 180_000, 14_400_000, 86_400_000]


@pytest.mark.parametrize("spec", ["", "   ", "1x", "s", "1.5s", "1S", "0s", "-1s", "1 s", "1s,2s", "１s"])
def test_parse_delay_levels_rejects(spec: str) -> None:
    with pytest.raises(ValueError, match="delay"):
        parse_delay_levels(spec)
