"""POST /api/v2/orders as a plain ASGI route, ahead of FastAPI's routing.

The hottest operation skips what routing costs per request (Starlette's router walks every
route, FastAPI's request-response wrapper and exception middleware): about 0.3 ms of CPU
per order, a fifth of the API's whole cost per order (docs/benchmarks.md). Only the routing
is bypassed: the request goes through every middleware of the app (request ID and log line,
metrics, rate limits, the request guard), and the endpoint's work is the same function as
the FastAPI route's (orders.endpoints.place), whose declaration still documents the
operation in the OpenAPI schema. Errors go to the app's own exception handlers, so their
bodies and statuses are the ones the routed endpoint gives.

Installed as the innermost middleware (app.py adds it first); a request it does not take
(another path or method, a mounted root_path) continues unchanged.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request

API_PREFIX = "/api/v2"
PATH = API_PREFIX + "/orders"


class FastOrderRoute:
    def __init__(self, app, fastapi_app):
        self.app = app
        self.fastapi_app = fastapi_app
        self.route = None

    def _find_route(self):
        """The FastAPI route of POST /orders (its template labels the request log and metrics)."""
        from largesse.orders.endpoints import router

        for route in router.routes:
            if getattr(route, "path", None) == PATH.removeprefix(API_PREFIX) and "POST" in route.methods:
                return route
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST" or scope.get("root_path"):
            return await self.app(scope, receive, send)
        if self.route is None:
            self.route = self._find_route()
            if self.route is None:  # no such route: nothing to shortcut
                return await self.app(scope, receive, send)
        from largesse.orders.endpoints import place

        scope["route"] = self.route  # the route template for the request log and metrics
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        try:
            response = await place(self.fastapi_app.state, authorization, await _body(receive))
        except Exception as exc:
            response = await self._handle(scope, receive, exc)
        await response(scope, receive, send)

    async def _handle(self, scope, receive, exc: Exception):
        """The app's handler for exc, as Starlette's ExceptionMiddleware picks it; else re-raise
        (to ServerErrorMiddleware and the observability middleware, as for a routed request)."""
        handlers = self.fastapi_app.exception_handlers
        for cls in type(exc).__mro__:
            if cls is Exception:
                break
            handler = handlers.get(cls)
            if handler is not None:
                return await handler(Request(scope, receive), exc)
        if isinstance(exc, HTTPException) and exc.status_code in handlers:
            return await handlers[exc.status_code](Request(scope, receive), exc)
        raise exc


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            # The client left mid-body: nobody reads the answer, but the request log and the
            # metrics say 400 (as for the routed endpoints), not an unhandled error and a 500.
            from largesse.errors import BadRequest

            raise BadRequest("The client closed the connection before the whole body arrived", {})
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)
