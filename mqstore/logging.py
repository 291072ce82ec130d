"""structlog set-up shared by the CLI and (later) every actor.

Events are snake_case facts with fields (``log.info("segment_rolled", base_offset=o)``).
Logs go to stderr so that commands can print results on stdout.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, level: str = "info", json: bool = True) -> None:
    """Render structlog events as JSON lines (or for a console) on stderr."""
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


__all__ = ["configure_logging"]
