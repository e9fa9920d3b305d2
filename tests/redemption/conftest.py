"""Redemption test helpers: LINK rewards, a browser per session, page clients per fake IP.

Every test talks to the page from its own client address (X-Forwarded-For, which uvicorn
trusts from 127.0.0.1), so the per-IP rate limit of one test never trips another.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil

import httpx

from tests.conftest import order_body

DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')

GIFT_CARD = "PGCNWBOOKS01US"
COFFEE = "PGCHRBRCOF01US"
CHARITY = "PCHOCEANTR01US"
EUR_ONLY = "PGCMSNLVND01FR"


def fake_ip() -> str:
    return str(ipaddress.IPv4Address(0x0A000000 + secrets.randbelow(0xFFFFFF)))


def link_reward(org, *, products=(GIFT_CARD, COFFEE, CHARITY), denomination=25, **extra) -> tuple[str, str]:
    """Order one LINK reward over the API; returns (reward id, redemption link)."""
    with org.http() as http:
        response = http.post("/orders", json=order_body(org.member_email, method="LINK", products=products,
                                                        denomination=denomination, **extra))
    assert response.status_code == 200, response.text
    reward = response.json()["order"]["rewards"][0]
    return reward["id"], reward["delivery"]["link"]


def page_client(ip: str | None = None) -> httpx.Client:
    return httpx.Client(timeout=30, headers={"X-Forwarded-For": ip or fake_ip()})


def csrf_of(html: str) -> str:
    match = CSRF.search(html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def inventory_product(engine, *, codes: list[str], fulfillment: str | None = "inventory") -> str:
    """A fresh catalog product (fulfilled from inventory by default) loaded with codes."""
    from largesse import db
    from largesse.catalog import service as catalog
    from largesse.redemption import inventory

    product_id = "PINV" + secrets.token_hex(5).upper()
    rows = catalog.parse_catalog({"products": [{
        "id": product_id, "name": "Inventory Books", "description": "Real codes from the operator's stock.",
        "category": "merchant_card", "disclosure": "No cash value.", "usage_instructions": "Enter the code.",
        # A 25 USD card (link_reward's default value): a code is worth its product's one value.
        "countries": ["US"], "skus": [{"min": 25, "max": 25, "currency_code": "USD"}],
        "images": [{"src": "static/products/PGCNWBOOKS01US.svg", "type": "card"}], "fulfillment": fulfillment,
    }]})
    with db.write(engine) as conn:
        catalog.import_rows(conn, rows)
        inventory.import_codes(conn, product_id, "\n".join(codes))
    return product_id


def _flag(name: str) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    return None if value == "" else value in ("1", "true", "yes")


def browser_required() -> bool:
    """LARGESSE_REQUIRE_BROWSER=1 (or CI=true, unless LARGESSE_REQUIRE_BROWSER=0): a missing
    browser fails the tests instead of skipping them, as a missing PostgreSQL does."""
    required = _flag("LARGESSE_REQUIRE_BROWSER")
    return bool(_flag("CI")) if required is None else required


def chromium_path() -> tuple[str | None, str]:
    """(executable or None, where it was looked for): LARGESSE_CHROMIUM, else chromium on
    PATH, else /usr/bin/chromium. Always Debian's (or the operator's) build: Playwright
    never downloads one here."""
    configured = os.environ.get("LARGESSE_CHROMIUM", "").strip()
    if configured:
        found = shutil.which(configured)  # an executable path, or a name on PATH
        return found, f"LARGESSE_CHROMIUM={configured}"
    found = shutil.which("chromium") or shutil.which(DEFAULT_CHROMIUM)
    return found, f"`chromium` on PATH or {DEFAULT_CHROMIUM}"


