"""`ledger verify` proves the approval invariants: pending_cents is the sum of the totals of the
PENDING APPROVAL orders, and a rejected order has exactly one refund of its whole total. Each
test tampers with the database as a bug would, expects the finding, then undoes the edit."""

from __future__ import annotations

from sqlalchemy import text

from largesse import db
from largesse.funding.service import verify
from largesse.orders import approvals
from tests.factories import ok, order_body


def _what(engine, org) -> set[tuple[str, str]]:
    with db.read(engine) as conn:
        return {(p.what, p.id) for p in verify(conn) if p.organization_id == org.id}


def _sql(engine, statement: str, **params):
    with db.write(engine) as conn:
        return conn.execute(text(statement), params)


def _pending_and_rejected(org, http, api, engine) -> tuple[dict, dict]:
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="all")
    pending = ok(http.post("/orders", json=order_body(org.member_email, denomination=15)))["order"]
    rejected = ok(http.post("/orders", json=order_body(org.member_email, denomination=25)))["order"]
    api.reject_order(rejected["id"])
    assert _what(engine, org) == set()
    return pending, rejected


def test_pending_cents_must_match_the_pending_orders(org, http, api, engine):
    _pending_and_rejected(org, http, api, engine)
    _sql(engine, "UPDATE funding_sources SET pending_cents = pending_cents + 1 WHERE id = :fs",
         fs=org.funding_source_id)
    try:
        assert _what(engine, org) == {("pending", org.funding_source_id)}
    finally:
        _sql(engine, "UPDATE funding_sources SET pending_cents = pending_cents - 1 WHERE id = :fs",
             fs=org.funding_source_id)
    # Only the pending order is held; the rejected one was released.
    with db.read(engine) as conn:
        held = conn.execute(text("SELECT pending_cents FROM funding_sources WHERE id = :fs"),
                            {"fs": org.funding_source_id}).scalar_one()
    assert held == 1500
    assert _what(engine, org) == set()


def test_a_rejected_order_has_exactly_one_refund_of_its_total(org, http, api, engine):
    _, rejected = _pending_and_rejected(org, http, api, engine)
    entry = {"order": rejected["id"]}
    _sql(engine, "UPDATE ledger_entries SET amount_cents = amount_cents - 100 WHERE order_id = :order "
                 "AND kind = 'order_refund'", **entry)
    try:
        assert ("order refund amount", rejected["id"]) in _what(engine, org)
    finally:
        _sql(engine, "UPDATE ledger_entries SET amount_cents = amount_cents + 100 WHERE order_id = :order "
                     "AND kind = 'order_refund'", **entry)
    _sql(engine, "UPDATE ledger_entries SET kind = 'funding' WHERE order_id = :order AND kind = 'order_refund'",
         **entry)
    try:
        assert ("order refund missing", rejected["id"]) in _what(engine, org)
    finally:
        _sql(engine, "UPDATE ledger_entries SET kind = 'order_refund' WHERE order_id = :order AND kind = 'funding'",
             **entry)
    reward_id = rejected["rewards"][0]["id"]
    _sql(engine, "UPDATE ledger_entries SET reward_id = :reward WHERE order_id = :order AND kind = 'order_refund'",
         reward=reward_id, **entry)
    _sql(engine, "UPDATE ledger_entries SET kind = 'reward_refund' WHERE order_id = :order AND kind = 'order_refund'",
         **entry)
    try:
        found = _what(engine, org)
        assert ("rejected order reward", reward_id) in found and ("order refund missing", rejected["id"]) in found
    finally:
        _sql(engine, "UPDATE ledger_entries SET kind = 'order_refund', reward_id = NULL WHERE order_id = :order "
                     "AND kind = 'reward_refund'", **entry)
    assert _what(engine, org) == set()


def test_an_unrejected_order_has_no_order_refund(org, http, api, engine):
    _, rejected = _pending_and_rejected(org, http, api, engine)
    with db.read(engine) as conn:
        rejected_at = conn.execute(text("SELECT rejected_at FROM orders WHERE id = :o"),
                                   {"o": rejected["id"]}).scalar_one()
    _sql(engine, "UPDATE orders SET rejected_at = NULL WHERE id = :o", o=rejected["id"])
    try:
        assert ("order refund of unrejected order", rejected["id"]) in _what(engine, org)
    finally:
        _sql(engine, "UPDATE orders SET rejected_at = :at WHERE id = :o", at=rejected_at, o=rejected["id"])
    assert _what(engine, org) == set()
