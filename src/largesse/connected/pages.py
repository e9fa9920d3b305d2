"""/connect/{token}: where a connected organization's member lands from a session URL.

GET only shows "You are about to sign in to <org>" with a button: mail scanners and link
previews open links, and must not spend them. POST spends the token (service.spend_session_token:
single use, expiry, one conditional UPDATE) and shows the member's organization with a link back
to the platform's return_url carrying `state`. When the dashboard exists, the lead makes the POST
start a dashboard session and redirect there instead of rendering this page.

Like the redemption pages: server-rendered (Jinja2, autoescaped), no script, a strict CSP, and
a signed double-submit CSRF token (the redemption pages' scheme, its own cookie), so a third-party
page cannot sign a visitor into someone else's organization (login CSRF). Tokens are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from pathlib import Path
from urllib.parse import urlsplit

import jinja2
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, Response

from largesse import db, forms_limits
from largesse.connected import service
from largesse.dashboard import signin
from largesse.funding import service as funding
from largesse.orgs import service as orgs
from largesse.orgs.models import members
from largesse.redemption import security
from largesse.redemption.style import format_money, theme_css

log = logging.getLogger("largesse.connect")
router = APIRouter(include_in_schema=False)
templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True, trim_blocks=True, lstrip_blocks=True,
)
THEME = theme_css(None, None)
CSRF_COOKIE = "largesse_connect_csrf"
MAX_FORM_BYTES = 4096
MAX_FIELDS = 10  # the form sends a CSRF token
# What may follow /connect/: a token (secrets.token_urlsafe); anything else is the HTML 404.
TOKEN_PATH = re.compile(r"[A-Za-z0-9_\-]{1,200}")

MESSAGES = {
    "not_found": (404, "Link not found", "This sign-in link is not valid. Ask the application you came from for "
                  "a new one."),
    "used": (410, "Link already used", "This sign-in link has already been used; each link works once. Ask the "
             "application you came from for a new one."),
    "expired": (410, "Link expired", "This sign-in link has expired. Ask the application you came from for a "
                "new one."),
    "csrf": (403, "Please try again", "Your sign-in could not be confirmed because the page had expired or "
             "cookies are blocked. Reload the page and try again."),
    "bad_form": (400, "Please try again", "The sign-in form could not be read. Reload the page and try again."),
    "too_large": (413, "Please try again", "The sign-in form was too large. Reload the page and try again."),
    "error": (500, "Something went wrong", "We could not sign you in. Please try again in a few minutes."),
}


def _render(status: int, **context) -> HTMLResponse:
    response = HTMLResponse(templates.get_template("connect.html").render(theme=THEME, **context),
                            status_code=status)
    response.headers.update(security.page_headers([security.style_hash(THEME)]))
    return response


def _message(kind: str, headers: dict | None = None) -> HTMLResponse:
    status, title, text = MESSAGES[kind]
    response = _render(status, step="message", title=title, text=text)
    if headers:
        response.headers.update(headers)
    return response


def not_found_page(request: Request, status: int = 404) -> HTMLResponse:
    """For 404/405 anywhere under /connect/ (paths.serve_html_404); never echoes the path."""
    response = _message("not_found")
    response.status_code = status
    return response


def too_large_page() -> HTMLResponse:
    """413 for a body over the server's limit (app.RequestGuard), before any route."""
    return _message("too_large")


def _csrf_key(request: Request) -> bytes:
    state = request.app.state
    if getattr(state, "connect_csrf_key", None) is None:
        base = security.load_csrf_key(state.engine, state.settings)
        state.connect_csrf_key = hmac.new(base, b"largesse connect csrf", hashlib.sha256).digest()
    return state.connect_csrf_key


def _show(request: Request, token: str) -> Response:
    with db.read(request.app.state.engine) as conn:
        try:
            session = service.peek_session(conn, token, request.app.state.settings.environment)
        except service.SessionError as exc:
            return _message(exc.kind)
        organization = orgs.get_org(conn, session.organization_id).name
    nonce = request.cookies.get(CSRF_COOKIE)
    fresh = not security.valid_nonce(nonce)
    if fresh:
        nonce = security.new_nonce()
    response = _render(200, step="confirm", title=f"Sign in to {organization}", organization=organization,
                       token=token, csrf_field=security.CSRF_FIELD,
                       csrf_token=security.csrf_token(_csrf_key(request), service.hash_token(token), nonce))
    if fresh:
        response.set_cookie(CSRF_COOKIE, nonce, httponly=True, samesite="lax", path="/connect",
                            secure=request.app.state.settings.public_url.startswith("https://"))
    return response


def _spend(request: Request, token: str, body: bytes) -> Response:
    try:
        form = forms_limits.first_values(body, max_fields=MAX_FIELDS)
    except forms_limits.FormRefused:  # e.g. too many fields: a 400 page, not a 500
        return _message("bad_form")
    if not forms_limits.same_origin(request) or not security.csrf_ok(
            _csrf_key(request), service.hash_token(token), request.cookies.get(CSRF_COOKIE),
            form.get(security.CSRF_FIELD)):
        return _message("csrf")
    try:
        with db.write(request.app.state.engine) as conn:
            member_id, organization_id, return_url, state = service.spend_session_token(
                conn, token, request.app.state.settings.environment)
            organization = orgs.get_org(conn, organization_id)
            balance = funding.resolve(conn, organization_id, "BALANCE")
            member = conn.execute(members.select().where(members.c.id == member_id)).first()
            session = signin.start_session(conn, member_id=member_id)  # the dashboard's own session
    except service.SessionError as exc:
        return _message(exc.kind)
    response = _render(200, step="signed_in", title=f"Signed in to {organization.name}", organization=organization.name,
                   member=member.name or member.email,
                   balance=format_money(balance.available_cents, balance.currency_code),
                   return_link=service.return_link(return_url, state),
                   return_host=urlsplit(return_url).netloc)
    signin.set_session_cookie(response, session, public_url=request.app.state.settings.public_url)
    return response


def _guarded(handler, request: Request, *args) -> Response:
    try:
        return handler(request, *args)
    except Exception as exc:  # the app-wide handler would log the path, which holds the token
        if db.is_unavailable(exc):
            log.warning("connect page: database unavailable (%s)", request.method)
            response = _message("error", {"Retry-After": "2"})
            response.status_code = 503
            return response
        log.exception("connect page failed (%s)", request.method)
        return _message("error")


@router.get("/connect/{token}")
async def show_connect(request: Request, token: str) -> Response:
    return await run_in_threadpool(_guarded, _show, request, token)


@router.post("/connect/{token}")
async def spend_connect(request: Request, token: str) -> Response:
    try:
        body = await forms_limits.read_body(request, MAX_FORM_BYTES)
    except forms_limits.FormRefused:
        return _message("too_large")
    return await run_in_threadpool(_guarded, _spend, request, token, body)
