"""GET /orders (pagination, filters) and GET /rewards (custom-field search, timestamps)."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from datetime import datetime, timedelta

import httpx
import pytest

from tests.factories import (
    CHARITY_USD,
    client_search_rewards,
    error,
    make_campaign,
    make_field,
    ok,
    place,
)


def test_orders_pagination_newest_first(org, api, http):
    ids = []
    for i in range(5):  # a millisecond apart: orders of the same millisecond are ordered by ID
        ids.append(place(http, org.member_email, denomination=10 + i)["id"])
        time.sleep(0.002)
    newest_first = list(reversed(ids))
    page = ok(http.get("/orders", params={"limit": 2}))
    assert page["total_count"] == 5 and [o["id"] for o in page["orders"]] == newest_first[:2]
    page = ok(http.get("/orders", params={"limit": 2, "offset": 2}))
    assert [o["id"] for o in page["orders"]] == newest_first[2:4]
    listed = api.list_orders(offset=4, limit=2)
    assert listed.total_count == 5 and [o.id for o in listed.orders] == newest_first[4:]
    assert [o.id for o in api.list_orders().orders] == newest_first
    assert ok(http.get("/orders", params={"offset": 50}))["orders"] == []


def test_orders_created_at_range_as_the_client_sends_it(org, api, http):
    first = place(http, org.member_email)
    time.sleep(0.02)
    second = place(http, org.member_email)
    assert first["created_at"] < second["created_at"]
    # The client percent-encodes the bracketed keys (created_at%5Bgte%5D=...).
    assert [o.id for o in api.list_orders(created_at_gte=second["created_at"]).orders] == [second["id"]]
    assert [o.id for o in api.list_orders(created_at_lte=first["created_at"]).orders] == [first["id"]]
    both = api.list_orders(created_at_gte=first["created_at"], created_at_lte=second["created_at"])
    assert both.total_count == 2
    assert api.list_orders(created_at_gte="2999-01-01T00:00:00Z").total_count == 0
    assert api.list_orders(created_at_lte="2000-01-01").total_count == 0
    raw = http.get("/orders?created_at%5Bgte%5D=" + second["created_at"].replace(":", "%3A"))
    assert [o["id"] for o in ok(raw)["orders"]] == [second["id"]]
    # An offset is honoured: the same instant written in +02:00.
    instant = datetime.strptime(second["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ") + timedelta(hours=2)
    local = instant.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+02:00"
    assert [o["id"] for o in ok(http.get("/orders", params={"created_at[gte]": local}))["orders"]] == [second["id"]]


def test_a_bare_date_as_upper_bound_takes_the_whole_day_in(org, api, http):
    order = place(http, org.member_email)
    today = order["created_at"][:10]
    day_after = (datetime.strptime(today, "%Y-%m-%d") + timedelta(days=1)).strftime("%Y-%m-%d")
    day_before = (datetime.strptime(today, "%Y-%m-%d") - timedelta(days=1)).strftime("%Y-%m-%d")
    assert [o.id for o in api.list_orders(created_at_lte=today).orders] == [order["id"]]
    assert [o.id for o in api.list_orders(created_at_gte=today, created_at_lte=today).orders] == [order["id"]]
    assert api.list_orders(created_at_lte=day_before).total_count == 0
    assert api.list_orders(created_at_gte=day_after).total_count == 0
    # A date-time is taken as the instant it names.
    assert api.list_orders(created_at_lte=today + "T00:00:00Z").total_count == 0
    assert ok(http.get("/orders", params={"created_at[lte]": "9999-12-31"}))["total_count"] == 1
    # So is a date in ISO 8601's basic form (20261124): it read as midnight, leaving the day out.
    assert [o.id for o in api.list_orders(created_at_lte=today.replace("-", "")).orders] == [order["id"]]
    transactions = ok(http.get("/balance_transactions", params={"created_at[lte]": today}))["transactions"]
    assert transactions and all(t["created_at"][:10] <= today for t in transactions)


@pytest.mark.parametrize("value", ["yesterday", "2024-13-01", "1700000000",
                                   # past year 9999 or before year 1 once in UTC (was a 500)
                                   "9999-12-31T12:00:00-12:00", "0001-01-01T00:00:00+01:00"])
def test_orders_bad_created_at_is_400(http, value):
    errors = error(http.get("/orders", params={"created_at[gte]": value}), 400)
    assert "created_at[gte]" in errors["payload"]


def test_orders_campaign_filter(org, api, http):
    campaign = make_campaign(http, products=[CHARITY_USD])
    with_campaign = place(http, org.member_email, products=None, campaign_id=campaign["id"])
    place(http, org.member_email)
    listed = api.list_orders(campaign_id=campaign["id"])
    assert listed.total_count == 1 and listed.orders[0].id == with_campaign["id"]
    assert api.list_orders(campaign_id="NOSUCHCAMPAIGN").total_count == 0
    # An empty filter is as if absent (docs/api.md): the client sends `?campaign_id=&external_id=`.
    everything = api.list_orders().total_count
    assert everything >= 2
    assert api.list_orders(campaign_id="", external_id="").total_count == everything
    assert ok(http.get("/orders?external_id="))["total_count"] == everything


@pytest.mark.parametrize("path", ["/orders", "/rewards"])
@pytest.mark.parametrize("query", ["limit=abc", "limit=-1", "offset=-1", "offset=1.5", "limit=0", "limit=%00",
                                   "offset=99999999999999999999"])
def test_pagination_validation(http, path, query):
    errors = error(http.get(f"{path}?{query}"), 400)
    assert set(errors["payload"]) <= {"limit", "offset"} and errors["payload"]


def _order_with_fields(http, email, values: dict[str, str]) -> str:
    order = place(http, email, custom_fields=[{"id": fid, "value": v} for fid, v in values.items()])
    return order["rewards"][0]["id"]


def test_reward_search_all_labels_must_match_exactly(org, api, http):
    dept = make_field(http, options=["Sales", "Support"])
    region = make_field(http, options=["EU", "US"])
    both = _order_with_fields(http, org.member_email, {dept["id"]: "Sales", region["id"]: "EU"})
    sales_us = _order_with_fields(http, org.member_email, {dept["id"]: "Sales", region["id"]: "US"})
    support_eu = _order_with_fields(http, org.member_email, {dept["id"]: "Support", region["id"]: "EU"})
    _order_with_fields(http, org.member_email, {})

    def search(**params):
        return ok(http.get("/rewards", params=params))

    found = search(**{dept["label"]: "Sales"})
    assert {r["id"] for r in found["rewards"]} == {both, sales_us} and found["total_count"] == 2
    found = search(**{dept["label"]: "Sales", region["label"]: "EU"})
    assert [r["id"] for r in found["rewards"]] == [both]
    assert {f["label"] for f in found["rewards"][0]["custom_fields"]} == {dept["label"], region["label"]}
    assert [r["id"] for r in search(**{region["label"]: "EU", dept["label"]: "Support"})["rewards"]] == [support_eu]
    for value in ("sales", "Sale", "Sales ", ""):
        assert search(**{dept["label"]: value})["rewards"] == []
    assert search(no_such_label="Sales")["rewards"] == []
    assert search(**{dept["label"]: "Sales", "no_such_label": "x"})["rewards"] == []
    assert search()["total_count"] == 4
    paged = search(**{dept["label"]: "Sales", "limit": 1, "offset": 1})
    assert paged["total_count"] == 2 and len(paged["rewards"]) == 1
    via_client = client_search_rewards(api, [(dept["label"], "Sales"), (region["label"], "US")])
    assert [r.id for r in via_client.rewards] == [sales_us]


def test_reward_search_takes_at_most_100_labels(http):
    """As many labels as a reward can carry are searched; more are a 400 (1,100 labels used to
    be a 500 on SQLite: its expression tree has a depth limit)."""
    labels = [f"L{i}" for i in range(101)]
    assert ok(http.get("/rewards", params={label: "v" for label in labels[:100]}))["rewards"] == []
    for count in (101, 1100):
        errors = error(http.get("/rewards", params=[(f"L{i}", "v") for i in range(count)]), 400)
        assert errors["payload"] == {"custom_fields": ["at most 100 labels per search"]}


def test_client_list_rewards(org, api, http):
    order = place(http, org.member_email)
    listed = api.list_rewards()
    assert [r.id for r in listed.rewards] == [order["rewards"][0]["id"]]
    assert listed.rewards[0].delivery.status == "PENDING"
    assert api.list_rewards(offset=1).rewards == []
    got = api.get_reward(order["rewards"][0]["id"]).reward
    assert got.order_id == order["id"] and got.value.denomination == 25


SPEC = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_auto_is_the_default_setting():
    from largesse.config import Settings

    assert Settings.from_env({}).reward_list_timestamps == "auto"
    for value in ("spec", "iso8601", "auto"):
        assert Settings.from_env({"LARGESSE_REWARD_LIST_TIMESTAMPS": value}).reward_list_timestamps == value


def test_auto_gives_the_spec_form_and_iso_8601_to_the_official_client(org, make_server):
    """The default: GET /rewards shows the specification's form, except to the official Python
    client (and other clients generated from the OpenAPI document), which cannot parse it and
    gets ISO 8601, so that list_rewards deserializes."""
    server = make_server(reward_list_timestamps="auto")
    moved = replace(org, base_url=server.url)
    with moved.http() as http:
        order = place(http, org.member_email)
        assert SPEC.match(ok(http.get("/rewards"))["rewards"][0]["created_at"])
        generated = ok(http.get("/rewards", headers={"User-Agent": "OpenAPI-Generator/1.0.0/python"}))
        assert ISO.match(generated["rewards"][0]["created_at"])
    api = moved.api()
    assert api.api_client.user_agent.startswith("Tremendous Python v")
    listed = api.list_rewards().rewards
    assert listed[0].id == order["rewards"][0]["id"]
    assert listed[0].created_at.isoformat(timespec="milliseconds")[:23] == order["rewards"][0]["created_at"][:23]


def test_reward_list_timestamps_spec_form(org, make_server):
    server = make_server(reward_list_timestamps="spec")
    with replace(org, base_url=server.url).http() as http:
        order = place(http, org.member_email)
        listed = ok(http.get("/rewards"))["rewards"][0]
        assert SPEC.match(listed["created_at"]), listed["created_at"]
        parsed = datetime.strptime(listed["created_at"], "%Y-%m-%d %H:%M:%S UTC")
        assert parsed.isoformat() == order["rewards"][0]["created_at"][:19]
        # Everywhere else: ISO 8601 with milliseconds and Z.
        assert ISO.match(ok(http.get(f"/rewards/{listed['id']}"))["reward"]["created_at"])
        assert ISO.match(ok(http.get(f"/orders/{order['id']}"))["order"]["rewards"][0]["created_at"])
        assert ISO.match(order["created_at"])


def test_reward_list_timestamps_iso_setting(org, http):
    place(http, org.member_email)
    assert ISO.match(ok(http.get("/rewards"))["rewards"][0]["created_at"])


def test_a_parameter_that_cannot_be_a_label_is_400_not_an_empty_list(org, http):
    """GET /rewards filters by custom field labels only: created_at[gte] (a filter of other
    lists) cannot be a label, and used to answer an empty list as if nothing matched."""
    place(http, org.member_email)
    body = error(http.get("/rewards", params={"created_at[gte]": "2020-01-01"}), 400)
    assert body["payload"] == {"created_at[gte]": ["is not a custom field label"]}
    assert "GET /rewards filters by custom field labels" in body["message"]
    assert ok(http.get("/rewards", params={"No Such Label": "x"}))["rewards"] == []  # could be one: no match


@pytest.mark.parametrize("path", ["/orders", "/rewards", "/invoices", "/fraud_reviews"])
def test_a_limit_of_any_size_reads_as_the_maximum(http, server, path):
    """The document says a limit above the maximum reads as the maximum: 2147483647 and more
    answered 400 "limit is too large" (a fuzzer's schema-valid request refused). An offset past
    the documented maximum is still a 400, which the document now declares."""
    for limit in ("501", "2147483647", "99999999999999999999"):
        ok(http.get(f"{path}?limit={limit}"))
    schema = next(p["schema"] for p in httpx.get(f"{server.url}/openapi.json").json()[
        "paths"]["/api/v2" + path]["get"]["parameters"] if p["name"] == "offset")
    assert schema["maximum"] == 10**9
    error(http.get(f"{path}?offset={10**9 + 1}"), 400)


def test_a_limit_above_the_maximum_cuts_the_page_at_the_maximum(http):
    """docs/api.md: "larger values are clamped": with 11 invoices (whose list's maximum is 10),
    a limit of 11, 2147483647 or more answers 10 of them, and the total counts all 11."""
    for amount in range(1, 12):
        ok(http.post("/invoices", json={"amount": amount}))
    for limit in ("11", "2147483647", "99999999999999999999"):
        page = ok(http.get(f"/invoices?limit={limit}"))
        assert (len(page["invoices"]), page["total_count"]) == (10, 11)
