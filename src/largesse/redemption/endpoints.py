"""The recipient's pages: GET /redeem/{token} shows the reward, POST redeems it.

Server-rendered HTML (Jinja2, autoescaped), no JavaScript needed. The POST answers with a
303 to the GET (post/redirect/get), so a reload never resubmits and the payout stays on the
page for every later visit. Tokens never reach a log: failures are logged by reward id.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import jinja2
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from largesse import db, forms_limits
from largesse.fraud import service as fraud
from largesse.redemption import ratelimit, recipient, security, service, tokens
from largesse.redemption.style import theme_css

log = logging.getLogger("largesse.redemption")
router = APIRouter(include_in_schema=False)
templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True, trim_blocks=True, lstrip_blocks=True,
)
MAX_FORM_BYTES = 4096
MAX_FIELDS = 10  # the form sends a CSRF token, the product chosen and the 4 bank account fields
DEVICE_COOKIE = "largesse_device"
DEVICE_COOKIE_SECONDS = 2 * 365 * 24 * 3600
DEFAULT_THEME = theme_css(None, None)

MESSAGES = {
    404: ("Link not found", "This reward link is not valid. Check that you opened the whole link from your "
          "message, or ask the sender for a new one."),
    403: ("Please try again", "Your choice could not be confirmed because the page had expired or cookies "
          "are blocked. Reload the page and choose again."),
    429: ("Too many attempts", "There have been too many requests for this page. Please wait a minute and "
          "try again."),
    500: ("Something went wrong", "We could not load your reward. Please try again in a few minutes."),
    400: ("Please try again", "Your choice could not be read. Reload the page and choose again."),
    413: ("Request too large", "The form was too large. Reload the page and choose again."),
    "canceled": ("This reward was canceled", "The sender canceled this reward, so it can no longer be "
                 "redeemed. If you think this is a mistake, please contact the sender."),
    "expired": ("This reward has expired", "The time to redeem this reward has passed, so it can no longer "
                "be redeemed. If you think this is a mistake, please contact the sender."),
    "replaced": ("This link was replaced", "A newer link to this reward has been sent to you. Please open the "
                 "most recent message about this reward."),
    "under_review": ("Your reward is under review", "Thank you: your choice has been received. Before it is "
                     "issued, it needs a quick review by the sender. Open this link again later to see your "
                     "reward; nothing more is needed from you."),
    "already_redeemed": ("Already redeemed", "This reward has already been redeemed, and a reward can only "
                         "be redeemed once."),
}


def _settings(request: Request):
    return request.app.state.settings


def _engine(request: Request):
    return request.app.state.engine


def _limits(request: Request) -> ratelimit.RateLimits:
    state = request.app.state
    if getattr(state, "redemption_limits", None) is None:
        state.redemption_limits = ratelimit.RateLimits.from_settings(state.settings)
    return state.redemption_limits


def _csrf_key(request: Request) -> bytes:
    state = request.app.state
    if getattr(state, "redemption_csrf_key", None) is None:
        state.redemption_csrf_key = security.load_csrf_key(_engine(request), _settings(request))
    return state.redemption_csrf_key


def _render(template: str, status: int, theme: str = DEFAULT_THEME, headers: dict | None = None,
            **context) -> HTMLResponse:
    html = templates.get_template(template).render(theme=theme, **context)
    response = HTMLResponse(html, status_code=status)
    response.headers.update(security.page_headers([security.style_hash(theme)]))
    if headers:
        response.headers.update(headers)
    return response


def _message(status: int, key=None, *, page: service.Page | None = None, token: str | None = None,
             headers: dict | None = None) -> HTMLResponse:
    title, text = MESSAGES[key if key is not None else status]
    return _render("message.html", status, page.theme if page else DEFAULT_THEME, headers,
                   title=title, text=text, page=page, token=token if key == "already_redeemed" else None)


def too_large_page() -> HTMLResponse:
    """413 for a body over the server's limit (app.RequestGuard), before any route: the page, not
    the API's JSON."""
    return _message(413)


def _rate_limited(request: Request, token: str, *, post: bool) -> HTMLResponse | None:
    limits = _limits(request)
    digest = tokens.hash_token(token)[:32]
    ip = request.client.host if request.client else "unknown"
    buckets = [(f"ip:{ip}", limits.per_ip), (f"token:{digest}", limits.per_token)]
    if post:
        buckets.append((f"post:{digest}", limits.posts_per_token))
    with db.write(_engine(request)) as conn:
        wait = ratelimit.check(conn, limits, buckets)
    if wait is None:
        return None
    return _message(429, headers={"Retry-After": str(wait)})


def _choose(request: Request, page: service.Page, status: int = 200, error: str | None = None,
            selected: str | None = None, field_errors: dict | None = None, values: dict | None = None) -> HTMLResponse:
    nonce = request.cookies.get(security.CSRF_COOKIE)
    fresh = not security.valid_nonce(nonce)
    if fresh:
        nonce = security.new_nonce()
    available = [o for o in page.options if o.available]
    if selected is None and len(available) == 1:
        selected = available[0].id
    response = _render("choose.html", status, page.theme, page=page, error=error, selected=selected,
                       field_errors=field_errors or {}, values=values or {},
                       csrf_field=security.CSRF_FIELD,
                       csrf_token=security.csrf_token(_csrf_key(request), page.token_hash, nonce),
                       any_available=bool(available),
                       sandbox=_settings(request).sandbox)
    if fresh:
        response.set_cookie(security.CSRF_COOKIE, nonce, httponly=True, samesite="lax", path="/redeem",
                            secure=_settings(request).public_url.startswith("https://"))
    if not security.valid_nonce(request.cookies.get(DEVICE_COOKIE)):
        # A random id per browser, for the fraud rules that look for one device used with
        # several emails (docs/fraud.md). It identifies nothing but this browser.
        response.set_cookie(DEVICE_COOKIE, security.new_nonce(), max_age=DEVICE_COOKIE_SECONDS, httponly=True,
                            samesite="lax", path="/redeem",
                            secure=_settings(request).public_url.startswith("https://"))
    return response


def _show(request: Request, token: str, status: int = 200, error: str | None = None,
          selected: str | None = None, **details_form) -> Response:
    with db.read(_engine(request)) as conn:
        page = service.load_page(conn, token, _settings(request))
        replaced = page is None and service.is_revoked(conn, token)
    if replaced:
        return _message(410, "replaced")
    if page is None:
        return _message(404)
    answer = service.link_answer(page.status)
    if answer in service.GONE:
        return _message(410, answer, page=page)
    if answer == "payout":
        return _render("payout.html", 200, page.theme, page=page, payout=page.payout)
    if answer == "under_review":
        return _message(200, "under_review", page=page)
    return _choose(request, page, status, error, selected, **details_form)


def _page_of(request: Request, token: str) -> service.Page | None:
    """The link's reward as its page shows it (the sender's name and colours), or None."""
    with db.read(_engine(request)) as conn:
        return service.load_page(conn, token, _settings(request))


def _get(request: Request, token: str) -> Response:
    limited = _rate_limited(request, token, post=False)
    return limited or _show(request, token)


def _post(request: Request, token: str, body: bytes) -> Response:
    limited = _rate_limited(request, token, post=True)
    if limited:
        return limited
    try:
        form = forms_limits.first_values(body, max_fields=MAX_FIELDS)
    except forms_limits.FormRefused as exc:  # e.g. too many fields: a 400 page, not a 500
        return _message(exc.status, page=_page_of(request, token))
    nonce = request.cookies.get(security.CSRF_COOKIE)
    if not forms_limits.same_origin(request) or not security.csrf_ok(
            _csrf_key(request), tokens.hash_token(token), nonce, form.get(security.CSRF_FIELD)):
        return _message(403, page=_page_of(request, token))  # branded as the link's other pages
    product_id = form.get("product_id", "")[:40]
    # What a product with recipient_details needs (a bank account); the service checks it only
    # for such a product. Never logged: a failure below logs the reward, not the form.
    details = {name: form.get(name, "") for kind in recipient.KINDS for name in recipient.FIELDS[kind]}
    device = request.cookies.get(DEVICE_COOKIE)
    client = fraud.Client(ip=request.client.host if request.client else None,
                          device_id=device if security.valid_nonce(device) else None)
    try:
        service.redeem(_engine(request), token=token, product_id=product_id, settings=_settings(request),
                       client=client, details=details)
    except service.RedemptionError as exc:
        if exc.kind == "not_found":
            return _show(request, token)  # 404, or 410 for a link replaced by a newer one
        if exc.kind in ("canceled", "expired"):
            return _message(410, exc.kind, page=_page_of(request, token))
        if exc.kind == "already_redeemed":  # e.g. a second tab: the sender's page, with a way to the payout
            return _message(409, "already_redeemed", page=_page_of(request, token), token=token)
        if exc.kind == "under_review":
            return _show(request, token)
        if exc.kind == "invalid_details":  # nothing redeemed: the form again, each error at its field
            return _show(request, token, status=400, error=exc.message, selected=product_id,
                         field_errors=exc.fields, values=recipient.echo(recipient.US_BANK_ACCOUNT, details))
        status = 400 if exc.kind == "invalid_choice" else 409
        return _show(request, token, status=status, error=exc.message, selected=product_id or None)
    return RedirectResponse(f"/redeem/{token}", status_code=303, headers=security.page_headers())


# What may follow /redeem/: a token (secrets.token_urlsafe). Any other path there answers the
# "link not found" page (app.py registers it with paths.serve_html_404), never the API's JSON.
TOKEN_PATH = re.compile(r"[A-Za-z0-9_\-]{1,200}")


def not_found_page(request: Request, status: int = 404) -> HTMLResponse:
    """The "link not found" page, for 404/405 anywhere under /redeem/; it never echoes the path."""
    return _message(status, 404)


def _guarded(handler, request: Request, token: str, *args) -> Response:
    try:
        return handler(request, token, *args)
    except Exception as exc:
        if db.is_unavailable(exc):  # the database is away (docs/operations.md): 503, retry later
            log.warning("redemption page: database unavailable (%s, %s)", request.method, type(exc).__name__)
            return _message(503, 500, headers={"Retry-After": "2"})
        # The app-wide handler would log the path, which holds the token: log without it.
        log.exception("redemption page failed (%s)", request.method)
        return _message(500)


@router.get("/redeem/{token}")
async def show_reward(request: Request, token: str) -> Response:
    return await run_in_threadpool(_guarded, _get, request, token)


@router.post("/redeem/{token}")
async def redeem_reward(request: Request, token: str) -> Response:
    try:
        body = await forms_limits.read_body(request, MAX_FORM_BYTES)
    except forms_limits.FormRefused as exc:
        return _message(exc.status)
    return await run_in_threadpool(_guarded, _post, request, token, body)
