"""Funding (administrators only): the balance and its ledger, with the running balance."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db
from largesse.dashboard.pages.rewards import PAGE_SIZE, _date_range, _page_number, _pager
from largesse.dashboard.web import route
from largesse.funding import service as funding
from largesse.funding.transactions import DESCRIPTIONS

router = APIRouter()


@route(router, "GET", "/funding", action="admin")
def ledger(ctx):
    org = ctx.viewer.organization_id
    page = _page_number(ctx)
    gte, lt, start, end = _date_range(ctx)
    with db.read(ctx.engine) as conn:
        balances = funding.list_for(conn, org)
        rows = funding.balance_transactions(conn, org, offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE + 1,
                                            created_gte=gte, created_lte=lt)
    return ctx.render("funding.html", title="Funding", balances=balances, rows=rows[:PAGE_SIZE],
                      pager=_pager(ctx, page, len(rows) > PAGE_SIZE), descriptions=DESCRIPTIONS, start=start, end=end)
