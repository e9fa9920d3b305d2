"""/organizations, /members and /roles: the caller's own organization and its people.

Members matter to API clients mostly in the sandbox, where they are the only allowed
recipients; the operator manages organizations themselves with the CLI.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from largesse import db
from largesse.auth import CallerDep
from largesse.errors import BadRequest, NotFound, Unprocessable
from largesse.orgs import service
from largesse.orgs.models import members
from largesse.schemas import Out, Text, Wire
from largesse.timeutil import iso
from largesse.web import EngineDep, clean_text, json_response

router = APIRouter(tags=["organization"])

ROLES = {
    "ADMIN": ("Admin", "Manages the organization, its members, campaigns and orders."),
    "MEMBER": ("Member", "Sends rewards and sees the organization's orders."),
}


class CreateMemberIn(Wire):
    email: Text(320, 3)
    role: Text(40, 1)
    name: Text(200) | None = None


class UpdateMemberIn(Wire):
    role: Text(40, 1)


class MemberOut(Out):
    id: str
    email: str
    name: str | None
    status: str


class MemberEnvelope(Out):
    member: MemberOut


class MemberList(Out):
    members: list[MemberOut]


def _member(row, *, events: bool = False) -> dict:
    out = {"id": row.id, "email": row.email, "name": row.name, "active": bool(row.active), "role": row.role,
           "status": row.status}
    if events:
        out["events"] = [{"type": "created", "date_utc": iso(row.created_at)}]
    else:
        out["created_at"] = iso(row.created_at)
    return out


def _check_role(role: str, loc: str = "role") -> str:
    role = role.upper()
    if role not in ROLES:
        raise BadRequest(f"Unknown role {role}; see GET /roles", {loc: ["is not a role"]})
    return role


def _get_member(conn, org: str, member_id: str):
    return db.owned_or_404(conn, members, org, member_id, "Member")


@router.get("/organizations")
def list_organizations(caller: CallerDep, engine: EngineDep):
    """Only the caller's own organization."""
    with db.read(engine) as conn:
        row = service.get_org(conn, caller.organization_id)
    return json_response({"organizations": [_organization(row)]})


@router.get("/organizations/{organization_id}")
def get_organization(organization_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(organization_id, "id", max_length=200)
    if organization_id != caller.organization_id:
        raise NotFound(f"Organization {organization_id} not found", {"id": ["not found"]})
    with db.read(engine) as conn:
        row = service.get_org(conn, caller.organization_id)
    return json_response({"organization": _organization(row)})


def _organization(row) -> dict:
    return {"id": row.id, "name": row.name, "website": row.website or "", "currency_code": row.currency_code,
            "status": "APPROVED", "created_at": row.created_at.date().isoformat()}


@router.get("/roles")
def list_roles(caller: CallerDep):
    return json_response({"roles": [{"id": rid, "title": title, "description": text}
                                    for rid, (title, text) in ROLES.items()]})


@router.get("/members", response_model=MemberList)
def list_members(caller: CallerDep, engine: EngineDep):
    with db.read(engine) as conn:
        rows = service.list_members(conn, caller.organization_id)
    return json_response({"members": [_member(r) for r in rows]})


@router.get("/members/{member_id}", response_model=MemberEnvelope)
def get_member(member_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(member_id, "id", max_length=200)
    with db.read(engine) as conn:
        row = _get_member(conn, caller.organization_id, member_id)
    return json_response({"member": _member(row, events=True)})


@router.post("/members", response_model=MemberEnvelope)
def create_member(body: CreateMemberIn, caller: CallerDep, engine: EngineDep):
    """Add a member. In the sandbox, members are the addresses rewards may be sent to."""
    from largesse.orders.service import EMAIL

    role = _check_role(body.role)
    if not EMAIL.match(body.email.strip()):
        raise BadRequest("email is not a valid email address", {"email": ["is not a valid email address"]})
    with db.write(engine) as conn:
        try:
            member_id = service.add_member(conn, organization_id=caller.organization_id, email=body.email,
                                           name=body.name, role=role)
        except service.OrgError as exc:
            raise BadRequest(str(exc), {"email": ["has already been taken"]}) from None
        row = _get_member(conn, caller.organization_id, member_id)
    return json_response({"member": _member(row)})


@router.patch("/members/{member_id}", response_model=MemberEnvelope)
def update_member(member_id: str, body: UpdateMemberIn, caller: CallerDep, engine: EngineDep):
    clean_text(member_id, "id", max_length=200)
    role = _check_role(body.role)
    with db.write(engine) as conn:
        _get_member(conn, caller.organization_id, member_id)
        service.set_member_role(conn, organization_id=caller.organization_id, member_id=member_id, role=role)
        row = _get_member(conn, caller.organization_id, member_id)
    return json_response({"member": _member(row)})


@router.delete("/members/{member_id}", status_code=204)
def delete_member(member_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(member_id, "id", max_length=200)
    with db.write(engine) as conn:
        _get_member(conn, caller.organization_id, member_id)
        try:
            service.remove_member(conn, organization_id=caller.organization_id, member_id=member_id)
        except service.LastMember as exc:
            raise Unprocessable(str(exc), {"id": ["is the last member"]}) from None
    return Response(status_code=204)
