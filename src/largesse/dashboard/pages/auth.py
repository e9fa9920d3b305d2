"""Sign in by emailed link, sign out."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db, email_address
from largesse.dashboard import signin
from largesse.dashboard.web import PREFIX, route

router = APIRouter()


@route(router, "GET", "/signin", action=None)
def signin_form(ctx):
    return ctx.render("signin.html", next=signin.local_path(ctx.arg("next", max_length=500)), sent=False,
                      email="", error=None)


@route(router, "POST", "/signin", action=None)
def signin_request(ctx):
    email = ctx.form.get("email", max_length=320)
    next_path = signin.local_path(ctx.form.get("next", max_length=500))
    if not email_address.valid(email):
        return ctx.render("signin.html", 400, next=next_path, sent=False, email=email,
                          error="Enter an email address, like name@example.com.")
    client = ctx.request.client.host if ctx.request.client else "unknown"
    try:
        signin.request_signin(ctx.engine, ctx.settings, email=email, client=client, next_path=next_path)
    except signin.RateLimited as exc:
        return ctx.render("signin.html", 429, headers={"Retry-After": str(exc.wait)}, next=next_path, sent=False,
                          email=email, error="Too many sign-in requests. Wait a minute and try again.")
    # The same answer whether or not the address is a member's (no enumeration).
    return ctx.render("signin.html", next=next_path, sent=True, email=email, error=None)


def _expired(ctx):
    return ctx.message(410, "This sign-in link has expired", "Sign-in links work once, for 15 minutes. "
                       "Ask for a new one on the sign-in page.")


@route(router, "GET", "/signin/link", action=None)
def signin_confirm(ctx):
    """Shows a button only: mail scanners that open the link must not spend it."""
    token = ctx.arg("token", max_length=100)
    with db.read(ctx.engine) as conn:
        row = signin.peek_token(conn, token, ctx.settings.environment) if token else None
    if row is None:
        return _expired(ctx)
    return ctx.render("signin_confirm.html", email=row.email, token=token)


@route(router, "POST", "/signin/link", action=None)
def signin_spend(ctx):
    token = ctx.form.get("token", max_length=100)
    signed_in = signin.spend_token(ctx.engine, token, ctx.settings.environment) if token else None
    if signed_in is None:
        return _expired(ctx)
    response = ctx.redirect(signed_in.next_path or PREFIX)
    signin.set_session_cookie(response, signed_in.cookie, public_url=ctx.settings.public_url)
    return response


@route(router, "POST", "/signout", action="view")
def signout(ctx):
    signin.end_session(ctx.engine, ctx.request.cookies.get(signin.COOKIE))
    response = ctx.redirect(f"{PREFIX}/signin")
    response.delete_cookie(signin.COOKIE, path=PREFIX, httponly=True, samesite="lax", secure=ctx.secure)
    return response
