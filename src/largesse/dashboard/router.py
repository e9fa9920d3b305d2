"""The dashboard under /dashboard: its pages, its static files, its 404 page."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from largesse import paths
from largesse.dashboard.pages import (
    approvals,
    auth,
    billing,
    campaigns,
    developers,
    funding,
    overview,
    reports,
    reviews,
    rewards,
    send,
    team,
)
from largesse.dashboard.web import PREFIX, not_found_page

STATIC = Path(__file__).parent / "static" / "dashboard"
PAGES = (auth, overview, send, rewards, approvals, reviews, campaigns, funding, billing, reports, team, developers)


def install(app: FastAPI) -> None:
    for module in PAGES:
        app.include_router(module.router, prefix=PREFIX, include_in_schema=False)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="dashboard-static")
    paths.serve_html_404(app, f"{PREFIX}/", not_found_page)
