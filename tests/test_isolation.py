"""Every resource is scoped to the caller's organization: another org's IDs are 404 everywhere."""

from __future__ import annotations

import pytest

from tests.factories import (
    available_cents,
    error,
    make_campaign,
    make_field,
    ok,
    order_body,
    unique,
)


@pytest.fixture
def theirs(other_org):
    """Resources of the other organization: an order (with a custom field and external_id), a campaign."""
    with other_org.http() as other:
        field = make_field(other, options=["Secret"])
        campaign = make_campaign(other)
        body = order_body(other_org.member_email, campaign_id=campaign["id"],
                          custom_fields=[{"id": field["id"], "value": "Secret"}])
        body["external_id"] = unique("theirs-")
        order = ok(other.post("/orders", json=body))["order"]
        yield {"field": field, "campaign": campaign, "order": order, "external_id": body["external_id"],
               "reward_id": order["rewards"][0]["id"], "funding_source_id": other_org.funding_source_id,
               "client": other}


def test_reads_of_other_org_resources_are_404(http, theirs):
    for path in (f"/orders/{theirs['order']['id']}", f"/orders/{theirs['external_id']}",
                 f"/rewards/{theirs['reward_id']}", f"/campaigns/{theirs['campaign']['id']}",
                 f"/funding_sources/{theirs['funding_source_id']}"):
        error(http.get(path), 404)


def test_lists_never_show_other_org_resources(http, theirs):
    assert ok(http.get("/orders"))["total_count"] == 0
    assert ok(http.get("/orders", params={"external_id": theirs["external_id"]}))["orders"] == []
    assert ok(http.get("/orders", params={"campaign_id": theirs["campaign"]["id"]}))["orders"] == []
    assert ok(http.get("/rewards"))["rewards"] == []
    assert ok(http.get("/rewards", params={theirs["field"]["label"]: "Secret"}))["rewards"] == []
    assert ok(http.get("/campaigns"))["campaigns"] == []
    assert ok(http.get("/fields"))["fields"] == []
    sources = ok(http.get("/funding_sources"))["funding_sources"]
    assert theirs["funding_source_id"] not in [s["id"] for s in sources]


def test_client_get_order_of_other_org_is_not_found(api, theirs):
    from tremendous.exceptions import NotFoundException

    with pytest.raises(NotFoundException):
        api.get_order(theirs["order"]["id"])
    with pytest.raises(NotFoundException):
        api.get_reward(theirs["reward_id"])


def test_writes_with_other_org_ids_change_nothing(org, http, theirs):
    """Another organization's ID in the path is a 404; inside a body, a 400 at the property."""
    other = theirs["client"]
    their_balance = available_cents(other)
    error(http.put(f"/campaigns/{theirs['campaign']['id']}", json={"name": "Hijacked"}), 404)
    assert ok(other.get(f"/campaigns/{theirs['campaign']['id']}"))["campaign"]["name"] == theirs["campaign"]["name"]

    errors = error(http.post("/orders", json=order_body(org.member_email, campaign_id=theirs["campaign"]["id"],
                                                        products=None)), 400)
    assert "campaign_id" in errors["payload"]["reward"]
    errors = error(http.post("/orders", json=order_body(
        org.member_email, custom_fields=[{"id": theirs["field"]["id"], "value": "Secret"}])), 400)
    assert "custom_fields" in errors["payload"]["reward"]
    body = order_body(org.member_email)
    body["payment"]["funding_source_id"] = theirs["funding_source_id"]
    errors = error(http.post("/orders", json=body), 400)
    assert "funding_source_id" in errors["payload"]["payment"]

    assert available_cents(http) == 500000 and available_cents(other) == their_balance
    assert ok(http.get("/orders"))["total_count"] == 0


def test_same_external_id_in_two_orgs_are_distinct(org, http, theirs):
    body = {**order_body(org.member_email), "external_id": theirs["external_id"]}
    mine = ok(http.post("/orders", json=body), 200)["order"]
    assert mine["id"] != theirs["order"]["id"]
    assert ok(http.get(f"/orders/{theirs['external_id']}"))["order"]["id"] == mine["id"]
