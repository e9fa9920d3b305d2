"""Order approvals: an organization's policy, and approving or rejecting a PENDING APPROVAL order.

Money (docs/approvals.md): an order that needs approval is paid when it is created, like any
order (one ledger debit, the same overdraft guard), and its total is also counted in the
balance's pending_cents until someone decides. Approving releases the hold and starts
delivery; rejecting releases the hold, credits the whole total back (one `order_refund`
ledger entry, unique per order) and cancels the rewards. Both are one conditional UPDATE of
the order (WHERE status = 'PENDING APPROVAL'), so of any number of concurrent decisions
exactly one changes the order and the others get 422. Services own their transactions;
the CLI, the API and the dashboard call these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, bindparam, select, update

from largesse import db
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.errors import Forbidden, Unprocessable
from largesse.funding import service as funding
from largesse.orders import lifecycle, repository
from largesse.orders.models import PENDING_APPROVAL, orders, rewards
from largesse.orgs import roles
from largesse.orgs.models import members, organizations
from largesse.timeutil import utcnow
from largesse.webhooks import service as webhooks

PENDING = PENDING_APPROVAL
MODES = ("off", "api", "all", "above")
ORDER_REFUND_KIND = "order_refund"


@dataclass(frozen=True)
class Policy:
    """Which new orders need approval, and whether API keys may approve or reject them.

    mode: "off" (none), "api" (orders placed through the API), "all" (every order), "above"
    (orders whose total, in the balance's currency, is strictly greater than above_cents).
    """

    mode: str = "off"
    above_cents: int | None = None
    api_allowed: bool = True


@dataclass(frozen=True)
class Decider:
    """Who approves or rejects: an API key (the API) or a member (the dashboard)."""

    key_id: str | None = None
    member_id: str | None = None


def needs_approval(mode: str | None, above_cents: int | None, *, channel: str, total_cents: int) -> bool:
    if mode == "all":
        return True
    if mode == "api":
        return channel == "API"
    if mode == "above":
        return above_cents is not None and total_cents > above_cents
    return False


_POLICY = select(organizations.c.approval_mode, organizations.c.approval_above_cents,
                 organizations.c.approval_api_allowed).where(organizations.c.id == bindparam("org"))


def get_policy(conn: Connection, org: str) -> Policy | None:
    row = conn.execute(_POLICY, {"org": org}).first()
    if row is None:
        return None
    return Policy(row.approval_mode, row.approval_above_cents, bool(row.approval_api_allowed))


def set_policy(conn: Connection, org: str, *, mode: str, above_cents: int | None = None,
               api_allowed: bool | None = None) -> Policy:
    """Change the policy (None api_allowed: unchanged). It applies to orders created from now
    on; orders already waiting stay PENDING APPROVAL until decided. ValueError on bad input,
    LookupError for an unknown organization."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if mode == "above":
        if above_cents is None or above_cents < 0:
            raise ValueError("mode 'above' needs an amount (0 or more)")
    else:
        above_cents = None
    values: dict = {"approval_mode": mode, "approval_above_cents": above_cents}
    if api_allowed is not None:
        values["approval_api_allowed"] = api_allowed
    if conn.execute(update(organizations).where(organizations.c.id == org).values(**values)).rowcount != 1:
        raise LookupError(f"no organization {org}")
    return get_policy(conn, org)


def list_pending(conn: Connection, org: str, *, limit: int = 100):
    """The organization's orders waiting for a decision, oldest first."""
    return conn.execute(
        select(orders).where(orders.c.organization_id == org, orders.c.status == PENDING)
        .order_by(orders.c.created_at, orders.c.id).limit(limit)
    ).all()


def _pending_order(conn: Connection, org: str, order_id: str, *, via_api: bool, verb: str, by: Decider):
    order = repository.order_or_404(conn, org, order_id)
    if by.member_id is not None:
        # The rule of every surface that decides for a member (the dashboard's page asks it
        # too, the CLI's `orders approve --member` only here): an active member of the order's
        # organization whose role may approve orders (orgs/roles.py; ADMIN).
        role = conn.execute(select(members.c.role).where(
            members.c.id == by.member_id, members.c.organization_id == org, members.c.active.is_(True))).scalar()
        if not roles.can(role, "approve_orders"):
            raise Forbidden(f"Only a member whose role may approve orders can have an order {verb} "
                            f"(this member's role: {role or 'none'})", {"member": ["may not approve orders"]})
    if via_api:
        allowed = conn.execute(select(organizations.c.approval_api_allowed)
                               .where(organizations.c.id == org)).scalar_one()
        if not allowed:
            raise Forbidden(f"Orders of this organization cannot be {verb} through the API; "
                            "a member must decide in the dashboard",
                            {"id": [f"cannot be {verb} through the API"]})
    return order


def _not_pending(order_id: str, status: str, verb: str) -> Unprocessable:
    return Unprocessable(f"Order {order_id} is {status}; only a {PENDING} order can be {verb}",
                         {"id": [f"is {status}, not {PENDING}"]})


def _decide(conn: Connection, order, *, status: str, decision: str, by: Decider, now: datetime, **extra):
    """The one conditional UPDATE that lets exactly one decision through; the new row or None."""
    return conn.execute(
        update(orders).where(orders.c.id == order.id, orders.c.status == PENDING)
        .values(status=status, **{f"{decision}_at": now, f"{decision}_by_key_id": by.key_id,
                                  f"{decision}_by_member_id": by.member_id}, **extra)
        .returning(*orders.c)
    ).first()


_START_REWARD = (
    update(rewards).where(rewards.c.id == bindparam("rid"))
    .values(delivery_status=bindparam("delivery_status"), delivered_at=bindparam("delivered_at"),
            expires_at=bindparam("new_expires_at"))
)


def approve_order(engine: Engine, *, org: str, order_id: str, by: Decider, via_api: bool = True) -> dict:
    """PENDING APPROVAL -> EXECUTED: release the hold and start delivery. Returns the order as
    the API shows it. 404 unknown, 403 API approval disallowed, 422 not pending."""
    now = utcnow()
    with db.write(engine) as conn:
        order = _pending_order(conn, org, order_id, via_api=via_api, verb="approved", by=by)
        row = _decide(conn, order, status="EXECUTED", decision="approved", by=by, now=now)
        if row is None:
            current = conn.execute(select(orders.c.status).where(orders.c.id == order.id)).scalar_one()
            raise _not_pending(order.id, current, "approved")
        funding.hold(conn, funding_source_id=row.funding_source_id, amount_cents=-row.total_cents)
        _start_delivery(conn, row, now=now)
        webhooks.emit(conn, org, [("ORDERS.APPROVED", row.id)])
        return repository.orders_to_wire(conn, [row])[0]


def _start_delivery(conn: Connection, order, *, now: datetime) -> None:
    """What place_order does for an order that needs no approval, done at approval: LINK
    rewards count as delivered, the others get their delivery jobs (scheduled ones at their
    deliver_at). Expiry runs from the approval, or from the delivery day if that is later
    (lifecycle.delivery_start, as at creation): its time to live is what it was given then."""
    today = now.date()
    updates, job_rows = [], []
    for reward in conn.execute(select(rewards).where(rewards.c.order_id == order.id)).all():
        expires_at = None
        if reward.expires_at is not None:
            lives = reward.expires_at - lifecycle.delivery_start(reward.delivery_method, reward.deliver_at,
                                                                 order.created_at)
            if lives <= timedelta(0):  # created before expiry ran from the delivery day: it ran from creation
                lives = reward.expires_at - order.created_at
            expires_at = lifecycle.delivery_start(reward.delivery_method, reward.deliver_at, now) + lives
        if reward.delivery_method == "LINK":
            updates.append({"rid": reward.id, "delivery_status": "SUCCEEDED", "delivered_at": now,
                            "new_expires_at": expires_at})
            continue
        scheduled = reward.deliver_at is not None and reward.deliver_at > today
        updates.append({"rid": reward.id, "delivery_status": "SCHEDULED" if scheduled else "PENDING",
                        "delivered_at": None, "new_expires_at": expires_at})
        run_after = datetime.combine(reward.deliver_at, datetime.min.time()) if scheduled else now
        job_rows.append(job_queue.queued_row(kind="deliver_reward", organization_id=order.organization_id,
                                             reward_id=reward.id, run_after=run_after, now=now))
    if updates:
        conn.execute(_START_REWARD, updates)
    if job_rows:
        conn.execute(jobs.insert(), job_rows)


def reject_order(engine: Engine, *, org: str, order_id: str, by: Decider, via_api: bool = True) -> dict:
    """PENDING APPROVAL -> CANCELED: release the hold, credit the whole total back once, and
    cancel the rewards. 404 unknown, 403 API decisions disallowed, 422 not pending."""
    now = utcnow()
    with db.write(engine) as conn:
        order = _pending_order(conn, org, order_id, via_api=via_api, verb="rejected", by=by)
        row = _decide(conn, order, status="CANCELED", decision="rejected", by=by, now=now,
                      refund_cents=orders.c.total_cents)
        if row is None:
            current = conn.execute(select(orders.c.status).where(orders.c.id == order.id)).scalar_one()
            raise _not_pending(order.id, current, "rejected")
        funding.hold(conn, funding_source_id=row.funding_source_id, amount_cents=-row.total_cents)
        # The uq_ledger_entries_order_refund index refuses a second refund of the same order.
        if row.total_cents:  # an order that was charged nothing (delivery.service.refund) has nothing to give back
            funding.credit(conn, funding_source_id=row.funding_source_id, organization_id=org,
                           amount_cents=row.total_cents, kind=ORDER_REFUND_KIND, memo=f"order {row.id} rejected",
                           order_id=row.id)
        conn.execute(update(rewards).where(rewards.c.order_id == row.id, rewards.c.status == "ACTIVE")
                     .values(status="CANCELED", canceled_at=now))
        webhooks.emit(conn, org, [("ORDERS.CANCELED", row.id)])
        return repository.orders_to_wire(conn, [row])[0]

