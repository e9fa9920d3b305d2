"""/organizations, /members and /roles: the caller's organization, its sub-organizations and people.

Endpoints parse, call orgs.service / orgs.suborgs, serialize; the rules live in the services
(shared with the dashboard). Read-only keys never reach a write here: auth.caller_from answers
403 for every non-GET request of a read_only key (docs/organizations.md).
"""

from __future__ import annotations

from fastapi import APIRouter, Body, Request
from pydantic import StrictBool
from starlette.responses import Response

from largesse import auth, codes, db
from largesse.auth import CallerDep
from largesse.errors import BadRequest
from largesse.orgs import roles, service, suborgs
from largesse.schemas import Out, Text, Wire
from largesse.web import EngineDep, clean_text, json_response, q_str, query_doc, read_db, write_db

router = APIRouter(tags=["organization"])


class CreateMemberIn(Wire):
    email: Text(320, 3)
    role: Text(40, 1)
    name: Text(200) | None = None


class UpdateMemberIn(Wire):
    role: Text(40, 1)


class CopySettingsIn(Wire):
    campaigns: StrictBool = False
    custom_fields: StrictBool = False
    order_approvals: StrictBool = False
    payment_methods: StrictBool = False
    users: StrictBool = False
    custom_roles: StrictBool = False
    fraud_prevention: StrictBool = False
    tax_management: StrictBool = False
    security_settings: StrictBool = True


class CreateOrganizationIn(Wire):
    name: Text(200, 1)
    website: Text(500, 1)
    with_api_key: StrictBool
    phone: Text(50) | None = None
    currency_code: Text(3, 3) | None = None
    copy_settings: CopySettingsIn | None = None


class CreateApiKeyIn(Wire):
    permission: Text(20, 1) | None = None


class MemberOut(Out):
    id: str
    email: str
    name: str | None
    status: str


class MemberEnvelope(Out):
    member: MemberOut


class MemberList(Out):
    members: list[MemberOut]


class OrganizationOut(Out):
    id: str
    name: str
    website: str
    currency_code: str
    status: str
    created_at: str


class OrganizationEnvelope(Out):
    organization: OrganizationOut


class OrganizationList(Out):
    organizations: list[OrganizationOut]


class ApiKeyOut(Out):
    api_key: str


@router.get("/organizations", response_model=OrganizationList, openapi_extra=query_doc(
    q_str("include", "sub_organizations: also the sub-organizations this one created")))
async def list_organizations(request: Request, caller: CallerDep, engine: EngineDep):
    """The caller's organization only, as Tremendous answers (API.md §1); with
    `?include=sub_organizations`, then the sub-organizations it created (oldest first)."""
    include = request.query_params.get("include")
    if include not in (None, "", "sub_organizations"):
        raise BadRequest("include takes only sub_organizations", {"include": ["is not sub_organizations"]})
    rows = await read_db(engine, service.visible_orgs, caller.organization_id,
                         sub_organizations=include == "sub_organizations")
    return json_response({"organizations": [service.organization_to_wire(r) for r in rows]})


@router.get("/organizations/{organization_id}", response_model=OrganizationEnvelope)
async def get_organization(organization_id: str, caller: CallerDep, engine: EngineDep):
    """The caller's organization or one of its sub-organizations; any other is 404."""
    clean_text(organization_id, "id", max_length=200)
    row = await read_db(engine, service.visible_org_or_404, caller.organization_id, organization_id)
    return json_response({"organization": service.organization_to_wire(row)})


@router.post("/organizations", response_model=OrganizationEnvelope)
async def create_organization(body: CreateOrganizationIn, caller: CallerDep, engine: EngineDep):
    """Create a sub-organization of the caller's (same environment), with `copy_settings`;
    `with_api_key` returns its first API key once, in `organization.api_key`."""
    try:
        name = service.clean_name(body.name)  # body.name is already 1-200 characters
    except service.OrgError as exc:
        raise BadRequest(str(exc), {"name": ["can't be blank"]}) from None
    website = body.website.strip()
    if not service.valid_website(website):
        raise BadRequest("website must be an http(s) URL or a domain name", {"website": ["is not a valid URL"]})
    currency = codes.currency(body.currency_code) if body.currency_code else None
    if body.currency_code and currency is None:
        raise BadRequest("currency_code must be an ISO 4217 currency code Largesse supports, e.g. USD, EUR, JPY",
                         {"currency_code": ["is not a currency"]})
    copy = (body.copy_settings or CopySettingsIn()).model_dump()

    def create(conn):
        from largesse.webhooks import service as webhooks

        created = suborgs.create_sub_org(conn, parent_id=caller.organization_id, name=name, website=website,
                                         phone=body.phone, currency_code=currency, copy_settings=copy,
                                         with_api_key=body.with_api_key)
        webhooks.emit(conn, caller.organization_id, [("ORGANIZATIONS.CREATED", created.organization_id)])
        return created, service.get_org(conn, created.organization_id)

    created, row = await write_db(engine, create)
    out = {**service.organization_to_wire(row), "phone": row.phone, "copy_settings": copy}
    if created.api_key is not None:
        out["api_key"] = created.api_key
    return json_response({"organization": out})


@router.post("/organizations/create_api_key", response_model=ApiKeyOut)
async def create_api_key(caller: CallerDep, engine: EngineDep, body: CreateApiKeyIn | None = Body(default=None)):
    """A new API key of the caller's organization, shown once: `read_write` (default) or
    `read_only`. The body may be absent or empty."""
    permission = (body.permission if body and body.permission else "read_write").strip().lower()
    if permission not in auth.PERMISSIONS:
        raise BadRequest("permission must be read_write or read_only", {"permission": ["is not included in the list"]})

    def issue(conn):
        return auth.issue_key(conn, organization_id=caller.organization_id, permission=permission,
                              label="created with the API")[1]

    return json_response({"api_key": await write_db(engine, issue)})


@router.get("/roles")
async def list_roles(caller: CallerDep):
    """The member roles; what each may do in the dashboard is in its description (orgs/roles.py)."""
    return json_response({"roles": [roles.to_wire(r) for r in roles.ROLES.values()]})


@router.get("/members", response_model=MemberList)
async def list_members(caller: CallerDep, engine: EngineDep):
    rows = await read_db(engine, service.list_members, caller.organization_id)
    return json_response({"members": [service.member_to_wire(r) for r in rows]})


@router.get("/members/{member_id}", response_model=MemberEnvelope)
async def get_member(member_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(member_id, "id", max_length=200)
    row = await read_db(engine, service.get_member_or_404, caller.organization_id, member_id)
    return json_response({"member": service.member_to_wire(row, events=True)})


@router.post("/members", response_model=MemberEnvelope)
def create_member(body: CreateMemberIn, caller: CallerDep, engine: EngineDep):
    """Add a member with a role (GET /roles). In the sandbox, members are the addresses rewards
    may be sent to."""
    row = db.retrying(service.create_member, engine, organization_id=caller.organization_id, email=body.email,
                      name=body.name, role=body.role, via_api=True)
    return json_response({"member": service.member_to_wire(row)})


@router.patch("/members/{member_id}", response_model=MemberEnvelope)
def update_member(member_id: str, body: UpdateMemberIn, caller: CallerDep, engine: EngineDep):
    """Change a member's role; demoting the last administrator is refused (422)."""
    clean_text(member_id, "id", max_length=200)
    row = db.retrying(service.update_member_role, engine, organization_id=caller.organization_id,
                      member_id=member_id, role=body.role, via_api=True)
    return json_response({"member": service.member_to_wire(row)})


@router.delete("/members/{member_id}", status_code=204)
def delete_member(member_id: str, caller: CallerDep, engine: EngineDep):
    """Remove a member; removing the last administrator is refused (422)."""
    clean_text(member_id, "id", max_length=200)
    db.retrying(service.remove_member, engine, organization_id=caller.organization_id, member_id=member_id)
    return Response(status_code=204)
