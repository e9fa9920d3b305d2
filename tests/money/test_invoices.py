"""Invoices through the official client: CSV and PDF documents, deletion, payment by the operator."""

from __future__ import annotations

import csv
import io

import pytest
from pypdf import PdfReader
from tremendous import CreateInvoiceRequest
from tremendous.exceptions import ApiException, BadRequestException, NotFoundException

from tests.factories import available_cents, error, ok
from tests.money.conftest import cli_json, concurrent_cli, ledger_problems


def _invoice(api, amount=1250.5, **extra):
    return api.create_invoice(CreateInvoiceRequest(amount=amount, **extra)).invoice


def test_create_get_list_and_documents(org, api, http):
    invoice = _invoice(api, po_number="PO-7781", memo="Q4 rewards", currency_code="USD")
    assert invoice.status == "OPEN" and invoice.amount == 1250.5 and invoice.paid_at is None
    assert invoice.currency_code == "USD" and invoice.po_number == "PO-7781"
    assert api.get_invoice(invoice.id).invoice.id == invoice.id
    listed = api.list_invoices()
    assert listed.total_count == 1 and listed.invoices[0].id == invoice.id

    text = api.download_invoice_csv(invoice.id)
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert (row["invoice_id"], row["po_number"], row["memo"], row["amount"], row["currency_code"]) == (
        invoice.id, "PO-7781", "Q4 rewards", "1250.50", "USD")
    assert row["organization"] == "Acme" and row["status"] == "OPEN" and row["created_at"]
    raw = http.get(f"/invoices/{invoice.id}/csv", headers={"Accept": "application/json"})
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/csv")

    pdf = api.download_invoice_pdf(invoice.id)
    assert isinstance(pdf, bytes) and pdf.startswith(b"%PDF-")
    content = "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    for expected in (invoice.id, "Acme", "1,250.50 USD", "PO-7781", "Q4 rewards", "not paid",
                     invoice.created_at.strftime("%Y-%m-%d")):
        assert expected in content, (expected, content)
    raw = http.get(f"/invoices/{invoice.id}/pdf", headers={"Accept": "application/json"})
    assert raw.status_code == 200 and raw.headers["content-type"] == "application/pdf"


def test_validation_is_400_and_creates_nothing(org, api, http):
    for body, key in (({"amount": 10.001}, "amount"), ({"amount": 0}, "amount"), ({"amount": "10"}, "amount"),
                      ({}, "amount"), ({"amount": 10, "currency_code": "JPY"}, "currency_code"),
                      ({"amount": 10, "currency_code": "EUR", "currency": "GBP"}, "currency_code"),
                      ({"amount": 10, "po_number": 5}, "po_number")):
        errors = error(http.post("/invoices", json=body), 400)
        assert key in errors["payload"], (body, errors)
    with pytest.raises(BadRequestException) as refused:
        _invoice(api, amount=-1)
    assert "amount" in refused.value.data.errors.payload
    assert api.list_invoices().total_count == 0


def test_currency_defaults_and_deprecated_currency(api):
    assert _invoice(api, amount=10).currency_code == "USD"
    eur = _invoice(api, amount=10, currency="EUR")
    assert eur.currency_code == "EUR" and eur.currency == "EUR"


def test_an_organization_whose_currency_cannot_be_invoiced_is_told_to_send_one(engine, server):
    """The default is the organization's currency; when that is not invoiceable the 400 says so,
    at currency_code, instead of blaming a key the caller never sent."""
    from largesse import db
    from largesse.orgs import service as orgs
    from tests.conftest import Org

    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Kronor", member_email="k@example.com", member_name=None,
                                  sandbox=True, currency_code="SEK")
    sek = Org(created.organization_id, created.api_key, created.funding_source_id, "k@example.com", server.url)
    with sek.http() as http:
        errors = error(http.post("/invoices", json={"amount": 10}), 400)
        why = "is required: the organization's currency, SEK, cannot be invoiced (must be one of USD, EUR, GBP)"
        assert errors == {"message": f"currency_code {why}", "payload": {"currency_code": [why]}}
        invoice = ok(http.post("/invoices", json={"amount": 10, "currency_code": "EUR"}))["invoice"]
        assert invoice["currency_code"] == "EUR"


def test_delete_hides_from_list_but_not_from_get(org, api, http):
    kept, gone = _invoice(api, amount=1), _invoice(api, amount=2)
    deleted = api.delete_invoices(gone.id).invoice
    assert deleted.status == "DELETED" and deleted.id == gone.id
    assert api.get_invoice(gone.id).invoice.status == "DELETED"
    listed = api.list_invoices()
    assert [i.id for i in listed.invoices] == [kept.id] and listed.total_count == 1
    assert api.delete_invoices(gone.id).invoice.status == "DELETED", "deleting again changes nothing"
    with pytest.raises(NotFoundException):
        api.get_invoice("NOSUCHINVOICE0")


def test_invoices_are_private(org, other_org, api):
    invoice = _invoice(api, amount=3)
    other = other_org.api()
    for call in (other.get_invoice, other.delete_invoices, other.download_invoice_csv, other.download_invoice_pdf):
        with pytest.raises(NotFoundException):
            call(invoice.id)
    assert other.list_invoices().total_count == 0
    assert api.get_invoice(invoice.id).invoice.status == "OPEN"


def test_pagination_max_ten(api, http):
    for amount in range(1, 13):
        _invoice(api, amount=amount)
    first = api.list_invoices()
    assert len(first.invoices) == 10 and first.total_count == 12
    assert [i.amount for i in first.invoices][:2] == [12, 11]
    assert len(api.list_invoices(offset=10, limit=10).invoices) == 2
    assert len(ok(http.get("/invoices", params={"limit": 500}))["invoices"]) == 10


def test_pay_credits_once_then_paid_cannot_be_deleted(org, api, http, cli):
    before = available_cents(http)
    invoice = _invoice(api, amount=300.25, po_number="PO-1")
    assert invoice.id in cli("invoices", "list", "--org", org.id).stdout
    paid = cli_json(cli("invoices", "pay", invoice.id, "--json"))
    assert paid["paid"] is True and paid["available_cents"] == before + 30025
    again = cli("invoices", "pay", invoice.id)
    assert again.returncode == 0 and "already paid" in again.stdout
    assert available_cents(http) == before + 30025
    fetched = api.get_invoice(invoice.id).invoice
    assert fetched.status == "PAID" and fetched.paid_at is not None
    with pytest.raises(ApiException) as refused:
        api.delete_invoices(invoice.id)
    assert refused.value.status == 409 and "paid" in refused.value.body
    assert api.get_invoice(invoice.id).invoice.status == "PAID"
    (entry, *_) = api.list_balance_transactions().transactions
    assert (entry.action, entry.amount) == ("invoice_payment", 300.25)
    content = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(api.download_invoice_pdf(invoice.id))).pages)
    assert fetched.paid_at.strftime("%Y-%m-%d") in content and "not paid" not in content
    assert ledger_problems(cli, org.id) == []


def test_a_deleted_invoice_cannot_be_paid(org, api, http, cli):
    before = available_cents(http)
    invoice = _invoice(api, amount=40)
    api.delete_invoices(invoice.id)
    refused = cli("invoices", "pay", invoice.id, check=False)
    assert refused.returncode == 1 and "DELETED" in refused.stderr
    assert available_cents(http) == before
    assert cli("invoices", "pay", "NOSUCHINVOICE0", check=False).returncode == 1


def test_paying_a_eur_invoice_credits_a_eur_balance(org, api, http, cli):
    invoice = _invoice(api, amount=80, currency_code="EUR")
    cli("invoices", "pay", invoice.id)
    sources = {s.meta.currency_code: s for s in api.list_funding_sources().funding_sources}
    assert sources["EUR"].meta.available_cents == 8000 and sources["USD"].meta.available_cents == 500000
    assert ledger_problems(cli, org.id) == []


def test_concurrent_pays_credit_once(org, api, http, database_url, tmp_path, cli):
    before = available_cents(http)
    invoice = _invoice(api, amount=12.34)
    results = concurrent_cli(database_url, tmp_path, "invoices", "pay", invoice.id, "--json")
    assert all(code == 0 for code, _, _ in results), results
    assert sorted(cli_json_text(out)["paid"] for _, out, _ in results) == [False, False, False, True]
    assert available_cents(http) == before + 1234
    assert ledger_problems(cli, org.id) == []


def test_pay_racing_delete_has_one_winner(org, api, http, database_url, tmp_path, cli):
    import threading

    before = available_cents(http)
    invoice = _invoice(api, amount=9)
    outcome = {}

    def delete():
        with org.http() as client:
            outcome["delete"] = client.delete(f"/invoices/{invoice.id}").status_code

    thread = threading.Thread(target=delete)
    thread.start()
    results = concurrent_cli(database_url, tmp_path, "invoices", "pay", invoice.id, runs=2)
    thread.join()
    status = api.get_invoice(invoice.id).invoice.status
    if status == "PAID":
        assert outcome["delete"] == 409 and available_cents(http) == before + 900
    else:
        assert status == "DELETED" and outcome["delete"] == 200 and available_cents(http) == before
        assert all(code == 1 for code, _, _ in results), results
    assert ledger_problems(cli, org.id) == []


def cli_json_text(text: str) -> dict:
    import json

    return json.loads(text)
