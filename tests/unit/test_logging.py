"""structlog set-up: events go to whatever stderr is when they are written."""

from __future__ import annotations

import io
import json
import sys

import structlog

from mqstore.logging import configure_logging


def test_a_closed_stream_swapped_in_for_a_while_breaks_no_later_log_call(capsys):
    """A CLI run in-process (typer's CliRunner) configures logging while its own
    stderr is swapped in, and closes that stream after: later events must still be
    written, to the stderr of the moment, not raise ValueError in the store's code."""
    swapped = io.StringIO()
    real, sys.stderr = sys.stderr, swapped
    try:
        configure_logging(level="info")
        structlog.get_logger("t").info("during", n=1)
    finally:
        sys.stderr = real
        swapped_text = swapped.getvalue()
        swapped.close()
    structlog.get_logger("t").info("after", n=2)
    assert json.loads(swapped_text.strip())["event"] == "during"
    assert json.loads(capsys.readouterr().err.strip().splitlines()[-1])["event"] == "after"
