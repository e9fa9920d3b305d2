"""Reading the dashboard's forms, and their CSRF protection.

Forms are read by largesse.forms_limits (the redemption and connect pages' reader too), with
the standard library, so the dashboard needs no form library: urlencoded by urllib, multipart
(the CSV upload) by its small parser. Within limits: at most MAX_FORM_BYTES and MAX_FIELDS
fields; a multipart body only where a route takes an upload (route(upload=True)), at most
MAX_UPLOAD_BYTES in MAX_PARTS parts, one of them a file, none of them nested multipart. Beyond a
limit, forms_limits.FormRefused: 413 or 400 with the dashboard's message page (web.route).

CSRF is the redemption pages' signed double-submit (redemption/security.py), reused: a
random nonce in an HttpOnly, SameSite=Lax cookie scoped to /dashboard, and in each form
HMAC(key, binding ":" nonce), where the binding is "dashboard:" plus the session's hash
(or "dashboard:signin" before signing in). A cross-site page can neither read the cookie
nor compute the HMAC; a value from one session is useless in another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

from starlette.requests import Request

from largesse import forms_limits
from largesse.redemption import security

CSRF_COOKIE = "largesse_dashboard_csrf"
CSRF_FIELD = security.CSRF_FIELD
MAX_FORM_BYTES = 64 * 1024
MAX_UPLOAD_BYTES = 900 * 1024  # under the app's 1 MB body limit (app.RequestGuard): 5,000 rows fit
MAX_FIELDS = 400  # urlencoded: send one carries up to 100 products and each custom field
MAX_PARTS = 120  # multipart (the CSV upload): the file, up to 100 products, a few choices
OVERHEAD = 4096  # over a limit: a multipart body's boundaries and part headers


# --- amounts ------------------------------------------------------------------------------------
# The one rule for every amount typed in the dashboard (send one, CSV rows, approval threshold,
# invoices, top-ups): a dot for decimals; a comma only as a strict thousands separator.
_PLAIN = re.compile(r"-?[0-9]+(?:\.[0-9]{1,2})?")
_GROUPED = re.compile(r"-?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]{1,2})?")
_DECIMAL_COMMA = re.compile(r"-?(?:[0-9]{1,3}(?:\.[0-9]{3})+|[0-9]+),([0-9]{1,2})")  # 7,5  25,50  1.000,50
_DOT_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:\.[0-9]{3})+")  # 1.000  12.345.678: thousands, or 3 decimals?
_LONG_FRACTION = re.compile(r"-?[0-9]+\.[0-9]{3,}")
AMOUNT_HELP = "must be a number like 25, 25.50 or 1,000.50 (a dot for decimals, commas only between thousands)"


class AmountError(ValueError):
    """What is wrong with a typed amount, in words for the person who typed it."""


def read_amount(text: str) -> Decimal:
    """The typed amount, exactly, as a Decimal: plain decimals ("7.50", "1000") or a comma as a
    strict thousands separator ("1,000", "12,345,678.90"), at most 2 decimals. Anything else
    raises AmountError: "7,5" is refused ("use a dot for decimals: 7.50"), never read as 75, and
    "1.000" ("use a comma between thousands (1,000) ..."), never read as 1. Whether the amount is
    acceptable (positive, decimals of the currency, not too large) stays the services' rule."""
    text = text.strip()
    if not text or len(text) > 30:
        raise AmountError(AMOUNT_HELP)
    if _PLAIN.fullmatch(text):
        return Decimal(text)
    if _GROUPED.fullmatch(text):
        return Decimal(text.replace(",", ""))
    if _DOT_THOUSANDS.fullmatch(text):
        # "1.000" is one thousand in much of the world and 1.000 in the rest: never guessed.
        grouped = text.replace(".", ",")
        raise AmountError(f"use a comma between thousands ({grouped}) and a dot for decimals (at most 2)")
    if _LONG_FRACTION.fullmatch(text):
        raise AmountError("must have at most 2 decimal places")
    match = _DECIMAL_COMMA.fullmatch(text)
    if match:
        whole = text[:match.start(1) - 1].replace(".", "")
        fraction = match.group(1)
        suggestion = f"{whole}.{fraction.ljust(2, '0')}"
        raise AmountError(f"use a dot for decimals: {suggestion}")
    raise AmountError(AMOUNT_HELP)


@dataclass
class Form:
    values: dict[str, list[str]] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # name -> (filename, content)

    def get(self, name: str, default: str = "", max_length: int = 1000) -> str:
        """The field, without surrounding spaces. A value longer than max_length or holding a
        NUL character is refused (FormRefused 400, the message page), never cut or altered:
        what was sent is either taken as it is or not at all, as the API does."""
        items = self.values.get(name)
        return _checked(name, items[0], max_length) if items else default

    def getlist(self, name: str, max_length: int = 1000) -> list[str]:
        return [v for v in (_checked(name, raw, max_length) for raw in self.values.get(name, [])) if v]

    def raw(self, name: str, max_length: int) -> str:
        """A field read leniently (cleaned and cut): the CSRF token, whose mismatch is its own answer."""
        items = self.values.get(name)
        return clean(items[0])[:max_length] if items else ""


def _checked(name: str, value: str, max_length: int) -> str:
    if "\x00" in value:
        raise forms_limits.FormRefused(400, f"The field {name} holds a NUL character, which no text can hold.")
    value = value.strip()
    if len(value) > max_length:
        raise forms_limits.FormRefused(400, f"The field {name} is longer than {max_length} characters.")
    return value


def clean(value: str) -> str:
    """Without NUL characters (no database column can hold one) and surrounding spaces."""
    return value.replace("\x00", "").strip()


async def read_body(request: Request, *, upload: bool = False) -> bytes:
    """The raw body, within the route's size limit (FormRefused 413 beyond it): MAX_UPLOAD_BYTES
    for a multipart body where the route takes an upload, else MAX_FORM_BYTES. Async, for the
    event loop: it only collects bytes; parse() reads them, in the thread pool."""
    if upload and request.headers.get("content-type", "").startswith("multipart/form-data"):
        try:
            return await forms_limits.read_body(request, MAX_UPLOAD_BYTES, overhead=OVERHEAD)
        except forms_limits.FormRefused as exc:
            if exc.status == 413:  # sending it again cannot help: the file is what is too large
                raise forms_limits.FormRefused(413, FILE_TOO_LARGE, advice="") from None
            raise
    return await forms_limits.read_body(request, MAX_FORM_BYTES, overhead=OVERHEAD)


FILE_TOO_LARGE = (f"The file is larger than the {MAX_UPLOAD_BYTES // 1024} KB one upload can be (5,000 rows with "
                  "a few short columns fit). Split it into smaller files and upload each one.")


def parse(request: Request, body: bytes) -> Form:
    """The form in a body read_body() accepted (FormRefused 400 beyond the field limits).
    Synchronous and bounded by the limits: web.route runs it in the thread pool."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        values, files = forms_limits.parse_multipart(content_type, body, max_parts=MAX_PARTS, max_files=1)
        return Form(values=values, files=files)
    return Form(values=forms_limits.parse_urlencoded(body, max_fields=MAX_FIELDS, keep_blank_values=True))


def binding(session_hash: str | None) -> str:
    return f"dashboard:{session_hash or 'signin'}"


def csrf_value(key: bytes, session_hash: str | None, nonce: str) -> str:
    return security.csrf_token(key, binding(session_hash), nonce)


def csrf_ok(key: bytes, session_hash: str | None, nonce: str | None, form: Form) -> bool:
    return security.csrf_ok(key, binding(session_hash), nonce, form.raw(CSRF_FIELD, max_length=200) or None)
