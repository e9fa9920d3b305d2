"""Fraud reviews: redemptions held by a fraud rule (docs/fraud.md), listed flagged first, and
released or blocked with one click. Every decision is fraud/reviews.py's release / block, the
functions behind PUT /fraud_reviews/{id}/release|block, with the same conditional UPDATE (one
winner), payout, refund, webhooks and 422s; the member's id is recorded as `reviewed_by`.

Who: `approve` (orgs/roles.py `approve_orders`): a release pays out and a block cancels and
refunds, the same kind of decision on held money as approving or rejecting an order."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from fastapi import APIRouter
from sqlalchemy import and_, case, func, or_, select

from largesse import db
from largesse.catalog.models import products
from largesse.dashboard import access
from largesse.dashboard.web import bad_filter, route
from largesse.errors import ApiError
from largesse.fraud import reviews
from largesse.fraud.models import fraud_reviews
from largesse.fraud.service import FLAGGED, REVIEW_STATUSES
from largesse.orders.models import rewards
from largesse.orgs.models import members

router = APIRouter()
PAGE_SIZE = 25
WAITING_CAP = 100
NOTICES = {"released": "Reward {id} released: the product the recipient chose was issued.",
           "blocked": "Reward {id} blocked: it is canceled and its amount went back to the balance."}

_RANK = case((fraud_reviews.c.status == FLAGGED, 0), else_=1)  # flagged first, then the decided ones
_COLUMNS = (fraud_reviews, rewards.c.recipient_name, rewards.c.recipient_email, rewards.c.recipient_phone,
            rewards.c.denomination_cents, rewards.c.currency_code, rewards.c.status.label("reward_status"),
            products.c.name.label("product_name"), members.c.email.label("reviewer_email"))


def _select(org: str):
    return (select(*_COLUMNS).select_from(
        fraud_reviews.join(rewards, rewards.c.id == fraud_reviews.c.reward_id)
        .outerjoin(products, products.c.id == fraud_reviews.c.product_id)
        .outerjoin(members, and_(members.c.id == fraud_reviews.c.reviewed_by,
                                 members.c.organization_id == org)))
        .where(fraud_reviews.c.organization_id == org))


def _cursor_of(row) -> str:
    return f"{0 if row.status == FLAGGED else 1}~{row.redeemed_at.isoformat()}~{row.reward_id}"


def _parse_cursor(text: str):
    rank, _, rest = (text or "").partition("~")
    when, _, reward_id = rest.partition("~")
    try:
        return (int(rank), datetime.fromisoformat(when), reward_id) if rank in ("0", "1") and reward_id \
            and len(reward_id) <= 64 else None
    except ValueError:
        return None


def page_reviews(conn, org: str, *, status: str | None, before, limit: int):
    """(rows, has_more): the organization's reviews, flagged first, then newest redemption
    first, below the keyset cursor `before` (rank, redeemed_at, reward_id); never counted."""
    query = _select(org)
    if status:
        query = query.where(fraud_reviews.c.status == status)
    if before is not None:
        rank, when, reward_id = before
        query = query.where(or_(_RANK > rank, and_(_RANK == rank, or_(
            fraud_reviews.c.redeemed_at < when,
            and_(fraud_reviews.c.redeemed_at == when, fraud_reviews.c.reward_id < reward_id)))))
    rows = conn.execute(query.order_by(_RANK, fraud_reviews.c.redeemed_at.desc(), fraud_reviews.c.reward_id.desc())
                        .limit(limit + 1)).all()
    return rows[:limit], len(rows) > limit


def review_of(conn, org: str, reward_id: str):
    """The review of this reward (with the reward's and product's names), or None."""
    return conn.execute(_select(org).where(fraud_reviews.c.reward_id == reward_id)).first()


def waiting_count(conn, org: str) -> int:
    """Flagged reviews, counted up to WAITING_CAP + 1 (the overview says "more than 100")."""
    capped = (select(fraud_reviews.c.reward_id).where(fraud_reviews.c.organization_id == org,
                                                      fraud_reviews.c.status == FLAGGED)
              .limit(WAITING_CAP + 1).subquery())
    return conn.execute(select(func.count()).select_from(capped)).scalar_one()


def _notice(ctx) -> str | None:
    done, decided = ctx.arg("done", max_length=20), ctx.arg("decided", max_length=64)
    return NOTICES[done].format(id=decided) if done in NOTICES and decided else None


def _list(ctx, status_code: int = 200, *, error: str | None = None):
    org = ctx.viewer.organization_id
    status = ctx.arg("status", max_length=40).lower()
    if status and status not in REVIEW_STATUSES:  # never the whole list as if it matched
        raise bad_filter("Status", status, "is not one of " + ", ".join(REVIEW_STATUSES))
    with db.read(ctx.engine) as conn:
        rows, more = page_reviews(conn, org, status=status or None, before=_parse_cursor(
            ctx.arg("before", max_length=100)), limit=PAGE_SIZE)
    params = {k: v for k, v in ctx.query.items() if k in ("status",) and v}
    pager = {"first": f"/dashboard/reviews?{urlencode(params)}" if ctx.arg("before") else None,
             "next": f"/dashboard/reviews?{urlencode({**params, 'before': _cursor_of(rows[-1])})}" if more else None}
    return ctx.render("reviews.html", status_code, title="Reviews", rows=rows, pager=pager, chosen=status,
                      statuses=REVIEW_STATUSES, error=error, notice=_notice(ctx) if status_code == 200 else None)


@route(router, "GET", "/reviews", action="approve")
def list_reviews(ctx):
    return _list(ctx)


def _show(ctx, reward_id: str, status_code: int = 200, *, error: str | None = None):
    org = ctx.viewer.organization_id
    with db.read(ctx.engine) as conn:
        row = review_of(conn, org, reward_id)
        if row is None:
            raise access.NotFoundPage()
        related = reviews.related_rewards(conn, org, reward_id)  # as the API's get_review shows them
    return ctx.render("review.html", status_code, title=f"Review of reward {reward_id}", r=row,
                      risk=row.risk, related=related, error=error,
                      notice=_notice(ctx) if status_code == 200 else None)


@route(router, "GET", "/reviews/{reward_id}", action="approve")
def show_review(ctx, reward_id: str):
    return _show(ctx, reward_id)


def _decide(ctx, reward_id: str, decide, done: str):
    org = ctx.viewer.organization_id
    with db.read(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, fraud_reviews, reward_id, id_column="reward_id")  # 404: another org's
    back_to_list = ctx.form.get("from", max_length=10) == "list"
    try:
        decide(org=org, reward_id=reward_id, key_id=ctx.viewer.member_id)
    except ApiError as exc:  # 422: decided the other way already, reward closed, product unavailable
        return _list(ctx, exc.status_code, error=exc.message) if back_to_list else \
            _show(ctx, reward_id, exc.status_code, error=exc.message)
    target = "/dashboard/reviews" if back_to_list else f"/dashboard/reviews/{reward_id}"
    return ctx.redirect(f"{target}?{urlencode({'done': done, 'decided': reward_id})}")


@route(router, "POST", "/reviews/{reward_id}/release", action="approve")
def release(ctx, reward_id: str):
    return _decide(ctx, reward_id, lambda **kw: db.retrying(reviews.release, ctx.engine, ctx.settings, **kw),
                   "released")


@route(router, "POST", "/reviews/{reward_id}/block", action="approve")
def block(ctx, reward_id: str):
    return _decide(ctx, reward_id, lambda **kw: db.retrying(reviews.block, ctx.engine, **kw), "blocked")
