"""`ledger verify` (funding.service.verify) finds each way a database's money can be made wrong.

Each test builds a real history over HTTP and the redemption page, tampers with the database
through SQL (as a bug or a hand edit would), expects the specific finding, then undoes the
edit so the shared test database stays consistent for later tests.
"""

from __future__ import annotations

import json

from sqlalchemy import text

from largesse import db
from largesse.funding.service import Problem, verify
from tests.conftest import failing
from tests.factories import ok, place
from tests.redemption.conftest import GIFT_CARD, csrf_of, link_reward, page_client


def _findings(engine, org) -> list[Problem]:
    """This organization's findings (other tests' organizations are not this test's business)."""
    with db.read(engine) as conn:
        return [p for p in verify(conn) if p.organization_id == org.id]


def _sql(engine, statement: str, **params):
    with db.write(engine) as conn:
        return conn.execute(text(statement), params)


def _one(engine, statement: str, **params):
    with db.read(engine) as conn:
        return conn.execute(text(statement), params).mappings().one()


def _redeem(org) -> str:
    reward_id, link = link_reward(org, denomination=30)
    with page_client() as client:
        token = csrf_of(client.get(link).text)
        assert client.post(link, data={"csrf_token": token, "product_id": GIFT_CARD}).status_code == 303
    return reward_id


def _cancel(org, http, deliver) -> tuple[str, str]:
    order = place(http, failing(org.member_email), denomination=20)
    reward_id = order["rewards"][0]["id"]
    deliver()  # its delivery fails: it can be canceled (API.md §2.5)
    ok(http.post(f"/rewards/{reward_id}/cancel"))
    return order["id"], reward_id


def _what(problems: list[Problem]) -> set[tuple[str, str]]:
    return {(p.what, p.id) for p in problems}


def test_a_real_history_has_no_findings(org, http, engine, deliver):
    place(http, org.member_email, denomination=10)
    _cancel(org, http, deliver)
    _redeem(org)
    place(http, org.member_email, denomination=12.34)
    assert _findings(engine, org) == []


def test_deleted_refund_with_the_balance_lowered_to_match(org, http, engine, deliver):
    order_id, reward_id = _cancel(org, http, deliver)
    refund = dict(_one(engine, "SELECT * FROM ledger_entries WHERE reward_id = :r AND kind = 'reward_refund'",
                       r=reward_id))
    _sql(engine, "DELETE FROM ledger_entries WHERE id = :id", id=refund["id"])
    _sql(engine, "UPDATE funding_sources SET available_cents = available_cents - :a WHERE id = :fs",
         a=refund["amount_cents"], fs=org.funding_source_id)
    try:
        found = _findings(engine, org)
        assert ("refund missing", reward_id) in _what(found), found
        assert ("order refund", order_id) in _what(found), found
        assert not [p for p in found if p.what == "balance"], found  # the edit kept the balance "right"
        missing = next(p for p in found if p.what == "refund missing")
        assert (missing.expected, missing.actual) == (2000, 0) and order_id in missing.detail
    finally:
        columns = ", ".join(refund)
        _sql(engine, f"INSERT INTO ledger_entries ({columns}) VALUES ({', '.join(':' + c for c in refund)})",
             **refund)
        _sql(engine, "UPDATE funding_sources SET available_cents = available_cents + :a WHERE id = :fs",
             a=refund["amount_cents"], fs=org.funding_source_id)
    assert _findings(engine, org) == []


def test_refund_of_a_redeemed_reward(org, engine):
    reward_id = _redeem(org)
    reward = _one(engine, "SELECT order_id, denomination_cents + fee_cents AS owed FROM rewards WHERE id = :r",
                  r=reward_id)
    balance = _one(engine, "SELECT available_cents FROM funding_sources WHERE id = :fs", fs=org.funding_source_id)
    after = balance["available_cents"] + reward["owed"]
    # Paid and refunded, done consistently everywhere else: balance, running balance, order refund.
    _sql(engine, "INSERT INTO ledger_entries (funding_source_id, organization_id, amount_cents, balance_after_cents,"
                 " kind, memo, order_id, reward_id, created_at) VALUES (:fs, :org, :a, :after, 'reward_refund',"
                 " 'tampered', :o, :r, CURRENT_TIMESTAMP)",
         fs=org.funding_source_id, org=org.id, a=reward["owed"], after=after, o=reward["order_id"], r=reward_id)
    _sql(engine, "UPDATE funding_sources SET available_cents = :after WHERE id = :fs", after=after,
         fs=org.funding_source_id)
    _sql(engine, "UPDATE orders SET refund_cents = refund_cents + :a WHERE id = :o", a=reward["owed"],
         o=reward["order_id"])
    try:
        found = _findings(engine, org)
        assert _what(found) == {("refund of unrefunded reward", reward_id)}, found
        assert "REDEEMED" in found[0].detail and found[0].actual == 3000
    finally:
        _sql(engine, "DELETE FROM ledger_entries WHERE reward_id = :r AND kind = 'reward_refund'", r=reward_id)
        _sql(engine, "UPDATE funding_sources SET available_cents = available_cents - :a WHERE id = :fs",
             a=reward["owed"], fs=org.funding_source_id)
        _sql(engine, "UPDATE orders SET refund_cents = refund_cents - :a WHERE id = :o", a=reward["owed"],
             o=reward["order_id"])
    assert _findings(engine, org) == []


def test_active_reward_denomination_raised(org, http, engine, cli):
    order = place(http, org.member_email, denomination=15)
    reward_id = order["rewards"][0]["id"]
    _sql(engine, "UPDATE rewards SET denomination_cents = denomination_cents + 500 WHERE id = :r", r=reward_id)
    try:
        found = _findings(engine, org)
        assert _what(found) == {("order subtotal", order["id"])}, found
        assert (found[0].expected, found[0].actual) == (1500, 2000)
        result = cli("ledger", "verify", check=False)
        assert result.returncode == 1 and order["id"] in result.stdout and "order subtotal" in result.stdout
        report = json.loads(cli("ledger", "verify", "--json", check=False).stdout)
        assert report["ok"] is False
        assert {"what": "order subtotal", "id": order["id"], "expected": 1500, "actual": 2000,
                "organization_id": org.id} in [{k: p[k] for k in ("what", "id", "expected", "actual",
                                                                  "organization_id")} for p in report["problems"]]
    finally:
        _sql(engine, "UPDATE rewards SET denomination_cents = denomination_cents - 500 WHERE id = :r", r=reward_id)
    assert _findings(engine, org) == []


def test_wrong_running_balance_is_reported_once(org, http, engine):
    first = place(http, org.member_email, denomination=5)
    place(http, org.member_email, denomination=6)
    entry = _one(engine, "SELECT id FROM ledger_entries WHERE order_id = :o", o=first["id"])["id"]
    _sql(engine, "UPDATE ledger_entries SET balance_after_cents = balance_after_cents + 7 WHERE id = :id", id=entry)
    try:
        found = _findings(engine, org)
        assert _what(found) == {("running balance", str(entry))}, found  # not the entry after it too
        assert found[0].actual - found[0].expected == 7
    finally:
        _sql(engine, "UPDATE ledger_entries SET balance_after_cents = balance_after_cents - 7 WHERE id = :id",
             id=entry)
    assert _findings(engine, org) == []


def test_redeemed_without_payout_and_payout_of_canceled(org, http, engine, deliver):
    redeemed = _redeem(org)
    payout = dict(_one(engine, "SELECT * FROM payouts WHERE reward_id = :r", r=redeemed))
    _sql(engine, "DELETE FROM payouts WHERE reward_id = :r", r=redeemed)
    order_id, canceled = _cancel(org, http, deliver)
    _sql(engine, "INSERT INTO payouts (reward_id, organization_id, product_id, provider, created_at)"
                 " VALUES (:r, :org, :p, 'sandbox', CURRENT_TIMESTAMP)", r=canceled, org=org.id, p=GIFT_CARD)
    try:
        assert _what(_findings(engine, org)) == {("payout missing", redeemed),
                                                 ("payout of unredeemed reward", canceled)}
    finally:
        _sql(engine, "DELETE FROM payouts WHERE reward_id = :r", r=canceled)
        _sql(engine, f"INSERT INTO payouts ({', '.join(payout)}) VALUES ({', '.join(':' + c for c in payout)})",
             **payout)
    assert _findings(engine, org) == []


def test_refund_of_the_wrong_amount_and_a_changed_debit(org, http, engine, deliver):
    order_id, reward_id = _cancel(org, http, deliver)
    _sql(engine, "UPDATE ledger_entries SET amount_cents = amount_cents + 1, balance_after_cents ="
                 " balance_after_cents + 1 WHERE reward_id = :r", r=reward_id)
    _sql(engine, "UPDATE orders SET refund_cents = refund_cents + 1 WHERE id = :o", o=order_id)
    _sql(engine, "UPDATE funding_sources SET available_cents = available_cents + 1 WHERE id = :fs",
         fs=org.funding_source_id)
    try:
        assert _what(_findings(engine, org)) == {("refund amount", reward_id)}
    finally:
        _sql(engine, "UPDATE ledger_entries SET amount_cents = amount_cents - 1, balance_after_cents ="
                     " balance_after_cents - 1 WHERE reward_id = :r", r=reward_id)
        _sql(engine, "UPDATE orders SET refund_cents = refund_cents - 1 WHERE id = :o", o=order_id)
        _sql(engine, "UPDATE funding_sources SET available_cents = available_cents - 1 WHERE id = :fs",
             fs=org.funding_source_id)
    assert _findings(engine, org) == []


def test_an_entry_of_a_kind_largesse_never_writes(org, engine):
    """A credit of an unknown kind ('adjustment'), its running balance and the balance made to
    match, is not a consistent history: no code path writes it."""
    entry = _one(engine, "SELECT id FROM ledger_entries WHERE organization_id = :o AND kind = 'sandbox_credit'",
                 o=org.id)["id"]
    _sql(engine, "UPDATE ledger_entries SET kind = 'adjustment' WHERE id = :id", id=entry)
    try:
        found = _findings(engine, org)
        assert _what(found) == {("ledger entry", str(entry))}, found
        assert "'adjustment', which Largesse never writes" in found[0].detail
    finally:
        _sql(engine, "UPDATE ledger_entries SET kind = 'sandbox_credit' WHERE id = :id", id=entry)
    assert _findings(engine, org) == []


def test_a_second_sandbox_credit_is_reported(org, engine):
    """A second 5,000 of sandbox credit, its running balance and the balance raised to match:
    "ledger OK" before, though no code path writes two."""
    balance = _one(engine, "SELECT available_cents FROM funding_sources WHERE id = :fs",
                   fs=org.funding_source_id)["available_cents"]
    _sql(engine, "INSERT INTO ledger_entries (funding_source_id, organization_id, amount_cents, balance_after_cents, "
                 "kind, memo, created_at) VALUES (:fs, :o, 500000, :after, 'sandbox_credit', 'again', "
                 "CURRENT_TIMESTAMP)", fs=org.funding_source_id, o=org.id, after=balance + 500000)
    _sql(engine, "UPDATE funding_sources SET available_cents = :after WHERE id = :fs", fs=org.funding_source_id,
         after=balance + 500000)
    try:
        found = _findings(engine, org)
        assert _what(found) == {("sandbox credit", org.id)}, found
        assert found[0].actual == 1000000 and "2 sandbox credit(s)" in found[0].detail
    finally:
        _sql(engine, "DELETE FROM ledger_entries WHERE organization_id = :o AND memo = 'again'", o=org.id)
        _sql(engine, "UPDATE funding_sources SET available_cents = :b WHERE id = :fs", fs=org.funding_source_id,
             b=balance)
    assert _findings(engine, org) == []


def test_a_charge_on_an_unconverted_reward_is_reported_and_not_trusted_for_its_refund(org, http, engine, deliver):
    """charged_cents is a converted reward's charge; on any other it would make a cancel
    refund that amount. verify reports it, and judges the refund by value + fee."""
    order_id, reward_id = _cancel(org, http, deliver)
    _sql(engine, "UPDATE rewards SET charged_cents = 100000 WHERE id = :r", r=reward_id)
    try:
        assert _what(_findings(engine, org)) == {("reward charge", reward_id)}
    finally:
        _sql(engine, "UPDATE rewards SET charged_cents = NULL WHERE id = :r", r=reward_id)
    assert _findings(engine, org) == []


def test_currencies_and_organizations_that_do_not_tie_up(org, other_org, http, engine):
    """An order is paid from a balance of its organization in that balance's currency, and its
    rewards are its organization's, in its currency."""
    order = place(http, org.member_email, denomination=10)
    reward_id = order["rewards"][0]["id"]
    _sql(engine, "UPDATE rewards SET currency_code = 'EUR' WHERE id = :r", r=reward_id)
    try:
        assert _what(_findings(engine, org)) == {("links", reward_id)}
    finally:
        _sql(engine, "UPDATE rewards SET currency_code = 'USD' WHERE id = :r", r=reward_id)
    _sql(engine, "UPDATE orders SET currency_code = 'GBP' WHERE id = :o", o=order["id"])
    try:  # the order against its balance, and its reward against it
        assert _what(_findings(engine, org)) == {("links", order["id"]), ("links", reward_id)}
    finally:
        _sql(engine, "UPDATE orders SET currency_code = 'USD' WHERE id = :o", o=order["id"])
    _sql(engine, "UPDATE rewards SET organization_id = :other WHERE id = :r", other=other_org.id, r=reward_id)
    try:
        with db.read(engine) as conn:
            found = [p for p in verify(conn) if p.id == reward_id]
        assert [(p.what, p.organization_id) for p in found] == [("links", other_org.id)], found
        assert f"of order {order['id']} of organization {org.id}" in found[0].detail
    finally:
        _sql(engine, "UPDATE rewards SET organization_id = :o WHERE id = :r", o=org.id, r=reward_id)
    assert _findings(engine, org) == []


def test_a_converted_total_that_is_not_its_subtotal_plus_fees(org, http, engine):
    from tests.money.test_currencies import _eur_body

    order = ok(http.post("/orders", json=_eur_body(org.member_email, denomination=30)))["order"]
    _sql(engine, "UPDATE orders SET fx_total_cents = fx_total_cents + 1 WHERE id = :o", o=order["id"])
    try:
        assert _what(_findings(engine, org)) == {("conversion", order["id"])}
    finally:
        _sql(engine, "UPDATE orders SET fx_total_cents = fx_total_cents - 1 WHERE id = :o", o=order["id"])
    assert _findings(engine, org) == []


def test_a_discount_made_up_with_its_debit_and_balance(org, http, engine):
    """Largesse gives no discounts: one written with the order's total, its debit and the balance
    lowered to match made an order cheaper and passed (a cancel would then refund it in full)."""
    order = place(http, org.member_email, denomination=15)
    entry = _one(engine, "SELECT id, funding_source_id FROM ledger_entries WHERE order_id = :o", o=order["id"])

    def shift(cents: int) -> None:
        _sql(engine, "UPDATE orders SET discount_cents = discount_cents + :c, total_cents = total_cents - :c "
                     "WHERE id = :o", c=cents, o=order["id"])
        _sql(engine, "UPDATE ledger_entries SET amount_cents = amount_cents + :c, "
                     "balance_after_cents = balance_after_cents + :c WHERE id = :e", c=cents, e=entry["id"])
        _sql(engine, "UPDATE funding_sources SET available_cents = available_cents + :c WHERE id = :f",
             c=cents, f=entry["funding_source_id"])

    shift(100)
    try:
        found = _findings(engine, org)
        assert _what(found) == {("order discount", order["id"])}, found
        assert (found[0].expected, found[0].actual) == (0, 100)
    finally:
        shift(-100)
    assert _findings(engine, org) == []
