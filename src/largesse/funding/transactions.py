"""/balance_transactions: the ledger, as the API shows it (newest first).

Every ledger entry of every balance of the organization: orders, reward refunds, fundings,
top-ups, invoice payments; each with the running balance of its own balance and in that
balance's currency. A converted order's entry says so in its description. Invalid query
values answer 422, the status list_balance_transactions' client decodes (API.md §1).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from largesse import db
from largesse.auth import CallerDep
from largesse.errors import ApiError, Unprocessable
from largesse.funding import service
from largesse.money import amount_in, to_wire
from largesse.timeutil import iso
from largesse.web import EngineDep, Paging, json_response, q_time, query_doc, timestamp_param

router = APIRouter(tags=["funding sources"])

DESCRIPTIONS = {
    "sandbox_credit": "Sandbox pre-loaded balance",
    "funding": "Balance funded",
    "order": "Order",
    "reward_refund": "Reward refund",
    "order_refund": "Order refund",
    "topup": "Top-up credited",
    "invoice_payment": "Invoice paid",
}


def _unprocessable(read, *args, **kwargs):
    try:
        return read(*args, **kwargs)
    except ApiError as exc:
        raise Unprocessable(exc.message, exc.payload) from None


def _description(row) -> str:
    if row.kind == "order" and row.order_id:
        text = f"Order {row.order_id}"
        if row.fx_currency_code:
            text += (f": {amount_in(row.fx_total_cents, row.fx_currency_code)} {row.fx_currency_code} converted to "
                     f"{row.currency_code} at {row.fx_rate} (rates of {row.fx_rate_date.isoformat()})")
        return text
    return row.memo or DESCRIPTIONS.get(row.kind, row.kind)


PAGING = Paging(limit=10, high=500)


@router.get("/balance_transactions", openapi_extra=query_doc(
    PAGING.doc(), q_time("created_at[gte]"), q_time("created_at[lte]")))
def list_balance_transactions(request: Request, caller: CallerDep, engine: EngineDep):
    """Ledger entries of the organization's balances. Query: offset, limit (default 10, max 500),
    created_at[gte], created_at[lte] (ISO 8601). Invalid values: 422."""
    offset, limit = _unprocessable(PAGING.read, request)
    gte = _unprocessable(timestamp_param, request, "created_at[gte]")
    lte = _unprocessable(timestamp_param, request, "created_at[lte]")
    with db.read(engine) as conn:
        rows = service.balance_transactions(conn, caller.organization_id, offset=offset, limit=limit,
                                            created_gte=gte, created_lte=lte)
    transactions = []
    for row in rows:
        item = {
            "created_at": iso(row.created_at),
            "amount": to_wire(row.amount_cents),
            "currency_code": row.currency_code,
            "balance": to_wire(row.balance_after_cents),
            "action": row.kind,
            "description": _description(row),
        }
        if row.order_id and row.total_cents is not None:
            order = {"id": row.order_id, "payment": {
                "subtotal": to_wire(row.subtotal_cents), "total": to_wire(row.total_cents),
                "fees": to_wire(row.fees_cents), "discount": 0, "currency_code": row.currency_code}}
            if row.refund_cents:  # as GET /orders/{id} shows it: what was refunded so far
                order["payment"]["refund"] = {"total": to_wire(row.refund_cents), "currency_code": row.currency_code}
            if row.external_id is not None:  # optional, not nullable for the Node client
                order["external_id"] = row.external_id
            item["order"] = order
        transactions.append(item)
    return json_response({"transactions": transactions})
