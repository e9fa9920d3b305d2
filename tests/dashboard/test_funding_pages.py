"""Invoices and top-ups in the dashboard over HTTP, through invoices/ and topups/ services:
create, list, documents, delete, request; the API sees the same objects; balances in several
currencies; scoping, roles and CSRF."""

from __future__ import annotations

import re

from largesse.invoices import service as invoices
from largesse.topups import service as topups
from tests.dashboard.conftest import csrf_of, text_of
from tests.factories import ok


def post(client, page_path: str, action: str, data: dict):
    page = client.get(page_path)
    assert page.status_code == 200, page.text
    return client.post(action, data={"csrf_token": csrf_of(page.text), **data})


def create_invoice(client, **fields) -> str:
    data = {"amount": "1250.50", "currency": "USD", "po_number": "PO-7", "memo": "Q3 rewards", **fields}
    response = post(client, "/dashboard/funding/invoices", "/dashboard/funding/invoices", data)
    assert response.status_code == 303, text_of(response.text)
    return response.headers["location"]


def test_invoice_create_list_documents_delete(admin, http, engine):
    location = create_invoice(admin)
    text = text_of(admin.get(location).text)
    assert "Invoice created" in text and "1,250.50 USD" in text and "PO-7" in text and "Q3 rewards" in text
    [invoice] = ok(http.get("/invoices"))["invoices"]  # the API sees the same invoice
    assert invoice["amount"] == 1250.5 and invoice["po_number"] == "PO-7" and invoice["status"] == "OPEN"
    assert f"Delete invoice {invoice['id']}" in text

    csv = admin.get(f"/dashboard/funding/invoices/{invoice['id']}/csv")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "1250.50" in csv.text and "PO-7" in csv.text
    assert csv.headers["content-disposition"] == f'attachment; filename="invoice-{invoice["id"]}.csv"'
    pdf = admin.get(f"/dashboard/funding/invoices/{invoice['id']}/pdf")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    assert pdf.headers["content-type"] == "application/pdf"

    response = post(admin, "/dashboard/funding/invoices", f"/dashboard/funding/invoices/{invoice['id']}/delete", {})
    assert response.status_code == 303
    assert "Invoice deleted" in text_of(admin.get(response.headers["location"]).text)
    assert ok(http.get(f"/invoices/{invoice['id']}"))["invoice"]["status"] == "DELETED"
    assert ok(http.get("/invoices"))["invoices"] == []


def test_a_paid_invoice_cannot_be_deleted_and_credits_a_second_currency(admin, http, engine):
    create_invoice(admin, amount="300", currency="EUR")
    [invoice] = ok(http.get("/invoices"))["invoices"]
    assert invoice["currency_code"] == "EUR"
    invoices.pay(engine, invoice["id"])
    page = text_of(admin.get("/dashboard/funding/invoices").text)
    assert "Paid" in page and f"Delete invoice {invoice['id']}" not in page
    response = post(admin, "/dashboard/funding/invoices", f"/dashboard/funding/invoices/{invoice['id']}/delete", {})
    assert response.status_code == 409 and "a paid invoice cannot be deleted" in text_of(response.text)
    funding = text_of(admin.get("/dashboard/funding").text)  # both balances, each in its currency
    assert "5,000.00 USD" in funding and "300.00 EUR" in funding


def test_invoice_form_shows_the_apis_errors(admin, http):
    for data, message in (({"amount": "12.3456"}, "Amount: must have at most 2 decimal places"),
                          ({"amount": "1.000"}, "Amount: use a comma between thousands (1,000) and a dot for decimals"),
                          ({"amount": "0"}, "amount must be greater than 0"),
                          ({"amount": "ten"}, "Amount: must be a number like 25, 25.50 or 1,000.50"),
                          ({"amount": "7,5"}, "Amount: use a dot for decimals: 7.50"),
                          ({"currency": "JPY"}, "currency_code must be one of USD, EUR, GBP")):
        response = post(admin, "/dashboard/funding/invoices", "/dashboard/funding/invoices",
                        {"amount": "10", "currency": "USD", **data})
        assert response.status_code == 400, data
        assert message in text_of(response.text), (data, text_of(response.text))
        typed = data.get("amount", "10")
        assert f'name="amount" inputmode="decimal" required maxlength="30" value="{typed}"' in response.text
    assert ok(http.get("/invoices"))["total_count"] == 0
    response = post(admin, "/dashboard/funding/invoices", "/dashboard/funding/invoices",
                    {"amount": "1,250.50", "currency": "USD"})  # a comma between thousands only
    assert response.status_code == 303
    assert ok(http.get("/invoices"))["invoices"][0]["amount"] == 1250.5


def test_topup_request_is_listed_and_replays(admin, http, org, engine):
    page = admin.get("/dashboard/funding/topups")
    assert page.status_code == 200 and "Request top-up" in text_of(page.text)
    key = re.search(r'name="idempotency_key" value="([^"]+)"', page.text).group(1)
    data = {"csrf_token": csrf_of(page.text), "idempotency_key": key, "source": org.funding_source_id,
            "amount": "750.25"}
    response = admin.post("/dashboard/funding/topups", data=data)
    assert response.status_code == 303
    text = text_of(admin.get(response.headers["location"]).text)
    assert "Top-up requested" in text and "750.25 USD" in text and "Waiting for payment" in text
    again = admin.post("/dashboard/funding/topups", data=data)  # the same form sent twice
    assert again.headers["location"].endswith("done=replayed")
    [topup] = ok(http.get("/topups"))["topups"]
    assert topup["amount"] == 750.25 and topup["status"] == "created" and topup["idempotency_key"] == key
    topups.credit(engine, topup["id"])
    assert "Credited" in text_of(admin.get("/dashboard/funding/topups").text)

    response = post(admin, "/dashboard/funding/topups", "/dashboard/funding/topups",
                    {"idempotency_key": "k-2", "source": org.funding_source_id, "amount": "-5"})
    assert response.status_code == 400 and "amount" in text_of(response.text)
    response = post(admin, "/dashboard/funding/topups", "/dashboard/funding/topups",
                    {"idempotency_key": "k-3", "source": "NOSUCHSOURCE1", "amount": "5"})
    assert response.status_code == 400 and "Funding source NOSUCHSOURCE1 not found" in text_of(response.text)
    assert ok(http.get("/topups"))["total_count"] == 1


def test_member_role_cannot_reach_funding(member_client, http, org):
    for path in ("/dashboard/funding/invoices", "/dashboard/funding/topups"):
        assert member_client.get(path).status_code == 403, path
    response = post(member_client, "/dashboard", "/dashboard/funding/invoices", {"amount": "10", "currency": "USD"})
    assert response.status_code == 403
    response = post(member_client, "/dashboard", "/dashboard/funding/topups",
                    {"idempotency_key": "k", "source": org.funding_source_id, "amount": "10"})
    assert response.status_code == 403
    assert ok(http.get("/invoices"))["total_count"] == 0 and ok(http.get("/topups"))["total_count"] == 0


def test_another_orgs_invoice_is_not_found(admin, other_org):
    with other_org.http() as other:
        invoice = ok(other.post("/invoices", json={"amount": 10}))["invoice"]
        for path in (f"/dashboard/funding/invoices/{invoice['id']}/csv",
                     f"/dashboard/funding/invoices/{invoice['id']}/pdf"):
            assert admin.get(path).status_code == 404, path
        response = post(admin, "/dashboard/funding/invoices", f"/dashboard/funding/invoices/{invoice['id']}/delete",
                        {})
        assert response.status_code == 404
        assert ok(other.get(f"/invoices/{invoice['id']}"))["invoice"]["status"] == "OPEN"
        response = post(admin, "/dashboard/funding/topups", "/dashboard/funding/topups",
                        {"idempotency_key": "k-x", "source": other_org.funding_source_id, "amount": "5"})
        assert response.status_code == 400  # another organization's balance is not found
        assert ok(other.get("/topups"))["total_count"] == 0


def test_funding_forms_without_csrf_are_refused(admin, http, org):
    assert admin.post("/dashboard/funding/invoices", data={"amount": "10", "currency": "USD"}).status_code == 403
    assert admin.post("/dashboard/funding/topups", data={"idempotency_key": "k", "source": org.funding_source_id,
                                                         "amount": "10"}).status_code == 403
    assert ok(http.get("/invoices"))["total_count"] == 0 and ok(http.get("/topups"))["total_count"] == 0


def test_a_superscript_digit_in_a_paging_parameter_is_no_page(admin):
    """"²" is a digit to str.isdigit and not to int(): the funding ledger's `before` and the
    invoices' and top-ups' `offset` answered 500."""
    for path in ("/dashboard/funding?before=%C2%B2", "/dashboard/funding/invoices?offset=%C2%B2",
                 "/dashboard/funding/topups?offset=%C2%B2"):
        assert admin.get(path).status_code == 200, path
