"""Campaigns: list (everyone), create and edit (administrators)."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import db
from largesse.campaigns import service as campaigns_service
from largesse.dashboard.web import route

router = APIRouter()


@route(router, "GET", "/campaigns")
def list_campaigns(ctx):
    with db.read(ctx.engine) as conn:
        rows = campaigns_service.list_for(conn, ctx.viewer.organization_id)
    return ctx.render("campaigns.html", title="Campaigns", rows=rows)
