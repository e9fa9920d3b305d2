"""Members, organizations and roles through the official client."""

import pytest
from tremendous import CreateMemberRequest, UpdateMemberRequest
from tremendous.exceptions import BadRequestException, NotFoundException, UnprocessableEntityException

from tests.conftest import order_body


def test_member_added_by_api_becomes_sandbox_recipient(org, api, http):
    refused = http.post("/orders", json=order_body("newcomer@example.com"))
    assert refused.status_code == 400
    assert refused.json()["errors"]["payload"]["reward"]["recipient"]["email"]

    member = api.create_member(CreateMemberRequest(email="newcomer@example.com", role="MEMBER")).member
    assert member.status == "INVITED" and member.role == "MEMBER"  # until their first sign-in
    assert http.post("/orders", json=order_body("newcomer@example.com")).status_code == 200

    listed = {m.email: m.status for m in api.list_members().members}
    assert listed == {org.member_email: "REGISTERED", "newcomer@example.com": "INVITED"}
    assert api.get_member(member.id).member.events[0].type == "created"


def test_member_role_update_delete_and_validation(org, api):
    member = api.create_member(CreateMemberRequest(email="x@example.com", role="ADMIN")).member
    assert api.update_member(member.id, UpdateMemberRequest(role="MEMBER")).member.role == "MEMBER"
    with pytest.raises(BadRequestException):
        api.create_member(CreateMemberRequest(email="x@example.com", role="ADMIN"))
    with pytest.raises(BadRequestException):
        api.create_member(CreateMemberRequest(email="y@example.com", role="OWNERX"))
    api.delete_member(member.id)
    with pytest.raises(NotFoundException):
        api.get_member(member.id)
    only = api.list_members().members[0]
    with pytest.raises(UnprocessableEntityException):
        api.delete_member(only.id)


def test_organization_roles_and_isolation(org, other_org, api):
    organizations = api.list_organizations().organizations
    assert [o.id for o in organizations] == [org.id]
    assert api.get_organization(org.id).organization.name == "Acme"
    with pytest.raises(NotFoundException):
        api.get_organization(other_org.id)
    other_member = other_org.api().list_members().members[0]
    with pytest.raises(NotFoundException):
        api.get_member(other_member.id)
    assert {r.id for r in api.list_roles().roles} == {"ADMIN", "MEMBER", "VIEWER"}
