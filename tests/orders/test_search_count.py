"""GET /rewards total_count at scale (docs/api.md): exact when the matches end within
repository.COUNT_HORIZON rows past the offset, otherwise a lower bound (offset + horizon + 1) that
still lets a client page to the end. The horizon is lowered to 3 here so that a handful of
rewards shows both sides (the server runs in this process)."""

from __future__ import annotations

from largesse.orders import repository
from tests.factories import make_field, ok, place


def test_total_count_is_exact_near_the_end_and_a_growing_lower_bound_before(org, http, monkeypatch):
    field = make_field(http, options=["Sales", "Support"])
    ids = [place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "Sales"}])["rewards"][0]["id"]
           for _ in range(6)]
    place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "Support"}])
    monkeypatch.setattr(repository, "COUNT_HORIZON", 3)
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
    monkeypatch.setattr(repository, "COUNT_HORIZON", 1000)
    assert page(0)["total_count"] == 6
