"""Funding (administrators only): the balance and its ledger, with the running balance."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db
from largesse.dashboard.pages.rewards import PAGE_SIZE, _date_range, _pager
from largesse.dashboard.web import route
from largesse.funding import service as funding
from largesse.funding.transactions import DESCRIPTIONS

router = APIRouter()


@route(router, "GET", "/funding", action="admin")
def ledger(ctx):
    org = ctx.viewer.organization_id
    gte, lt, start, end = _date_range(ctx)
    before_id = ctx.int_arg("before", max_length=18)
    with db.read(ctx.engine) as conn:
        balances = funding.list_for(conn, org)
        rows = funding.balance_transactions(conn, org, offset=0, limit=PAGE_SIZE + 1, created_gte=gte,
                                            created_lte=lt, before_id=before_id)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    return ctx.render("funding.html", title="Funding", balances=balances, rows=rows,
                      pager=_pager(ctx, str(rows[-1].id) if more else None), descriptions=DESCRIPTIONS,
                      start=start, end=end)
