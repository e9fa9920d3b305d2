"""What an operator watches: request IDs and logs, Prometheus metrics, readiness, and the
503 answered when the database is away (docs/operations.md).

app.py calls `install(app)` last, so that the middleware is the outermost one and sees (and
stamps with a request ID) every response, including those of the other middlewares.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from sqlalchemy.exc import SQLAlchemyError

from largesse.errors import RETRY_AFTER_SECONDS

log = logging.getLogger("largesse")


def install(app: FastAPI) -> None:
    from starlette.responses import Response

    from largesse import db
    from largesse.ops import health, metrics
    from largesse.ops.middleware import UNAVAILABLE_MESSAGE, ObservabilityMiddleware, loggable_path
    from largesse.web import json_response, run_db

    @app.exception_handler(SQLAlchemyError)
    async def database_error(request: Request, exc: SQLAlchemyError):
        if db.is_unavailable(exc):
            log.warning("database unavailable on %s %s: %s", request.method, loggable_path(request.url.path),
                        type(exc).__name__)
            response = json_response({"errors": {"message": UNAVAILABLE_MESSAGE, "payload": {}}}, status_code=503)
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return response
        log.error("unhandled error on %s %s", request.method, loggable_path(request.url.path), exc_info=exc)
        return json_response({"errors": {"message": "Internal error; it has been logged", "payload": {}}},
                             status_code=500)

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request):
        """200 when the database answers and its schema is current; 503 (error body) otherwise."""
        engine = request.app.state.engine
        ready, body = await run_db(engine, health.readiness, engine)
        response = json_response(body, status_code=200 if ready else 503)
        if not ready:
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics(request: Request):
        engine = request.app.state.engine
        return Response(await run_db(engine, metrics.render, engine), media_type=metrics.CONTENT_TYPE)

    app.add_middleware(ObservabilityMiddleware)
