"""Team (administrators only): members and their roles, invitations by email."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db
from largesse.dashboard import access, signin
from largesse.dashboard.web import route
from largesse.errors import ApiError
from largesse.orgs import service as orgs
from largesse.orgs.models import members
from largesse.orgs.roles import ROLES
from largesse.redemption import ratelimit

router = APIRouter()
_ROLE_CHOICES = {r.id: (r.title, r.description) for r in ROLES.values()}
NOTICES = {"invited": f"Invitation sent: they will receive a sign-in link by email, valid {signin.INVITE_DAYS} days.",
           "reinvited": f"Invitation sent again, with a new link valid {signin.INVITE_DAYS} days.",
           "role": "Role changed.", "removed": "Member removed."}


def _team(ctx, status: int = 200, *, error: str | None = None, entered: dict | None = None):
    """The page; after a refused invitation, its form shows what was typed (entered)."""
    with db.read(ctx.engine) as conn:
        people = orgs.list_members(conn, ctx.viewer.organization_id)
    return ctx.render("team.html", status, title="Team", people=people, roles=_ROLE_CHOICES, error=error,
                      notice=NOTICES.get(ctx.arg("done", max_length=20)),
                      entered=entered or {"email": "", "name": "", "role": "MEMBER"})


@route(router, "GET", "/team", action="admin")
def team(ctx):
    return _team(ctx)


@route(router, "POST", "/team/invite", action="admin")
def invite(ctx):
    email = ctx.form.get("email", max_length=320)
    name = ctx.form.get("name", max_length=200) or None
    role = ctx.form.get("role", "MEMBER", max_length=40).upper()
    org = ctx.viewer.organization_id
    try:  # the API's own rules (orgs.service): a known role, a valid new address, MEMBERS.CREATED
        with db.write(ctx.engine) as conn:
            member_id = orgs.add_member_checked(conn, organization_id=org, email=email, name=name, role=role)
            signin.queue_invitation(conn, member_id=member_id, organization_id=org, invited_by=_inviter(ctx))
    except ApiError as exc:
        return _team(ctx, 400, error=exc.message, entered={"email": email, "name": name or "", "role": role})
    return ctx.redirect("/dashboard/team?done=invited")


def _inviter(ctx) -> str:
    return ctx.viewer.name or ctx.viewer.email


@route(router, "POST", "/team/members/{member_id}/invite", action="admin")
def reinvite(ctx, member_id: str):
    """Send the invitation again (a lost email, an expired link), to a member who has not
    signed in yet; at most PER_ADDRESS a minute, as sign-in emails are."""
    org = ctx.viewer.organization_id
    wait = None
    with db.write(ctx.engine) as conn:
        member = access.owned(conn, ctx.viewer, members, member_id)
        if member.status == orgs.INVITED:
            wait = ratelimit.check(conn, signin.LIMITS, [(f"dinvite:{member_id}", signin.PER_ADDRESS)])
            if wait is None:
                signin.queue_invitation(conn, member_id=member_id, organization_id=org, invited_by=_inviter(ctx))
    if member.status != orgs.INVITED:
        return _team(ctx, 409, error=f"{member.email} has signed in already: they can ask for a sign-in link "
                                     "on the sign-in page.")
    if wait is not None:
        return _team(ctx, 429, error=f"Too many invitations to this address: try again in {wait} s.")
    return ctx.redirect("/dashboard/team?done=reinvited")


@route(router, "POST", "/team/members/{member_id}/role", action="admin")
def change_role(ctx, member_id: str):
    role = ctx.form.get("role", max_length=40).upper()
    with db.read(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, members, member_id)
    try:  # the API's rules: a known role, never demote the last administrator
        orgs.update_member_role(ctx.engine, organization_id=ctx.viewer.organization_id, member_id=member_id,
                                role=role)
    except ApiError as exc:
        return _team(ctx, exc.status_code, error=exc.message)
    return ctx.redirect("/dashboard/team?done=role")


@route(router, "POST", "/team/members/{member_id}/remove", action="admin")
def remove(ctx, member_id: str):
    with db.read(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, members, member_id)
    try:  # the API's rule: never the last administrator
        orgs.remove_member(ctx.engine, organization_id=ctx.viewer.organization_id, member_id=member_id)
    except ApiError as exc:
        return _team(ctx, exc.status_code, error=exc.message)
    return ctx.redirect("/dashboard/team?done=removed")
