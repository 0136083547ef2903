"""The daemon's log: one JSON object per line, whoever logs (structured logs).

The daemon's own lines are written by ``log_event`` as ``{"event": kind, "at": ISO-8601 UTC, …fields}``
and pass through unchanged. Everything else that reaches the handler ``json_logging`` installs — a
library's warning (APScheduler's "run time of job … was missed", SQLAlchemy's), a Python warning
(``warnings.warn``, captured) — is rendered by ``JsonFormatter`` as ``{"event": "log", "at": …,
"level": …, "logger": …, "message": …}`` (plus ``exception`` with a traceback), so that a log
shipper reading the daemon's stderr never meets a plain-text line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

LOG = logging.getLogger("repart.daemon")

_STRUCTURED = "repart_structured"
"""The LogRecord attribute that marks a line ``log_event`` already wrote as JSON."""


def log_event(kind: str, **fields: Any) -> None:
    """One structured log line: ``{"event": kind, "at": ISO-8601 UTC, …fields}``."""
    line = json.dumps({"event": kind, "at": datetime.now(UTC).isoformat(), **fields}, default=str)
    LOG.info(line, extra={_STRUCTURED: True})


class JsonFormatter(logging.Formatter):
    """Renders any log record as one JSON object (see the module docstring); ``log_event``'s lines,
    already JSON, are kept as they are."""

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, _STRUCTURED, False):
            return record.getMessage()
        line: dict[str, Any] = {
            "event": "log",
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


@contextmanager
def json_logging(stream: TextIO) -> Iterator[None]:
    """While inside: the daemon's lines (INFO and up) and every other logger's warnings and errors go
    to ``stream`` as JSON lines, and Python warnings are logged (``logging.captureWarnings``). The
    handler sits on the root logger, so a library logger without handlers of its own (APScheduler's)
    no longer falls back to Python's plain-text last-resort handler."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = LOG.level
    root.addHandler(handler)
    LOG.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        LOG.setLevel(level)
        root.removeHandler(handler)
