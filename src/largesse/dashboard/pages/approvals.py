"""Approvals: the orders waiting for a decision, approve or reject with one click, and the
organization's approval policy (administrators). Every decision is orders/approvals.py's
approve_order / reject_order, the functions behind POST /order_approvals/{id}/approve|reject,
called as a member (`via_api=False`, `Decider(member_id=...)`): the same conditional UPDATE,
ledger entries, webhooks and errors as the API."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import func, select

from largesse import db
from largesse.dashboard import access, forms
from largesse.dashboard.web import route, when
from largesse.errors import ApiError
from largesse.money import MoneyError, amount_in, decimals_for, to_cents
from largesse.orders import approvals
from largesse.orders.models import orders
from largesse.orgs.models import members

router = APIRouter()
QUEUE_SIZE = 100
MODE_CHOICES = {
    "off": "No order needs approval",
    "api": "Orders placed through the API need approval",
    "all": "Every order needs approval",
    "above": "Orders whose total is above an amount need approval",
}
NOTICES = {"policy": "Approval policy saved. It applies to orders placed from now on."}
WAITING_CAP = 100


def waiting_count(conn, org: str) -> int:
    """Orders waiting for approval, counted up to WAITING_CAP + 1 (the overview says "more
    than 100"): the count stops early however many orders the organization has."""
    capped = (select(orders.c.id).where(orders.c.organization_id == org, orders.c.status == approvals.PENDING)
              .limit(WAITING_CAP + 1).subquery())
    return conn.execute(select(func.count()).select_from(capped)).scalar_one()


def decision_of(conn, order) -> dict | None:
    """Who approved or rejected this order and when ({"verb", "by", "at"}), or None: a member
    (their email) or an API key (its label or prefix)."""
    for verb in ("approved", "rejected"):
        at = getattr(order, f"{verb}_at", None)
        if at is None:
            continue
        member_id, key_id = getattr(order, f"{verb}_by_member_id"), getattr(order, f"{verb}_by_key_id")
        by = "someone"
        if member_id:
            by = conn.execute(select(members.c.email).where(members.c.id == member_id)).scalar() or "a former member"
        elif key_id:
            by = f"API key {key_id}"
        return {"verb": verb, "by": by, "at": at}
    return None


def _page(ctx, status: int = 200, *, error: str | None = None, entered: dict | None = None):
    org = ctx.viewer.organization_id
    notice = NOTICES.get(ctx.arg("done", max_length=20))
    decided = ctx.arg("decided", max_length=64)
    with db.read(ctx.engine) as conn:
        waiting = approvals.list_pending(conn, org, limit=QUEUE_SIZE)
        policy = approvals.get_policy(conn, org) if ctx.viewer.may("settings") else None
        if decided and status == 200:  # after a decision: who made it and when, from the order itself
            order = conn.execute(select(orders).where(orders.c.organization_id == org,
                                                      orders.c.id == decided)).first()
            decision = decision_of(conn, order) if order is not None else None
            if decision is not None:
                notice = f"Order {order.id} {decision['verb']} by {decision['by']} at {when(decision['at'])} UTC."
    above = ""
    if policy is not None and policy.above_cents is not None:
        above = amount_in(policy.above_cents, ctx.viewer.currency_code)
    if policy is not None and entered:  # after an error: the form as it was sent
        above = entered["above"]
        policy = approvals.Policy(entered["mode"] or policy.mode, policy.above_cents, entered["api_allowed"])
    return ctx.render("approvals.html", status, title="Approvals", waiting=waiting, queue_size=QUEUE_SIZE,
                      policy=policy, above=above, modes=MODE_CHOICES, error=error,
                      notice=notice)


@route(router, "GET", "/approvals", action="approve")
def queue(ctx):
    return _page(ctx)


def _decide(ctx, order_id: str, decide):
    with db.read(ctx.engine) as conn:
        order = access.owned(conn, ctx.viewer, orders, order_id)  # 404 for another organization's order
    try:
        db.retrying(decide, ctx.engine, org=ctx.viewer.organization_id, order_id=order.id,
                    by=approvals.Decider(member_id=ctx.viewer.member_id), via_api=False)
    except ApiError as exc:  # 422: already decided (by someone else, a moment ago)
        return _page(ctx, exc.status_code, error=exc.message)
    return ctx.redirect(f"/dashboard/approvals?decided={order.id}")


@route(router, "POST", "/approvals/{order_id}/approve", action="approve")
def approve(ctx, order_id: str):
    return _decide(ctx, order_id, approvals.approve_order)


@route(router, "POST", "/approvals/{order_id}/reject", action="approve")
def reject(ctx, order_id: str):
    return _decide(ctx, order_id, approvals.reject_order)


@route(router, "POST", "/approvals/policy", action="settings")
def save_policy(ctx):
    mode = ctx.form.get("mode", max_length=10)
    above_text = ctx.form.get("above", max_length=30)
    entered = {"mode": mode, "above": above_text, "api_allowed": ctx.form.get("api_allowed") == "yes"}
    above_cents = None
    if mode == "above":
        try:
            above_cents = to_cents(forms.read_amount(above_text), decimals=decimals_for(ctx.viewer.currency_code))
        except (forms.AmountError, MoneyError) as exc:
            return _page(ctx, 400, error=f"Amount: {exc}", entered=entered)
        if above_cents < 0:
            return _page(ctx, 400, error="Amount: must be 0 or more", entered=entered)
    try:
        with db.write(ctx.engine) as conn:  # `largesse org approvals` calls the same
            approvals.set_policy(conn, ctx.viewer.organization_id, mode=mode, above_cents=above_cents,
                                 api_allowed=entered["api_allowed"])
    except ValueError as exc:
        return _page(ctx, 400, error=str(exc), entered=entered)
    return ctx.redirect("/dashboard/approvals?done=policy")

