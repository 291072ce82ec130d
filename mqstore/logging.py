"""structlog set-up shared by the CLI and every actor, and mqstore's default as a library.

Events are snake_case facts with fields (``log.info("segment_rolled", base_offset=o)``).
Logs go to stderr so that commands can print results on stdout. A process that is
one component (a Ray actor) passes ``context``: fields every event of the process
carries unless the event sets them itself (``{"component": "shard", "shard": 3}``),
store-layer events included.

Used as a library (``from mqstore import MessageStore``) in a program that has not
configured structlog, mqstore writes warnings and errors only, as JSON lines on
stderr (``configure_library_default``, run at import): structlog's own default would
print every info event on stdout, among the program's results.
``MQSTORE_LOG_LEVEL=info`` (or debug) shows more; a program's own
``structlog.configure``, before or after the import, wins.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import structlog


class _Stderr:
    """Whatever ``sys.stderr`` is when an event is written, not when logging was
    configured: a stream swapped in for a while (a CLI run inside tests, a captured
    stream) and closed after must not break every later log call."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    *, level: str = "info", json: bool = True, context: Mapping[str, Any] | None = None, cache: bool = True
) -> None:
    """Render structlog events as JSON lines (or for a console) on stderr, each with
    the fields of ``context`` (see the module docstring). ``cache``: loggers keep this
    configuration from their first use (False: a later structlog.configure still
    reaches them)."""
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    fixed = dict(context or {})

    def add_context(_logger, _method, event_dict):
        for k, v in fixed.items():
            event_dict.setdefault(k, v)
        return event_dict

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),
        cache_logger_on_first_use=cache,
    )


LEVEL_ENV = "MQSTORE_LOG_LEVEL"


def configure_library_default() -> None:
    """Warnings and errors as JSON lines on stderr (level: ``MQSTORE_LOG_LEVEL``,
    default warning), unless structlog is configured already (see the module docstring)."""
    if structlog.is_configured():
        return
    level = os.environ.get(LEVEL_ENV, "warning").lower()
    if level.upper() not in logging.getLevelNamesMapping():
        level = "warning"
    configure_logging(level=level, cache=False)  # the program may configure structlog later


__all__ = ["LEVEL_ENV", "configure_library_default", "configure_logging"]
