"""Verify's check of the small state files: the checkpoint and ``config/*.json``.

Both are read *before* the commitlog walk, so that on a running store they can only
lag the data verify sees, never lead it (a consumer offset committed after the walk
could otherwise look past the end).

    kind                       severity  meaning
    checkpoint_missing         warning   no checkpoint (recovery after a crash starts at the first segment)
    checkpoint_unreadable      warning   too short to decode; the store reads it as zeros
    checkpoint_ahead           error     a timestamp later than the newest record: flushed data is gone,
                                         and recovery after a crash would start too late
    config_from_bak            warning   the file is unusable; the store reads its .bak
    config_unreadable          error     neither the file nor its .bak is usable: the store starts empty
    consumer_offset_past_end   error     a group's offset is past its queue's max offset
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mqstore.errors import DecodeError
from mqstore.formats.checkpoint import CHECKPOINT_BYTES, Checkpoint
from mqstore.store.checkpoint_file import CHECKPOINT_FILE
from mqstore.store.config_files import inspect_config_file
from mqstore.store.consumer_offsets import CONSUMER_OFFSET_FILE, TOPIC_GROUP_SEPARATOR
from mqstore.store.delay_offsets import DELAY_OFFSET_FILE
from mqstore.store.json_files import CONFIG_DIR, ConfigFileState
from mqstore.store.topic_configs import TOPICS_FILE
from mqstore.store.verify.report import Damage, Findings, QueueKey

CONFIG_FILES = (CONSUMER_OFFSET_FILE, TOPICS_FILE, DELAY_OFFSET_FILE)


@dataclass
class StateFiles:
    """The state files as read before the walk."""

    checkpoint: Checkpoint | None
    checkpoint_problem: str | None  # "missing" or why it does not decode
    configs: dict[str, ConfigFileState]


def read_state(store_dir: Path) -> StateFiles:
    path = Path(store_dir) / CHECKPOINT_FILE
    checkpoint, problem = None, None
    try:
        raw = path.read_bytes()
        checkpoint = Checkpoint.decode(raw)
        if len(raw) != CHECKPOINT_BYTES:
            problem = f"{len(raw)} bytes, expected {CHECKPOINT_BYTES}"
    except FileNotFoundError:
        problem = "missing"
    except DecodeError as e:
        problem = str(e)
    return StateFiles(checkpoint, problem, {name: inspect_config_file(store_dir, name) for name in CONFIG_FILES})


def check_checkpoint(state: StateFiles, newest_store_timestamp: int, findings: Findings, damage: Damage) -> None:
    cp = state.checkpoint
    damage.checkpoint = cp
    if cp is None:
        if state.checkpoint_problem == "missing":
            findings.warning(
                "checkpoint_missing",
                CHECKPOINT_FILE,
                "no checkpoint; recovery after a crash starts at the first "
                "segment (the store writes one when it closes)",
            )
        else:
            findings.warning(
                "checkpoint_unreadable", CHECKPOINT_FILE, f"{state.checkpoint_problem}; the store reads it as zeros"
            )
        damage.checkpoint_fix = True
        return
    if state.checkpoint_problem:
        findings.warning("checkpoint_unreadable", CHECKPOINT_FILE, f"{state.checkpoint_problem}; it still decodes")
    ahead = {
        name: value
        for name, value in (
            ("physic_msg_timestamp", cp.physic_msg_timestamp),
            ("logics_msg_timestamp", cp.logics_msg_timestamp),
            ("index_msg_timestamp", cp.index_msg_timestamp),
        )
        if value > newest_store_timestamp
    }
    for name, value in ahead.items():
        findings.error(
            "checkpoint_ahead",
            CHECKPOINT_FILE,
            f"{name} {value} is later than the newest record's store time "
            f"{newest_store_timestamp}: data it counts as flushed is gone",
        )
    if ahead:
        damage.checkpoint_fix = True


def check_configs(state: StateFiles, queue_max: dict[QueueKey, int], findings: Findings, damage: Damage) -> int:
    """Parse status of the three files and consumer offsets against their queues'
    max offsets. Returns how many consumer offsets were checked."""
    for name, st in state.configs.items():
        loc = f"{CONFIG_DIR}/{name}"
        if st.source == "bak":
            findings.warning("config_from_bak", loc, f"{st.problem or 'missing'}; the store reads {name}.bak instead")
            damage.config_from_bak.append(name)
        elif st.source == "none" and st.problem:
            findings.error(
                "config_unreadable", loc, f"{st.problem}, and no usable .bak: the store starts with an empty table"
            )
            damage.config_unusable.append(name)
    offsets = state.configs[CONSUMER_OFFSET_FILE]
    if offsets.value is None:
        return 0
    table, _extra = offsets.value
    checked = 0
    for key, queues in table.items():
        topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if not sep:
            continue  # kept verbatim by the store, never used
        for qid, offset in queues.items():
            checked += 1
            top = queue_max.get((topic, qid), 0)
            if offset > top or offset < 0:
                findings.error(
                    "consumer_offset_past_end",
                    f"{CONFIG_DIR}/{CONSUMER_OFFSET_FILE}",
                    f"group {group!r} is at offset {offset} of {topic}:{qid}, whose max offset is {top}",
                )
                damage.consumer_offsets_past_end.append((group, topic, qid, offset, top))
    return checked


__all__ = ["CONFIG_FILES", "StateFiles", "check_checkpoint", "check_configs", "read_state"]
