"""Typed errors and the one error body every non-2xx response carries.

Body: {"errors": {"message": str, "payload": {...}}} where payload mirrors the request
keys that caused the error, e.g. {"reward": {"value": {"denomination": ["must be > 0"]}}}.
Services raise these; the app's handlers turn them (and framework errors) into responses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


class ApiError(Exception):
    status_code = 400
    default_message = "Bad request"

    def __init__(self, message: str | None = None, payload: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        self.message = message or self.default_message
        self.payload = payload or {}
        self.headers = headers
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        return {"errors": {"message": self.message, "payload": self.payload}}


class BadRequest(ApiError):
    status_code = 400


class Unauthorized(ApiError):
    """401, with the challenge HTTP requires on it (RFC 9110 §15.5.2): the Bearer scheme."""

    status_code = 401
    default_message = "Missing or invalid API key"

    def __init__(self, message: str | None = None, payload: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message, payload, {"WWW-Authenticate": "Bearer", **(headers or {})})


class PaymentRequired(ApiError):
    status_code = 402
    default_message = "Insufficient funds"


class Forbidden(ApiError):
    status_code = 403
    default_message = "Forbidden"


class NotFound(ApiError):
    status_code = 404
    default_message = "Not found"


class Conflict(ApiError):
    status_code = 409
    default_message = "Conflict"


class Unprocessable(ApiError):
    status_code = 422
    default_message = "Unprocessable entity"


class TooManyRequests(ApiError):
    status_code = 429
    default_message = "Too many requests"


RETRY_AFTER_SECONDS = 2


class ServiceUnavailable(ApiError):
    """The database is unreachable, locked past the request's wait, or overloaded: retry later.

    Always carries Retry-After; the payload stays empty (nothing in the request was wrong)."""

    status_code = 503
    default_message = "The service is temporarily unavailable; retry shortly"

    def __init__(self, message: str | None = None, payload: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message, payload, {"Retry-After": str(RETRY_AFTER_SECONDS), **(headers or {})})


def nest(loc: Sequence[Any], message: str, into: dict[str, Any] | None = None) -> dict[str, Any]:
    """Place message at the path loc inside a nested dict, e.g. ("reward", "value") -> {...}.

    List indices become string keys ("rewards": {"0": {...}}) so the payload stays an object.
    """
    root = {} if into is None else into
    if not loc:
        root.setdefault("base", []).append(message)
        return root
    node = root
    for key in loc[:-1]:
        key = str(key)
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    last = str(loc[-1])
    existing = node.get(last)
    if isinstance(existing, list):
        existing.append(message)
    elif isinstance(existing, dict):
        existing.setdefault("base", []).append(message)
    else:
        node[last] = [message]
    return root


def payload_from(errors: Iterable[tuple[Sequence[Any], str]]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for loc, message in errors:
        nest(loc, message, root)
    return root


def first_message(errors: Sequence[tuple[Sequence[Any], str]]) -> str:
    if not errors:
        return "Bad request"
    loc, message = errors[0]
    where = ".".join(str(p) for p in loc)
    return f"{where}: {message}" if where else message
