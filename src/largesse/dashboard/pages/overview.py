"""Overview: balance, this month's rewards by status, recent orders."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db
from largesse.dashboard.pages import reviews
from largesse.dashboard.pages.approvals import waiting_count
from largesse.dashboard.web import route
from largesse.funding import service as funding
from largesse.orders import browse
from largesse.timeutil import utcnow

router = APIRouter()


@route(router, "GET", "")
def overview(ctx):
    org = ctx.viewer.organization_id
    month_start = utcnow().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    with db.read(ctx.engine) as conn:
        balances = funding.list_for(conn, org)
        counts = browse.status_counts(conn, org, since=month_start)
        recent, _ = browse.page_orders(conn, org, campaign_id=None, created_gte=None, created_lt=None,
                                       before=None, limit=5)
        waiting = waiting_count(conn, org) if ctx.viewer.may("approve") else None
        held = reviews.waiting_count(conn, org) if ctx.viewer.may("approve") else None
    return ctx.render("overview.html", title="Overview", balances=balances, counts=counts, recent=recent,
                      waiting=waiting, held=held, month=month_start.strftime("%B %Y"))


@route(router, "GET", "/", action=None)
def trailing_slash(ctx):
    return ctx.redirect("/dashboard")
