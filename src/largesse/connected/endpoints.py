"""/connected_organizations, /connected_organization_members and their sessions (API.md §2.8, §3)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from largesse.auth import CallerDep
from largesse.connected import service
from largesse.errors import BadRequest
from largesse.schemas import Out, Text, Wire
from largesse.web import (
    EngineDep,
    Paging,
    SettingsDep,
    clean_text,
    json_response,
    q_str,
    query_doc,
    read_db,
    write_db,
)

router = APIRouter(tags=["connected organizations"])


class KybPrefillIn(Wire):
    company_name: Text(200) | None = None
    doing_business_as: Text(200) | None = None
    company_structure: Text(100) | None = None
    company_registration_number: Text(100) | None = None
    country_code: Text(3) | None = None
    website_url: Text(500) | None = None
    address_1: Text(200) | None = None
    address_2: Text(200) | None = None
    city: Text(100) | None = None
    state: Text(100) | None = None
    postal_code: Text(20) | None = None


class CreateConnectedOrganizationIn(Wire):
    client_id: Text(200, 1)
    currency_code: Text(3, 3) | None = "USD"
    kyb_prefill: KybPrefillIn | None = None


class CreateConnectedMemberIn(Wire):
    connected_organization_id: Text(64, 1)
    external_name: Text(200) | None = None
    external_email: Text(320) | None = None
    role: Text(40, 1) | None = None


class CreateSessionIn(Wire):
    return_url: Text(service.MAX_RETURN_URL, 1)
    state: Text(1024) | None = None


class ConnectedOrganizationEnvelope(Out):
    connected_organization: dict


class ConnectedOrganizationList(Out):
    connected_organizations: list[dict]
    total_count: int


class ConnectedMemberEnvelope(Out):
    connected_organization_member: dict


class ConnectedMemberList(Out):
    connected_organization_members: list[dict]
    total_count: int


class SessionEnvelope(Out):
    connected_organization_member_session: dict


PAGING = Paging(limit=10, high=100)


@router.post("/connected_organizations", response_model=ConnectedOrganizationEnvelope)
async def create_connected_organization(body: CreateConnectedOrganizationIn, caller: CallerDep, engine: EngineDep):
    """Onboard a customer of the platform: a real organization (a sub-organization of the caller's,
    same environment). Emits CONNECTED_ORGANIZATIONS.REGISTERED."""
    kyb = body.kyb_prefill.model_dump() if body.kyb_prefill else None

    def create(conn):
        connected_id = service.create_connected_org(conn, platform_id=caller.organization_id,
                                                    client_id=body.client_id, currency_code=body.currency_code,
                                                    kyb_prefill=kyb)
        return service.connected_org_to_wire(conn, service.get_connected_org(conn, caller.organization_id,
                                                                             connected_id))

    return json_response({"connected_organization": await write_db(engine, create)})


@router.get("/connected_organizations", response_model=ConnectedOrganizationList,
            openapi_extra=query_doc(PAGING.doc()))
async def list_connected_organizations(request: Request, caller: CallerDep, engine: EngineDep):
    """Newest first; `offset`, `limit` (default 10, max 100), `total_count`."""
    offset, limit = PAGING.read(request)

    def page(conn):
        rows, total = service.list_connected_orgs(conn, caller.organization_id, offset=offset, limit=limit)
        return service.connected_orgs_to_wire(conn, rows), total

    items, total = await read_db(engine, page)
    return json_response({"connected_organizations": items, "total_count": total})


@router.get("/connected_organizations/{connected_organization_id}", response_model=ConnectedOrganizationEnvelope)
async def get_connected_organization(connected_organization_id: str, caller: CallerDep, engine: EngineDep):
    def get(conn):
        row = service.get_connected_org(conn, caller.organization_id, connected_organization_id)
        return service.connected_org_to_wire(conn, row)

    return json_response({"connected_organization": await read_db(engine, get)})


@router.delete("/connected_organizations/{connected_organization_id}", response_model=ConnectedOrganizationEnvelope)
async def delete_connected_organization(connected_organization_id: str, caller: CallerDep, engine: EngineDep):
    """End the connection (its keys revoked, sign-in links dead); the organization and its money stay."""
    def delete(conn):
        row = service.delete_connected_org(conn, caller.organization_id, connected_organization_id)
        return service.connected_org_to_wire(conn, row)

    return json_response({"connected_organization": await write_db(engine, delete)})


@router.post("/connected_organization_members", response_model=ConnectedMemberEnvelope)
async def create_connected_organization_member(body: CreateConnectedMemberIn, caller: CallerDep,
                                               engine: EngineDep):
    """A real member of the connected organization (`role` a role ID, default ADMIN)."""
    def create(conn):
        cm_id = service.create_connected_member(
            conn, platform_id=caller.organization_id, connected_id=body.connected_organization_id,
            external_name=body.external_name, external_email=body.external_email, role=body.role)
        return service.connected_member_to_wire(conn, service.get_connected_member(conn, caller.organization_id,
                                                                                   cm_id))

    return json_response({"connected_organization_member": await write_db(engine, create)})


@router.get("/connected_organization_members", response_model=ConnectedMemberList, openapi_extra=query_doc(
    q_str("connected_organization_id", "the connected organization whose members are listed", required=True),
    PAGING.doc()))
async def list_connected_organization_members(request: Request, caller: CallerDep, engine: EngineDep):
    """Members of one connected organization (`connected_organization_id`, required), newest first."""
    connected_id = request.query_params.get("connected_organization_id")
    if not connected_id:
        raise BadRequest("connected_organization_id is required",
                         {"connected_organization_id": ["is required"]})
    clean_text(connected_id, "connected_organization_id", max_length=64)
    offset, limit = PAGING.read(request)

    def page(conn):
        rows, total = service.list_connected_members(conn, caller.organization_id, connected_id,
                                                     offset=offset, limit=limit)
        return service.connected_members_to_wire(conn, rows), total

    items, total = await read_db(engine, page)
    return json_response({"connected_organization_members": items, "total_count": total})


@router.get("/connected_organization_members/{connected_organization_member_id}",
            response_model=ConnectedMemberEnvelope)
async def get_connected_organization_member(connected_organization_member_id: str, caller: CallerDep,
                                            engine: EngineDep):
    def get(conn):
        row = service.get_connected_member(conn, caller.organization_id, connected_organization_member_id)
        return service.connected_member_to_wire(conn, row)

    return json_response({"connected_organization_member": await read_db(engine, get)})


@router.delete("/connected_organization_members/{connected_organization_member_id}",
               response_model=ConnectedMemberEnvelope)
async def delete_connected_organization_member(connected_organization_member_id: str, caller: CallerDep,
                                               engine: EngineDep):
    """Remove the member from the connected organization and end its sign-in links."""
    def delete(conn):
        row = service.get_connected_member(conn, caller.organization_id, connected_organization_member_id)
        wire = service.connected_member_to_wire(conn, row)
        service.delete_connected_member(conn, caller.organization_id, connected_organization_member_id)
        return wire

    return json_response({"connected_organization_member": await write_db(engine, delete)})


@router.post("/connected_organization_members/{connected_organization_member_id}/sessions",
             response_model=SessionEnvelope)
async def create_connected_organization_member_session(connected_organization_member_id: str,
                                                       body: CreateSessionIn, caller: CallerDep,
                                                       engine: EngineDep, settings: SettingsDep):
    """A single-use sign-in URL for the member, valid 10 minutes; leaving sends the member back to
    `return_url` with `state`."""
    def create(conn):
        session = service.create_session(conn, platform_id=caller.organization_id,
                                         cm_id=connected_organization_member_id, return_url=body.return_url,
                                         state=body.state, public_url=settings.public_url)
        return service.session_to_wire(session)

    return json_response({"connected_organization_member_session": await write_db(engine, create)})
