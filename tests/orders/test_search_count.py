"""GET /rewards total_count at scale (docs/api.md): exact when the matches end within
paging.COUNT_HORIZON rows past the offset, otherwise a lower bound (offset + horizon + 1) that
still lets a client page to the end. The horizon is lowered to 3 here so that a handful of
rewards shows both sides (the server runs in this process)."""

from __future__ import annotations

import time

from largesse import paging
from tests.factories import make_campaign, make_field, ok, place


def test_total_count_is_exact_near_the_end_and_a_growing_lower_bound_before(org, http, monkeypatch):
    field = make_field(http, options=["Sales", "Support"])
    ids = [place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "Sales"}])["rewards"][0]["id"]
           for _ in range(6)]
    place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "Support"}])
    monkeypatch.setattr(paging, "COUNT_HORIZON", 3)
    label = field["label"]

    def page(offset: int) -> dict:
        return ok(http.get("/rewards", params={label: "Sales", "limit": 2, "offset": offset}))

    first = page(0)
    assert first["total_count"] == 4  # 0 + 3 + 1: more than the page, fewer than the 6 matches
    assert isinstance(first["total_count"], int)
    assert page(2)["total_count"] == 6  # the matches end within 3 rows past offset 2: exact
    assert page(4)["total_count"] == 6
    assert page(10) == {"rewards": [], "total_count": 6}  # past the end: still exact
    # Paging until offset >= total_count reaches every match.
    seen, offset = [], 0
    while True:
        body = page(offset)
        seen += [r["id"] for r in body["rewards"]]
        offset += 2
        if offset >= body["total_count"]:
            break
    assert sorted(seen) == sorted(ids)  # each match once (ties in created_at order by id)
    monkeypatch.setattr(paging, "COUNT_HORIZON", 1000)
    assert page(0)["total_count"] == 6


def test_two_label_total_count_examines_a_bounded_number_of_the_first_labels_rewards(org, http, monkeypatch):
    """With several labels, counting past a full page examines at most COUNT_HORIZON rewards of
    the first label: exact when they end there, otherwise the matches seen and at least one
    more than the page (docs/api.md)."""
    dept, region = make_field(http, options=["Sales", "Support"]), make_field(http, options=["EMEA", "AMER"])
    regions = ["AMER", "AMER", "EMEA", "AMER", "AMER", "AMER", "AMER", "AMER", "EMEA", "EMEA"]  # oldest first
    for value in regions:
        place(http, org.member_email, custom_fields=[{"id": dept["id"], "value": "Sales"},
                                                     {"id": region["id"], "value": value}])
        time.sleep(0.002)  # created_at has milliseconds: orders of one millisecond list by their random IDs
    place(http, org.member_email, custom_fields=[{"id": dept["id"], "value": "Support"},
                                                 {"id": region["id"], "value": "EMEA"}])
    sales = ok(http.get("/rewards", params={dept["label"]: "Sales"}))["rewards"]  # newest first, as a search walks
    assert len(sales) == 10
    emea = [i for i, r in enumerate(sales) if {"label": region["label"], "value": "EMEA"}.items()
            <= {k: v for f in r["custom_fields"] if f["label"] == region["label"] for k, v in f.items()}.items()]
    monkeypatch.setattr(paging, "COUNT_HORIZON", 3)

    def page(offset: int, limit: int = 2) -> dict:
        return ok(http.get("/rewards", params={dept["label"]: "Sales", region["label"]: "EMEA", "limit": limit,
                                               "offset": offset}))

    def expected(offset: int, limit: int = 2) -> int:
        """The documented rule, computed from the Sales rewards in list order."""
        matches = emea[offset:offset + limit]
        if len(matches) < limit:
            return offset + len(matches) if matches or not offset else len(emea)
        rest = range(matches[-1] + 1, len(sales))
        seen = sum(1 for i in rest[:3 + 1] if i in emea)
        return offset + limit + (max(seen, 1) if len(rest) > 3 else seen)

    assert emea == [0, 1, 7]  # placed one after the other: newest first is the reverse order
    assert page(0, 1)["total_count"] == 2  # 1..4 examined, one match: a lower bound
    assert page(0)["total_count"] == 3  # 2..5 examined, no match: one more than the page
    assert page(1)["total_count"] == 3  # after 7: 8 and 9, no match: exact
    for limit in (1, 2, 3):
        for offset in range(5):
            body = page(offset, limit)
            assert [r["id"] for r in body["rewards"]] == [sales[i]["id"] for i in emea[offset:offset + limit]]
            assert body["total_count"] == expected(offset, limit), (offset, limit)
            assert isinstance(body["total_count"], int)
            if offset + limit < len(emea):  # more matches than this page: always more than the page
                assert body["total_count"] > offset + limit
            else:  # the matches end on this page: exact
                assert body["total_count"] == 3
    # Paging until offset >= total_count reaches every match, whatever the page size.
    for limit in (1, 2, 3):
        seen_ids, offset = [], 0
        while True:
            body = page(offset, limit)
            seen_ids += [r["id"] for r in body["rewards"]]
            offset += limit
            if offset >= body["total_count"]:
                break
        assert seen_ids == [sales[i]["id"] for i in emea]
    monkeypatch.setattr(paging, "COUNT_HORIZON", 1000)
    assert page(0)["total_count"] == 3


def test_order_list_total_count_follows_the_same_rule(org, http, monkeypatch):
    """GET /orders counts as GET /rewards does: exact within COUNT_HORIZON rows past the offset,
    a growing lower bound before; filters count too."""
    campaign = make_campaign(http)
    ids = [place(http, org.member_email, campaign_id=campaign["id"])["id"] for _ in range(6)]
    monkeypatch.setattr(paging, "COUNT_HORIZON", 3)

    def page(offset: int, **params) -> dict:
        return ok(http.get("/orders", params={"campaign_id": campaign["id"], "limit": 2, "offset": offset,
                                              **params}))

    assert page(0)["total_count"] == 4  # 0 + 3 + 1: more than the page, fewer than the 6 orders
    assert page(2)["total_count"] == 6 and page(4)["total_count"] == 6  # within 3 past the offset: exact
    assert page(10) == {"orders": [], "total_count": 6}  # past the end: still exact
    seen, offset = [], 0
    while True:  # paging until offset >= total_count reaches every order, newest first
        body = page(offset)
        seen += [o["id"] for o in body["orders"]]
        offset += 2
        if offset >= body["total_count"]:
            break
    assert sorted(seen) == sorted(ids)
    assert page(0, external_id="no-such-order") == {"orders": [], "total_count": 0}
    monkeypatch.setattr(paging, "COUNT_HORIZON", 1000)
    assert page(0)["total_count"] == 6
