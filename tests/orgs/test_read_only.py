"""A read_only key reads everything and writes nothing, on every write route of the app.

The walk iterates the application's own routes (app.routes, cross-checked with /openapi.json):
a route added later by anyone is covered without touching this test. Each write is tried with a
plausible JSON body, no body, and a malformed body, against real resources of the organization,
and the whole database (every table but the rate-limit counters) must be unchanged afterwards.
"""

from __future__ import annotations

import hashlib
import re

import httpx
import pytest
from sqlalchemy import select
from tremendous import CreateApiKeyRequest, CreateMemberRequest
from tremendous.exceptions import ForbiddenException

from largesse import db
from largesse.models import metadata
from tests.conftest import Org, order_body
from tests.factories import error, make_campaign, make_field, ok

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


def _flat_routes(routes):
    """Every route with its full path: FastAPI >= 0.16x keeps included routers as one entry
    (effective_route_contexts() gives their routes with the prefix applied)."""
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is not None:
            yield from contexts()
        else:
            yield route


def write_routes(app) -> set[tuple[str, str]]:
    return {(method, route.path) for route in _flat_routes(app.routes)
            if getattr(route, "path", "").startswith("/api/v2/")
            for method in (getattr(route, "methods", None) or set()) & WRITE_METHODS}


def database_fingerprint(engine) -> dict[str, str]:
    """A digest of every row of every table (rate-limit counters excluded: reads count too)."""
    digests = {}
    with db.read(engine) as conn:
        for table in metadata.sorted_tables:
            if "rate_limit" in table.name:
                continue
            rows = sorted(repr(tuple(row)) for row in conn.execute(select(table)))
            digests[table.name] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return digests


@pytest.fixture
def resources(org, http):
    """Real IDs of the organization's things, so that a write that slipped through would change them."""
    campaign = make_campaign(http)
    make_field(http)
    order = ok(http.post("/orders", json=order_body(org.member_email)))["order"]
    webhook = ok(http.post("/webhooks", json={"url": "http://127.0.0.1:9/hook"}))["webhook"]
    connected = ok(http.post("/connected_organizations", json={"client_id": "walk-client"}))["connected_organization"]
    member = ok(http.post("/connected_organization_members", json={
        "connected_organization_id": connected["id"], "external_email": "walker@example.com"}))[
        "connected_organization_member"]
    owner = ok(http.get("/members"))["members"][0]
    return {"campaign_id": campaign["id"], "reward_id": order["rewards"][0]["id"], "order_id": order["id"],
            "webhook_id": webhook["id"], "member_id": owner["id"], "connected_organization_id": connected["id"],
            "connected_organization_member_id": member["id"], "rule_type": "review_country", "id": order["id"]}


def test_read_only_key_gets_403_on_every_write_route(server, engine, org, api, resources):
    read_only = api.create_api_key(CreateApiKeyRequest(permission="read_only")).api_key
    routes = write_routes(server.app)
    documented = {(method.upper(), path) for path, operations in httpx.get(f"{server.url}/openapi.json").json()[
        "paths"].items() if path.startswith("/api/v2/") for method in operations if method.upper() in WRITE_METHODS}
    assert documented <= routes  # every documented write is walked (undocumented ones too)
    assert {("POST", "/api/v2/orders"), ("POST", "/api/v2/organizations"), ("PATCH", "/api/v2/members/{member_id}"),
            ("POST", "/api/v2/connected_organization_members/{connected_organization_member_id}/sessions")} <= routes

    before = database_fingerprint(engine)
    as_json = {"Content-Type": "application/json"}
    # Not UTF-8, or nested past the JSON reader: FastAPI's own 400, which was answered before
    # the key (400/422 to a read-only key and to an unknown one, on half the routes).
    bodies = ({"json": order_body(org.member_email)}, {"json": {}}, {},
              {"content": b"{not json", "headers": as_json}, {"content": b"\xff", "headers": as_json},
              {"content": b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "headers": as_json})
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {read_only}"}, timeout=30) as client:
        for method, template in sorted(routes):
            path = PARAM.sub(lambda m: resources.get(m.group(1), "ZZZZZZZZZZZZ"), template)
            for body in bodies:
                response = client.request(method, path, **body)
                assert response.status_code == 403, f"{method} {template} {body}: {response.text}"
                assert "read-only" in error(response, 403)["message"]
        assert ok(client.get("/api/v2/orders"))["total_count"] == 1  # and it reads
        assert ok(client.get(f"/api/v2/campaigns/{resources['campaign_id']}"))["campaign"]["id"]
    with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer LRG_SANDBOX_unknown"}) as client:
        for method, template in sorted(routes):
            path = PARAM.sub(lambda m: resources.get(m.group(1), "ZZZZZZZZZZZZ"), template)
            for body in bodies[-3:]:
                assert client.request(method, path, **body).status_code == 401, f"{method} {template} {body}"
    assert database_fingerprint(engine) == before


def test_read_only_key_through_the_client(org, api):
    read_only = api.create_api_key(CreateApiKeyRequest(permission="read_only")).api_key
    reader = Org(org.id, read_only, "", "", org.base_url).api()
    assert reader.list_funding_sources().funding_sources[0].meta.available_cents == 500_000
    with pytest.raises(ForbiddenException) as raised:
        reader.create_member(CreateMemberRequest(email="sneaky@example.com", role="ADMIN"))
    assert raised.value.status == 403
    with pytest.raises(ForbiddenException):
        reader.delete_member(reader.list_members().members[0].id)
    assert [m.email for m in api.list_members().members] == [org.member_email]
