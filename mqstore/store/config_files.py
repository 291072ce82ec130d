"""The JSON files under ``<store>/config/``: which table each holds, and reading any
of them by name, as verify and the store's open do.

    file                  RocketMQ class            module (shape documented there)
    consumerOffset.json   ConsumerOffsetManager     consumer_offsets.py
    topics.json           TopicConfigManager        topic_configs.py
    delayOffset.json      ScheduleMessageService    delay_offsets.py
    derivedOffset.json    (mqstore's own)           derived_offset.py

How one file is read, written and set aside: json_files.py.

"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqstore.store.consumer_offsets import CONSUMER_OFFSET_FILE, parse_offset_file
from mqstore.store.delay_offsets import DELAY_OFFSET_FILE, parse_delay_file
from mqstore.store.json_files import CONFIG_DIR, ConfigFileState, inspect_json_file, set_aside
from mqstore.store.topic_configs import TOPICS_FILE, parse_topics_file

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


__all__ = ["inspect_config_file", "set_aside_unusable"]
