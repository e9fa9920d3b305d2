"""/balance_transactions: the ledger, as the API shows it (newest first)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from largesse import db
from largesse.auth import CallerDep
from largesse.funding import service
from largesse.money import to_wire
from largesse.timeutil import iso
from largesse.web import EngineDep, int_param, json_response, timestamp_param

router = APIRouter(tags=["funding sources"])

DESCRIPTIONS = {
    "sandbox_credit": "Sandbox pre-loaded balance",
    "funding": "Balance funded",
    "order": "Order",
    "reward_refund": "Reward refund",
    "adjustment": "Adjustment",
}


@router.get("/balance_transactions")
def list_balance_transactions(request: Request, caller: CallerDep, engine: EngineDep):
    """Ledger entries of the balance. Query: offset, limit (default 10, max 500), created_at[gte|lte]."""
    offset = int_param(request, "offset", 0, low=0)
    limit = int_param(request, "limit", 10, low=1, high=500)
    gte, lte = timestamp_param(request, "created_at[gte]"), timestamp_param(request, "created_at[lte]")
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
            "description": row.memo or DESCRIPTIONS.get(row.kind, row.kind),
        }
        if row.order_id and row.total_cents is not None:
            item["order"] = {"id": row.order_id, "external_id": row.external_id, "payment": {
                "subtotal": to_wire(row.subtotal_cents), "total": to_wire(row.total_cents),
                "fees": to_wire(row.fees_cents), "discount": 0, "currency_code": row.currency_code}}
        transactions.append(item)
    return json_response({"transactions": transactions})
