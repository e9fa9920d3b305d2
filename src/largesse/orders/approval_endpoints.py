"""/order_approvals/{id}/approve and /order_approvals/{id}/reject (API.md §1; docs/approvals.md)."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db
from largesse.auth import CallerDep
from largesse.orders import approvals
from largesse.orders.schemas import OrderEnvelope
from largesse.web import EngineDep, clean_text, json_response, run_db

router = APIRouter(tags=["orders"])


@router.post("/order_approvals/{order_id}/approve", response_model=OrderEnvelope)
async def approve_order(order_id: str, caller: CallerDep, engine: EngineDep):
    """Approve an order waiting as `PENDING APPROVAL`: it becomes `EXECUTED` and its rewards
    are delivered. 403 when the organization does not allow approvals through the API, 422
    when the order is not pending approval (already approved, rejected, or never needed it)."""
    clean_text(order_id, "id", max_length=200)
    order = await run_db(engine, db.retrying, approvals.approve_order, engine, org=caller.organization_id,
                         order_id=order_id, by=approvals.Decider(key_id=caller.key_id))
    return json_response({"order": order})


@router.post("/order_approvals/{order_id}/reject", response_model=OrderEnvelope)
async def reject_order(order_id: str, caller: CallerDep, engine: EngineDep):
    """Reject an order waiting as `PENDING APPROVAL`: it becomes `CANCELED`, its rewards are
    canceled and its whole total goes back to the balance. 403 and 422 as for approve."""
    clean_text(order_id, "id", max_length=200)
    order = await run_db(engine, db.retrying, approvals.reject_order, engine, org=caller.organization_id,
                         order_id=order_id, by=approvals.Decider(key_id=caller.key_id))
    return json_response({"order": order})
