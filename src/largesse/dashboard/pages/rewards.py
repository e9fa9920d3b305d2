"""Orders and rewards: lists with filters and pages, a reward's history, and its actions
(resend, cancel, generate a link; an order's links as CSV) through delivery/service.py, as the
API's endpoints do."""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, timedelta
from urllib.parse import urlencode

from fastapi import APIRouter
from sqlalchemy import exists, select
from starlette.responses import Response

from largesse import db
from largesse.campaigns import service as campaigns_service
from largesse.catalog import service as catalog
from largesse.dashboard import access
from largesse.dashboard.pages import approvals as approvals_page
from largesse.dashboard.pages import reviews as reviews_page
from largesse.dashboard.web import bad_filter, route
from largesse.delivery import service as delivery
from largesse.errors import ApiError
from largesse.fields import service as fields_service
from largesse.fraud import service as fraud
from largesse.money import amount_in
from largesse.orders import browse, lifecycle
from largesse.orders.models import PENDING_APPROVAL, orders, rewards
from largesse.redemption import service as redemption
from largesse.spreadsheet import safe_cell
from largesse.timeutil import utcnow

router = APIRouter()
PAGE_SIZE = 25


def _day(label: str, value: str) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.combine(date.fromisoformat(value), datetime.min.time())
    except ValueError:
        raise bad_filter(label, value, "is not a date; use YYYY-MM-DD, e.g. 2026-01-31") from None


def _before(ctx):
    """The keyset cursor of the page asked for (orders/browse.py), or None for the newest."""
    return browse.parse_cursor(ctx.arg("before", max_length=100))


def _pager(ctx, next_cursor: str | None) -> dict:
    """Links to the newest page and to the next (older) one, keeping the filters."""
    params = {k: v for k, v in ctx.query.items() if k != "before" and v}

    def url(extra: dict) -> str:
        return f"{ctx.request.url.path}?{urlencode({**params, **extra})}"

    return {"first": url({}) if ctx.arg("before") else None,
            "next": url({"before": next_cursor}) if next_cursor else None}


def _date_range(ctx) -> tuple[datetime | None, datetime | None, str, str]:
    start, end = ctx.arg("from", max_length=40), ctx.arg("to", max_length=40)
    gte, to = _day("From", start), _day("To", end)
    # The whole of the `to` day: before the next day (9999-12-31 has none: its last moment).
    lt = (to + timedelta(days=1) if to < datetime.max - timedelta(days=1) else datetime.max) if to else None
    return gte, lt, start if gte else "", end if to else ""


@route(router, "GET", "/orders")
def list_orders(ctx):
    org = ctx.viewer.organization_id
    gte, lt, start, end = _date_range(ctx)
    campaign_id = ctx.arg("campaign", max_length=20) or None
    with db.read(ctx.engine) as conn:
        rows, more = browse.page_orders(conn, org, campaign_id=campaign_id, created_gte=gte, created_lt=lt,
                                        before=_before(ctx), limit=PAGE_SIZE)
        campaigns = campaigns_service.list_for(conn, org)
    pager = _pager(ctx, browse.cursor_of(rows[-1]) if more else None)
    return ctx.render("orders.html", title="Orders", rows=rows, pager=pager, campaigns=campaigns,
                      campaign_id=campaign_id or "", start=start, end=end)


def _show_order(ctx, order_id: str, *, status: int = 200, error: str | None = None, new_links=()):
    with db.read(ctx.engine) as conn:
        order = access.owned(conn, ctx.viewer, orders, order_id)
        rows, more = browse.page_order_rewards(conn, order.id, before=_before(ctx), limit=PAGE_SIZE)
        decision = approvals_page.decision_of(conn, order)
        under_review = fraud.held_among(conn, [r.id for r in rows])  # the order's own rewards
        # Offer "Download links (CSV)" on an order with LINK rewards (ix_rewards_order).
        has_link_rewards = conn.execute(select(exists().where(
            rewards.c.order_id == order.id, rewards.c.delivery_method == "LINK"))).scalar()
    return ctx.render("order.html", status, title=f"Order {order.id}", order=order, rows=rows, decision=decision,
                      pager=_pager(ctx, browse.cursor_of(rows[-1]) if more else None), new_links=new_links,
                      under_review=under_review, has_link_rewards=has_link_rewards, error=error)


@route(router, "GET", "/orders/{order_id}")
def show_order(ctx, order_id: str):
    new_links = ctx.take_flash("links") or []  # right after "Send rewards" with a link: shown once
    return _show_order(ctx, order_id, new_links=new_links)


LINKS_CSV_COLUMNS = ["reward_id", "recipient_name", "recipient_email", "amount", "currency", "link"]


def links_csv(issued: list[tuple]) -> str:
    """The order's new links as CSV; every cell through the invoices' CSV-injection guard."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(LINKS_CSV_COLUMNS)
    for reward, link in issued:
        amount = amount_in(reward.denomination_cents, reward.currency_code)
        writer.writerow([safe_cell(v) for v in (
            reward.id, reward.recipient_name or "", reward.recipient_email or "", amount, reward.currency_code,
            link)])
    return out.getvalue()


@route(router, "POST", "/orders/{order_id}/links", action="send")  # the action of "Generate a new link"
def download_links(ctx, order_id: str):
    """A fresh link for every active LINK reward of the order, as a CSV download (one write
    transaction in delivery.service.generate_order_links; only the tokens' hashes are stored)."""
    try:  # another organization's order: NotFound from the service, the order page's 404 below
        issued = delivery.generate_order_links(ctx.engine, ctx.settings, org=ctx.viewer.organization_id,
                                               order_id=order_id)
    except ApiError as exc:
        return _show_order(ctx, order_id, status=exc.status_code, error=exc.message)
    return ctx.finish(Response(links_csv(issued), media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="order-{order_id}-links.csv"', "Cache-Control": "no-store"}))


@route(router, "GET", "/rewards")
def list_rewards(ctx):
    org = ctx.viewer.organization_id
    gte, lt, start, end = _date_range(ctx)
    status = ctx.arg("status", max_length=40).upper()
    delivery_status = ctx.arg("delivery", max_length=40).upper()
    for label, given, known in (("Status", status, browse.REWARD_STATUSES),
                                ("Delivery", delivery_status, browse.DELIVERY_STATUSES)):
        if given and given not in known:
            raise bad_filter(label, given, "is not one of " + ", ".join(s.title() for s in known))
    label, value = ctx.arg("field", max_length=100), ctx.arg("value", max_length=1000)
    flt = browse.RewardFilter(
        status=status or None, delivery_status=delivery_status or None,
        campaign_id=ctx.arg("campaign", max_length=20) or None, created_gte=gte, created_lt=lt,
        fields=[(label, value)] if label and value else [],
        recipient_email=ctx.arg("recipient", max_length=320) or None)
    # A value without a field would be ignored (the filter is one field's value): ask for the
    # field instead of listing every reward as if it matched.
    field_needed = bool(value and not label)
    with db.read(ctx.engine) as conn:
        flt.fields = fields_service.search_values(conn, org, flt.fields)
        rows, more = ([], False) if field_needed else browse.page_rewards(conn, org, flt, before=_before(ctx),
                                                                            limit=PAGE_SIZE)
        campaigns = campaigns_service.list_for(conn, org)
        fields = fields_service.list_for(conn, org)
        under_review = fraud.held_among(conn, [r.id for r in rows])  # a page of the org's own rewards
    pager = _pager(ctx, browse.cursor_of(rows[-1]) if more else None)
    return ctx.render("rewards.html", title="Rewards", rows=rows, pager=pager,
                      flt=flt, campaigns=campaigns, fields=fields, statuses=browse.REWARD_STATUSES,
                      delivery_statuses=browse.DELIVERY_STATUSES, start=start, end=end, label=label, value=value,
                      field_needed=field_needed, under_review=under_review)


# What a reward's live links answer (redemption.service.reward_link_answer, the recipient's
# page's own rule), in words.
LINK_STATES = {"choose": "valid", "under_review": "valid (the redemption is under review)",
               "payout": "no longer redeemable: the reward was redeemed (the link shows what was issued)",
               "canceled": "no longer works: the reward was canceled",
               "expired": "no longer works: the reward expired"}


def _show_reward(ctx, reward_id: str, *, status: int = 200, error: str | None = None, notice: str | None = None,
                 link: str | None = None, resend_email: str = ""):
    with db.read(ctx.engine) as conn:
        reward = access.owned(conn, ctx.viewer, rewards, reward_id)
        history = browse.history(conn, reward.id)
        values = browse_values(conn, reward.id)
        review = reviews_page.review_of(conn, reward.organization_id, reward.id)  # held by a fraud rule?
        now = utcnow()
        link_state = LINK_STATES[redemption.reward_link_answer(conn, reward, at=now)]
        # As the API shows it: past its expiry it reads Expired before the sweep has stored it
        # (unless its order waits for approval: those do not expire).
        order_status = conn.execute(select(orders.c.status).where(orders.c.id == reward.order_id)).scalar()
        status_now = lifecycle.status(reward, at=now, order_status=order_status)
        product = (catalog.get_many_cached(conn, [history.payout.product_id]).get(history.payout.product_id)
                   if history.payout else None)
    cancelable = delivery.cancelable(reward, order_status=order_status, any_delivery=ctx.settings.cancel_any_unredeemed)
    # The services' rules for what the page offers: no link while the order waits for approval
    # (generate_link's own refusal), no cancel then either (rejecting the order refunds it).
    linkable = delivery.link_refusal(reward, order_status=order_status, now=now) is None
    return ctx.render("reward.html", status, title=f"Reward {reward.id}", reward=reward, status_now=status_now,
                      history=history, order_waiting=order_status == PENDING_APPROVAL, linkable=linkable,
                      values=values, error=error, notice=notice, link=link, cancelable=cancelable,
                      resendable=delivery.resendable(reward), resend_email=resend_email, review=review,
                      link_state=link_state, payout_product=product.name if product else None)


def browse_values(conn, reward_id: str) -> list:
    from largesse.orders.repository import field_values_for
    return field_values_for(conn, [reward_id]).get(reward_id, [])


NOTICES = {"resent": "The reward is queued to be sent again.", "canceled": "The reward was canceled and refunded."}


@route(router, "GET", "/rewards/{reward_id}")
def show_reward(ctx, reward_id: str):
    link = ctx.take_flash("link")  # right after "Generate a new link": shown once
    if isinstance(link, str):
        return _show_reward(ctx, reward_id, link=link, notice="A new link was generated. Copy it now: it is "
                            "shown on this page once.")
    return _show_reward(ctx, reward_id, notice=NOTICES.get(ctx.arg("done", max_length=20)))


def _act(ctx, reward_id: str, action, done: str, **entered):
    with db.read(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, rewards, reward_id)  # 404 for another organization's reward
    try:
        action()
    except ApiError as exc:  # the page again, with what was typed
        return _show_reward(ctx, reward_id, status=exc.status_code, error=exc.message, **entered)
    return ctx.redirect(f"/dashboard/rewards/{reward_id}?done={done}")


@route(router, "POST", "/rewards/{reward_id}/resend", action="send")
def resend(ctx, reward_id: str):
    email = ctx.form.get("email", max_length=320) or None
    return _act(ctx, reward_id, lambda: delivery.resend_reward(
        ctx.engine, ctx.settings, org=ctx.viewer.organization_id, reward_id=reward_id, updated_email=email,
        updated_phone=None), "resent", resend_email=email or "")


@route(router, "POST", "/rewards/{reward_id}/cancel", action="send")
def cancel(ctx, reward_id: str):
    return _act(ctx, reward_id, lambda: delivery.cancel_reward(
        ctx.engine, org=ctx.viewer.organization_id, reward_id=reward_id,
        any_delivery=ctx.settings.cancel_any_unredeemed), "canceled")


@route(router, "POST", "/rewards/{reward_id}/link", action="send")
def generate_link(ctx, reward_id: str):
    with db.read(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, rewards, reward_id)
    try:
        link = delivery.generate_link(ctx.engine, ctx.settings, org=ctx.viewer.organization_id, reward_id=reward_id)
    except ApiError as exc:
        return _show_reward(ctx, reward_id, status=exc.status_code, error=exc.message)
    # Post/redirect/get: a reload of the page that follows issues no other link; the link (only
    # this response holds it) rides in a one-time flash, as Send's LINK rewards do.
    return ctx.redirect_with_flash(f"/dashboard/rewards/{reward_id}", "link", link)
