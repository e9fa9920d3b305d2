"""CSRF protection and response headers for the redemption pages.

CSRF: a signed double-submit token. The first GET sets a random nonce in a cookie
(HttpOnly, SameSite=Lax, Path=/redeem); the form carries HMAC-SHA256(key, token_hash ":" nonce).
A POST is accepted only when the cookie is present and the form value is that HMAC of the
cookie's nonce and this link's token. A cross-site page can neither read nor set the cookie,
and cannot compute the HMAC without the key, so it cannot forge a choice; the value is tied
to one link, so a value seen on one page is useless on another.

The key must be the same in every server process: it is derived from LARGESSE_SECRET_KEY
when that is set, otherwise a random key is stored in the database (redemption_secrets) by
the first process that needs it, and read by the others. Nothing is kept per session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from sqlalchemy import Engine, select

from largesse import db
from largesse.config import Settings
from largesse.redemption.models import redemption_secrets
from largesse.timeutil import utcnow

CSRF_COOKIE = "largesse_redeem_csrf"
CSRF_FIELD = "csrf_token"
SECRET_NAME = "csrf_key"


def load_csrf_key(engine: Engine, settings: Settings) -> bytes:
    """The process-independent CSRF key (see the module docstring)."""
    if settings.secret_keys:  # the current (first) of LARGESSE_SECRET_KEY's comma-separated keys
        return hmac.new(settings.secret_keys[0].encode(), b"largesse redemption csrf", hashlib.sha256).digest()
    with db.write(engine) as conn:
        insert = db.upsert_insert(conn)
        conn.execute(
            insert(redemption_secrets)
            .values(name=SECRET_NAME, value=secrets.token_hex(32), created_at=utcnow())
            .on_conflict_do_nothing(index_elements=[redemption_secrets.c.name])
        )
        value = conn.execute(
            select(redemption_secrets.c.value).where(redemption_secrets.c.name == SECRET_NAME)
        ).scalar_one()
    return bytes.fromhex(value)


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def valid_nonce(value: str | None) -> bool:
    return bool(value) and 20 <= len(value) <= 64 and value.replace("-", "").replace("_", "").isalnum()


def csrf_token(key: bytes, token_hash: str, nonce: str) -> str:
    return hmac.new(key, f"{token_hash}:{nonce}".encode(), hashlib.sha256).hexdigest()


def csrf_ok(key: bytes, token_hash: str, nonce: str | None, submitted: str | None) -> bool:
    if not valid_nonce(nonce) or not submitted or not submitted.isascii():  # compare_digest raises on non-ASCII
        return False
    return hmac.compare_digest(csrf_token(key, token_hash, nonce), submitted)


def style_hash(css: str) -> str:
    """The CSP source for one inline <style> block (the campaign's colours)."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(css.encode()).digest()).decode() + "'"


def page_headers(style_sources: list[str] | None = None) -> dict[str, str]:
    """Headers for every redemption page.

    no-referrer keeps the token (in the URL) out of Referer headers sent to logo hosts;
    no-store keeps codes out of shared caches and the back-forward cache; the CSP allows our
    own script and styles, the hashed colour block, and http(s) images (campaign logos).
    """
    styles = " ".join(["'self'", *(style_sources or [])])
    csp = (
        "default-src 'none'; script-src 'self'; "
        f"style-src {styles}; img-src 'self' https: http: data:; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        "Cross-Origin-Opener-Policy": "same-origin",
    }
