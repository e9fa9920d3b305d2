"""`largesse ledger verify` sees top-ups, invoice payments and conversions that do not add up."""

from __future__ import annotations

from sqlalchemy import text
from tremendous import CreateInvoiceRequest, CreateTopupRequest

from largesse import db
from tests.factories import TRAVEL_MULTI, ok, order_body, unique
from tests.money.conftest import ledger_problems


def _tampered(engine, cli, org_id, sql: str, undo: str, params: dict) -> list[str]:
    with db.write(engine) as conn:
        conn.execute(text(sql), params)
    try:
        return sorted(p["what"] for p in ledger_problems(cli, org_id))
    finally:
        with db.write(engine) as conn:
            conn.execute(text(undo), params)


def test_verify_checks_topups_invoices_and_conversions(org, api, http, cli, engine):
    topup = api.create_topup(CreateTopupRequest(funding_source_id="BALANCE", idempotency_key=unique(), amount=5))
    cli("topups", "credit", topup.topup.id)
    invoice = api.create_invoice(CreateInvoiceRequest(amount=7)).invoice
    cli("invoices", "pay", invoice.id)
    body = order_body(org.member_email, products=[TRAVEL_MULTI])
    body["reward"]["value"] = {"denomination": 30, "currency_code": "EUR"}
    order = ok(http.post("/orders", json=body))["order"]
    assert ledger_problems(cli, org.id) == []

    assert _tampered(engine, cli, org.id, "UPDATE topups SET status = 'created' WHERE id = :id",
                     "UPDATE topups SET status = 'fully_credited' WHERE id = :id",
                     {"id": topup.topup.id}) == ["credit of uncredited topup", "topup entry without topup"]
    assert _tampered(engine, cli, org.id, "UPDATE invoices SET amount_cents = amount_cents + 1 WHERE id = :id",
                     "UPDATE invoices SET amount_cents = amount_cents - 1 WHERE id = :id",
                     {"id": invoice.id}) == ["invoice credit"]
    reward_id = order["rewards"][0]["id"]
    assert _tampered(engine, cli, org.id, "UPDATE rewards SET charged_cents = charged_cents - 1 WHERE id = :id",
                     "UPDATE rewards SET charged_cents = charged_cents + 1 WHERE id = :id",
                     {"id": reward_id}) == ["conversion", "conversion"]
    assert ledger_problems(cli, org.id) == []
