"""Sandbox and production are separate: a server answers 401 to the other environment's keys,
by prefix and by the organization's recorded environment (a forged prefix cannot cross)."""

from __future__ import annotations

import json
import re
import secrets

import httpx
import pytest
from sqlalchemy import create_engine, text

from largesse import db
from largesse.auth import hash_key
from largesse.ids import new_id
from largesse.migrate import upgrade
from largesse.orgs.models import api_keys
from largesse.timeutil import utcnow
from tests.conftest import Org, create_org, production_org
from tests.factories import error, ok, order_body, orders_count


def _forged_key(engine, org_id: str, prefix: str) -> str:
    """A key with the other environment's prefix stored for org (as a bug or a hand edit could)."""
    key = prefix + secrets.token_urlsafe(32)
    with db.write(engine) as conn:
        conn.execute(api_keys.insert().values(id=new_id(), organization_id=org_id, key_hash=hash_key(key),
                                              prefix=key[:16], permission="read_write", created_at=utcnow()))
    return key


def test_sandbox_key_is_refused_by_a_production_server(org, make_server):
    production = make_server(environment="production")
    with org.http() as sandbox_http:
        before = orders_count(sandbox_http)
    with Org(org.id, org.api_key, org.funding_source_id, org.member_email, production.url).http() as prod:
        errors = error(prod.post("/orders", json=order_body("stranger@example.com")), 401)
        assert "sandbox" in errors["message"]
        error(prod.get("/funding_sources"), 401)
        error(prod.get("/orders"), 401)
    with org.http() as sandbox_http:
        assert orders_count(sandbox_http) == before


def test_production_key_is_refused_by_a_sandbox_server(engine, server, make_server):
    prod_org = production_org(engine, make_server(environment="production").url)
    assert prod_org.api_key.startswith("LRG_PROD_")
    with prod_org.http() as prod:  # works where it belongs, to any address
        order = ok(prod.post("/orders", json=order_body("anyone@elsewhere.example.org")))["order"]
        assert order["status"] == "EXECUTED"
    with Org(prod_org.id, prod_org.api_key, "", "", server.url).http() as sandbox:
        errors = error(sandbox.post("/orders", json=order_body(prod_org.member_email)), 401)
        assert "production" in errors["message"]
        error(sandbox.get("/funding_sources"), 401)


@pytest.mark.parametrize("direction", ["sandbox org, LRG_PROD_ key", "production org, LRG_SANDBOX_ key"])
def test_a_forged_prefix_cannot_cross(engine, server, make_server, direction):
    production = make_server(environment="production")
    if direction.startswith("sandbox"):
        owner = create_org(engine, server.url)
        key, target = _forged_key(engine, owner.id, "LRG_PROD_"), production
    else:
        owner = production_org(engine, production.url)
        key, target = _forged_key(engine, owner.id, "LRG_SANDBOX_"), server
    forged = Org(owner.id, key, owner.funding_source_id, owner.member_email, target.url)
    with forged.http() as http:
        errors = error(http.post("/orders", json=order_body("stranger@example.com")), 401)
        assert "organization" in errors["message"]
        error(http.get("/funding_sources"), 401)
        error(http.get(f"/rewards/{new_id()}"), 401)


def test_cli_creates_organizations_and_keys_of_the_servers_environment(cli, make_server):
    production = make_server(environment="production")
    created = cli("org", "create", "--name", "Prod", "--member-email", "ops@example.org", "--json",
                  env={"LARGESSE_ENVIRONMENT": "production"})
    data = json.loads(created.stdout)
    assert data["api_key"].startswith("LRG_PROD_") and data["available_cents"] == 0
    org = Org(data["organization_id"], data["api_key"], data["funding_source_id"], "ops@example.org", production.url)
    with org.http() as http:
        assert ok(http.get("/funding_sources"))["funding_sources"][0]["id"] == data["funding_source_id"]
    # A key issued later follows its organization, whatever LARGESSE_ENVIRONMENT the CLI runs with.
    issued = json.loads(cli("keys", "create", "--org", data["organization_id"], "--json",
                            env={"LARGESSE_ENVIRONMENT": "sandbox"}).stdout)
    assert issued["api_key"].startswith("LRG_PROD_")
    with Org(org.id, issued["api_key"], "", "", production.url).http() as http:
        ok(http.get("/funding_sources"))


def test_migration_backfills_the_environment_from_key_prefixes(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'old.sqlite3'}")
    upgrade(engine, "0008")
    now = utcnow()
    with engine.begin() as conn:
        for org_id, prefix in (("ORGSANDBOX0001", "LRG_SANDBOX_abcd"), ("ORGPROD0000001", "LRG_PROD_abcdefg")):
            conn.execute(text("INSERT INTO organizations (id, name, currency_code, fee_basis_points, fee_flat_cents, "
                              "created_at) VALUES (:id, 'x', 'USD', 0, 0, :now)"), {"id": org_id, "now": now})
            conn.execute(text("INSERT INTO api_keys (id, organization_id, key_hash, prefix, permission, created_at) "
                              "VALUES (:id, :org, :hash, :prefix, 'read_write', :now)"),
                         {"id": new_id(), "org": org_id, "hash": secrets.token_hex(32), "prefix": prefix, "now": now})
    upgrade(engine)
    with engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, environment FROM organizations")).all())
    assert rows == {"ORGSANDBOX0001": "sandbox", "ORGPROD0000001": "production"}
    engine.dispose()


def test_links_of_the_other_environment_are_unknown_there_and_stay_unspent(org, api, engine, server, make_server,
                                                                           deliver):
    """A production server neither shows nor spends a sandbox organization's dashboard sign-in
    link, /connect link or report download, as it does not redeem its rewards; the sandbox
    server still takes each of them afterwards."""
    from tremendous import (
        CreateConnectedOrganizationMemberRequest,
        CreateConnectedOrganizationMemberSessionRequest,
        CreateConnectedOrganizationRequest,
        CreateReportRequest,
    )

    from largesse.dashboard import signin
    from tests.dashboard.conftest import csrf_of, member_id, sign_in_with_link

    production = make_server(environment="production")

    # The dashboard's sign-in link.
    with db.write(engine) as conn:
        token = signin.issue_token(conn, member_id=member_id(engine, org.id, org.member_email), organization_id=org.id)
    with httpx.Client(base_url=production.url, timeout=30) as browser:
        assert browser.get("/dashboard/signin/link", params={"token": token}).status_code == 410
        csrf = csrf_of(browser.get("/dashboard/signin").text)
        spent = browser.post("/dashboard/signin/link", data={"csrf_token": csrf, "token": token})
        assert spent.status_code == 410 and "largesse_session" not in spent.headers.get("set-cookie", "")
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        assert sign_in_with_link(browser, signin.signin_link(server.url, token)).status_code == 303

    # A connected organization member's /connect link, with a valid form from the sandbox page.
    connected = api.create_connected_organization(CreateConnectedOrganizationRequest(
        client_id="env-1", currency_code="USD")).connected_organization
    member = api.create_connected_organization_member(CreateConnectedOrganizationMemberRequest(
        connected_organization_id=connected.id, external_email="env@customer.example.com",
        external_name="Env")).connected_organization_member
    url = api.create_connected_organization_member_session(member.id, CreateConnectedOrganizationMemberSessionRequest(
        return_url="https://platform.example.com/back")).connected_organization_member_session.url
    path = url.removeprefix(server.url)
    with httpx.Client(timeout=30) as browser:
        page = browser.get(server.url + path)
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        assert browser.get(production.url + path).status_code == 404
        assert browser.post(production.url + path, data={"csrf_token": csrf}).status_code == 404
        assert browser.post(server.url + path, data={"csrf_token": csrf}).status_code == 200

    # A report's download.
    report_id = api.create_report(CreateReportRequest.from_dict(
        {"report_type": "digital_rewards", "format": "csv"})).report.id
    deliver()
    download = api.get_report(report_id).report.url.removeprefix(server.url)
    assert httpx.get(production.url + download, timeout=30).status_code == 404
    assert httpx.get(server.url + download, timeout=30).status_code == 200
