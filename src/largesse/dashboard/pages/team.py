"""Team (administrators only): members and their roles, invitations by email."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db
from largesse.dashboard import access, signin
from largesse.dashboard.web import route
from largesse.orders.service import EMAIL
from largesse.orgs import service as orgs
from largesse.orgs.endpoints import ROLES
from largesse.orgs.models import members

router = APIRouter()
NOTICES = {"invited": "Invitation sent: they will receive a sign-in link by email.",
           "role": "Role changed.", "removed": "Member removed."}


def _team(ctx, status: int = 200, *, error: str | None = None):
    with db.read(ctx.engine) as conn:
        people = orgs.list_members(conn, ctx.viewer.organization_id)
    return ctx.render("team.html", status, title="Team", people=people, roles=ROLES, error=error,
                      notice=NOTICES.get(ctx.arg("done", max_length=20)))


@route(router, "GET", "/team", action="admin")
def team(ctx):
    return _team(ctx)


@route(router, "POST", "/team/invite", action="admin")
def invite(ctx):
    email = ctx.form.get("email", max_length=320)
    name = ctx.form.get("name", max_length=200) or None
    role = ctx.form.get("role", "MEMBER", max_length=40).upper()
    if role not in ROLES:
        return _team(ctx, 400, error=f"Unknown role {role}.")
    if not EMAIL.match(email):
        return _team(ctx, 400, error="Enter a valid email address to invite.")
    org = ctx.viewer.organization_id
    try:
        with db.write(ctx.engine) as conn:
            member_id = orgs.add_member(conn, organization_id=org, email=email, name=name, role=role)
            signin.queue_signin_email(conn, member_id=member_id, organization_id=org)
    except orgs.OrgError as exc:
        return _team(ctx, 400, error=str(exc))
    return ctx.redirect("/dashboard/team?done=invited")


@route(router, "POST", "/team/members/{member_id}/role", action="admin")
def change_role(ctx, member_id: str):
    role = ctx.form.get("role", max_length=40).upper()
    if role not in ROLES:
        return _team(ctx, 400, error=f"Unknown role {role}.")
    with db.write(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, members, member_id)
        orgs.set_member_role(conn, organization_id=ctx.viewer.organization_id, member_id=member_id, role=role)
    return ctx.redirect("/dashboard/team?done=role")


@route(router, "POST", "/team/members/{member_id}/remove", action="admin")
def remove(ctx, member_id: str):
    try:
        with db.write(ctx.engine) as conn:
            access.owned(conn, ctx.viewer, members, member_id)
            orgs.remove_member(conn, organization_id=ctx.viewer.organization_id, member_id=member_id)
    except orgs.LastMember as exc:
        return _team(ctx, 422, error=str(exc))
    return ctx.redirect("/dashboard/team?done=removed")
