"""structlog set-up shared by the CLI and every actor.

Events are snake_case facts with fields (``log.info("segment_rolled", base_offset=o)``).
Logs go to stderr so that commands can print results on stdout. A process that is
one component (a Ray actor) passes ``context``: fields every event of the process
carries unless the event sets them itself (``{"component": "shard", "shard": 3}``),
store-layer events included.
"""

from __future__ import annotations

import logging
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


def configure_logging(*, level: str = "info", json: bool = True, context: Mapping[str, Any] | None = None) -> None:
    """Render structlog events as JSON lines (or for a console) on stderr, each with
    the fields of ``context`` (see the module docstring)."""
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
        cache_logger_on_first_use=True,
    )


__all__ = ["configure_logging"]
