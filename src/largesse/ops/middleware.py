"""One ASGI middleware, outermost: request ID, one log line, the latency histogram, last-resort errors.

- X-Request-ID: the client's value when sane (1-128 of [A-Za-z0-9._:=+/-]), else a new random
  one; set as a context variable (every log line of the request carries it) and returned on
  every response, errors included.
- The log line: method, path with secrets removed (redemption tokens; emails masked by the
  formatter), the route template, status and duration. Query strings are never logged.
- The histogram is labelled by route template (e.g. /api/v2/orders/{order_id}), never the
  raw path: no IDs or tokens in labels, and a bounded number of series.
- Exceptions that escape the app become the JSON error body here (503 with Retry-After when
  the database is unavailable, 500 otherwise), so even those carry the request ID.
"""

from __future__ import annotations

import logging
import os
import re
import time

from largesse import db, paths
from largesse.errors import RETRY_AFTER_SECONDS
from largesse.ops import logs, metrics

access_log = logging.getLogger("largesse.access")
error_log = logging.getLogger("largesse")

# Routers included under the API prefix report their template without it (FastAPI's
# included routes): the prefix is static, so adding it back shows no part of the request.
API_PREFIX = "/api/v2"
_SANE_ID = re.compile(rb"[A-Za-z0-9._:=+/-]{1,128}")
UNMATCHED = "<unmatched>"


LOGGED_PATH_LENGTH = 1000


def route_template(scope) -> str:
    """The template of the route that answered (`/api/v2/rewards/{id}`), for the metrics and
    the log: never the path itself, whose IDs and tokens would make a label per request.

    FastAPI leaves in scope["route"] the route as its router declared it, without the prefix it
    was included under: added back here, the API's (static) at once, the dashboard's found
    from the path. Routes that set no scope["route"] (FastAPI's /openapi.json) are looked up
    among the application's parameterless routes; what matched nothing is UNMATCHED."""
    route, path = scope.get("route"), scope["path"]
    template = getattr(route, "path", None)
    if template is None:
        return _static_route(scope) or UNMATCHED
    if path.startswith(API_PREFIX):
        return template if template.startswith(API_PREFIX) else API_PREFIX + template
    if path == template:
        return template
    regex = getattr(route, "path_regex", None)
    if regex is not None:
        for cut in [0, *(i for i, c in enumerate(path) if c == "/" and i), len(path)]:
            if regex.match(path[cut:]):
                return path[:cut] + template
    return template or UNMATCHED


def _static_route(scope) -> str | None:
    """The path itself when it is one of the application's parameterless routes (a set made
    once per application: an unknown path, of a scan for instance, walked every route)."""
    app = scope.get("app")
    if app is None:
        return None
    paths = getattr(app.state, "static_route_paths", None)
    if paths is None:
        paths = app.state.static_route_paths = frozenset(
            route.path for route in app.router.routes if "{" not in getattr(route, "path", "{"))
    return scope["path"] if scope["path"] in paths else None


def loggable_path(path: str) -> str:
    """The path without secrets: redemption, sign-in and report tokens are bearer secrets, never
    logged; and without control characters (a %0A in a URL must not start a forged log line)."""
    lowered = path.lower()
    for prefix in logs.TOKEN_PATHS:
        if lowered.startswith(prefix):
            return path[:len(prefix)] + "<token>"
    return paths.printable(path, LOGGED_PATH_LENGTH)


class ObservabilityMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        rid = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                if _SANE_ID.fullmatch(value):
                    rid = value
                break
        if rid is None:
            rid = os.urandom(12).hex().encode()
        rid_text = rid.decode()
        token = logs.request_id.set(rid_text)
        status = 499  # no response sent (the client went away): nginx's "client closed request"
        started = False

        async def send_with_id(message):
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            if started:
                raise
            status = await self._error_response(scope, exc, send_with_id)
        finally:
            seconds = time.perf_counter() - start
            template = route_template(scope)
            method = scope["method"]
            metrics.observe_request(method, template, status, seconds)
            if access_log.isEnabledFor(logging.INFO):
                logs.info_fields(access_log, "request", {
                    "request_id": rid_text, "method": method, "path": loggable_path(scope["path"]),
                    "route": template, "status": status, "duration_ms": round(seconds * 1000, 2)})
            logs.request_id.reset(token)

    async def _error_response(self, scope, exc: Exception, send) -> int:
        from largesse.web import json_response

        if db.is_unavailable(exc):
            error_log.warning("database unavailable on %s %s: %s", scope["method"], loggable_path(scope["path"]),
                              type(exc).__name__)
            status, message, headers = 503, UNAVAILABLE_MESSAGE, {"Retry-After": str(RETRY_AFTER_SECONDS)}
        else:
            error_log.error("unhandled error on %s %s", scope["method"], loggable_path(scope["path"]),
                            exc_info=exc)
            status, message, headers = 500, "Internal error; it has been logged", {}
        response = json_response({"errors": {"message": message, "payload": {}}}, status_code=status)
        response.headers.update(headers)

        async def no_body():
            return {"type": "http.disconnect"}

        await response(scope, no_body, send)
        return status


UNAVAILABLE_MESSAGE = "The database is unavailable; retry shortly"
