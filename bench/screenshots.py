"""Screenshots of the redemption page for the README: `python -m bench.screenshots`.

Starts Largesse in-process on a throw-away SQLite database, sends one LINK reward with a
styled campaign, and drives Debian's Chromium (Playwright) through the page at a phone and
a desktop size. Writes docs/screenshots/redeem-phone.png, redeem-desktop.png and
redeem-payout-phone.png; commit them when the page changes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from largesse import db
from largesse.app import create_app
from largesse.bootstrap import prepare
from largesse.config import Settings
from largesse.orgs import service as orgs

# The browser is Debian's chromium (never one Playwright downloads): LARGESSE_CHROMIUM, else
# `chromium` on PATH, else /usr/bin/chromium, as in the browser tests.
CHROMIUM = os.environ.get("LARGESSE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PRODUCTS = ["PGCNWBOOKS01US", "PGCHRBRCOF01US", "PGCALPOUTF01US", "PCHOCEANTR01US"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(database_url: str) -> tuple[uvicorn.Server, str]:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    settings = Settings(database_url=database_url, public_url=base, run_worker=False)
    engine = db.make_engine(database_url)
    prepare(engine)
    server = uvicorn.Server(uvicorn.Config(create_app(settings, engine=engine), host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    with db.write(engine) as conn:
        org = orgs.create_org(conn, name="Northwind Labs", member_email="team@northwind.example",
                              member_name="Team", sandbox=True)
    server.org = org  # type: ignore[attr-defined]
    return server, base


def _reward_link(base: str, org) -> str:
    headers = {"Authorization": f"Bearer {org.api_key}"}
    with httpx.Client(base_url=f"{base}/api/v2", headers=headers, timeout=30) as http:
        campaign = http.post("/campaigns", json={
            "name": "Quarterly thanks", "description": None, "products": PRODUCTS,
            "webpage_style": {"headline": "Thank you for an amazing quarter!",
                              "message": "Your work on the spring launch made a real difference. "
                                         "Please pick the reward you like best.",
                              "background_color": "#eef2f7", "logo_background_color": "#0f766e"},
            "email_style": {"sender_name": "Northwind Labs People Team", "button_color": "#0f766e"},
        })
        campaign.raise_for_status()
        order = http.post("/orders", json={"payment": {"funding_source_id": "balance"}, "reward": {
            "campaign_id": campaign.json()["campaign"]["id"], "value": {"denomination": 50},
            "recipient": {"name": "Maya", "email": "team@northwind.example"}, "delivery": {"method": "LINK"},
        }})
        assert order.status_code == 200, order.text
    return order.json()["order"]["rewards"][0]["delivery"]["link"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/screenshots", help="directory for the PNG files")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        server, base = _serve(f"sqlite:///{tmp}/screens.sqlite3")
        try:
            link = _reward_link(base, server.org)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                desktop = browser.new_page(viewport={"width": 1280, "height": 800})
                desktop.goto(link)
                desktop.get_by_label("Harbor Coffee Co.").check()
                desktop.screenshot(path=out / "redeem-desktop.png", full_page=True)
                phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
                phone.goto(link)
                phone.screenshot(path=out / "redeem-phone.png", full_page=True)
                phone.get_by_label("Northwind Books").check()
                phone.get_by_role("button", name="Confirm my choice").click()
                phone.wait_for_selector("#code-value")
                phone.screenshot(path=out / "redeem-payout-phone.png", full_page=True)
                browser.close()
        finally:
            server.should_exit = True
    for name in ("redeem-phone.png", "redeem-desktop.png", "redeem-payout-phone.png"):
        print(out / name)


if __name__ == "__main__":
    main()
