"""Organizations and API keys through the official client: sub-organizations (environment,
preload, copy_settings, with_api_key), visibility, create_api_key."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import select
from tremendous import CreateApiKeyRequest, CreateOrganizationRequest, CreateOrganizationRequestCopySettings
from tremendous.exceptions import BadRequestException, ForbiddenException, NotFoundException

from largesse import db
from largesse.campaigns.models import campaigns as campaign_rows
from largesse.funding import service as funding
from largesse.orgs.models import organizations
from tests.conftest import Org, production_org
from tests.factories import available_cents, error, make_campaign, make_field, ok


def _sub_org(api, name="Sub Co", *, with_api_key=True, currency_code=None, **copy):
    request = CreateOrganizationRequest(
        name=name, website="https://sub.example.com", with_api_key=with_api_key, currency_code=currency_code,
        copy_settings=CreateOrganizationRequestCopySettings(**copy) if copy else None)
    return api.create_organization(request).organization


def test_sandbox_sub_organization_gets_preload_key_and_is_listed(org, api, other_org, cli):
    created = _sub_org(api, "Sandbox Child")
    assert created.id and created.name == "Sandbox Child" and created.website == "https://sub.example.com"
    assert created.api_key.startswith("LRG_SANDBOX_") and created.currency_code == "USD"
    assert len(created.created_at.isoformat()) == 10  # a date (API.md §3)

    child = Org(created.id, created.api_key, "", "", org.base_url)
    with child.http() as http:
        assert available_cents(http) == 500_000  # the sandbox preload, through the ledger
        assert http.get("/organizations").json()["organizations"][0]["id"] == created.id
    # Only the caller's own, as Tremendous answers; its sub-organizations on request.
    assert [o.id for o in api.list_organizations().organizations] == [org.id]
    with org.http() as http:
        listed = ok(http.get("/organizations", params={"include": "sub_organizations"}))["organizations"]
        assert [o["id"] for o in listed] == [org.id, created.id]
        assert "include" in error(http.get("/organizations", params={"include": "everything"}), 400)["payload"]
    fetched = api.get_organization(created.id).organization
    assert (fetched.name, fetched.status, fetched.currency_code) == ("Sandbox Child", "APPROVED", "USD")
    # Neither the child nor another organization sees the parent or each other's children.
    with pytest.raises(NotFoundException):
        child.api().get_organization(org.id)
    with pytest.raises(NotFoundException):
        other_org.api().get_organization(created.id)

    listed = json.loads(cli("org", "list", "--json").stdout)["organizations"]
    assert {"id": created.id, "parent_organization_id": org.id} in [
        {"id": o["id"], "parent_organization_id": o["parent_organization_id"]} for o in listed]
    assert f"sub-organization of {org.id}" in cli("org", "list").stdout
    cli("ledger", "verify")


def test_production_sub_organization_starts_at_zero(engine, make_server):
    production = make_server(environment="production")
    parent = production_org(engine, production.url)
    created = _sub_org(parent.api(), "Prod Child")
    assert created.api_key.startswith("LRG_PROD_")
    child = Org(created.id, created.api_key, "", "", production.url)
    with child.http() as http:
        assert available_cents(http) == 0
    with db.read(engine) as conn:
        row = conn.execute(organizations.select().where(organizations.c.id == created.id)).first()
        assert (row.environment, row.parent_organization_id) == ("production", parent.id)
    # The operator funds it like any organization.
    funding.fund(engine, organization_id=created.id, amount_cents=1234, memo="operator", reference=None)
    with child.http() as http:
        assert available_cents(http) == 1234


def test_copy_settings_copies_campaigns_fields_and_users(org, api, http, engine):
    campaign = make_campaign(http, name="Holiday")
    field = make_field(http, name="dept")
    later_campaigns = [f"Campaign {n}" for n in range(8)]
    later_fields = [f"field {n}" for n in range(8)]
    for name in later_campaigns:
        make_campaign(http, name=name)
    for name in later_fields:
        make_field(http, name=name)
    ok(http.post("/members", json={"email": "helper@example.com", "role": "MEMBER"}))
    with db.write(engine) as conn:
        conn.execute(organizations.update().where(organizations.c.id == org.id).values(fee_basis_points=250))

    plain = _sub_org(api, "Plain", campaigns=False)
    copied = _sub_org(api, "Copied", campaigns=True, custom_fields=True, users=True)
    with Org(plain.id, plain.api_key, "", "", org.base_url).http() as child:
        assert ok(child.get("/campaigns"))["campaigns"] == []
        assert ok(child.get("/members"))["members"] == []
    with Org(copied.id, copied.api_key, "", "", org.base_url).http() as child:
        campaigns = ok(child.get("/campaigns"))["campaigns"]
        assert [c["name"] for c in campaigns] == ["Holiday", *later_campaigns] and campaigns[0]["id"] != campaign["id"]
        assert campaigns[0]["products"] == campaign["products"]
        # In the source's creation order, as every list of fields and campaigns is (the copies
        # shared one timestamp and came back in the order of their random IDs).
        assert [f["label"] for f in ok(child.get("/fields"))["fields"]] == [field["label"], *later_fields]
        members = {m["email"]: m["role"] for m in ok(child.get("/members"))["members"]}
        assert members == {org.member_email: "ADMIN", "helper@example.com": "MEMBER"}
    with db.read(engine) as conn:
        fees = dict(conn.execute(organizations.select().with_only_columns(
            organizations.c.id, organizations.c.fee_basis_points)
            .where(organizations.c.id.in_([plain.id, copied.id]))).all())
    assert fees == {plain.id: 250, copied.id: 250}  # operator terms are always inherited
    with db.read(engine) as conn:  # no rule is SQL NULL in the copy too (not JSON null, which
        # auto_add_products' IS NOT NULL read and locked on every catalog import)
        assert conn.execute(select(campaign_rows.c.id).where(campaign_rows.c.organization_id == copied.id,
                                                             campaign_rows.c.auto_add_product_rule.is_(None))).all()


def test_copy_settings_copies_fraud_rules_and_approvals(org, api, http, engine):
    ok(http.post("/fraud_rules/review_email", json={"config": {"domains": ["spam.example"]}}))
    with db.write(engine) as conn:
        conn.execute(organizations.update().where(organizations.c.id == org.id).values(approval_mode="all"))

    plain = _sub_org(api, "Plain rules")
    copied = _sub_org(api, "Copied rules", fraud_prevention=True, order_approvals=True)
    with Org(plain.id, plain.api_key, "", "", org.base_url).http() as child:
        assert ok(child.get("/fraud_rules"))["fraud_rules"] == []
    with Org(copied.id, copied.api_key, "", "", org.base_url).http() as child:
        rules = ok(child.get("/fraud_rules"))["fraud_rules"]
        assert [(r["rule_type"], r["config"]["domains"]) for r in rules] == [("review_email", ["spam.example"])]
    with db.read(engine) as conn:
        modes = dict(conn.execute(organizations.select().with_only_columns(
            organizations.c.id, organizations.c.approval_mode)
            .where(organizations.c.id.in_([plain.id, copied.id]))).all())
    assert modes == {plain.id: "off", copied.id: "all"}


def test_a_child_in_another_currency_gets_the_parents_amounts_converted(org, http, cli):
    """A USD parent's flat fee of 5.00 and approval threshold of 50.00 are 773 and 7,731 yen on a
    JPY sub-organization (at the shipped 154.62), not 5 and 50 yen; a connected organization in
    GBP likewise. Copied as numbers, they were a way around the operator's fee."""
    cli("org", "fees", "--org", org.id, "--flat", "5.00")
    cli("org", "approvals", "--org", org.id, "--above", "50.00")
    body = {"name": "Yen child", "website": "https://yen.example.com", "with_api_key": True, "currency_code": "JPY",
            "copy_settings": {"order_approvals": True}}
    child = ok(http.post("/organizations", json=body))["organization"]
    fees = json.loads(cli("org", "fees", "--org", child["id"], "--json").stdout)
    assert (fees["flat_cents"], fees["currency_code"]) == (77300, "JPY")  # 500 x 154.62 = 77,310: 773 yen
    approvals = json.loads(cli("org", "approvals", "--org", child["id"], "--json").stdout)
    assert approvals["mode"] == "above" and approvals["above"] == "7731"
    connected = ok(http.post("/connected_organizations", json={"client_id": "gbp-child", "currency_code": "GBP"}))
    gbp_id = connected["connected_organization"]["organization"]["id"]
    assert json.loads(cli("org", "fees", "--org", gbp_id, "--json").stdout)["flat_cents"] == 395  # 500 x 0.79


def test_create_organization_without_key_and_validation(org, api, http):
    created = _sub_org(api, "No Key", with_api_key=False, currency_code="EUR")
    assert created.api_key is None and created.currency_code == "EUR"
    for body, key in (({"website": "https://x.example", "with_api_key": True}, "name"),
                      ({"name": "X", "website": "javascript:alert(1)", "with_api_key": True}, "website"),
                      ({"name": "X", "website": "https://x.example", "with_api_key": "yes"}, "with_api_key"),
                      ({"name": "X", "website": "https://x.example", "with_api_key": True, "currency_code": "E1R"},
                       "currency_code"),
                      # API.md §5, CurrencyCodes: "Emit only listed values"
                      ({"name": "X", "website": "https://x.example", "with_api_key": True, "currency_code": "XYZ"},
                       "currency_code")):
        assert key in error(http.post("/organizations", json=body), 400)["payload"]
    with pytest.raises(BadRequestException) as raised:
        api.create_organization(CreateOrganizationRequest(name="X", website="not a site", with_api_key=False))
    assert raised.value.data.errors.payload == {"website": ["is not a valid URL"]}
    assert [o.name for o in api.list_organizations().organizations] == ["Acme"]
    with org.http() as http:
        listed = ok(http.get("/organizations", params={"include": "sub_organizations"}))["organizations"]
    assert [o["name"] for o in listed] == ["Acme", "No Key"]


def test_create_api_key_read_write_read_only_and_empty_body(org, api):
    fresh = api.create_api_key().api_key  # no body: the client sends an empty JSON body
    assert fresh.startswith("LRG_SANDBOX_")
    with Org(org.id, fresh, "", "", org.base_url).http() as http:
        ok(http.post("/campaigns", json={"name": "by new key", "products": ["PGCNWBOOKS01US"]}))
    read_only = api.create_api_key(CreateApiKeyRequest(permission="read_only")).api_key
    reader = Org(org.id, read_only, "", "", org.base_url)
    assert [o.id for o in reader.api().list_organizations().organizations] == [org.id]
    with pytest.raises(ForbiddenException):
        reader.api().create_api_key()
    with pytest.raises(ForbiddenException):
        reader.api().create_organization(CreateOrganizationRequest(name="X", website="x.example",
                                                                   with_api_key=True))
    explicit = api.create_api_key(CreateApiKeyRequest(permission="read_write")).api_key
    assert len({fresh, read_only, explicit}) == 3
    with httpx.Client(base_url=f"{org.base_url}/api/v2", headers={"Authorization": f"Bearer {org.api_key}"}) as h:
        raw = h.post("/organizations/create_api_key", content=b"", headers={"Content-Type": "application/json"})
        assert ok(raw)["api_key"].startswith("LRG_SANDBOX_")
        assert "permission" in error(h.post("/organizations/create_api_key", json={"permission": "admin"}),
                                     400)["payload"]
    assert [o.name for o in api.list_organizations().organizations] == ["Acme"]


def test_a_website_port_must_be_a_port(org, api):
    """`website` (and a connected organization's kyb_prefill.website_url, the same rule): a port
    outside 1-65535 is not a URL."""
    for website in ("https://x.example:99999/about", "x.example:0", "https://x.example:65536"):
        with pytest.raises(BadRequestException) as raised:
            api.create_organization(CreateOrganizationRequest(name="X", website=website, with_api_key=False))
        assert raised.value.data.errors.payload == {"website": ["is not a valid URL"]}, website
    created = api.create_organization(CreateOrganizationRequest(name="Port", website="https://x.example:8443/about",
                                                                with_api_key=False)).organization
    assert created.website == "https://x.example:8443/about"
    assert [o.name for o in api.list_organizations().organizations] == ["Acme"]
