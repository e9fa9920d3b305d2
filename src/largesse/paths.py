"""Path parameters, checked once for every request, and HTML 404s for the pages people open.

PathGuard (ASGI, before routing) checks every path that is not plain (only [A-Za-z0-9/_.-],
at most 256 characters: the fast path, one regex match):

- control or format characters (Unicode categories Cc, Cf, Cs) or bytes that were not UTF-8
  (decoded as U+FFFD) anywhere in the path: 400 with the error body, without echoing the path.
  PostgreSQL cannot even store a NUL, and no error message carries control characters.
- a parameter of an API route (matched against the OpenAPI path templates) longer than
  MAX_LENGTH characters: 400. Any other value that cannot be an ID of this API (ids.py:
  [A-Z0-9]) in an `..._id` parameter: 404 "<Thing> not found", without echoing it. Two
  parameters take more than IDs: `order_id` (an order's ID or its external_id, free text) and
  `funding_source_id` (an ID or a keyword such as `balance`).

Plain paths (and so upper-case IDs, the hot path) go straight to the endpoints, whose lookups
answer 404 for unknown IDs as before.

HTML 404s: paths under a prefix registered with serve_html_404 (`/redeem/`, later the
dashboard) answer a page made for a person, never the API's JSON error, and never echo the
path: on 404/405 (app.py's HTTP error handler asks html_error_page first) and for any path
there that PathGuard would refuse. A redemption token must be URL-safe base64.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from largesse.ids import ALPHABET
from largesse.web import json_response

MAX_LENGTH = 200
MAX_ID_LENGTH = 64
PLAIN_PATH = re.compile(r"[A-Za-z0-9/_.\-]{0,256}")
ID_CHARS = frozenset(ALPHABET)
KEYWORD_CHARS = frozenset(string.ascii_letters + string.digits + "_")
FREE_TEXT_PARAMS = frozenset({"order_id"})  # an ID or an external_id
KEYWORD_PARAMS = frozenset({"funding_source_id"})  # an ID or "balance" (any case), "invoice"...
TEMPLATE_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


def _holds(value: str, categories: tuple[str, ...]) -> bool:
    if value.isascii():  # ASCII's unprintable characters are all control characters (Cc)
        return not value.isprintable()
    return any(c == "\ufffd" or unicodedata.category(c) in categories for c in value)


def unprintable(value: str) -> bool:
    """Whether value holds control/format characters or undecodable bytes (U+FFFD)."""
    return _holds(value, ("Cc", "Cf", "Cs"))


def undecodable_or_control(value: str) -> bool:
    """Whether value holds control characters (Cc), lone surrogates or U+FFFD (bytes that were
    not UTF-8): what no path parameter may hold. Free-text parameters (FREE_TEXT_PARAMS: an
    external_id) may hold format characters (Cf: a zero-width joiner inside an emoji, a bidi
    mark), which unprintable refuses in every other parameter."""
    return _holds(value, ("Cc", "Cs"))


def printable(value: str, max_length: int = MAX_LENGTH) -> str:
    """value with control/format characters replaced by '?', cut to max_length: safe to echo."""
    if unprintable(value):
        value = "".join("?" if unprintable(c) else c for c in value)
    return value if len(value) <= max_length else value[:max_length] + "..."


def _noun(name: str) -> str:
    return name.removesuffix("_id").replace("_", " ").capitalize()


def param_problem(name: str, value: str) -> tuple[int, str, dict] | None:
    """(status, message, payload) for a bad value of the path parameter `name`, or None."""
    what = "id" if name == "id" else f"{_noun(name).lower()} id"  # {id}: not "id id"
    if undecodable_or_control(value) if name in FREE_TEXT_PARAMS else unprintable(value):
        return 400, (f"Invalid {what}: it contains control characters or bytes that are not "
                     "UTF-8"), {"id": ["contains invalid characters"]}
    if len(value) > MAX_LENGTH:
        return 400, f"Invalid {what}: longer than {MAX_LENGTH} characters", {
            "id": [f"must be at most {MAX_LENGTH} characters"]}
    if name in FREE_TEXT_PARAMS or not name.endswith("_id"):
        return None
    allowed = KEYWORD_CHARS if name in KEYWORD_PARAMS else ID_CHARS
    if len(value) > MAX_ID_LENGTH or not allowed.issuperset(value):
        return 404, f"{_noun(name)} not found (not an ID of this API)", {"id": ["not found"]}
    return None


def _templates(app) -> list[tuple[re.Pattern, list[str]]]:
    """The API's path templates as regexes, from the OpenAPI document (built once per app)."""
    templates = getattr(app.state, "path_templates", None)
    if templates is None:
        templates = []
        try:
            paths = app.openapi().get("paths", {})
        except Exception:  # no document, no parameter rules: the path-wide 400 still applies
            paths = {}
        for template in paths:
            names = TEMPLATE_PARAM.findall(template)
            if names:
                pattern = TEMPLATE_PARAM.sub(r"(?P<\1>[^/]+)", re.escape(template).replace(r"\{", "{")
                                             .replace(r"\}", "}"))
                templates.append((re.compile(pattern), names))
        app.state.path_templates = templates
    return templates


def path_problem(app, path: str) -> tuple[int, str, dict] | None:
    """What PathGuard answers for a path that is not plain, or None to let it through."""
    for pattern, names in _templates(app):
        match = pattern.fullmatch(path)
        if match:
            for name in names:
                problem = param_problem(name, match.group(name))
                if problem:
                    return problem
            return None
    if unprintable(path):
        return 400, "Invalid path: it contains control characters or bytes that are not UTF-8", {
            "path": ["contains invalid characters"]}
    return None


class PathGuard:
    """ASGI middleware: refuses bad path parameters before any endpoint sees them."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or PLAIN_PATH.fullmatch(scope["path"]):
            return await self.app(scope, receive, send)
        path = scope["path"]
        app = scope["app"]
        page = _html_prefix(app, path)
        if page is not None:
            prefix, render, valid = page
            if unprintable(path) or (valid is not None and not valid.fullmatch(path[len(prefix):])):
                return await render(Request(scope), 404)(scope, receive, send)
            return await self.app(scope, receive, send)
        problem = path_problem(app, path)
        if problem is None:
            return await self.app(scope, receive, send)
        status, message, payload = problem
        response = json_response({"errors": {"message": message, "payload": payload}}, status_code=status)
        return await response(scope, receive, send)


PageRenderer = Callable[[Request, int], Response]


def serve_html_404(app, prefix: str, render: PageRenderer, *, valid: re.Pattern | None = None) -> None:
    """Answer 404/405 under prefix (e.g. "/redeem/") with render(request, status), an HTML page.

    valid: what may follow the prefix; other paths there (if not plain) get the page at once."""
    pages = getattr(app.state, "html_error_pages", None)
    if pages is None:
        pages = app.state.html_error_pages = []
    pages.append((prefix, render, valid))


def _html_prefix(app, path: str) -> tuple[str, PageRenderer, re.Pattern | None] | None:
    for page in getattr(app.state, "html_error_pages", ()):
        if path.startswith(page[0]) or path == page[0].rstrip("/"):
            return page
    return None


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route takes on this path (for a 405's Allow header), asked of the
    router itself: its routes are nested (included routers), and one route holds one method."""
    from starlette.routing import Match

    routes = request.app.router.routes
    allowed = [method for method in _METHODS
               if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)]
    if "GET" in allowed and "HEAD" not in allowed:  # HeadAsGet answers HEAD wherever GET is taken
        allowed.insert(allowed.index("GET") + 1, "HEAD")
    return allowed


def html_error_page(request: Request, status: int) -> Response | None:
    """The registered HTML page for this request's path and a 404/405 status, or None. A 405
    names the methods the path takes (Allow), as the API's do."""
    if status not in (404, 405):
        return None
    page = _html_prefix(request.app, request.url.path)
    if not page:
        return None
    response = page[1](request, status)
    if status == 405:
        response.headers["Allow"] = ", ".join(allowed_methods(request))
    return response


def install(app) -> None:
    """Add PathGuard to app (call before adding middleware that should run first)."""
    app.add_middleware(PathGuard)
