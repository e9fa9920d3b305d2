"""GET /invoices and GET /topups total_count at scale (docs/api.md, "total_count at scale"):
exact when the list ends within paging.COUNT_HORIZON rows past the offset, otherwise the lower
bound offset + horizon + 1. The horizon is lowered to 3 so that six rows show both sides (the
server runs in this process)."""

from __future__ import annotations

from largesse import paging
from tests.factories import ok, unique


def _pages_count_within_the_horizon(http, monkeypatch, path: str, key: str, created: list[str]) -> None:
    monkeypatch.setattr(paging, "COUNT_HORIZON", 1000)
    everything = ok(http.get(path, params={"limit": 10}))
    newest_first = [row["id"] for row in everything[key]]
    assert everything["total_count"] == len(created) == 6 and sorted(newest_first) == sorted(created)
    monkeypatch.setattr(paging, "COUNT_HORIZON", 3)

    def page(offset: int) -> dict:
        return ok(http.get(path, params={"limit": 2, "offset": offset}))

    assert page(0)["total_count"] == 4  # 0 + 3 + 1: more than the page, fewer than the 6 rows
    assert page(2)["total_count"] == 6 and page(4)["total_count"] == 6  # within 3 past the offset: exact
    assert page(10) == {key: [], "total_count": 6}  # past the end: exact
    seen, offset = [], 0
    while True:  # paging until offset >= total_count reaches every row, in the list's order
        body = page(offset)
        seen += [row["id"] for row in body[key]]
        offset += 2
        if offset >= body["total_count"]:
            break
    assert seen == newest_first


def test_invoice_list_total_count(http, monkeypatch):
    created = [ok(http.post("/invoices", json={"amount": 10 + n}))["invoice"]["id"] for n in range(7)]
    ok(http.delete(f"/invoices/{created.pop(3)}"))  # deleted invoices are neither listed nor counted
    _pages_count_within_the_horizon(http, monkeypatch, "/invoices", "invoices", created)


def test_topup_list_total_count(http, monkeypatch):
    created = [ok(http.post("/topups", json={"funding_source_id": "balance", "idempotency_key": unique(),
                                             "amount": 1 + n}))["topup"]["id"] for n in range(6)]
    _pages_count_within_the_horizon(http, monkeypatch, "/topups", "topups", created)
