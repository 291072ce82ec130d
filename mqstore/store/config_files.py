"""The JSON files under ``<store>/config/``: consumer offsets, topic configs, delay offsets.

Spec sections 13 and 15. RocketMQ's ConfigManager keeps each table in memory and
persists it as pretty-printed fastjson; every file has a ``.bak`` sibling.

    file                  RocketMQ class            shape
    consumerOffset.json   ConsumerOffsetManager     {"offsetTable": {"<topic>@<group>": {<queueId>: <nextOffset>}}}
    topics.json           TopicConfigManager        {"dataVersion": {...}, "topicConfigTable": {"<topic>": {...}}}
    delayOffset.json      ScheduleMessageService    {"offsetTable": {<level>: <offset>}}

Quirk: fastjson writes integer map keys unquoted (``{0:250,1:250}``), which is not
strict JSON. :func:`read_config_json` quotes such keys before decoding; we always write
them quoted (strict JSON), which fastjson reads back into its ``Integer`` keys.

Top-level keys we do not know (5.x adds ``dataVersion`` to some files) are kept and
written back unchanged, so a table written by a RocketMQ broker loses nothing here.

Persisting (:func:`write_config_json`), a crash at any step leaves the old or the
new content readable through ``<file>`` or ``<file>.bak``:

    step  action                                          what a reader finds after a crash here
    1     write ``<file>.tmp``, fsync it                   ``<file>`` = old
    2     rename ``<file>`` -> ``<file>.bak``, fsync dir   ``<file>`` missing, ``.bak`` = old
    3     rename ``<file>.tmp`` -> ``<file>``, fsync dir   ``<file>`` = new

Step 2 runs only when ``<file>`` is itself decodable, so a damaged ``<file>`` never
replaces a good ``.bak``. This is the 5.x order (4.9 copies instead and never fsyncs).
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import structlog

from mqstore.errors import ConfigError, InvalidMessageError, StoreClosedError, TopicPermissionError
from mqstore.formats.names import check_topic
from mqstore.store import faults
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.mapped_file import fsync_dir, note_sync_failure

T = TypeVar("T")

CONFIG_DIR = "config"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
TOPICS_FILE = "topics.json"
DELAY_OFFSET_FILE = "delayOffset.json"
BAK_SUFFIX = ".bak"
TMP_SUFFIX = ".tmp"
TOPIC_GROUP_SEPARATOR = "@"  # RocketMQ ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
GROUP_MAX_CHARS = 120  # 5.x TopicValidator / Validators
MAX_QUEUE_NUMS = 65_536
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_GROUP_RE = re.compile(r"[%|a-zA-Z0-9_-]+")
# A whole JSON string (skipped untouched), or a bare integer key: `{` or `,`, blanks,
# digits, blanks, `:`. Strings are matched first, so their contents are never rewritten.
_BARE_INT_KEY_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)


def _log() -> Any:
    # A fresh proxy per call: warnings are rare, and a logger cached by an earlier
    # structlog configuration would otherwise hide them from later ones.
    return structlog.get_logger(__name__)


# ---------------------------------------------------------------------------
# Reading and writing one file


def quote_int_keys(text: str) -> str:
    """Quote fastjson's bare integer object keys so that strict JSON parsers accept them.

    Only where a key is expected (after ``{`` or ``,``); string contents are left alone.

    >>> quote_int_keys('{"t@g":{0:250, 1 :7},"s":"{1:2}"}')
    '{"t@g":{"0":250, "1" :7},"s":"{1:2}"}'
    """

    def fix(m: re.Match[str]) -> str:
        return m[0] if m[1] is None else f'{m[1]}"{m[2]}"{m[3]}'

    return _BARE_INT_KEY_RE.sub(fix, text)


def _decode(data: bytes) -> object:
    """Decode a config file's bytes; ValueError (with the reason) if they are unusable."""
    if not data.strip():
        raise ValueError("file is empty")
    text = data.decode("utf-8")  # UnicodeDecodeError is a ValueError
    return json.loads(quote_int_keys(text))  # JSONDecodeError is a ValueError


def _load_one(path: Path, parse: Callable[[Any], T] | None) -> tuple[T | object | None, str | None]:
    """(value, None) if ``path`` is usable, else (None, reason)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, f"unreadable: {e}"
    try:
        obj = _decode(data)
        return (parse(obj) if parse is not None else obj), None
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        return None, f"undecodable: {type(e).__name__}: {e}"


def read_config_json(path: Path, *, parse: Callable[[Any], T] | None = None) -> T | object | None:
    """The content of ``path``, or of ``path.bak`` when ``path`` is missing, empty or
    undecodable; None if neither is usable.

    Accepts fastjson's unquoted integer keys. ``parse`` (optional) turns the decoded
    JSON into the caller's value; if it raises ValueError, TypeError, KeyError or
    AttributeError the file counts as undecodable, so a file of the wrong shape also
    falls back to the ``.bak``. Nothing is deleted or rewritten here.
    """
    value, reason = _load_one(path, parse)
    if reason is None:
        return value
    bak = path.with_name(path.name + BAK_SUFFIX)
    bak_value, bak_reason = _load_one(bak, parse)
    if reason == "missing" and bak_reason == "missing":
        return None  # a fresh store: nothing to warn about
    if reason != "missing" or bak_reason is None:
        _log().warning("config_file_unusable", path=str(path), reason=reason)
    if bak_reason is None:
        _log().warning("config_file_loaded_from_bak", path=str(bak), reason=reason)
        return bak_value
    if bak_reason != "missing":
        _log().warning("config_file_unusable", path=str(bak), reason=bak_reason)
    return None


@dataclass(frozen=True)
class ConfigFileState:
    """How one config file reads, for tools that report on a store (verify).

    ``source`` is where the store's managers take the table from: ``"file"``,
    ``"bak"`` (the file is missing or unusable, its ``.bak`` is fine) or ``"none"``
    (neither: the store starts with an empty table). ``value`` is the parsed table
    (None with ``"none"``); ``problem`` says why the file itself is unusable (None
    if it is fine or simply absent, as in a fresh store)."""

    path: Path
    source: str
    value: Any
    problem: str | None


def inspect_config_file(store_dir: Path, name: str) -> ConfigFileState:
    """Read ``<store>/config/<name>`` (one of the three files) as the store's
    manager would, with the same fallback to ``.bak``, without logging or changing
    anything. ``value`` has the shape the manager's parser returns."""
    parse = _PARSERS[name]
    path = Path(store_dir) / CONFIG_DIR / name
    value, reason = _load_one(path, parse)
    if reason is None:
        return ConfigFileState(path, "file", value, None)
    problem = None if reason == "missing" else reason
    bak_value, bak_reason = _load_one(path.with_name(path.name + BAK_SUFFIX), parse)
    if bak_reason is None:
        return ConfigFileState(path, "bak", bak_value, problem)
    if problem is None and bak_reason != "missing":
        problem = f"missing, and its {BAK_SUFFIX} is {bak_reason}"
    return ConfigFileState(path, "none", None, problem)


def set_aside_unusable(store_dir: Path, names: tuple[str, ...]) -> set[str]:
    """Config files among ``names`` that neither parse nor have a usable .bak would
    start the store with an empty table and stay unreadable: each is renamed to
    ``<file>.corrupt`` (and its .bak to ``<file>.bak.corrupt``), to look at later,
    for its owner to rebuild. Returns the names set aside."""
    out = set()
    for name in names:
        st = inspect_config_file(store_dir, name)
        if st.source != "none" or st.problem is None:
            continue
        for path in (st.path, st.path.with_name(st.path.name + BAK_SUFFIX)):
            if path.exists():
                os.replace(path, path.with_name(path.name + ".corrupt"))
        fsync_dir(st.path.parent)
        _log().warning("config_file_set_aside", path=str(st.path), problem=st.problem,
                       action=f"renamed to {st.path.name}.corrupt; rebuilt")  # fmt: skip
        out.add(name)
    return out


def _encode(obj: object) -> bytes:
    # fastjson's PrettyFormat: tab indentation, no blank after ':'.
    return json.dumps(obj, indent="\t", separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _is_decodable(path: Path) -> bool:
    try:
        _decode(path.read_bytes())
    except (OSError, ValueError):
        return False
    return True


def write_config_json(path: Path, obj: object) -> None:
    """Persist ``obj`` to ``path`` as pretty-printed UTF-8 JSON, crash-safe.

    Steps in the module docstring: ``.tmp`` written and fsynced, the previous content
    kept as ``.bak`` (only if it decodes), ``.tmp`` renamed over ``path``, directory
    fsynced. Creates the parent directory if needed. Callers serialise their own
    writes to one path (the managers below hold a lock); two concurrent writers
    would share the ``.tmp``.
    """
    data = _encode(obj)
    parent = path.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(parent.parent)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    bak = path.with_name(path.name + BAK_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    faults.created(fd)
    try:
        faults.hit("config.write", tmp)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as e:
        note_sync_failure("config.write", tmp, e)
        os.close(fd)
        tmp.unlink(missing_ok=True)  # <file> (or its .bak) keeps the old content
        raise
    os.close(fd)
    faults.synced(tmp)
    faults.hit("config.write.tmp", tmp)  # step 1 done: <file> is still the old content
    if _is_decodable(path):
        os.replace(path, bak)
        fsync_dir(parent)
        faults.hit("config.write.bak", bak)  # step 2 done: <file> is missing, .bak is the old content
    os.replace(tmp, path)
    fsync_dir(parent)


def _persist_logged(path: Path, obj: object) -> bool:
    """write_config_json for tables persisted in the background: an OSError is
    logged (the previous file stays readable), not raised."""
    try:
        write_config_json(path, obj)
    except OSError as e:
        _log().error("config_persist_failed", file=str(path), errno=errno.errorcode.get(e.errno or 0), error=str(e))
        return False
    return True


def _split_extra(obj: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in known}


def _check_int(name: str, value: object, *, low: int, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidMessageError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise InvalidMessageError(f"{name} must be {bound}, got {value}")
    return value


def check_group(group: str) -> None:
    """Raise InvalidMessageError unless ``group`` is a legal consumer group name:
    characters ``[%|a-zA-Z0-9_-]``, 1 to 120 of them (RocketMQ 5.x)."""
    if not isinstance(group, str) or not group:
        raise InvalidMessageError("consumer group name is empty")
    if len(group) > GROUP_MAX_CHARS:
        raise InvalidMessageError(
            f"consumer group name is {len(group)} characters long; the limit is {GROUP_MAX_CHARS}"
        )
    if not _GROUP_RE.fullmatch(group):
        raise InvalidMessageError(f"consumer group name {group!r} has characters outside [%|a-zA-Z0-9_-]")


# ---------------------------------------------------------------------------
# consumerOffset.json


def _parse_offset_file(obj: Any) -> tuple[dict[str, dict[int, int]], dict[str, Any]]:
    table = obj["offsetTable"]
    if not isinstance(table, dict):
        raise TypeError("offsetTable is not an object")
    offsets: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        if not isinstance(queues, dict):
            raise TypeError(f"offsetTable[{key!r}] is not an object")
        inner: dict[int, int] = {}
        for qid, off in queues.items():
            if not isinstance(off, int) or isinstance(off, bool):
                raise TypeError(f"offsetTable[{key!r}][{qid!r}] is not an integer")
            inner[int(qid)] = off
        offsets[key] = inner
    return offsets, _split_extra(obj, ("offsetTable",))


DERIVED_OFFSET_FILE = "derivedOffset.json"


def write_derived_offset(store_dir: Path, offset: int) -> None:
    """Record that consume queues and index are durable for every record below
    ``offset`` (mqstore's own file, ``config/derivedOffset.json``; RocketMQ has no such
    record and re-dispatches from a whole segment after a crash)."""
    write_config_json(Path(store_dir) / CONFIG_DIR / DERIVED_OFFSET_FILE, {"durableReputOffset": int(offset)})


def read_derived_offset(store_dir: Path) -> int | None:
    """The offset ``write_derived_offset`` recorded; None if there is none or it is
    unreadable (then recovery falls back to RocketMQ's rule)."""
    obj = read_config_json(Path(store_dir) / CONFIG_DIR / DERIVED_OFFSET_FILE)
    value = obj.get("durableReputOffset") if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class ConsumerOffsets:
    """Committed consume progress per (group, topic, queue): RocketMQ's ConsumerOffsetManager
    over ``<store>/config/consumerOffset.json``.

    An offset is the *next* queue offset the group will consume (RocketMQ's meaning).
    :meth:`commit` overwrites: an offset may go back (a consumer reset); nothing here
    enforces monotony.

    At-least-once contract: commits live in memory and reach the disk only on
    :meth:`persist`, which the owner calls periodically (RocketMQ: every 5 s) and on
    :meth:`close`. After a crash the file holds the last persisted offsets, which are
    at or behind what was committed, so consumers may receive again the messages
    after the last persisted offset; they never skip one.

    Entries of the file whose key is not ``<topic>@<group>`` (or whose names we would
    not accept) are kept and written back, never exposed.

    Thread-safe: any thread may call any method; a lock guards the table and
    another serialises writes of the file.
    """

    def __init__(self, store_dir: Path) -> None:
        self.path = Path(store_dir) / CONFIG_DIR / CONSUMER_OFFSET_FILE
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        loaded = read_config_json(self.path, parse=_parse_offset_file)
        self._table, self._extra = loaded if loaded is not None else ({}, {})

    @staticmethod
    def _key(group: str, topic: str) -> str:
        check_group(group)
        check_topic(topic)
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` will next consume ``offset`` of ``(topic, queue_id)``."""
        self.commit_many(group, topic, {queue_id: offset})

    def commit_many(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """:meth:`commit` for several queues of one topic at once; all or nothing."""
        key = self._key(group, topic)
        checked = {
            _check_int("queue_id", qid, low=0, high=MAX_QUEUE_NUMS - 1): _check_int("offset", off, low=0)
            for qid, off in offsets.items()
        }
        with self._lock:
            if self._closed:
                raise StoreClosedError("consumer offsets are closed")
            self._table.setdefault(key, {}).update(checked)

    def fetch(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or -1 if the group never committed one for this queue."""
        key = self._key(group, topic)
        with self._lock:
            return self._table.get(key, {}).get(queue_id, -1)

    def groups(self) -> list[str]:
        """Every group with at least one committed offset, sorted."""
        with self._lock:
            keys = list(self._table)
        return sorted({k.split(TOPIC_GROUP_SEPARATOR, 1)[1] for k in keys if k.count(TOPIC_GROUP_SEPARATOR) == 1})

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next_offset}`` of one group."""
        check_group(group)
        out: dict[tuple[str, int], int] = {}
        with self._lock:
            for key, queues in self._table.items():
                topic, sep, g = key.partition(TOPIC_GROUP_SEPARATOR)
                if sep and g == group:
                    out.update({(topic, qid): off for qid, off in queues.items()})
        return out

    def persist(self) -> bool:
        """Write the table to disk (crash-safe, see :func:`write_config_json`).

        A failing disk (EIO, ENOSPC, EROFS...) is logged, not raised: the file keeps
        its previous content, the table stays in memory, and the next persist writes
        it whole again (at-least-once: a crash now only means redelivery from the
        previous persist). Returns whether the file was written."""
        with self._write_lock:
            with self._lock:
                obj = {
                    **self._extra,
                    "offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in self._table.items()},
                }
            return _persist_logged(self.path, obj)

    def close(self) -> None:
        """Persist, then refuse further commits. Closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.persist()

    def __enter__(self) -> ConsumerOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------
# topics.json

TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
# RocketMQ PermName bits of TopicConfig.perm.
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
_PERM_NAMES = {PERM_READ: ("readable", "read"), PERM_WRITE: ("writable", "write")}


def check_perm(topic: str, perm: int | None, needed: int) -> None:
    """TopicPermissionError unless ``perm`` (a topic's config; None: the topic has no
    config, which allows everything, as an auto-created topic's 6 does) has every bit
    of ``needed`` (PERM_READ for pulls, PERM_WRITE for sends; RocketMQ
    PermName.isReadable / isWriteable)."""
    if perm is None or perm & needed == needed:
        return
    able, bit = _PERM_NAMES.get(needed, ("allowed", f"0x{needed:x}"))
    raise TopicPermissionError(f"topic {topic!r} is not {able} (perm {perm}: "
                               f"{'r' if perm & PERM_READ else '-'}{'w' if perm & PERM_WRITE else '-'}"
                               f"{'x' if perm & PERM_INHERIT else '-'}; the {bit} bit is {needed})",
                               topic=topic, perm=perm, needed=needed)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class TopicConfig:
    """One entry of ``topicConfigTable`` (RocketMQ TopicConfig). ``perm`` is a bit mask:
    2 = write, 4 = read, 1 = inherit, 8 = priority (default 6 = read + write)."""

    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_topic(self.topic_name)
        for name in ("read_queue_nums", "write_queue_nums"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_QUEUE_NUMS:
                raise ConfigError(f"{name} must be in 1..{MAX_QUEUE_NUMS}, got {value!r}")
        if not isinstance(self.perm, int) or isinstance(self.perm, bool) or not 0 <= self.perm <= 15:
            raise ConfigError(f"perm must be a bit mask in 0..15, got {self.perm!r}")
        if self.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ConfigError(f"topic_filter_type must be one of {TOPIC_FILTER_TYPES}, got {self.topic_filter_type!r}")
        if not isinstance(self.topic_sys_flag, int) or isinstance(self.topic_sys_flag, bool):
            raise ConfigError(f"topic_sys_flag must be an int, got {self.topic_sys_flag!r}")
        if not isinstance(self.order, bool):
            raise ConfigError(f"order must be a bool, got {self.order!r}")
        attrs = dict(self.attributes)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()):
            raise ConfigError(f"attributes must map str to str, got {attrs!r}")
        object.__setattr__(self, "attributes", MappingProxyType(attrs))

    def to_json(self) -> dict[str, Any]:
        """The fastjson field names and order of RocketMQ's TopicConfig."""
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TopicConfig:
        return cls(
            topic_name=obj["topicName"],
            read_queue_nums=obj.get("readQueueNums", 4),
            write_queue_nums=obj.get("writeQueueNums", 4),
            perm=obj.get("perm", 6),
            topic_filter_type=obj.get("topicFilterType", "SINGLE_TAG"),
            topic_sys_flag=obj.get("topicSysFlag", 0),
            order=obj.get("order", False),
            attributes=obj.get("attributes") or {},
        )


@dataclass(frozen=True)
class DataVersion:
    """RocketMQ DataVersion: bumped on every change of the table."""

    counter: int = 0
    timestamp: int = 0
    state_version: int = 0

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp, "stateVersion": self.state_version}


def _parse_topics_file(obj: Any) -> tuple[DataVersion, dict[str, TopicConfig], dict[str, Any], dict[str, Any]]:
    dv = obj.get("dataVersion") or {}
    version = DataVersion(int(dv.get("counter", 0)), int(dv.get("timestamp", 0)), int(dv.get("stateVersion", 0)))
    table = obj.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise TypeError("topicConfigTable is not an object")
    topics: dict[str, TopicConfig] = {}
    kept: dict[str, Any] = {}  # entries we cannot represent: kept verbatim, written back
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise TypeError(f"topicConfigTable[{name!r}] is not an object")
        try:
            cfg = TopicConfig.from_json(entry)
            if cfg.topic_name != name:
                raise ConfigError(f"entry names topic {cfg.topic_name!r}")
            topics[name] = cfg
        except (ConfigError, InvalidMessageError, KeyError, TypeError) as e:
            _log().warning("topic_config_kept_verbatim", topic=name, reason=str(e))
            kept[name] = entry
    return version, topics, kept, _split_extra(obj, ("dataVersion", "topicConfigTable"))


class TopicConfigs:
    """Topic configurations: RocketMQ's TopicConfigManager over ``<store>/config/topics.json``.

    Every change bumps ``dataVersion`` (counter + 1, timestamp = clock) and is persisted
    before the call returns; if writing fails, the table in memory stays as it was.
    Entries of the file we cannot represent (a name check_topic refuses, an unknown
    filter type) are kept verbatim and written back; 5.x retry and dead-letter topics
    of up to 255 characters are ordinary entries.

    Thread-safe: one lock guards the table and the file.
    """

    def __init__(self, store_dir: Path, *, clock: Clock | None = None) -> None:
        self.path = Path(store_dir) / CONFIG_DIR / TOPICS_FILE
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        loaded = read_config_json(self.path, parse=_parse_topics_file)
        if loaded is None:
            self._version, self._topics, self._kept, self._extra = DataVersion(), {}, {}, {}
        else:
            self._version, self._topics, self._kept, self._extra = loaded

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._version

    def get(self, topic: str) -> TopicConfig | None:
        with self._lock:
            return self._topics.get(topic)

    def perm_of(self, topic: str) -> int | None:
        """The topic's perm (PermName bits); None: the topic has no config."""
        tc = self.get(topic)
        return None if tc is None else tc.perm

    def all(self) -> dict[str, TopicConfig]:
        """A copy of the table, ``{topic: config}``."""
        with self._lock:
            return dict(self._topics)

    def create_or_update(
        self,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        *,
        topic_filter_type: str = "SINGLE_TAG",
        topic_sys_flag: int = 0,
        order: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> TopicConfig:
        """Put a topic's config (replacing any previous one), persist, return it."""
        cfg = TopicConfig(
            topic_name=topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            topic_filter_type=topic_filter_type,
            topic_sys_flag=topic_sys_flag,
            order=order,
            attributes=attributes or {},
        )
        with self._lock:
            topics = {**self._topics, topic: cfg}
            kept = {k: v for k, v in self._kept.items() if k != topic}
            self._persist_new(topics, kept)
        return cfg

    def delete(self, topic: str) -> bool:
        """Remove a topic's config; False (and nothing written) if there was none."""
        with self._lock:
            if topic not in self._topics and topic not in self._kept:
                return False
            topics = {k: v for k, v in self._topics.items() if k != topic}
            kept = {k: v for k, v in self._kept.items() if k != topic}
            self._persist_new(topics, kept)
            return True

    def _persist_new(self, topics: dict[str, TopicConfig], kept: dict[str, Any]) -> None:
        """Bump the version and write the new table; memory changes only once the file did."""
        v = self._version
        version = DataVersion(v.counter + 1, self._clock.now_ms(), v.state_version)
        table = {**kept, **{name: cfg.to_json() for name, cfg in topics.items()}}
        write_config_json(self.path, {**self._extra, "dataVersion": version.to_json(), "topicConfigTable": table})
        self._version, self._topics, self._kept = version, topics, kept


# ---------------------------------------------------------------------------
# delayOffset.json


def _parse_delay_file(obj: Any) -> tuple[dict[int, int], dict[str, Any]]:
    table = obj["offsetTable"]
    if not isinstance(table, dict):
        raise TypeError("offsetTable is not an object")
    out: dict[int, int] = {}
    for level, off in table.items():
        if not isinstance(off, int) or isinstance(off, bool):
            raise TypeError(f"offsetTable[{level!r}] is not an integer")
        out[int(level)] = off
    return out, _split_extra(obj, ("offsetTable",))


class DelayOffsets:
    """Progress of the delay-level delivery per level: the queue offset of
    ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` up to which messages were delivered
    (RocketMQ ScheduleMessageService over ``<store>/config/delayOffset.json``).

    Like consumer offsets, :meth:`set` stays in memory until :meth:`persist`; after a
    crash delivery restarts from the last persisted offset (redelivery, never loss).

    Thread-safe: any thread may call any method.
    """

    def __init__(self, store_dir: Path) -> None:
        self.path = Path(store_dir) / CONFIG_DIR / DELAY_OFFSET_FILE
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        loaded = read_config_json(self.path, parse=_parse_delay_file)
        self._table, self._extra = loaded if loaded is not None else ({}, {})

    def get(self, level: int) -> int:
        """The stored offset of ``level``; 0 if none was set."""
        _check_int("delay level", level, low=1)
        with self._lock:
            return self._table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        _check_int("delay level", level, low=1)
        _check_int("offset", offset, low=0)
        with self._lock:
            self._table[level] = offset

    def all(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)

    @property
    def commitlog_offset(self) -> int:
        """The commitlog write position when the offsets were last set (an mqstore
        field; RocketMQ readers ignore it): deliveries made after the last persist lie
        past it, so a restart can find them instead of repeating them."""
        with self._lock:
            return int(self._extra.get("commitlogOffset", 0))

    def set_commitlog_offset(self, offset: int) -> None:
        with self._lock:
            self._extra["commitlogOffset"] = int(offset)

    def persist(self) -> bool:
        """Write the table; like ConsumerOffsets.persist, a failing disk is logged and
        False returned (deliveries since the previous persist may then repeat)."""
        with self._write_lock:
            with self._lock:
                obj = {**self._extra, "offsetTable": {str(k): v for k, v in sorted(self._table.items())}}
            return _persist_logged(self.path, obj)

    def close(self) -> None:
        self.persist()


_PARSERS: dict[str, Callable[[Any], Any]] = {
    CONSUMER_OFFSET_FILE: _parse_offset_file,
    TOPICS_FILE: _parse_topics_file,
    DELAY_OFFSET_FILE: _parse_delay_file,
}


# ---------------------------------------------------------------------------
# messageDelayLevel

_DELAY_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_TOKEN_RE = re.compile(r"([0-9]+)([smhd])")


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> list[int]:
    """Milliseconds of each delay level; item ``i`` is level ``i + 1``.

    RocketMQ's messageDelayLevel: blank-separated ``<n><unit>``, units s, m, h, d
    (lowercase only, as in RocketMQ's unit table). A level must be > 0.

    >>> parse_delay_levels("1s 2m 1h 1d")
    [1000, 120000, 3600000, 86400000]
    """
    if not isinstance(spec, str):
        raise ValueError(f"delay levels must be a string, got {spec!r}")
    tokens = spec.split()
    if not tokens:
        raise ValueError("delay levels are empty; expected e.g. '1s 5s 10s 1m'")
    levels = []
    for i, token in enumerate(tokens, start=1):
        m = _DELAY_TOKEN_RE.fullmatch(token)
        if m is None:
            raise ValueError(f"delay level {i} is {token!r}; expected <digits><unit> with unit s, m, h or d")
        ms = int(m[1]) * _DELAY_UNIT_MS[m[2]]
        if ms <= 0:
            raise ValueError(f"delay level {i} is {token!r}; a delay must be > 0")
        levels.append(ms)
    return levels


__all__ = [
    "CONFIG_DIR",
    "CONSUMER_OFFSET_FILE",
    "DEFAULT_DELAY_LEVELS",
    "DELAY_OFFSET_FILE",
    "GROUP_MAX_CHARS",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "TOPICS_FILE",
    "ConfigFileState",
    "ConsumerOffsets",
    "DataVersion",
    "DelayOffsets",
    "TopicConfig",
    "TopicConfigs",
    "check_group",
    "check_perm",
    "inspect_config_file",
    "parse_delay_levels",
    "quote_int_keys",
    "read_config_json",
    "write_config_json",
]
