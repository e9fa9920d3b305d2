"""Connected organizations through the official client, and the /connect sign-in page (httpx)."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import select, update
from tremendous import (
    CreateConnectedOrganizationMemberRequest,
    CreateConnectedOrganizationMemberSessionRequest,
    CreateConnectedOrganizationRequest,
    CreateConnectedOrganizationRequestKybPrefill,
    CreateOrganizationRequest,
    CreateWebhookRequest,
)
from tremendous.exceptions import BadRequestException, NotFoundException, UnauthorizedException

from largesse import auth, db
from largesse.connected.models import connected_member_sessions
from largesse.delivery.models import jobs
from largesse.orgs.models import members
from largesse.timeutil import utcnow
from tests.conftest import Org
from tests.factories import error

RETURN_URL = "https://platform.example.com/back?tab=rewards"


def _connected(api, client_id="cust-1", name="Customer One"):
    request = CreateConnectedOrganizationRequest(
        client_id=client_id, kyb_prefill=CreateConnectedOrganizationRequestKybPrefill(
            company_name=name, website_url="https://customer.example.com"))
    return api.create_connected_organization(request).connected_organization


def _member(api, connected_id, email="alice@customer.example.com", name="Alice"):
    return api.create_connected_organization_member(CreateConnectedOrganizationMemberRequest(
        connected_organization_id=connected_id, external_name=name, external_email=email)).connected_organization_member


def _session(api, member_id, state="xyz 1"):
    return api.create_connected_organization_member_session(member_id, CreateConnectedOrganizationMemberSessionRequest(
        return_url=RETURN_URL, state=state)).connected_organization_member_session


def _sub_organizations(org) -> list[str]:
    with org.http() as http:
        listed = http.get("/organizations", params={"include": "sub_organizations"}).json()["organizations"]
    assert listed[0]["id"] == org.id
    return [o["id"] for o in listed[1:]]


def test_connected_organizations_lifecycle(org, api, other_org, engine):
    api.create_webhook(CreateWebhookRequest(url="http://127.0.0.1:9/hook"))
    first = _connected(api)
    assert first.client_id == "cust-1" and first.organization.name == "Customer One"
    assert first.organization.website == "https://customer.example.com" and first.organization.status == "APPROVED"
    assert first.organization.currency_code == "USD"
    second = _connected(api, "cust-2", "Customer Two")
    with db.read(engine) as conn:
        events = [j.payload["event"] for j in conn.execute(jobs.select().where(jobs.c.organization_id == org.id))]
    assert events.count("CONNECTED_ORGANIZATIONS.REGISTERED") == 2

    page = api.list_connected_organizations(limit=1)
    assert page.total_count == 2 and [c.id for c in page.connected_organizations] == [second.id]
    assert [c.id for c in api.list_connected_organizations(offset=1).connected_organizations] == [first.id]
    assert api.get_connected_organization(first.id).connected_organization.client_id == "cust-1"
    # The connected organization is a real sub-organization of the platform, in the sandbox preloaded.
    assert api.get_organization(first.organization.id).organization.id == first.organization.id
    assert first.organization.id in _sub_organizations(org)
    with pytest.raises(NotFoundException):
        other_org.api().get_connected_organization(first.id)
    with pytest.raises(BadRequestException) as raised:
        _connected(api, "cust-1")
    assert raised.value.data.errors.payload == {"client_id": ["has already been taken"]}
    with pytest.raises(BadRequestException):
        api.create_connected_organization(CreateConnectedOrganizationRequest(client_id="c3", currency_code="JPY"))

    deleted = api.delete_connected_organization(first.id).connected_organization
    assert deleted.id == first.id
    with pytest.raises(NotFoundException):
        api.get_connected_organization(first.id)
    with pytest.raises(NotFoundException):
        api.delete_connected_organization(first.id)
    assert api.list_connected_organizations().total_count == 1
    assert _connected(api, "cust-1").id != first.id  # a deleted connection frees its client_id


def test_connected_members_and_sessions(org, api, other_org):
    connected = _connected(api)
    alice = _member(api, connected.id)
    assert alice.connected_organization_id == connected.id and alice.external_email == "alice@customer.example.com"
    assert alice.member.email == "alice@customer.example.com" and alice.member.role == "ADMIN"
    bob = api.create_connected_organization_member(CreateConnectedOrganizationMemberRequest(
        connected_organization_id=connected.id, external_name="Bob", role="MEMBER")).connected_organization_member
    assert bob.external_email is None and bob.member.role == "MEMBER"

    listed = api.list_connected_organization_members(connected.id, limit=1)
    assert listed.total_count == 2 and [m.id for m in listed.connected_organization_members] == [bob.id]
    assert api.get_connected_organization_member(alice.id).connected_organization_member.external_name == "Alice"
    with pytest.raises(NotFoundException):
        other_org.api().get_connected_organization_member(alice.id)
    with pytest.raises(BadRequestException):  # the body's connected_organization_id: not theirs
        _member(other_org.api(), connected.id, "eve@example.com")
    with pytest.raises(BadRequestException):
        _member(api, connected.id, "alice@customer.example.com")  # already a member

    session = _session(api, alice.id)
    assert session.connected_organization_member_id == alice.id and session.return_url == RETURN_URL
    assert session.state == "xyz 1" and session.url.startswith(f"{org.base_url}/connect/")
    assert timedelta(minutes=9) < session.expires_at - session.created_at <= timedelta(minutes=10)
    with pytest.raises(BadRequestException) as raised:
        api.create_connected_organization_member_session(alice.id, CreateConnectedOrganizationMemberSessionRequest(
            return_url="javascript:alert(1)"))
    assert raised.value.data.errors.payload == {"return_url": ["must be an absolute http(s) URL"]}

    assert api.delete_connected_organization_member(bob.id).connected_organization_member.id == bob.id
    with pytest.raises(NotFoundException):
        api.get_connected_organization_member(bob.id)
    assert api.list_connected_organization_members(connected.id).total_count == 1
    with org.http() as http:
        assert "connected_organization_id" in error(http.get("/connected_organization_members"), 400)["payload"]
        # An unknown one is 404 at the query parameter that named it (API.md §4: the payload
        # mirrors the request).
        unknown = http.get("/connected_organization_members", params={"connected_organization_id": "ZZZZZZZZZZZZZZ"})
        assert error(unknown, 404)["payload"] == {"connected_organization_id": ["not found"]}


def test_member_of_an_unknown_connected_organization_is_400_at_its_property(api, other_org):
    # An ID inside the body points at its property with a 400, the status this operation's
    # client decodes (API.md §1: 400 401 429 500); another platform's connection is unknown too.
    theirs = _connected(other_org.api(), "theirs-1")
    for connected_id in ("ZZZZZZZZZZZZ", theirs.id):
        with pytest.raises(BadRequestException) as raised:
            _member(api, connected_id, "carol@customer.example.com")
        assert raised.value.data.errors.payload == {"connected_organization_id": ["not found"]}


@pytest.mark.parametrize("website_url", ["javascript:alert(1)", "data:text/html,<script>x</script>",
                                         "https://a.example.com/<script>", "ftp://files.example.com"])
def test_kyb_website_url_is_validated_like_an_organizations_website(org, api, http, website_url):
    """The rule of POST /organizations' `website` (orgs/endpoints.py WEBSITE), at
    kyb_prefill.website_url: 400 at the property, nothing created."""
    assert error(http.post("/organizations", json={"name": "Sub", "website": website_url,
                                                   "with_api_key": False}), 400)["payload"] == {
        "website": ["is not a valid URL"]}
    before = _sub_organizations(org)
    with pytest.raises(BadRequestException) as raised:
        api.create_connected_organization(CreateConnectedOrganizationRequest(
            client_id="cust-js", kyb_prefill=CreateConnectedOrganizationRequestKybPrefill(website_url=website_url)))
    assert raised.value.data.errors.payload == {"kyb_prefill": {"website_url": ["is not a valid URL"]}}
    assert _sub_organizations(org) == before and api.list_connected_organizations().total_count == 0


def test_kyb_website_url_takes_what_an_organizations_website_takes(api):
    for client_id, website_url, shown in (("c-url", " https://customer.example.com/about ",
                                           "https://customer.example.com/about"),
                                          ("c-domain", "customer.example.com", "customer.example.com"),
                                          ("c-blank", "  ", ""), ("c-none", None, "")):
        created = api.create_connected_organization(CreateConnectedOrganizationRequest(
            client_id=client_id, kyb_prefill=CreateConnectedOrganizationRequestKybPrefill(
                company_name="Customer", website_url=website_url))).connected_organization
        assert created.organization.website == shown, client_id


def _confirm(client: httpx.Client, url: str) -> tuple[str, str]:
    """GET the sign-in page as a browser: (form action, csrf token)."""
    page = client.get(url)
    assert page.status_code == 200, page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    action = re.search(r'<form method="post" action="([^"]+)"', page.text).group(1)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    return action, token


def test_connect_page_get_does_not_spend_post_spends_once(org, api, engine):
    connected = _connected(api, name="Customer <One>")
    session = _session(api, _member(api, connected.id).id)
    with httpx.Client(base_url=org.base_url) as browser:
        for _ in range(2):  # a mail scanner and the person: GET spends nothing
            page = browser.get(session.url)
            assert "You are about to sign in to Customer &lt;One&gt;" in page.text
        action, csrf = _confirm(browser, session.url)
        assert browser.post(action, data={}).status_code == 403  # no CSRF token: not signed in
        signed_in = browser.post(action, data={"csrf_token": csrf})
        assert signed_in.status_code == 200, signed_in.text
        assert "Customer &lt;One&gt;" in signed_in.text and "$5,000.00" in signed_in.text
        back = re.search(r'<a href="([^"]+)">Return to platform.example.com</a>', signed_in.text)
        link = urlsplit(back.group(1).replace("&amp;", "&"))
        assert (link.scheme, link.netloc, link.path) == ("https", "platform.example.com", "/back")
        assert parse_qs(link.query) == {"tab": ["rewards"], "state": ["xyz 1"]}
        # The member is signed in to the dashboard of the connected organization, not the platform's.
        assert 'href="/dashboard">Open the dashboard</a>' in signed_in.text
        dashboard = browser.get("/dashboard")
        assert dashboard.status_code == 200 and "Customer &lt;One&gt;" in dashboard.text
        assert "Acme" not in dashboard.text

        again = browser.post(action, data={"csrf_token": csrf})
        assert again.status_code == 410 and "already been used" in again.text
        assert browser.get(session.url).status_code == 410
        assert browser.get("/connect/not-a-real-token").status_code == 404
        assert browser.get("/connect/a/b").headers["content-type"].startswith("text/html")


def test_connect_concurrent_posts_one_wins_and_expired_refused(org, api, engine):
    connected = _connected(api)
    member = _member(api, connected.id)
    session = _session(api, member.id)
    with httpx.Client(base_url=org.base_url) as browser:
        action, csrf = _confirm(browser, session.url)
        cookies = dict(browser.cookies)
    statuses = []

    def spend():
        with httpx.Client(base_url=org.base_url, cookies=cookies) as client:
            statuses.append(client.post(action, data={"csrf_token": csrf}).status_code)

    threads = [threading.Thread(target=spend) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 410, 410, 410]

    expired = _session(api, member.id)
    with httpx.Client(base_url=org.base_url) as browser:
        action, csrf = _confirm(browser, expired.url)
        with db.write(engine) as conn:
            conn.execute(update(connected_member_sessions)
                         .where(connected_member_sessions.c.connected_organization_member_id == member.id,
                                connected_member_sessions.c.spent_at.is_(None))
                         .values(expires_at=utcnow() - timedelta(seconds=1)))
        refused = browser.post(action, data={"csrf_token": csrf})
        assert refused.status_code == 410 and "expired" in refused.text
        assert browser.get(expired.url).status_code == 410


def test_deleting_the_connection_ends_links_and_keys(org, api, engine):
    connected = _connected(api)
    member = _member(api, connected.id)
    session = _session(api, member.id)
    with db.write(engine) as conn:  # a key of the connected organization, as the operator would issue
        _, key = auth.issue_key(conn, organization_id=connected.organization.id)
    customer = Org(connected.organization.id, key, "", "", org.base_url).api()
    assert customer.list_members().members[0].email == "alice@customer.example.com"
    # The customer's own sub-organization, and its sub-organization, each with a key.
    child = customer.create_organization(CreateOrganizationRequest(
        name="Customer Child", website="https://child.example.com", with_api_key=True)).organization
    child_api = Org(child.id, child.api_key, "", "", org.base_url).api()
    grandchild = child_api.create_organization(CreateOrganizationRequest(
        name="Customer Grandchild", website="https://grandchild.example.com", with_api_key=True)).organization
    grandchild_api = Org(grandchild.id, grandchild.api_key, "", "", org.base_url).api()
    assert grandchild_api.list_funding_sources().funding_sources
    signed_in = httpx.Client(base_url=org.base_url)  # Alice, in the dashboard through the platform
    action, csrf = _confirm(signed_in, _session(api, member.id).url)
    assert signed_in.post(action, data={"csrf_token": csrf}).status_code == 200
    assert signed_in.get("/dashboard/developers").status_code == 200
    api.delete_connected_organization(connected.id)
    with httpx.Client(base_url=org.base_url) as browser:
        assert browser.get(session.url).status_code == 404
    # Her session ended with the connection: no page, no new API key.
    try:
        for path in ("/dashboard", "/dashboard/developers"):
            page = signed_in.get(path)
            assert page.status_code == 303 and "/dashboard/signin" in page.headers["location"], path
    finally:
        signed_in.close()
    with db.read(engine) as conn:
        assert conn.execute(select(members.c.id).where(
            members.c.organization_id == connected.organization.id)).first() is None
    with pytest.raises(NotFoundException):
        _session(api, member.id)
    for ended in (customer, child_api, grandchild_api):  # the keys of its own sub-organizations end too
        with pytest.raises(UnauthorizedException):
            ended.list_members()
    with db.read(engine) as conn:
        assert conn.execute(select(members.c.id).where(
            members.c.organization_id.in_([child.id, grandchild.id]))).first() is None
    # The organization and its money stay.
    assert api.get_organization(connected.organization.id).organization.id == connected.organization.id


def test_concurrent_creates_with_one_client_id(org, api):
    statuses = []

    def create():
        with org.http() as http:
            statuses.append(http.post("/connected_organizations", json={"client_id": "race"}).status_code)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 400, 400, 400]
    assert api.list_connected_organizations().total_count == 1
    # The losers' sub-organizations (and their sandbox credit) rolled back with them.
    assert len(_sub_organizations(org)) == 1


def test_list_total_count_is_exact_near_the_end_and_a_lower_bound_before(api, http, monkeypatch):
    """total_count as every list counts it (docs/api.md, "total_count at scale"; the horizon
    lowered to 3 here): a lower bound while more than 3 follow the offset, exact after."""
    from largesse import paging
    from tests.factories import ok

    created = [_connected(api, client_id=f"count-{n}", name=f"Customer {n}").id for n in range(7)]
    api.delete_connected_organization(created.pop(2))  # ended connections are neither listed nor counted
    everything = ok(http.get("/connected_organizations", params={"limit": 10}))
    newest_first = [c["id"] for c in everything["connected_organizations"]]
    assert everything["total_count"] == 6 and sorted(newest_first) == sorted(created)
    monkeypatch.setattr(paging, "COUNT_HORIZON", 3)

    def page(offset: int) -> dict:
        return ok(http.get("/connected_organizations", params={"limit": 2, "offset": offset}))

    assert page(0)["total_count"] == 4
    assert page(2)["total_count"] == 6 and page(4)["total_count"] == 6
    assert page(10) == {"connected_organizations": [], "total_count": 6}
    seen, offset = [], 0
    while True:
        body = page(offset)
        seen += [c["id"] for c in body["connected_organizations"]]
        offset += 2
        if offset >= body["total_count"]:
            break
    assert seen == newest_first


def test_a_page_reads_its_organizations_and_members_in_one_statement_each(api, http, engine):
    """A page of connected organizations (and of their members) costs the same statements for 1
    row as for 10: each row's organization (member) was read by a statement of its own."""
    from sqlalchemy import event

    from tests.factories import ok

    if not db.is_sqlite(engine):  # PostgreSQL's requests run on the engine's asyncio twin
        pytest.skip("statements are counted on the shared engine, which SQLite's requests use")
    connected = [_connected(api, client_id=f"n1-{n}", name=f"Customer {n}").id for n in range(10)]
    for n in range(10):
        _member(api, connected[0], email=f"m{n}@customer.example.com", name=f"M{n}")
    statements: list[str] = []

    def count(conn, cursor, statement, *args):
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        def cost(path: str, **params) -> int:
            """The fewest statements of three requests: a request may also pay for what is
            cached across requests (its API key) or run beside housekeeping."""
            counts = []
            for _ in range(3):
                statements.clear()
                ok(http.get(path, params=params))
                counts.append(len(statements))
            return min(counts)

        assert cost("/connected_organizations", limit=1) == cost("/connected_organizations", limit=10)
        members = {"connected_organization_id": connected[0]}
        assert cost("/connected_organization_members", limit=1, **members) == \
            cost("/connected_organization_members", limit=10, **members)
    finally:
        event.remove(engine, "before_cursor_execute", count)


@pytest.mark.parametrize("return_url", ["https://[::1", "https://platform.example.com:99999/back",
                                        "https://platform.example.com:0/back"])
def test_a_return_url_that_urlsplit_refuses_is_400_not_500(api, return_url):
    """A malformed IPv6 host or a port outside 1-65535: 400 at return_url, never a 500."""
    alice = _member(api, _connected(api).id)
    with pytest.raises(BadRequestException) as raised:
        api.create_connected_organization_member_session(alice.id, CreateConnectedOrganizationMemberSessionRequest(
            return_url=return_url))
    assert raised.value.data.errors.payload == {"return_url": ["must be an absolute http(s) URL"]}
    session = api.create_connected_organization_member_session(
        alice.id, CreateConnectedOrganizationMemberSessionRequest(return_url="https://[::1]:8443/back"),
    ).connected_organization_member_session
    assert session.return_url == "https://[::1]:8443/back"


def test_a_blank_kyb_name_does_not_name_the_organization(api):
    """The name rule of every organization (no surrounding spaces, not blank): a blank
    company_name falls back to doing_business_as, then to the client_id."""
    for client_id, company, dba, shown in (("c-dba", "   ", " Trading As ", "Trading As"),
                                           ("c-id", " ", "  ", "c-id"), ("c-trim", " Acme Ltd ", None, "Acme Ltd")):
        created = api.create_connected_organization(CreateConnectedOrganizationRequest(
            client_id=client_id, kyb_prefill=CreateConnectedOrganizationRequestKybPrefill(
                company_name=company, doing_business_as=dba))).connected_organization
        assert created.organization.name == shown, client_id
