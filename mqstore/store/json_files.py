"""One JSON file under ``<store>/config/``: read with its ``.bak`` fallback, written
crash-safe (``.tmp``, fsync, ``.bak``), inspected without side effects, set aside
when unusable. The tables kept in these files are the modules consumer_offsets.py,
topic_configs.py, delay_offsets.py and derived_offset.py; config_files.py names the
store's files and which table reads each.

Spec sections 13 and 15. RocketMQ's ConfigManager keeps each table in memory and
persists it as pretty-printed fastjson (tab indentation, no blank after ``:``);
every file has a ``.bak`` sibling.

Quirk: fastjson writes integer map keys unquoted (``{0:250,1:250}``), which is not
strict JSON. :func:`read_config_json` quotes such keys before decoding; we always write
them quoted (strict JSON), which fastjson reads back into its ``Integer`` keys.

Top-level keys a table does not know (5.x adds ``dataVersion`` to some files) are kept
(:func:`split_extra`) and written back unchanged, so a table written by a RocketMQ
broker loses nothing here.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from mqstore.errors import InvalidMessageError
from mqstore.store import faults
from mqstore.store.mapped_file import fsync_dir, note_sync_failure

T = TypeVar("T")

CONFIG_DIR = "config"
BAK_SUFFIX = ".bak"
TMP_SUFFIX = ".tmp"

# A whole JSON string (skipped untouched), or a bare integer key: `{` or `,`, blanks,
# digits, blanks, `:`. Strings are matched first, so their contents are never rewritten.
_BARE_INT_KEY_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)


def _log() -> Any:
    # A fresh proxy per call: warnings are rare, and a logger cached by an earlier
    # structlog configuration would otherwise hide them from later ones.
    return structlog.get_logger(__name__)


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


def inspect_json_file(path: Path, parse: Callable[[Any], Any]) -> ConfigFileState:
    """Read ``path`` as the manager that ``parse`` belongs to would, with the same
    fallback to ``.bak``, without logging or changing anything. ``value`` has the
    shape ``parse`` returns."""
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


def set_aside(st: ConfigFileState) -> bool:
    """A file that neither parses nor has a usable .bak (``st`` from
    inspect_json_file) would start its table empty and stay unreadable: it is
    renamed to ``<file>.corrupt`` (and its .bak to ``<file>.bak.corrupt``), to look at
    later, for its owner to rebuild. Returns whether it was set aside."""
    if st.source != "none" or st.problem is None:
        return False
    for path in (st.path, st.path.with_name(st.path.name + BAK_SUFFIX)):
        if path.exists():
            os.replace(path, path.with_name(path.name + ".corrupt"))
    fsync_dir(st.path.parent)
    _log().warning(
        "config_file_set_aside",
        path=str(st.path),
        problem=st.problem,
        action=f"renamed to {st.path.name}.corrupt; rebuilt",
    )
    return True


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
    writes to one path (the table managers hold a lock); two concurrent writers
    would share the ``.tmp``.
    """
    replace_with_bak(path, _encode(obj), _is_decodable, points=("config.write", "config.write.tmp", "config.write.bak"))


def replace_with_bak(path: Path, data: bytes, decodes: Callable[[Path], bool], *, points: tuple[str, str, str]) -> None:
    """The module docstring's steps for any file kept with a ``.bak``: ``.tmp`` written
    and fsynced, the previous content moved to ``.bak`` (only if ``decodes(path)``),
    ``.tmp`` renamed over ``path``, the directory fsynced. ``points``: the fault points
    of the write and after steps 1 and 2 (crash tests)."""
    write, after_tmp, after_bak = points
    parent = path.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(parent.parent)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    bak = path.with_name(path.name + BAK_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    faults.created(fd)
    try:
        faults.hit(write, tmp)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as e:
        note_sync_failure(write, tmp, e)
        os.close(fd)
        tmp.unlink(missing_ok=True)  # <file> (or its .bak) keeps the old content
        raise
    os.close(fd)
    faults.synced(tmp)
    faults.hit(after_tmp, tmp)  # step 1 done: <file> is still the old content
    if decodes(path):
        os.replace(path, bak)
        fsync_dir(parent)
        faults.hit(after_bak, bak)  # step 2 done: <file> is missing, .bak is the old content
    os.replace(tmp, path)
    fsync_dir(parent)


def persist_logged(path: Path, obj: object) -> bool:
    """write_config_json for tables persisted in the background: an OSError is
    logged (the previous file stays readable), not raised."""
    try:
        write_config_json(path, obj)
    except OSError as e:
        _log().error("config_persist_failed", file=str(path), errno=errno.errorcode.get(e.errno or 0), error=str(e))
        return False
    return True


def split_extra(obj: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """The top-level keys of a file that its table does not use, to write back unchanged."""
    return {k: v for k, v in obj.items() if k not in known}


def check_int(name: str, value: object, *, low: int, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in range; else InvalidMessageError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidMessageError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise InvalidMessageError(f"{name} must be {bound}, got {value}")
    return value


__all__ = [
    "BAK_SUFFIX",
    "CONFIG_DIR",
    "TMP_SUFFIX",
    "ConfigFileState",
    "check_int",
    "inspect_json_file",
    "persist_logged",
    "quote_int_keys",
    "read_config_json",
    "set_aside",
    "split_extra",
    "write_config_json",
]
