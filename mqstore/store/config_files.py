"""The JSON files under ``<store>/config/``: which table each holds, and reading any
of them by name, as verify and the store's open do.

    file                  RocketMQ class            module (shape documented there)
    consumerOffset.json   ConsumerOffsetManager     consumer_offsets.py
    topics.json           TopicConfigManager        topic_configs.py
    delayOffset.json      ScheduleMessageService    delay_offsets.py
    derivedOffset.json    (mqstore's own)           derived_offset.py

How one file is read, written and set aside: json_files.py.

The names this module re-exports (below) are the public API it had before the tables
moved out; code in mqstore.store imports them from their modules, while services/,
mqstore/jobs/ and mqstore/store/verify/ still import them from here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqstore.store.consumer_offsets import (
    CONSUMER_OFFSET_FILE,
    GROUP_MAX_CHARS,
    TOPIC_GROUP_SEPARATOR,
    ConsumerOffsets,
    check_group,
    parse_offset_file,
)
from mqstore.store.delay_offsets import (
    DEFAULT_DELAY_LEVELS,
    DELAY_OFFSET_FILE,
    DelayOffsets,
    parse_delay_file,
    parse_delay_levels,
)
from mqstore.store.json_files import (
    BAK_SUFFIX,
    CONFIG_DIR,
    ConfigFileState,
    inspect_json_file,
    quote_int_keys,
    read_config_json,
    set_aside,
    write_config_json,
)
from mqstore.store.topic_configs import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    TOPICS_FILE,
    DataVersion,
    TopicConfig,
    TopicConfigs,
    check_perm,
    parse_topics_file,
)

# The parser of each file's table manager: a file counts as usable only if it parses.
_PARSERS: dict[str, Callable[[Any], Any]] = {
    CONSUMER_OFFSET_FILE: parse_offset_file,
    TOPICS_FILE: parse_topics_file,
    DELAY_OFFSET_FILE: parse_delay_file,
}


def inspect_config_file(store_dir: Path, name: str) -> ConfigFileState:
    """Read ``<store>/config/<name>`` (one of the three files) as the store's
    manager would, with the same fallback to ``.bak``, without logging or changing
    anything. ``value`` has the shape the manager's parser returns."""
    return inspect_json_file(Path(store_dir) / CONFIG_DIR / name, _PARSERS[name])


def set_aside_unusable(store_dir: Path, names: tuple[str, ...]) -> set[str]:
    """Config files among ``names`` that neither parse nor have a usable .bak would
    start the store with an empty table and stay unreadable: each is renamed to
    ``<file>.corrupt`` (and its .bak to ``<file>.bak.corrupt``), to look at later,
    for its owner to rebuild. Returns the names set aside."""
    return {name for name in names if set_aside(inspect_config_file(store_dir, name))}


__all__ = [
    "BAK_SUFFIX",
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
    "TOPIC_GROUP_SEPARATOR",
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
    "set_aside_unusable",
    "write_config_json",
]
