"""API rate limits per key and per organization, shared by the server processes of one database."""

from __future__ import annotations

import time

import pytest
from tremendous.exceptions import ApiException

from largesse import auth, db
from tests.conftest import Org, create_org
from tests.factories import error, ok

SYNC = 0.2  # seconds between a server's syncs with the shared counters, in these tests


@pytest.fixture(autouse=True)
def _whole_window():
    """Counts are per minute (fixed windows): start a test early enough in one to finish in it."""
    if time.time() % 60 > 45:
        time.sleep(60.5 - time.time() % 60)


def _limited(make_server, **limits):
    return make_server(api_rate_limit_sync_seconds=SYNC, **{"api_rate_limit_per_key": 0,
                                                            "api_rate_limit_per_org": 0, **limits})


def _second_key(engine, org: Org) -> Org:
    with db.write(engine) as conn:
        _, key = auth.issue_key(conn, organization_id=org.id, label="second")
    return Org(org.id, key, org.funding_source_id, org.member_email, org.base_url)


def test_burst_beyond_the_key_limit_is_429_with_headers(engine, make_server):
    server = _limited(make_server, api_rate_limit_per_key=5)
    org = create_org(engine, server.url)
    with org.http() as http:
        remaining = []
        for _ in range(5):
            response = http.get("/funding_sources")
            ok(response)
            assert response.headers["ratelimit-limit"] == "5"
            assert 0 < int(response.headers["ratelimit-reset"]) <= 60
            remaining.append(int(response.headers["ratelimit-remaining"]))
        assert remaining == [4, 3, 2, 1, 0]
        refused = http.post("/orders", json={})
        errors = error(refused, 429)
        assert "rate limit" in errors["message"].lower()
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["ratelimit-limit"] == "5" and refused.headers["ratelimit-remaining"] == "0"
        assert refused.headers["ratelimit-reset"] == refused.headers["retry-after"]
        error(http.get("/orders"), 429)
    with _second_key(engine, org).http() as other_key:  # the limit is per key here: another key goes on
        ok(other_key.get("/funding_sources"))


def test_a_key_with_other_whitespace_is_counted_or_refused(engine, make_server):
    """The key check stripped U+00A0 and U+0085 around the key, the limiter did not: 'Bearer
    KEY\xa0' verified but was never counted, past any limit. Only spaces and tabs are the
    header's; a key with anything else around it is not a key (401)."""
    import httpx

    server = _limited(make_server, api_rate_limit_per_key=3)
    org = create_org(engine, server.url)
    url = f"{server.url}/api/v2/funding_sources"
    for padded in (f"{org.api_key}\xa0", f"\xa0{org.api_key}", f"{org.api_key}\x85"):
        headers = [(b"authorization", b"Bearer " + padded.encode("latin-1"))]
        error(httpx.get(url, headers=headers), 401)
    for padded in (f"  {org.api_key}", f"\t{org.api_key}", org.api_key):  # counted: 3 of 3
        ok(httpx.get(url, headers={"Authorization": f"Bearer {padded}"}))
    assert httpx.get(url, headers={"Authorization": f"Bearer  {org.api_key}"}).status_code == 429


def test_the_official_client_raises_on_429(engine, make_server):
    """Its urllib3 pool would honour Retry-After (wait, then retry up to 3 times); without
    retries the 429 surfaces as the client's ApiException, its body the error body."""
    from tremendous import ApiClient, Configuration, TremendousApi

    server = _limited(make_server, api_rate_limit_per_key=3)
    org = create_org(engine, server.url)
    api = TremendousApi(ApiClient(Configuration(host=f"{server.url}/api/v2", access_token=org.api_key,
                                                retries=False)))
    for _ in range(3):
        api.list_funding_sources()
    with pytest.raises(ApiException) as raised:
        api.list_funding_sources()
    assert raised.value.status == 429
    assert "Rate limit" in raised.value.body and raised.value.headers["Retry-After"]


def test_organization_limit_counts_all_its_keys(engine, make_server):
    server = _limited(make_server, api_rate_limit_per_org=6)
    first = create_org(engine, server.url)
    second = _second_key(engine, first)
    with first.http() as a, second.http() as b:
        for _ in range(3):
            ok(a.get("/funding_sources"))
            ok(b.get("/funding_sources"))
        error(a.get("/funding_sources"), 429)
        error(b.get("/funding_sources"), 429)
    with create_org(engine, server.url).http() as other_org:
        ok(other_org.get("/funding_sources"))


def test_two_servers_on_one_database_share_the_count(engine, make_server):
    one = _limited(make_server, api_rate_limit_per_key=10)
    two = _limited(make_server, api_rate_limit_per_key=10)
    org = create_org(engine, one.url)
    with org.http() as http:
        for _ in range(6):
            ok(http.get("/funding_sources"))
        time.sleep(SYNC * 2)
        ok(http.get("/funding_sources"))  # starts a sync that adds these 7 to the shared count
    time.sleep(SYNC * 2)
    admitted = 0
    with Org(org.id, org.api_key, "", "", two.url).http() as http:
        ok(http.get("/funding_sources"))  # the second server's first sync reads the shared count
        admitted += 1
        time.sleep(SYNC * 2)
        for _ in range(10):
            response = http.get("/funding_sources")
            if response.status_code == 429:
                break
            ok(response)
            admitted += 1
    assert admitted == 3  # 7 on the first server + 3 here = the limit of 10


def test_limits_of_zero_disable_them(engine, make_server):
    server = _limited(make_server)
    with create_org(engine, server.url).http() as http:
        for _ in range(20):
            response = http.get("/funding_sources")
            ok(response)
            assert "ratelimit-limit" not in response.headers


def test_default_limits_are_generous(http):
    response = http.get("/funding_sources")
    ok(response)
    assert int(response.headers["ratelimit-limit"]) >= 60_000
    assert int(response.headers["ratelimit-remaining"]) > 59_000
