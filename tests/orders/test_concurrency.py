"""Concurrent orders on both backends: no overdraft, exactly one order per external_id."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from tests.factories import available_cents, ok, order_body, orders_count, unique


def _post_all(org, bodies: list[dict]) -> list:
    def post(body):
        with org.http() as client:
            return client.post("/orders", json=body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(post, bodies))


def _post_spread(org, urls: list[str], bodies: list[dict]) -> list:
    """_post_all, the requests dealt in turn to the servers at urls."""
    def post(numbered):
        number, body = numbered
        with replace(org, base_url=urls[number % len(urls)]).http() as client:
            return client.post("/orders", json=body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(post, enumerate(bodies)))


def test_parallel_orders_never_overdraw(org, http, cli):
    # 500000 cents afford 16 orders of 300.00 (leaving 200.00); 40 race for them.
    responses = _post_all(org, [order_body(org.member_email, denomination=300) for _ in range(40)])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 16 + [402] * 24, statuses
    for response in responses:
        if response.status_code == 402:
            assert response.json()["errors"]["payload"] == {"payment": {"funding_source_id": ["insufficient funds"]}}
    assert available_cents(http) == 500000 - 16 * 30000
    assert orders_count(http) == 16
    assert cli("ledger", "verify", check=False).returncode == 0


def test_parallel_identical_external_id_creates_one_order(org, http):
    key = unique("race-")
    body = {**order_body(org.member_email), "external_id": key}
    responses = _post_all(org, [body] * 20)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [201] * 19, [r.text for r in responses if r.status_code not in (200, 201)]
    assert len({r.json()["order"]["id"] for r in responses}) == 1
    assert available_cents(http) == 500000 - 2500
    assert orders_count(http) == 1


def test_parallel_conflicting_external_id_one_wins(org, http):
    key = unique("race-")
    bodies = [{**order_body(org.member_email, denomination=10 + i), "external_id": key} for i in range(10)]
    responses = _post_all(org, bodies)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * 9, statuses
    winner = next(r.json()["order"] for r in responses if r.status_code == 200)
    assert available_cents(http) == 500000 - round(winner["payment"]["total"] * 100)
    assert ok(http.get(f"/orders/{key}"))["order"]["id"] == winner["id"]


def test_parallel_retries_of_an_order_that_took_the_last_of_the_balance_are_201_not_402(org, http, make_server):
    """On PostgreSQL an order's writes are one statement that debits before it inserts: a retry
    waiting on the balance row found it drained by its own original and answered 402 for an
    order that exists (a client would then place it again under a new external_id)."""
    for _ in range(16):  # 500000 cents less 16 orders of 300.00: 200.00 left
        ok(http.post("/orders", json=order_body(org.member_email, denomination=300)))
    key = unique("last-")
    same = {**order_body(org.member_email, denomination=200), "external_id": key}
    # Three servers on the database, as API processes are: their transactions wait on the row together.
    urls = [org.base_url, make_server().url, make_server().url]
    responses = _post_spread(org, urls, [same] * 30)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [201] * 29, [r.text for r in responses if r.status_code not in (200, 201)]
    assert available_cents(http) == 0 and orders_count(http) == 17
    # Other parameters under the used external_id, racing again on the empty balance: 409, never 402.
    other = [{**order_body(org.member_email, denomination=100 + i), "external_id": key} for i in range(10)]
    assert sorted(r.status_code for r in _post_spread(org, urls, other)) == [409] * 10
