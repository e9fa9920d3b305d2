"""The dashboard's request plumbing: one route() decorator, the page context, rendering.

A page handler is a plain function `handler(ctx, **path_params) -> Response`, run in the
thread pool. route() collects the body of a POST on the event loop (within forms' size
limits) and, in the thread pool: resolves the viewer through access.viewer() with the action
the route needs, refuses a POST whose browser names another site as its Origin (403, as the
redemption pages: forms_limits.same_origin), parses the form (within forms' field limits: else
400/413 with the message page), checks its CSRF token, and turns access's exceptions into the sign-in redirect, the 403
page and the 404 page. Handlers parse, call a service, render: rules live in the services.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote, urlsplit

import jinja2
from cryptography.fernet import Fernet, InvalidToken
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from largesse import db, forms_limits
from largesse.dashboard import access, forms, signin
from largesse.money import amount_in
from largesse.redemption import security

log = logging.getLogger("largesse.dashboard")
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
)
PREFIX = "/dashboard"
FLASH_COOKIE = "largesse_dashboard_flash"
FLASH_SECONDS = 120


def money(cents: int | None, currency: str = "USD") -> str:
    """An amount for people: "1,250.50 USD", "-100.00 USD", "5,000 JPY"."""
    if cents is None:
        return ""
    sign = "-" if cents < 0 else ""
    return f"{sign}{amount_in(abs(cents), currency, grouped=True)} {currency}"


def wire_money(amount, currency: str) -> str:
    """An amount in currency units (a JSON number as the API shows it, or a Decimal as a form
    or a CSV row read it), for people, as money() shows cents."""
    return money(int(Decimal(str(amount)).scaleb(2)), currency)


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else ""


# Catalog categories (and words in them) that are acronyms or brands: shown as they are written.
CATEGORY_NAMES = {"ach": "ACH", "paypal": "PayPal", "visa_card": "Visa card", "merchant_card": "Merchant card",
                  "charity": "Charity", "venmo": "Venmo", "cash_app": "Cash App"}


def category_name(category: str | None) -> str:
    """A catalog category for people: "ACH", "PayPal", "Merchant card" (never "Ach", "Paypal")."""
    if not category:
        return ""
    return CATEGORY_NAMES.get(category.lower(), category.replace("_", " ").capitalize())


def number(value: int | None) -> str:
    """A count with its thousands grouped, as amounts are: "3,202"."""
    return "" if value is None else f"{value:,}"


def campaign_labels(rows) -> dict[str, str]:
    """{campaign id: the text a dropdown shows}: the name, and where two campaigns share it,
    what tells them apart (products, creation date, ID)."""
    def same(row) -> str:
        return " ".join((row.name or "").split()).casefold()

    seen = Counter(same(row) for row in rows)
    labels = {}
    for row in rows:
        if seen[same(row)] > 1:
            count = len(row.products or [])
            created = row.created_at.strftime("%Y-%m-%d") if row.created_at else ""
            labels[row.id] = (f"{row.name} ({count} product{'s' if count != 1 else ''}, created {created}, "
                              f"ID {row.id})")
        else:
            labels[row.id] = row.name
    return labels


def _page_messages(context) -> list[str]:
    """The problems a page shows about its form: `errors` (a list, _errors.html) or one `error`."""
    errors = context.get("errors") or []
    if errors:
        return [str(e) for e in errors]
    error = context.get("error")
    return [str(error)] if error else []


@jinja2.pass_context
def invalid(context, label: str, *hints: str) -> Markup:
    """The attributes that tie a form control to the page's messages about it, for every form:
    aria-invalid="true" and aria-describedby naming each message (ids error-1, error-2, ... in
    the page's order, as _errors.html gives them) that starts with the control's label, as the
    problems are worded ("Amount: use a dot for decimals: 25.50", bulk.in_words); `hints`: the
    control's own descriptions, named first. Without a problem: only the hints."""
    ids = [f"error-{i}" for i, text in enumerate(_page_messages(context), 1) if text.startswith(f"{label}:")]
    described = " ".join([*hints, *ids])
    attrs = Markup(' aria-invalid="true"') if ids else Markup("")
    return attrs + (Markup(' aria-describedby="{}"').format(described) if described else Markup(""))


TEMPLATES.filters["money"] = money
TEMPLATES.filters["wire_money"] = wire_money
TEMPLATES.filters["when"] = when
TEMPLATES.filters["category_name"] = category_name
TEMPLATES.filters["number"] = number
TEMPLATES.globals["campaign_names"] = campaign_labels
TEMPLATES.globals["invalid"] = invalid


@functools.lru_cache(maxsize=8)
def _flash_box(csrf_key: bytes) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"largesse-dashboard-flash:" + csrf_key).digest()))


@dataclass
class Ctx:
    request: Request
    engine: object
    settings: object
    viewer: access.Viewer | None
    form: forms.Form = field(default_factory=forms.Form)
    nonce: str = ""
    new_nonce: bool = False
    csrf_key: bytes = b""
    flash_out: tuple[str, str] | None = None  # (cookie path, value) to set; value "" clears it

    @property
    def query(self):
        return self.request.query_params

    def arg(self, name: str, default: str = "", max_length: int = 200) -> str:
        return forms.clean(self.request.query_params.get(name) or default)[:max_length]

    def int_arg(self, name: str, max_length: int) -> int | None:
        """A query parameter of ASCII digits as a number, else None ("²" is a digit to
        str.isdigit, not to int(): a paging parameter of it answered 500)."""
        text = self.arg(name, max_length=max_length)
        return int(text) if text.isascii() and text.isdigit() else None

    def render(self, template: str, status: int = 200, *, headers: dict | None = None, **context) -> HTMLResponse:
        who = self.viewer
        html = TEMPLATES.get_template(f"dashboard/{template}").render(
            viewer=who, csrf_field=forms.CSRF_FIELD,
            csrf_token=forms.csrf_value(self.csrf_key, who.session_hash if who else None, self.nonce),
            path=self.request.url.path, sandbox=self.settings.sandbox, **context)
        response = HTMLResponse(html, status_code=status)
        self.finish(response)
        if headers:
            response.headers.update(headers)
        return response

    def finish(self, response: Response) -> Response:
        response.headers.update(security.page_headers())
        if self.new_nonce:
            response.set_cookie(forms.CSRF_COOKIE, self.nonce, httponly=True, samesite="lax", path=PREFIX,
                                secure=self.secure)
        if self.flash_out is not None:
            path, value = self.flash_out
            response.set_cookie(FLASH_COOKIE, value, max_age=FLASH_SECONDS if value else 0, httponly=True,
                                samesite="lax", path=path, secure=self.secure)
        return response

    # One-time values (a new API key, a new reward's links) across a post/redirect/get: the POST
    # answers a redirect with a cookie scoped to the target page's path, valid FLASH_SECONDS;
    # the first GET of that page shows it and clears the cookie, so a reload shows it no more
    # and the POST is not repeated. Nothing is stored on the server (the database keeps only
    # the key's or the link's hash). The cookie is encrypted (Fernet, a key derived from the
    # server's CSRF secret): it carries a secret, which a signed-only cookie showed to whatever
    # reads the browser's cookie jar or a proxy's headers. It is bound to the session and kind.
    def redirect_with_flash(self, url: str, kind: str, data) -> Response:
        plain = json.dumps({"kind": kind, "session": self._flash_session(), "data": data}, separators=(",", ":"))
        self.flash_out = (urlsplit(url).path, _flash_box(self.csrf_key).encrypt(plain.encode()).decode("ascii"))
        return self.redirect(url)

    def take_flash(self, kind: str):
        """The one-time value a redirect_with_flash left for this page, or None; consumed."""
        raw = self.request.cookies.get(FLASH_COOKIE)
        if not raw:
            return None
        self.flash_out = (self.request.url.path, "")  # shown once: the answer clears it
        try:
            value = json.loads(_flash_box(self.csrf_key).decrypt(raw.encode("ascii"), ttl=FLASH_SECONDS))
        except (InvalidToken, ValueError, UnicodeEncodeError):
            return None
        if not isinstance(value, dict) or value.get("kind") != kind or value.get("session") != self._flash_session():
            return None
        return value.get("data")

    def _flash_session(self) -> str:
        return self.viewer.session_hash if self.viewer else ""

    @property
    def secure(self) -> bool:
        return self.settings.public_url.startswith("https://")

    def redirect(self, url: str) -> Response:
        return self.finish(RedirectResponse(url, status_code=303))

    def message(self, status: int, title: str, text: str) -> HTMLResponse:
        return self.render("message.html", status, title=title, text=text)


def _csrf_key(request: Request) -> bytes:
    state = request.app.state
    if getattr(state, "redemption_csrf_key", None) is None:  # one key with the redemption pages
        state.redemption_csrf_key = security.load_csrf_key(state.engine, state.settings)
    return state.redemption_csrf_key


REFUSED_TITLES = {413: "The form is too large", 400: "The form could not be read"}


def _run(handler, request: Request, body: bytes | forms_limits.FormRefused | None, action: str | None,
         kwargs: dict) -> Response:
    """In the thread pool. body: None for a GET; for a POST, the bytes forms.read_body() took,
    or the FormRefused it raised. The cheap checks come first (the sign-in, then the CSRF
    cookie), so a form is parsed only when its content can matter."""
    state = request.app.state
    nonce = request.cookies.get(forms.CSRF_COOKIE)
    fresh = not security.valid_nonce(nonce)
    ctx = Ctx(request, state.engine, state.settings, None, forms.Form(),
              nonce=security.new_nonce() if fresh else nonce, new_nonce=fresh, csrf_key=_csrf_key(request))
    try:
        if action is not None:
            ctx.viewer = access.viewer(state.engine, request.cookies.get(signin.COOKIE), action=action,
                                       environment=state.settings.environment)
        if body is not None:
            if not forms_limits.same_origin(request):  # the recipient pages' rule: a named Origin is this host
                return _foreign(ctx)
            if fresh:
                return _expired(ctx)
            try:
                if isinstance(body, forms_limits.FormRefused):
                    raise body
                ctx.form = forms.parse(request, body)
            except forms_limits.FormRefused as exc:
                advice = " Go back, reload the page and send it again." if exc.advice is None else exc.advice
                return ctx.message(exc.status, REFUSED_TITLES.get(exc.status, REFUSED_TITLES[400]),
                                   exc.text + advice)
            if not forms.csrf_ok(ctx.csrf_key, ctx.viewer.session_hash if ctx.viewer else None, nonce, ctx.form):
                return _expired(ctx)
        return handler(ctx, **kwargs)
    except forms_limits.FormRefused as exc:  # a field the handler read: too long, or a NUL character
        return ctx.message(exc.status, REFUSED_TITLES.get(exc.status, REFUSED_TITLES[400]),
                           f"{exc.text} Go back, correct it and send it again.")
    except access.SignInRequired:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return ctx.redirect(f"{PREFIX}/signin?next={quote(target, safe='')}")
    except access.Denied:
        return ctx.message(403, "Not allowed", "Your role in this organization does not allow this page. "
                           "Ask an administrator of your organization.")
    except access.NotFoundPage:
        return ctx.message(404, "Not found", "There is nothing here. Check the address, or go back to the "
                           "overview.")
    except Exception as exc:
        if db.is_unavailable(exc):
            return ctx.message(503, "Try again in a moment", "The database is not reachable right now.")
        raise


def _foreign(ctx: Ctx) -> HTMLResponse:
    return ctx.message(403, "Not sent from this site", "The form was sent from another site, so nothing was "
                       "changed. Open the dashboard at this address and send it from there.")


def bad_filter(label: str, value: str, expected: str) -> forms_limits.FormRefused:
    """A list's filter that cannot be applied (an unknown status, a date that is no date), to
    raise: the 400 message page naming it, never the list without it (as if all matched)."""
    return forms_limits.FormRefused(400, f'{label}: "{value}" {expected}.')


def _expired(ctx: Ctx) -> HTMLResponse:
    return ctx.message(403, "Please try again", "The form had expired or cookies are blocked. "
                       "Go back, reload the page and send it again.")


def route(router, method: str, path: str, *, action: str | None = "view", upload: bool = False):
    """Register handler(ctx, **path params) for METHOD path. action None: no sign-in needed;
    upload: the route takes a multipart form with a file (forms.MAX_UPLOAD_BYTES)."""

    def register(handler):
        async def endpoint(request: Request) -> Response:
            # On the event loop only the body's bytes are collected; parsing it, like the
            # handler, runs in the thread pool (_run).
            body = None
            if method == "POST":
                try:
                    body = await forms.read_body(request, upload=upload)
                except forms_limits.FormRefused as exc:
                    body = exc
            return await run_in_threadpool(_run, handler, request, body, action, dict(request.path_params))

        endpoint.__name__ = handler.__name__
        router.add_api_route(path, endpoint, methods=[method], include_in_schema=False)
        return handler

    return register


def too_large_page() -> Response:
    """A body over the app's limit (app.RequestGuard, before the dashboard reads it): a page,
    never the API's JSON, saying what to do with the file."""
    html = TEMPLATES.get_template("dashboard/message.html").render(
        viewer=None, csrf_field="", csrf_token="", path="", sandbox=False, title="The file is too large",
        text=forms.FILE_TOO_LARGE)
    return HTMLResponse(html, status_code=413, headers=security.page_headers())


def not_found_page(request: Request, status: int = 404) -> Response:
    """404/405 anywhere under /dashboard/ (paths.serve_html_404): a page, never JSON."""
    html = TEMPLATES.get_template("dashboard/message.html").render(
        viewer=None, csrf_field="", csrf_token="", path="", sandbox=False, title="Not found",
        text="There is nothing here. Check the address, or go back to the overview.")
    return HTMLResponse(html, status_code=status, headers=security.page_headers())
