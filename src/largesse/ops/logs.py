"""Log lines an operator reads: one per request, JSON or text, never a secret.

Every handler that `log_config`/`configure` installs formats through `redact`, so a secret
that slips into a message or a traceback (an SQL error quoting its parameters, an SMTP reply
naming the recipient) is masked at the last moment: API keys, bearer credentials, passwords
in URLs, secret-named query parameters (?token=, &key=, ...), redemption tokens in paths and
links, and email addresses (j***@example.com).
"""

from __future__ import annotations

import contextvars
import logging
import logging.config
import re
import time

import orjson

# The current request's ID: set by the middleware, read by every log line of the request
# (anyio copies context variables into worker threads; db.on_loop's greenlets share the task's).
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("largesse_request_id", default=None)

_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@")
_API_KEY = re.compile(r"\b(LRG_(?:SANDBOX|PROD)_)[A-Za-z0-9_-]+")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",]+")
_QUERY_SECRET = re.compile(r"(?i)([?&](?:token|key|api_key|secret|signature|sig|password|access_token)=)[^&\s'\"]+")
# Paths whose next segment is a bearer token (redemption links, connected members' sign-in
# links, report downloads): logged as PREFIX<token>. The one list of them (ops.middleware too).
# Paths whose next segment is a bearer secret. Matched in any capitals: a hand-typed
# /REDEEM/<token> is a 404, but its token is the real one.
TOKEN_PATHS = ("/redeem/", "/connect/", "/reports/download/", "/dashboard/signin/link/")
_TOKEN_PATH = re.compile("(" + "|".join(map(re.escape, TOKEN_PATHS)) + r")[^/\s?#'\"<>]+", re.IGNORECASE)
_EMAIL = re.compile(r"([A-Za-z0-9!#$%&*+=?^_`{|}~-])[A-Za-z0-9!#$%&'*+=?^_`{|}~.-]*"
                    r"@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")


def redact(text: str) -> str:
    """text with secrets masked; cheap when there is nothing to mask (each pattern is a scan)."""
    if "://" in text:
        text = _URL_PASSWORD.sub(r"\1***@", text)
    if "LRG_" in text:
        text = _API_KEY.sub(r"\1***", text)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(r"\1***", text)
    if "=" in text and ("?" in text or "&" in text):
        text = _QUERY_SECRET.sub(r"\1***", text)
    lowered = text.lower()  # once, not once per prefix
    if any(prefix in lowered for prefix in TOKEN_PATHS):
        text = _TOKEN_PATH.sub(r"\1<token>", text)
    if "@" in text:
        text = _EMAIL.sub(r"\1***@\2", text)
    return text


def redact_url(url: str) -> str:
    """url with its password and secret-named query parameters masked (https://user:***@host/?token=***)."""
    return _QUERY_SECRET.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", url))


# Structured fields travel as one dict, `log.info("request", extra={"fields": {...}})`: the
# formatters print exactly those, in order, without scanning the record's attributes.
class _LineFormatter(logging.Formatter):
    """A formatter whose text comes from its `line` (also called without a LogRecord: info_fields)."""

    def format(self, record: logging.LogRecord) -> str:
        return self.line(record.created, record.levelname, record.name, record.getMessage(),
                         record.__dict__.get("fields"),
                         self.formatException(record.exc_info) if record.exc_info else None)

    @staticmethod
    def line(created: float, levelname: str, name: str, message: str, extra: dict | None,
             exception: str | None = None) -> str:
        raise NotImplementedError


class TextFormatter(_LineFormatter):
    """`2026-01-01T12:00:00.123Z INFO largesse.access request_id=... method=GET ...`"""

    @staticmethod
    def line(created: float, levelname: str, name: str, message: str, extra: dict | None,
             exception: str | None = None) -> str:
        extra = extra or {}
        fields = [f"{k}={v}" for k, v in extra.items()]
        rid = request_id.get()
        if rid and "request_id" not in extra:
            fields.insert(0, f"request_id={rid}")
        line = f"{_timestamp(created)} {levelname} {name}: {message}"
        if fields:
            line += " " + " ".join(fields)
        if exception:
            line += "\n" + exception
        return redact(line)


class JsonFormatter(_LineFormatter):
    """One JSON object per line: ts, level, logger, message, request_id, the record's extra fields."""

    @staticmethod
    def line(created: float, levelname: str, name: str, message: str, extra: dict | None,
             exception: str | None = None) -> str:
        data = {"ts": _timestamp(created), "level": levelname.lower(), "logger": name, "message": message}
        rid = request_id.get()
        if rid:
            data["request_id"] = rid
        if extra:
            data.update(extra)
        if exception:
            data["exception"] = exception
        return redact(orjson.dumps(data, default=str).decode())


def info_fields(logger: logging.Logger, message: str, fields: dict) -> None:
    """logger.info(message, extra={"fields": fields}) for a line written on every request.

    When the logger writes through the one handler log_config installs (its "largesse"
    parent's stderr handler, nothing else on the way), the formatter's own `line` makes the
    text and it goes to that handler's stream, under its lock, flushed: the same line, without
    a LogRecord and the walk through loggers, filters and handlers (measured: half the cost of
    a request's log line). Any other set-up (a handler or filter added, another formatter)
    goes through logging as usual."""
    handler = _sole_handler(logger)
    if handler is None:
        logger.handle(_record(logger, message, fields))
        return
    line = handler.formatter.line(time.time(), "INFO", logger.name, message, fields) + handler.terminator
    handler.acquire()
    try:
        handler.stream.write(line)
        handler.flush()
    except Exception:  # what StreamHandler.emit does with a failed write (e.g. a closed stream)
        handler.handleError(_record(logger, message, fields))
    finally:
        handler.release()


def _record(logger: logging.Logger, message: str, fields: dict) -> logging.LogRecord:
    """What logger.info(message, extra={"fields": fields}) makes, minus the caller lookup (a
    stack walk) that a fixed-format line does not need."""
    return logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, None, None, extra={"fields": fields})


def _sole_handler(logger: logging.Logger) -> logging.StreamHandler | None:
    parent = logger.parent
    if logger.handlers or logger.filters or not logger.propagate or logger.disabled or parent is None:
        return None
    if parent.propagate or parent.filters or parent.disabled or len(parent.handlers) != 1:
        return None
    handler = parent.handlers[0]
    if (type(handler) is not logging.StreamHandler or handler.filters or handler.level > logging.INFO
            or type(handler.formatter) not in (TextFormatter, JsonFormatter)):
        return None
    return handler


_second: list = [None, ""]  # the last second formatted: one strftime per second, not per line


def _timestamp(created: float) -> str:
    second = int(created)
    if _second[0] != second:
        _second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))]
    return f"{_second[1]}.{int(created % 1 * 1000):03d}Z"


def formatter_class(log_format: str) -> type[logging.Formatter]:
    return JsonFormatter if log_format == "json" else TextFormatter


def log_config(log_format: str = "text", level: str = "INFO") -> dict:
    """A logging.config dict for uvicorn.run(log_config=...): uvicorn applies it in every worker
    process. uvicorn's own loggers and largesse's share one redacting stderr handler."""
    cls = formatter_class(log_format)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"largesse": {"()": f"{cls.__module__}.{cls.__qualname__}"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "largesse", "stream": "ext://sys.stderr"}},
        "loggers": {
            "largesse": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        },
    }


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Install the same handlers in a process that uvicorn does not start (`largesse worker`)."""
    logging.config.dictConfig(log_config(log_format, level))
