"""Signing in to the dashboard: one-time links sent by email, and server-side sessions.

A sign-in link carries a 256-bit token, stored as its SHA-256 only, valid SIGNIN_MINUTES and
spent once. Its GET only shows a button: mail scanners open links, and only the POST (by
the person, with the CSRF token) spends it and starts a session.

The email goes through the delivery pipeline: request_signin() queues a `dashboard_signin`
job in the outbox; the worker calls send_signin_email(), which issues the token at that
moment (so no usable secret ever sits in the jobs table) and sends through the same
transport as reward emails (Maildir on a laptop, SMTP in production).

An invitation (the Team page's "Send invitation" and "Send the invitation again") is the same
job with `invite` set: its link lasts INVITE_DAYS, its email says who added them and as what,
and queueing it emits MEMBERS.INVITED.

A session's cookie holds a random value; the table holds its SHA-256. It ends on sign-out,
after IDLE of inactivity, or ABSOLUTE after sign-in, whichever comes first.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, timedelta
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from urllib.parse import quote, unquote, urlsplit

from sqlalchemy import Connection, Engine, and_, select, update

from largesse import db
from largesse.config import Settings
from largesse.dashboard.models import sessions, signin_tokens
from largesse.delivery import jobs as job_queue
from largesse.orgs.models import members, organizations
from largesse.orgs.service import REGISTERED, email_key, of_environment
from largesse.redemption import ratelimit
from largesse.timeutil import utcnow

log = logging.getLogger("largesse.dashboard")

JOB_KIND = "dashboard_signin"
SIGNIN_MINUTES = 15
INVITE_DAYS = 7  # an invitation's link: people read such mail days later
IDLE = timedelta(hours=12)
ABSOLUTE = timedelta(days=7)
TOUCH_EVERY = timedelta(minutes=5)  # last_seen_at is written at most this often: reads stay reads
COOKIE = "largesse_session"
# Sign-in requests per minute (the redemption limiter's table and 60 s windows).
LIMITS = ratelimit.RateLimits(window_seconds=60)
PER_ADDRESS = 3
PER_CLIENT = 20


def hash_secret(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def local_path(value: str | None) -> str | None:
    """value if it is a path of the dashboard on this site, else None (no open redirect): only
    "/dashboard", "/dashboard/..." or "/dashboard?...", with no scheme or host, no "//"
    anywhere, no backslash, no control character and no ".." segment (nor its percent-encoded
    forms, which browsers resolve as "..")."""
    if (not value or len(value) > 500 or "\\" in value or "//" in value
            or any(ord(c) < 32 or ord(c) == 127 for c in value)):
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return None
    if parts.path != "/dashboard" and not parts.path.startswith("/dashboard/"):
        return None
    decoded = unquote(parts.path)
    if "\\" in decoded or "//" in decoded or ".." in decoded.split("/"):
        return None
    return value


def signin_link(public_url: str, token: str) -> str:
    # The token rides in the query string: request logs record paths only (ops/middleware.py).
    return f"{public_url.rstrip('/')}/dashboard/signin/link?token={quote(token)}"


def issue_token(conn: Connection, *, member_id: str, organization_id: str, next_path: str | None = None,
                lifetime: timedelta = timedelta(minutes=SIGNIN_MINUTES)) -> str:
    token = secrets.token_urlsafe(32)
    now = utcnow()
    conn.execute(signin_tokens.insert().values(
        token_hash=hash_secret(token), member_id=member_id, organization_id=organization_id,
        next_path=local_path(next_path), created_at=now, expires_at=now + lifetime))
    return token


class RateLimited(Exception):
    def __init__(self, wait: int):
        super().__init__(f"retry in {wait} s")
        self.wait = wait


_MEMBERS_BY_EMAIL = (
    select(members.c.id, members.c.organization_id)
    .join(organizations, organizations.c.id == members.c.organization_id)
)


def request_signin(engine: Engine, settings: Settings, *, email: str, client: str, next_path: str | None) -> int:
    """Queue a sign-in email for every membership of this address (in this server's
    environment); returns how many, which the page never shows (no enumeration).
    Raises RateLimited past the per-address or per-client limit."""
    key = email_key(email)[:320]
    with db.write(engine) as conn:
        wait = ratelimit.check(conn, LIMITS, [(f"dsign-addr:{hash_secret(key)[:32]}", PER_ADDRESS),
                                              (f"dsign-ip:{client[:60]}", PER_CLIENT)])
    if wait is not None:
        raise RateLimited(wait)
    with db.write(engine) as conn:
        found = conn.execute(_MEMBERS_BY_EMAIL.where(
            members.c.email_key == key, members.c.active.is_(True),
            organizations.c.environment == settings.environment)).all()
        for row in found:
            queue_signin_email(conn, member_id=row.id, organization_id=row.organization_id, next_path=next_path)
    return len(found)


def queue_signin_email(conn: Connection, *, member_id: str, organization_id: str, next_path: str | None = None) -> None:
    """Queue a sign-in email in the caller's transaction."""
    job_queue.enqueue(conn, kind=JOB_KIND, organization_id=organization_id,
                      payload={"member_id": member_id, "next": local_path(next_path)}, max_attempts=5)


def queue_invitation(conn: Connection, *, member_id: str, organization_id: str, invited_by: str | None) -> None:
    """Queue an invitation email in the caller's transaction, and emit MEMBERS.INVITED."""
    from largesse.webhooks import service as webhooks

    job_queue.enqueue(conn, kind=JOB_KIND, organization_id=organization_id,
                      payload={"member_id": member_id, "next": None, "invite": True,
                               "invited_by": (invited_by or "")[:200]}, max_attempts=5)
    webhooks.emit(conn, organization_id, [("MEMBERS.INVITED", member_id)])


def send_signin_email(ctx, job) -> str:
    """The worker's handler of a dashboard_signin job (delivery/tasks.py dispatches to it)."""
    from largesse.delivery.transport import DeliveryError

    payload = job.payload or {}
    settings = ctx.settings
    with db.write(ctx.engine) as conn:
        member = conn.execute(
            select(members.c.id, members.c.email, members.c.name, members.c.role, members.c.organization_id,
                   organizations.c.name.label("org_name"))
            .join(organizations, organizations.c.id == members.c.organization_id)
            .where(members.c.id == payload.get("member_id"), members.c.active.is_(True))
        ).first()
        if member is None:
            job_queue.mark_done(conn, job, ctx.worker_id, "skipped: member not found")
            return "skipped"
        invite = bool(payload.get("invite"))
        token = issue_token(conn, member_id=member.id, organization_id=member.organization_id,
                            next_path=payload.get("next"),
                            lifetime=timedelta(days=INVITE_DAYS) if invite else timedelta(minutes=SIGNIN_MINUTES))
    try:
        link = signin_link(settings.public_url, token)
        message = (invitation_message(member, link, settings, str(payload.get("invited_by") or ""))
                   if invite else signin_message(member, link, settings))
    except (ValueError, TypeError) as exc:
        raise DeliveryError(f"cannot build the message: {exc}", permanent=True) from None
    ctx.transport.send(message)
    with db.write(ctx.engine) as conn:
        job_queue.mark_done(conn, job, ctx.worker_id)
    return "sent"


def _message(member, subject: str, kind: str, settings: Settings) -> EmailMessage:
    from largesse.delivery.compose import address, display_name, one_line

    msg = EmailMessage()
    # One line and no address syntax, as in reward emails: a CR in a member's or organization's
    # name made every sign-in email of that member fail to build, for good.
    msg["Subject"] = one_line(subject)
    msg["From"] = address(display_name(settings.mail_from_name, settings.mail_from), settings.mail_from)
    msg["To"] = address(display_name(member.name, member.email, "To"), member.email)
    msg["Date"] = format_datetime(utcnow().replace(tzinfo=UTC))
    msg["Message-ID"] = make_msgid(domain=settings.mail_from.rpartition("@")[2] or None)
    msg["X-Largesse-Kind"] = kind
    return msg


def _which_org(member) -> str:
    """The line that tells apart two organizations of the same name a person belongs to: its ID
    and the member's role there."""
    from largesse.orgs.roles import ROLES

    role = ROLES.get(member.role)
    title = role.title if role else str(member.role or "").title()
    return f"Organization: {member.org_name} (ID {member.organization_id}); your role there: {title}.\n\n"


def signin_message(member, link: str, settings: Settings) -> EmailMessage:
    msg = _message(member, f"Sign in to {member.org_name} on Largesse", "dashboard-signin", settings)
    msg.set_content(
        f"Hello{' ' + member.name if member.name else ''},\n\n"
        f"Open this link to sign in to the {member.org_name} dashboard:\n\n{link}\n\n"
        f"{_which_org(member)}"
        f"The link works once, for {SIGNIN_MINUTES} minutes. If you did not ask to sign in, ignore this "
        "message: nobody can sign in without it.\n")
    return msg


def invitation_message(member, link: str, settings: Settings, invited_by: str) -> EmailMessage:
    from largesse.orgs.roles import ROLES

    role = ROLES.get(member.role)
    as_what = f" as {role.title.lower()}. What this role can do: {role.description}" if role else "."
    who = " ".join((invited_by or "An administrator").split())
    msg = _message(member, f"{who} invited you to {member.org_name} on Largesse", "dashboard-invitation", settings)
    msg.set_content(
        f"Hello{' ' + member.name if member.name else ''},\n\n"
        f"{who} added you to the {member.org_name} dashboard on Largesse{as_what}\n\n"
        f"{_which_org(member)}"
        f"Open this link to sign in:\n\n{link}\n\n"
        f"The link works once, for {INVITE_DAYS} days. After that, or to sign in again later, ask for a new "
        f"link at {settings.public_url.rstrip('/')}/dashboard/signin with this address.\n")
    return msg


# --- spending a link, sessions ------------------------------------------------------------------

_LIVE_TOKEN = select(signin_tokens, members.c.email).join(members, members.c.id == signin_tokens.c.member_id)


def peek_token(conn: Connection, token: str, environment: str):
    """The token's row when this server (of `environment`) can still spend it (the GET's
    confirmation page), else None."""
    row = conn.execute(_LIVE_TOKEN.where(signin_tokens.c.token_hash == hash_secret(token),
                                         signin_tokens.c.organization_id.in_(of_environment(environment)))).first()
    if row is None or row.used_at is not None or row.expires_at <= utcnow():
        return None
    return row


@dataclass(frozen=True)
class SignedIn:
    cookie: str
    next_path: str | None


def spend_token(engine: Engine, token: str, environment: str) -> SignedIn | None:
    """Spend a sign-in token and start a session, in one transaction; None if the token is
    unknown, used, expired or of the other environment's server. The conditional UPDATE makes
    exactly one of two racing POSTs win."""
    now = utcnow()
    with db.write(engine) as conn:
        row = conn.execute(
            update(signin_tokens)
            .where(signin_tokens.c.token_hash == hash_secret(token), signin_tokens.c.used_at.is_(None),
                   signin_tokens.c.expires_at > now, signin_tokens.c.organization_id.in_(of_environment(environment)))
            .values(used_at=now)
            .returning(signin_tokens.c.member_id, signin_tokens.c.next_path)
        ).first()
        if row is None:
            return None
        active = conn.execute(select(members.c.active).where(members.c.id == row.member_id)).scalar_one_or_none()
        if not active:
            return None
        return SignedIn(start_session(conn, member_id=row.member_id), row.next_path)


def start_session(conn: Connection, *, member_id: str) -> str:
    """Start a session for a member; returns the cookie value (shown once, stored hashed).
    Any sign-in path (emailed link, connected organizations) ends here."""
    value = secrets.token_urlsafe(32)
    now = utcnow()
    org = conn.execute(select(members.c.organization_id).where(members.c.id == member_id)).scalar_one()
    conn.execute(sessions.insert().values(id_hash=hash_secret(value), member_id=member_id, organization_id=org,
                                          created_at=now, last_seen_at=now, expires_at=now + ABSOLUTE))
    # Member.last_login_at, and an INVITED member becomes REGISTERED (orgs.service.INVITED).
    conn.execute(members.update().where(members.c.id == member_id).values(last_login_at=now, status=REGISTERED))
    return value


def set_session_cookie(response, value: str, *, public_url: str) -> None:
    """The session cookie, the same for every sign-in path: HttpOnly, SameSite=Lax, scoped to
    /dashboard, Secure when the public URL is https."""
    response.set_cookie(COOKIE, value, httponly=True, samesite="lax", path="/dashboard",
                        secure=public_url.startswith("https://"), max_age=int(ABSOLUTE.total_seconds()))


SESSION_COLUMNS = (
    sessions.c.id_hash, sessions.c.last_seen_at, sessions.c.expires_at, sessions.c.ended_at,
    members.c.id.label("member_id"), members.c.email, members.c.name, members.c.role, members.c.active,
    organizations.c.id.label("organization_id"), organizations.c.name.label("org_name"),
    organizations.c.currency_code, organizations.c.environment,
)
_SESSION = (
    select(*SESSION_COLUMNS)
    .join(members, and_(members.c.id == sessions.c.member_id, members.c.organization_id == sessions.c.organization_id))
    .join(organizations, organizations.c.id == members.c.organization_id)
)


def load_session(engine: Engine, cookie: str | None):
    """The live session behind a cookie value, with its member and organization; else None.
    Records activity at most every TOUCH_EVERY, so most pages stay read-only."""
    if not cookie or len(cookie) > 100:
        return None
    id_hash = hash_secret(cookie)
    now = utcnow()
    with db.read(engine) as conn:
        row = conn.execute(_SESSION.where(sessions.c.id_hash == id_hash)).first()
    if (row is None or row.ended_at is not None or not row.active or row.expires_at <= now
            or row.last_seen_at + IDLE <= now):
        return None
    if now - row.last_seen_at >= TOUCH_EVERY:
        with db.write(engine) as conn:
            conn.execute(update(sessions).where(sessions.c.id_hash == id_hash).values(last_seen_at=now))
    return row


def end_session(engine: Engine, cookie: str | None) -> None:
    if not cookie or len(cookie) > 100:
        return
    with db.write(engine) as conn:
        conn.execute(update(sessions).where(sessions.c.id_hash == hash_secret(cookie), sessions.c.ended_at.is_(None))
                     .values(ended_at=utcnow()))
