"""Concurrent approval decisions on both backends: exactly one decision wins, and no money is
created or lost while orders are placed, approved and rejected at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from largesse import db
from largesse.funding.service import verify
from largesse.orders import approvals
from tests.factories import error, ok, order_body


def _policy(engine, org, mode: str) -> None:
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode=mode)


def _post_all(org, requests: list[tuple[str, dict | None]]) -> list:
    def post(request):
        path, body = request
        with org.http() as client:
            return client.post(path, json=body) if body is not None else client.post(path)

    with ThreadPoolExecutor(max_workers=min(len(requests), 16)) as pool:
        return list(pool.map(post, requests))


def _meta(http) -> dict:
    return ok(http.get("/funding_sources/BALANCE"))["funding_source"]["meta"]


def _clean(engine, org) -> None:
    with db.read(engine) as conn:
        assert [p for p in verify(conn) if p.organization_id == org.id] == []


def test_double_approve_exactly_one_wins(org, http, engine):
    _policy(engine, org, "api")
    order = ok(http.post("/orders", json=order_body(org.member_email, denomination=20)))["order"]
    responses = _post_all(org, [(f"/order_approvals/{order['id']}/approve", None)] * 12)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [422] * 11, [r.text for r in responses]
    for response in responses:
        if response.status_code == 422:
            assert error(response, 422)["payload"] == {"id": ["is EXECUTED, not PENDING APPROVAL"]}
    assert _meta(http)["pending_cents"] == 0
    _clean(engine, org)


def test_approve_against_reject_exactly_one_wins(org, http, engine):
    _policy(engine, org, "api")
    before = _meta(http)["available_cents"]
    for _ in range(3):
        order = ok(http.post("/orders", json=order_body(org.member_email, denomination=20)))["order"]
        requests = [(f"/order_approvals/{order['id']}/{verb}", None) for verb in ("approve", "reject") * 6]
        responses = _post_all(org, requests)
        winners = [r for r in responses if r.status_code == 200]
        assert len(winners) == 1 and sorted(r.status_code for r in responses) == [200] + [422] * 11
        final = ok(http.get(f"/orders/{order['id']}"))["order"]["status"]
        assert winners[0].json()["order"]["status"] == final
        if final == "EXECUTED":
            before -= 2000
        assert _meta(http)["available_cents"] == before and _meta(http)["pending_cents"] == 0
    _clean(engine, org)


def test_orders_and_decisions_at_once_create_or_lose_nothing(org, http, engine):
    """Pending orders are approved and rejected while new orders race for the rest of the
    balance: whatever the interleaving, available + pending + what was kept adds up."""
    _policy(engine, org, "api")
    start = _meta(http)["available_cents"]  # 5000.00 in the sandbox
    pending = [ok(http.post("/orders", json=order_body(org.member_email, denomination=500)))["order"]
               for _ in range(4)]
    requests = []
    for i, order in enumerate(pending):
        requests.append((f"/order_approvals/{order['id']}/{'approve' if i % 2 else 'reject'}", None))
        requests.append((f"/order_approvals/{order['id']}/{'reject' if i % 2 else 'approve'}", None))
    requests += [("/orders", order_body(org.member_email, denomination=400))] * 12
    responses = _post_all(org, requests)
    decisions, placed = responses[:8], responses[8:]
    assert sorted(r.status_code for r in decisions) == [200] * 4 + [422] * 4
    assert {r.status_code for r in placed} <= {200, 402}
    new_orders = [r.json()["order"] for r in placed if r.status_code == 200]
    assert all(o["status"] == "PENDING APPROVAL" for o in new_orders)
    executed = sum(1 for o in pending if ok(http.get(f"/orders/{o['id']}"))["order"]["status"] == "EXECUTED")
    meta = _meta(http)
    # Kept: the approved 500.00 orders; held: the new 400.00 orders; every rejected cent is back.
    assert meta["pending_cents"] == 40000 * len(new_orders)
    assert meta["available_cents"] == start - 50000 * executed - 40000 * len(new_orders)
    assert meta["available_cents"] >= 0
    _clean(engine, org)
