"""Roles: GET /roles, members carry a role ID, the last administrator stays, and can() is the
one rule the API and the dashboard share."""

from __future__ import annotations

import threading

import pytest
from tremendous import CreateMemberRequest, UpdateMemberRequest
from tremendous.exceptions import BadRequestException, NotFoundException, UnprocessableEntityException

from largesse.orgs import roles
from tests.factories import error, ok


def test_roles_listed_with_what_each_may_do(api):
    listed = {r.id: r for r in api.list_roles().roles}
    assert {"ADMIN", "MEMBER"} <= set(listed)
    assert all(r.title and r.description for r in listed.values())


def test_can_is_the_dashboard_rule():
    assert all(roles.can("ADMIN", action) for action in roles.ACTIONS)
    assert roles.can("MEMBER", "send_rewards") and roles.can("MEMBER", "view")
    for action in ("manage_api_keys", "manage_members", "manage_funding"):
        assert not roles.can("MEMBER", action)
    assert roles.can("VIEWER", "view") and not roles.can("VIEWER", "send_rewards")
    assert not roles.can("OWNER", "view") and not roles.can(None, "view")
    with pytest.raises(ValueError):
        roles.can("ADMIN", "launch_rockets")


def test_member_roles_and_the_last_administrator(org, api, http):
    owner = api.list_members().members[0]
    assert owner.role == "ADMIN"
    with pytest.raises(UnprocessableEntityException) as raised:
        api.update_member(owner.id, UpdateMemberRequest(role="MEMBER"))
    assert raised.value.data.errors.payload == {"role": ["is the last administrator"]}
    with pytest.raises(UnprocessableEntityException):
        api.delete_member(owner.id)

    second = api.create_member(CreateMemberRequest(email="second@example.com", role="admin")).member
    assert second.role == "ADMIN"  # role IDs are case-insensitive on input
    assert api.update_member(owner.id, UpdateMemberRequest(role="VIEWER")).member.role == "VIEWER"
    with pytest.raises(UnprocessableEntityException):
        api.delete_member(second.id)  # now the last administrator
    assert api.update_member(owner.id, UpdateMemberRequest(role="ADMIN")).member.role == "ADMIN"
    api.delete_member(second.id)
    assert [m.id for m in api.list_members().members] == [owner.id]

    with pytest.raises(BadRequestException) as raised:
        api.create_member(CreateMemberRequest(email="third@example.com", role="OWNER"))
    assert raised.value.data.errors.payload == {"role": ["is not a role"]}
    with pytest.raises(BadRequestException):
        api.update_member(owner.id, UpdateMemberRequest(role="SUPERUSER"))
    with pytest.raises(NotFoundException):
        api.update_member("NOSUCHMEMBER00", UpdateMemberRequest(role="ADMIN"))
    assert "email" in error(http.post("/members", json={"email": "not-an-address", "role": "MEMBER"}), 400)["payload"]
    assert [m.role for m in api.list_members().members] == ["ADMIN"]


def test_concurrent_demotions_keep_one_administrator(org, api, http):
    other = api.create_member(CreateMemberRequest(email="peer@example.com", role="ADMIN")).member
    owner = next(m for m in api.list_members().members if m.id != other.id)
    results = []

    def demote(member_id):
        with org.http() as client:
            results.append(client.patch(f"/members/{member_id}", json={"role": "MEMBER"}).status_code)

    threads = [threading.Thread(target=demote, args=(m,)) for m in (owner.id, other.id)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200, 422]
    assert [m["role"] for m in ok(http.get("/members"))["members"]].count("ADMIN") == 1
