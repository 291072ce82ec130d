"""``<store>/config/topics.json``: topic configurations, RocketMQ's TopicConfigManager;
and the permission bits (PermName) reads and sends check.

The file, as this module writes it (json_files.py: pretty-printed, crash-safe, .bak):

    {<other keys kept>,
     "dataVersion": {"counter": <n>, "timestamp": <ms>, "stateVersion": <n>},
     "topicConfigTable": {"<topic>": {"topicName": "<topic>", "readQueueNums": 4, "writeQueueNums": 4,
                                      "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                      "order": false, "attributes": {}}, ...}}

Entry fields in the order of RocketMQ's TopicConfig (``TopicConfig.to_json``); entries
this module cannot represent are written back verbatim, before the others.

A topic's message type (RocketMQ 5's TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE) is
the attribute ``"message.type"``: ``"attributes": {"message.type": "FIFO"}``. The key
is stored without a sign: ``+message.type=FIFO`` is mqadmin's syntax for adding it
(RocketMQ's AttributeUtil strips the ``+`` before storing). No attribute: NORMAL.
An entry whose type is none of MessageType's (RocketMQ's UNSPECIFIED, or PRIORITY of
later releases) is kept verbatim, like the other entries this module can not represent.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import structlog

from mqstore.errors import ConfigError, InvalidMessageError, TopicPermissionError
from mqstore.formats.names import check_topic
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.json_files import CONFIG_DIR, read_config_json, split_extra, write_config_json

TOPICS_FILE = "topics.json"
MAX_QUEUE_NUMS = 65_536
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
# RocketMQ PermName bits of TopicConfig.perm.
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
_PERM_NAMES = {PERM_READ: ("readable", "read"), PERM_WRITE: ("writable", "write")}
# The attribute holding a topic's message type (RocketMQ TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE).
MESSAGE_TYPE_ATTRIBUTE = "message.type"


class MessageType(StrEnum):
    """A topic's message type (RocketMQ 5 TopicMessageType): the kind of message
    RocketMQ 5 clients may send to it. MIXED accepts every kind."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


MESSAGE_TYPES = tuple(t.value for t in MessageType)


def parse_message_type(value: object, topic: str | None = None) -> MessageType:
    """``value`` (a MessageType or its name, exactly: ``"FIFO"``) as a MessageType;
    ConfigError naming the topic (if given), the value and the allowed names otherwise."""
    try:
        return MessageType(value)
    except ValueError:
        where = f"topic {topic!r}: " if topic is not None else ""
        raise ConfigError(f"{where}message type must be one of {', '.join(MESSAGE_TYPES)}, got {value!r}") from None


def accepted_types(config: TopicConfig | None) -> tuple[MessageType, ...]:
    """The message types a topic accepts: its own type, or all four concrete ones if
    it is MIXED; a topic without a config accepts NORMAL messages."""
    kind = MessageType.NORMAL if config is None else config.message_type
    if kind is MessageType.MIXED:
        return (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION)
    return (kind,)


def check_perm(topic: str, perm: int | None, needed: int) -> None:
    """TopicPermissionError unless ``perm`` (a topic's config; None: the topic has no
    config, which allows everything, as an auto-created topic's 6 does) has every bit
    of ``needed`` (PERM_READ for pulls, PERM_WRITE for sends; RocketMQ
    PermName.isReadable / isWriteable)."""
    if perm is None or perm & needed == needed:
        return
    able, bit = _PERM_NAMES.get(needed, ("allowed", f"0x{needed:x}"))
    raise TopicPermissionError(
        f"topic {topic!r} is not {able} (perm {perm}: "
        f"{'r' if perm & PERM_READ else '-'}{'w' if perm & PERM_WRITE else '-'}"
        f"{'x' if perm & PERM_INHERIT else '-'}; the {bit} bit is {needed})",
        topic=topic,
        perm=perm,
        needed=needed,
    )


@dataclass(frozen=True, kw_only=True)
class TopicConfig:
    """One entry of ``topicConfigTable`` (RocketMQ TopicConfig). ``perm`` is a bit mask:
    2 = write, 4 = read, 1 = inherit, 8 = priority (default 6 = read + write).
    ``attributes["message.type"]``, if present, must name a MessageType
    (``message_type``: NORMAL without it)."""

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
        if MESSAGE_TYPE_ATTRIBUTE in attrs:
            parse_message_type(attrs[MESSAGE_TYPE_ATTRIBUTE], self.topic_name)
        object.__setattr__(self, "attributes", MappingProxyType(attrs))

    @property
    def message_type(self) -> MessageType:
        """The topic's message type: ``attributes["message.type"]``, NORMAL without it."""
        return parse_message_type(self.attributes.get(MESSAGE_TYPE_ATTRIBUTE, MessageType.NORMAL), self.topic_name)

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


def parse_topics_file(obj: Any) -> tuple[DataVersion, dict[str, TopicConfig], dict[str, Any], dict[str, Any]]:
    """The decoded file as (data version, the topics, the entries kept verbatim, other top-level keys)."""
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
            # A fresh logger per call, as json_files._log: a cached one would miss later configurations.
            structlog.get_logger(__name__).warning("topic_config_kept_verbatim", topic=name, reason=str(e))
            kept[name] = entry
    return version, topics, kept, split_extra(obj, ("dataVersion", "topicConfigTable"))


class TopicConfigs:
    """Topic configurations: RocketMQ's TopicConfigManager over ``<store>/config/topics.json``.

    Every change bumps ``dataVersion`` (counter + 1, timestamp = clock) and is persisted
    before the call returns; if writing fails, the table in memory stays as it was.
    Entries of the file we cannot represent (a name check_topic refuses, an unknown
    filter type) are kept verbatim and written back; 5.x retry and dead-letter topics
    of up to 255 characters are ordinary entries.

    Thread-safe: one lock guards the table and the file. Listeners (``add_listener``)
    hear the name of every topic created, changed or deleted, after the change and
    outside that lock (the store's topic table forgets what it cached of it).
    """

    def __init__(self, store_dir: Path, *, clock: Clock | None = None) -> None:
        self.path = Path(store_dir) / CONFIG_DIR / TOPICS_FILE
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str], None]] = []
        loaded = read_config_json(self.path, parse=parse_topics_file)
        if loaded is None:
            self._version, self._topics, self._kept, self._extra = DataVersion(), {}, {}, {}
        else:
            self._version, self._topics, self._kept, self._extra = loaded

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._version

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(topic)`` after each change of a topic's config."""
        self._listeners.append(listener)

    def _changed(self, topic: str) -> None:
        for listener in self._listeners:
            listener(topic)

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
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        *,
        topic_filter_type: str | None = None,
        topic_sys_flag: int | None = None,
        order: bool | None = None,
        attributes: Mapping[str, str] | None = None,
        message_type: MessageType | str | None = None,
    ) -> TopicConfig:
        """Create a topic's config or change what is given of it, persist, return it.

        As RocketMQ's updateTopic: every argument left None keeps the topic's current
        value (a new topic gets TopicConfig's defaults: 4 read and 4 write queues, perm
        6), so closing a topic with ``perm=0`` and later setting its type leaves it
        closed. ``attributes`` given replace the topic's; ``message_type`` given sets
        ``attributes["message.type"]`` (other attributes kept). A name that is not a
        MessageType is a ConfigError, and nothing changes."""
        kind = None if message_type is None else parse_message_type(message_type, topic)
        with self._lock:
            old = self._topics.get(topic) or TopicConfig(topic_name=topic)
            attrs = dict(attributes if attributes is not None else old.attributes)
            if kind is not None:
                attrs[MESSAGE_TYPE_ATTRIBUTE] = kind.value
            given = {
                "read_queue_nums": read_queue_nums,
                "write_queue_nums": write_queue_nums,
                "perm": perm,
                "topic_filter_type": topic_filter_type,
                "topic_sys_flag": topic_sys_flag,
                "order": order,
            }
            cfg = dataclasses.replace(old, attributes=attrs, **{k: v for k, v in given.items() if v is not None})
            topics = {**self._topics, topic: cfg}
            kept = {k: v for k, v in self._kept.items() if k != topic}
            self._persist_new(topics, kept)
        self._changed(topic)
        return cfg

    def delete(self, topic: str) -> bool:
        """Remove a topic's config; False (and nothing written) if there was none."""
        with self._lock:
            if topic not in self._topics and topic not in self._kept:
                return False
            topics = {k: v for k, v in self._topics.items() if k != topic}
            kept = {k: v for k, v in self._kept.items() if k != topic}
            self._persist_new(topics, kept)
        self._changed(topic)
        return True

    def _persist_new(self, topics: dict[str, TopicConfig], kept: dict[str, Any]) -> None:
        """Bump the version and write the new table; memory changes only once the file did."""
        v = self._version
        version = DataVersion(v.counter + 1, self._clock.now_ms(), v.state_version)
        table = {**kept, **{name: cfg.to_json() for name, cfg in topics.items()}}
        write_config_json(self.path, {**self._extra, "dataVersion": version.to_json(), "topicConfigTable": table})
        self._version, self._topics, self._kept = version, topics, kept


__all__ = [
    "MAX_QUEUE_NUMS",
    "MESSAGE_TYPES",
    "MESSAGE_TYPE_ATTRIBUTE",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "TOPICS_FILE",
    "TOPIC_FILTER_TYPES",
    "DataVersion",
    "MessageType",
    "TopicConfig",
    "TopicConfigs",
    "accepted_types",
    "check_perm",
    "parse_message_type",
    "parse_topics_file",
]
