"""Invoices and top-ups (members who may manage funding): next to the ledger page, through
invoices/service.py and topups/service.py, the functions behind /invoices and /topups. The
amount typed is handed over as text, which the services read exactly (money.to_cents)."""

from __future__ import annotations

import secrets

from fastapi import APIRouter
from starlette.responses import Response

from largesse import db
from largesse.dashboard import access, forms
from largesse.dashboard.web import route
from largesse.errors import ApiError
from largesse.funding import service as funding
from largesse.invoices import documents
from largesse.invoices import service as invoices
from largesse.invoices.models import invoices as invoices_table
from largesse.topups import service as topups

router = APIRouter()
PAGE_SIZE = 25
INVOICE_NOTICES = {"created": "Invoice created. Pay it by bank transfer; the balance is credited when it is paid.",
                   "deleted": "Invoice deleted."}
TOPUP_NOTICES = {"requested": "Top-up requested. The balance is credited when the payment arrives.",
                 "replayed": "This top-up was already requested; nothing was added twice."}




def _offset(ctx) -> int:
    return ctx.int_arg("offset", max_length=9) or 0


def _pager(ctx, offset: int, total: int) -> dict:
    path = ctx.request.url.path
    return {"first": path if offset else None,
            "next": f"{path}?offset={offset + PAGE_SIZE}" if offset + PAGE_SIZE < total else None}


def _invoices(ctx, status: int = 200, *, error: str | None = None, entered: dict | None = None):
    org, offset = ctx.viewer.organization_id, _offset(ctx)
    with db.read(ctx.engine) as conn:
        rows, total = invoices.page(conn, org, offset=offset, limit=PAGE_SIZE)
    return ctx.render("invoices.html", status, title="Invoices", rows=rows, pager=_pager(ctx, offset, total),
                      currencies=invoices.CURRENCIES, error=error,
                      entered=entered or {"amount": "", "currency": ctx.viewer.currency_code, "po_number": "",
                                          "memo": ""},
                      notice=INVOICE_NOTICES.get(ctx.arg("done", max_length=20)))


@route(router, "GET", "/funding/invoices", action="funding")
def list_invoices(ctx):
    return _invoices(ctx)


@route(router, "POST", "/funding/invoices", action="funding")
def create_invoice(ctx):
    entered = {"amount": ctx.form.get("amount", max_length=30), "currency": ctx.form.get("currency", max_length=3),
               "po_number": ctx.form.get("po_number", max_length=200),
               "memo": ctx.form.get("memo", max_length=1000)}
    try:
        amount = forms.read_amount(entered["amount"])  # the dashboard's one rule for typed amounts
    except forms.AmountError as exc:
        return _invoices(ctx, 400, error=f"Amount: {exc}", entered=entered)
    try:  # POST /invoices's rules: currency, amount read exactly, > 0, not too large
        with db.write(ctx.engine) as conn:
            invoices.create(conn, org=ctx.viewer.organization_id, amount=amount,
                            currency_code=entered["currency"] or None, currency=None,
                            po_number=entered["po_number"] or None, memo=entered["memo"] or None)
    except ApiError as exc:
        return _invoices(ctx, exc.status_code, error=exc.message, entered=entered)
    return ctx.redirect("/dashboard/funding/invoices?done=created")


@route(router, "POST", "/funding/invoices/{invoice_id}/delete", action="funding")
def delete_invoice(ctx, invoice_id: str):
    with db.read(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, invoices_table, invoice_id)
    try:  # DELETE /invoices/{id}: an OPEN invoice only; a paid one is a 409
        with db.write(ctx.engine) as conn:
            invoices.delete(conn, ctx.viewer.organization_id, invoice_id)
    except ApiError as exc:
        return _invoices(ctx, exc.status_code, error=exc.message)
    return ctx.redirect("/dashboard/funding/invoices?done=deleted")


def _document(ctx, invoice_id: str, make, media_type: str, ext: str) -> Response:
    with db.read(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, invoices_table, invoice_id)
        row = invoices.document_row(conn, ctx.viewer.organization_id, invoice_id)
    return ctx.finish(Response(make(row), media_type=media_type, headers={
        "Content-Disposition": f'attachment; filename="invoice-{row.id}.{ext}"'}))


@route(router, "GET", "/funding/invoices/{invoice_id}/csv", action="funding")
def invoice_csv(ctx, invoice_id: str):
    return _document(ctx, invoice_id, documents.to_csv, "text/csv; charset=utf-8", "csv")


@route(router, "GET", "/funding/invoices/{invoice_id}/pdf", action="funding")
def invoice_pdf(ctx, invoice_id: str):
    return _document(ctx, invoice_id, documents.to_pdf, "application/pdf", "pdf")


def _topups(ctx, status: int = 200, *, error: str | None = None, entered: dict | None = None):
    org, offset = ctx.viewer.organization_id, _offset(ctx)
    with db.read(ctx.engine) as conn:
        rows, total = topups.page(conn, org, offset=offset, limit=PAGE_SIZE)
        balances = funding.list_for(conn, org)
    # A fresh idempotency key per form shown: the same form sent twice is one top-up.
    return ctx.render("topups.html", status, title="Top-ups", rows=rows, pager=_pager(ctx, offset, total),
                      balances=balances, error=error, key=f"dashboard-{secrets.token_hex(16)}",
                      entered=entered or {"amount": "", "source": ""},
                      notice=TOPUP_NOTICES.get(ctx.arg("done", max_length=20)))


@route(router, "GET", "/funding/topups", action="funding")
def list_topups(ctx):
    return _topups(ctx)


@route(router, "POST", "/funding/topups", action="funding")
def request_topup(ctx):
    entered = {"amount": ctx.form.get("amount", max_length=30), "source": ctx.form.get("source", max_length=64)}
    key = ctx.form.get("idempotency_key", max_length=200)
    if not key:
        return _topups(ctx, 400, error="The form is incomplete: reload the page and send it again.", entered=entered)
    try:
        amount = forms.read_amount(entered["amount"])  # the dashboard's one rule for typed amounts
    except forms.AmountError as exc:
        return _topups(ctx, 400, error=f"Amount: {exc}", entered=entered)
    try:  # POST /topups's rules: one of the organization's balances, amount exact, > 0; the key replays
        created = topups.create(ctx.engine, org=ctx.viewer.organization_id, funding_source_id=entered["source"],
                                idempotency_key=key, amount=amount)
    except ApiError as exc:
        return _topups(ctx, exc.status_code, error=exc.message, entered=entered)
    return ctx.redirect(f"/dashboard/funding/topups?done={'replayed' if created.replay else 'requested'}")
