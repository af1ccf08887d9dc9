"""How the ``omni-grpc`` commands log: today's text lines, or one JSON object per line.

``--log-format text`` (the default) writes ``time level logger: message`` lines;
``--log-format json`` writes one object per line with ``time`` (UTC, ISO 8601), ``level``,
``logger`` and ``message``, then every structured field the line carries (``session_id``, given
with ``extra`` or a ``logging.LoggerAdapter`` where the line is written) and, for a failure, its
``exception``. Both go to stderr; stdout stays for what a command prints on purpose.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import orjson

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# What every LogRecord has; any other attribute is a structured field the line was given.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(
            (name, value)
            for name, value in vars(record).items()
            if name not in _RECORD_ATTRIBUTES and name not in entry
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a field that JSON cannot hold is written as its text, never dropped.
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str, log_format: str = "text") -> None:
    """Sends every log line to stderr at ``level`` (debug ... error), as text or JSON lines."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler()
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
