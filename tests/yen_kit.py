"""A sandbox organization whose currency is JPY (a zero-decimal currency) and a JPY product,
for the tests of how amounts are written to recipients (tests/*/test_money_format.py)."""

from __future__ import annotations

import secrets

from largesse import db
from largesse.catalog import service as catalog
from largesse.orgs import service as orgs
from tests.conftest import Org, order_body


def yen_org(engine, base_url: str) -> Org:
    """Its sandbox credit is 500000 hundredths: 5,000 yen."""
    email = f"owner-{secrets.token_hex(4)}@example.com"
    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Yen Corp", member_email=email, member_name="Owner", sandbox=True,
                                  currency_code="JPY")
    return Org(created.organization_id, created.api_key, created.funding_source_id, email, base_url)


def yen_product(engine) -> str:
    """A fresh merchant card sold in JPY, fulfilled by the sandbox."""
    product_id = "PYEN" + secrets.token_hex(5).upper()
    rows = catalog.parse_catalog({"products": [{
        "id": product_id, "name": "Yen Books", "description": "A card in yen.", "category": "merchant_card",
        "disclosure": "No cash value.", "usage_instructions": "Enter the code.", "countries": ["JP"],
        "skus": [{"min": 100, "max": 100000, "currency_code": "JPY"}],
        "images": [{"src": "static/products/PGCNWBOOKS01US.svg", "type": "card"}],
    }]})
    with db.write(engine) as conn:
        catalog.import_rows(conn, rows)
    return product_id


def yen_order_body(email: str, product_id: str, *, yen: int = 5000, method: str = "EMAIL") -> dict:
    body = order_body(email, denomination=yen, products=(product_id,), method=method)
    body["reward"]["value"]["currency_code"] = "JPY"
    return body
