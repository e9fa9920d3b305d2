"""The ASGI application: routers, the one error shape, static files, OpenAPI."""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from largesse import __version__, apidoc, auth, db, paths, ratelimit
from largesse.config import Settings
from largesse.db import make_engine
from largesse.errors import ApiError, ServiceUnavailable, Unauthorized, first_message, payload_from
from largesse.web import json_response

log = logging.getLogger("largesse")

API_PREFIX = "/api/v2"
MAX_BODY_BYTES = 1_000_000
STATIC_DIR = Path(__file__).parent / "static"

# Operations whose client decodes 422 but not 400 (API.md §1): validation failures there
# answer 422 so that the official client exposes the error body as `.data`.
# (method, path or path prefix ending in "/", path suffix)
VALIDATION_422 = (("POST", "/campaigns", ""), ("PUT", "/campaigns/", ""), ("POST", "/fields", ""),
                  ("POST", "/rewards/", ""), ("POST", "/webhooks/", "/simulate"))


def _validation_status(request: Request) -> int:
    path = request.url.path.removeprefix(API_PREFIX)
    for method, prefix, suffix in VALIDATION_422:
        if request.method == method and (path == prefix or (prefix.endswith("/") and path.startswith(prefix))) \
                and path.endswith(suffix):
            return 422
    return 400


class HeadAsGet:
    """HEAD answered as GET without the body (RFC 9110 §9.3.2: a server that takes GET takes
    HEAD), on every path: FastAPI's routes declare GET only. Innermost, so the request log,
    metrics and rate limits see the HEAD it is; the status and headers (Content-Length
    included) are the GET's. uvicorn also leaves out a HEAD's body; this does it for any server."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)

        async def headers_only(message):
            if message["type"] == "http.response.body":
                if message.get("more_body"):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def _error(status: int, message: str, payload: dict | None = None, headers: dict | None = None):
    response = json_response({"errors": {"message": message, "payload": payload or {}}}, status_code=status)
    if headers:
        response.headers.update(headers)
    return response


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _read_as_json(scope) -> None:
    """An API body is JSON whatever its Content-Type (docs/api.md: `curl -d` sends
    application/x-www-form-urlencoded, some clients none): the request is given a JSON one, so
    the endpoints whose body FastAPI reads (campaigns, fields, webhooks, members...) read it as
    those that parse their own bytes (orders, invoices, top-ups) always did."""
    headers = scope["headers"]
    for name, value in headers:
        if name == b"content-type":
            if b"json" in value.lower():
                return
            break
    scope["headers"] = [(n, v) for n, v in headers if n != b"content-type"] + [
        (b"content-type", b"application/json")]


# The human surfaces under their prefixes: each module's too_large_page() answers a body over
# the limit with its own page (looked up when one comes, as the routes' modules import this one's).
_HUMAN_PAGES = (("/dashboard/", "largesse.dashboard.web"), ("/redeem/", "largesse.redemption.endpoints"),
                ("/connect/", "largesse.connected.pages"))


async def _too_large(scope):
    """413: the error body, or for a human's page (a dashboard CSV upload, a recipient's choice,
    a connected member's sign-in) a page that says what to do. An API write's key is checked
    first, as for every other refusal (install_error_handlers: auth_first): an unknown key gets
    its 401, a read-only one its 403, not the size limit."""
    for prefix, pages in _HUMAN_PAGES:
        if scope["path"].startswith(prefix):
            return importlib.import_module(pages).too_large_page()
    if scope["path"].startswith(API_PREFIX + "/"):
        refused = await auth.refusal(Request(scope))
        if refused is not None:
            return _error(refused.status_code, refused.message, refused.payload, refused.headers)
    return _error(413, f"Request body larger than {MAX_BODY_BYTES} bytes")


class RequestGuard:
    """Checks made before any routing or body parsing.

    - API requests without a Bearer Authorization header answer 401 at once, so an
      anonymous caller learns nothing about routes or body validation.
    - Bodies over MAX_BODY_BYTES answer 413: by Content-Length up front; a chunked body (no
      length) is read here first, up to the limit.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"].startswith(API_PREFIX + "/") or scope["path"] == API_PREFIX:
            authorization = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not authorization[:7].lower() == b"bearer " or not authorization[7:].strip():
                return await _error(401, "Missing or malformed Authorization header; send "
                                         "'Authorization: Bearer <API key>'",
                                    headers=Unauthorized().headers)(scope, receive, send)
            if scope["method"] in _BODY_METHODS:
                _read_as_json(scope)
        chunked = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit():
                    return await _error(400, "Invalid Content-Length")(scope, receive, send)
                if int(value) > MAX_BODY_BYTES:
                    return await (await _too_large(scope))(scope, receive, send)
                break  # the server delivers exactly that many bytes
            if name == b"transfer-encoding":
                chunked = True
        else:
            if chunked:  # no length up front: read it here, so an oversized body is a 413 too
                return await self._buffered(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _buffered(self, scope, receive, send):
        """A body without Content-Length, read whole (at most MAX_BODY_BYTES) before the app
        sees it: the app's JSON and form readers then never meet a limit halfway through."""
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went away
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > MAX_BODY_BYTES:
                return await (await _too_large(scope))(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


def _serve_api_docs(app: FastAPI) -> None:
    """/docs: Swagger UI on this server's own copy of its files (the fastapi-offline package
    ships them), so the page works on a laptop without internet and loads nothing from a
    third party."""
    from importlib.resources import files

    from fastapi.openapi.docs import get_swagger_ui_html

    assets = "/docs/assets"
    app.mount(assets, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def api_docs():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} API",
                                   swagger_js_url=f"{assets}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{assets}/swagger-ui.css",
                                   swagger_favicon_url=f"{assets}/favicon.png")


def _document_self_parsed_bodies(app: FastAPI) -> None:
    """Put the schemas of bodies that endpoints parse themselves (web.json_body_doc) into the
    OpenAPI components, where their requestBody $refs point; then the bearer scheme, each
    operation's errors and API.md's constraints (apidoc.py)."""
    from largesse.web import SELF_PARSED_BODIES

    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schemas = generate().setdefault("components", {}).setdefault("schemas", {})
            for model in SELF_PARSED_BODIES:
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, definition in schema.pop("$defs", {}).items():
                    schemas.setdefault(name, definition)
                schemas[model.__name__] = schema
            _document_bearer_auth(app.openapi_schema)
            apidoc.document_errors(app.openapi_schema, API_PREFIX)
            apidoc.document_constraints(app.openapi_schema)
        return app.openapi_schema

    app.openapi = openapi


def _document_bearer_auth(schema: dict) -> None:
    """Every /api/v2 operation takes the key as `Authorization: Bearer <key>` (auth.bearer reads
    it itself, so FastAPI knows of no scheme): say so, for /docs' Authorize button and for
    clients generated from the document."""
    schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearerAuth"] = {
        "type": "http", "scheme": "bearer",
        "description": "An API key (`largesse keys create`, or POST /organizations/create_api_key)"}
    for path, operations in schema.get("paths", {}).items():
        if path.startswith(API_PREFIX + "/"):
            for operation in operations.values():
                operation["security"] = [{"bearerAuth": []}]


def install_error_handlers(app: FastAPI) -> None:
    async def auth_first(request: Request, status: int):
        """A write's 401/403 wins over its other 4xx (auth.refusal): nothing about the request
        is answered to a key that may not make it."""
        if status in (400, 404, 409, 413, 422) and request.url.path.startswith(API_PREFIX + "/"):
            return await auth.refusal(request)
        return None

    async def invalid_request(request: Request, problems: list):
        """A malformed body or parameters: the route's 400 or 422 with every problem (API.md §4),
        after the key's 401/403."""
        status = _validation_status(request)
        refused = await auth_first(request, status)
        if refused is not None:
            return _error(refused.status_code, refused.message, refused.payload)
        return _error(status, "Invalid request: " + first_message(problems), payload_from(problems))

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        exc = await auth_first(request, exc.status_code) or exc
        if isinstance(exc, ServiceUnavailable):  # SQLite's write lock held past the wait: one line, as
            # for a database that is away (ops.install; docs/operations.md)
            from largesse.ops.middleware import loggable_path

            log.warning("database unavailable on %s %s: %s", request.method, loggable_path(request.url.path),
                        exc.message)
        return _error(exc.status_code, exc.message, exc.payload, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err.get("loc", ()) if p not in ("body", "query", "path", "header"))
            # Drop pydantic's union/function tags so the payload mirrors the request keys.
            loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
            message = err.get("msg", "is invalid")
            if err.get("type") == "json_invalid":
                # Its loc ends with the character position, which is no request key.
                loc, message = (), "Malformed JSON body"
            elif message.startswith("Value error, "):
                message = message[len("Value error, "):]
            problems.append((loc, message))
        return await invalid_request(request, problems)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        page = paths.html_error_page(request, exc.status_code)  # /redeem/...: a page for a person
        if page is not None:
            return page
        message = exc.detail if isinstance(exc.detail, str) else "Error"
        status = exc.status_code
        if status == 400:
            # FastAPI's own refusal of a body its JSON reader failed on other than by a syntax
            # error (not UTF-8, nesting too deep): the same answer as any malformed body of the
            # route (validation_error's), after the key's 401/403 as every refusal of a write.
            if message == "There was an error parsing the body":
                message = "Malformed JSON body"
            return await invalid_request(request, [((), message)])
        if status == 404:
            message = f"No route for {request.method} {paths.printable(request.url.path)}"
        headers = getattr(exc, "headers", None)
        if status == 405:
            message = f"Method {request.method} is not allowed on {paths.printable(request.url.path)}"
            # Starlette's Allow names the methods of the first route of the path only.
            headers = {**(headers or {}), "Allow": ", ".join(paths.allowed_methods(request))}
        return _error(status, message, {}, headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        from largesse.ops.middleware import loggable_path

        log.exception("unhandled error on %s %s", request.method, loggable_path(request.url.path))
        return _error(500, "Internal error; it has been logged")


def create_served_app() -> FastAPI:
    """The app of a `largesse serve` process (uvicorn's factory): create_app, then its heap
    frozen out of the cyclic garbage collector.

    Everything built at start-up (routes, models, metadata: most of the heap) leaves the GC's
    view, so a full collection walks the objects of requests only. Measured under load: full
    collections of 40-240 ms, a few per 10 s, every request of the process waiting meanwhile
    (the p99); after, a few ms (docs/benchmarks.md)."""
    from largesse.delivery.supervisor import API_PARENT_ENV, bind_to_parent

    bind_to_parent(API_PARENT_ENV)  # an API process of `serve --workers N` dies with serve
    app = create_app()
    gc.collect()
    gc.freeze()
    return app


def _fastapi_telemetry(settings: Settings) -> dict:
    """FastAPI's own OpenTelemetry instrumentation (FastAPI 0.142 and later), off unless
    LARGESSE_OPENTELEMETRY=1: Largesse's observability is its request log and /metrics
    (docs/operations.md). Even with no OpenTelemetry provider configured, FastAPI looks for one
    on every request, three provider lookups that read the environment: 0.02 ms of the 0.35-0.38
    ms of CPU that an order costs in-process (docs/benchmarks.md, issue 9 seventh pass)."""
    import inspect

    if settings.opentelemetry or "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def create_app(settings: Settings | None = None, engine=None) -> FastAPI:
    settings = settings or Settings.from_env()
    engine = engine or make_engine(settings.database_url, pool_size=settings.db_slots,
                                   timeout=settings.db_timeout_seconds,
                                   statement_timeout=settings.db_statement_timeout_seconds,
                                   background_checkpoints=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        # Delivery runs in child processes, never on this process's threads (its GIL is the
        # event loop's): delivery/supervisor.py.
        supervisor = None
        if settings.run_worker:
            from largesse.delivery.supervisor import DeliverySupervisor

            supervisor = DeliverySupervisor(settings).start()
        try:
            # PostgreSQL: requests' database work awaits on this loop (web.run_db, db.on_loop).
            async with db.loop_engine(engine, pool_size=settings.db_slots):
                yield
        finally:
            if supervisor is not None:
                await anyio.to_thread.run_sync(supervisor.stop)

    app = FastAPI(
        title="Largesse",
        version=__version__,
        description=(
            "Self-hostable reward ordering service, wire-compatible with the Tremendous API v2. "
            "Authenticate with `Authorization: Bearer <API key>`. Every error answers "
            '`{"errors": {"message": str, "payload": object}}`.'
        ),
        lifespan=lifespan,
        openapi_url="/openapi.json",
        redirect_slashes=False,  # exact paths only (API.md §7.16): /orders/ is a 404, not a redirect
        docs_url=None,  # served below with Swagger UI's own files, not a CDN
        redoc_url=None,
        **_fastapi_telemetry(settings),
    )
    app.state.settings = settings
    app.state.engine = engine
    from largesse.orders.fast_route import FastOrderRoute

    app.add_middleware(HeadAsGet)  # innermost of all: HEAD reaches the routes as GET
    # Innermost but HeadAsGet, so added next: POST /api/v2/orders without the routing
    # (orders/fast_route.py).
    app.add_middleware(FastOrderRoute, fastapi_app=app)
    paths.install(app)  # path parameters checked before routing (paths.py)
    ratelimit.install(app, settings, engine, prefix=API_PREFIX + "/")  # per key/org limits (ratelimit.py)
    app.add_middleware(RequestGuard)
    install_error_handlers(app)

    from largesse.campaigns.endpoints import router as campaigns_router
    from largesse.catalog.endpoints import router as products_router
    from largesse.connected import pages as connect_pages
    from largesse.connected.endpoints import router as connected_router
    from largesse.delivery.endpoints import router as delivery_router
    from largesse.fields.endpoints import router as fields_router
    from largesse.forex.endpoints import router as forex_router
    from largesse.fraud.endpoints import router as fraud_router
    from largesse.funding.endpoints import router as funding_router
    from largesse.funding.transactions import router as transactions_router
    from largesse.invoices.endpoints import router as invoices_router
    from largesse.orders.approval_endpoints import router as approvals_router
    from largesse.orders.endpoints import router as orders_router
    from largesse.orgs.endpoints import router as orgs_router
    from largesse.redemption.endpoints import TOKEN_PATH as REDEEM_TOKEN_PATH
    from largesse.redemption.endpoints import not_found_page as redemption_not_found
    from largesse.redemption.endpoints import router as redemption_router
    from largesse.reports.endpoints import download_router as report_download_router
    from largesse.reports.endpoints import router as reports_router
    from largesse.topups.endpoints import router as topups_router
    from largesse.webhooks.endpoints import router as webhooks_router

    for router in (orders_router, products_router, campaigns_router, fields_router, funding_router,
                   transactions_router, orgs_router, webhooks_router, approvals_router, topups_router,
                   invoices_router, forex_router, connected_router, delivery_router, reports_router, fraud_router):
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(report_download_router)  # /reports/download/{token}: the CSV link, outside the API
    app.include_router(redemption_router)  # /redeem/{token}: HTML pages, outside the API
    paths.serve_html_404(app, "/redeem/", redemption_not_found, valid=REDEEM_TOKEN_PATH)
    app.include_router(connect_pages.router)  # /connect/{token}: connected members' sign-in page
    paths.serve_html_404(app, "/connect/", connect_pages.not_found_page, valid=connect_pages.TOKEN_PATH)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _serve_api_docs(app)
    from largesse.dashboard import router as dashboard

    dashboard.install(app)  # /dashboard: the organization's web pages (dashboard/)
    _document_self_parsed_bodies(app)

    @app.get("/healthz", include_in_schema=False)
    async def healthz():
        return json_response({"status": "ok", "version": __version__, "environment": settings.environment})

    @app.get("/", include_in_schema=False)
    def root():
        return json_response({"service": "largesse", "version": __version__, "api": API_PREFIX, "docs": "/docs"})

    from largesse import ops

    ops.install(app)  # /readyz, /metrics, request IDs and logs; keep it last: its middleware is the outermost
    return app
