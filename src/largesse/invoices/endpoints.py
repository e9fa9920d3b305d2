"""/invoices (API.md §1 P1, §2.6 CreateInvoice, §3 Invoice), with their CSV and PDF documents.

The documents ignore Accept: the client sends `Accept: application/json` on every call
(API.md §7.9), so they never answer 406.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from largesse.auth import CallerDep
from largesse.invoices import documents, service
from largesse.money import Amount, ExactJsonModel, exact_amount
from largesse.schemas import Out, Text, Wire
from largesse.web import (
    EngineDep,
    Paging,
    json_body_doc,
    json_response,
    parse_json_body,
    query_doc,
    read_db,
    write_db,
)

router = APIRouter(tags=["invoices"])


class CreateInvoiceIn(Wire, ExactJsonModel):
    po_number: Text(200) | None = None
    amount: Amount
    currency_code: Text(3, 3) | None = None
    currency: Text(3, 3) | None = None
    memo: Text(1000) | None = None

    def adopt_exact_numbers(self, data: Any) -> None:
        exact = exact_amount(data, "amount")
        if exact is not None:
            self.__dict__["amount"] = exact


class InvoiceOut(Out):
    id: str
    amount: float
    status: str
    created_at: str
    paid_at: str | None


class InvoiceEnvelope(Out):
    invoice: InvoiceOut


class InvoiceList(Out):
    invoices: list[InvoiceOut]
    total_count: int


@router.post("/invoices", response_model=InvoiceEnvelope, openapi_extra=json_body_doc(CreateInvoiceIn))
async def create_invoice(request: Request, caller: CallerDep, engine: EngineDep):
    """Create an OPEN invoice (currency: USD, EUR or GBP; default the organization's)."""
    raw = await request.body()
    body = parse_json_body(CreateInvoiceIn, raw if raw.strip() else b"{}")
    invoice = await write_db(engine, service.create, org=caller.organization_id, amount=body.amount,
                             currency_code=body.currency_code, currency=body.currency, po_number=body.po_number,
                             memo=body.memo)
    return json_response({"invoice": invoice})


PAGING = Paging(limit=10, high=10)  # API.md §1


@router.get("/invoices", response_model=InvoiceList, openapi_extra=query_doc(PAGING.doc()))
async def list_invoices(request: Request, caller: CallerDep, engine: EngineDep):
    """Invoices, newest first, deleted ones left out. Query: offset, limit (default and max 10)."""
    offset, limit = PAGING.read(request)
    items, total = await read_db(engine, service.page, caller.organization_id, offset=offset, limit=limit)
    return json_response({"invoices": items, "total_count": total})


@router.get("/invoices/{id}", response_model=InvoiceEnvelope)
async def get_invoice(id: str, caller: CallerDep, engine: EngineDep):  # noqa: A002 - the client's name
    """An invoice by ID, deleted ones included."""
    return json_response({"invoice": await read_db(engine, service.get, caller.organization_id, id)})


@router.delete("/invoices/{id}", response_model=InvoiceEnvelope)
async def delete_invoice(id: str, caller: CallerDep, engine: EngineDep):  # noqa: A002
    """Delete an OPEN invoice (200, status DELETED); a PAID one cannot be deleted (409)."""
    return json_response({"invoice": await write_db(engine, service.delete, caller.organization_id, id)})


@router.get("/invoices/{id}/csv", response_class=Response,
            responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}}})
async def download_invoice_csv(id: str, caller: CallerDep, engine: EngineDep):  # noqa: A002
    row = await read_db(engine, service.document_row, caller.organization_id, id)
    return Response(documents.to_csv(row), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="invoice-{row.id}.csv"'})


@router.get("/invoices/{id}/pdf", response_class=Response,
            responses={200: {"content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}}}})
async def download_invoice_pdf(id: str, caller: CallerDep, engine: EngineDep):  # noqa: A002
    row = await read_db(engine, service.document_row, caller.organization_id, id)
    return Response(documents.to_pdf(row), media_type="application/pdf",
                    headers={"Content-Disposition": f'attachment; filename="invoice-{row.id}.pdf"'})
