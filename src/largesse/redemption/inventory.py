"""Operator-loaded codes for the "inventory" provider: import and stock levels.

A file is CSV with a code per line and an optional PIN (`code[,pin]`); a first line
`code,pin` (or `code`) is a header. A code already loaded for the product, or repeated in
the file, is skipped and counted, so importing the same file twice is harmless.
"""

from __future__ import annotations

import csv
import io

from sqlalchemy import Connection, case, func, select

from largesse import db
from largesse.catalog.models import products
from largesse.money import amount_in
from largesse.redemption.models import inventory_codes
from largesse.timeutil import utcnow

MAX_CODE, MAX_PIN = 500, 100


class InventoryError(ValueError):
    pass


def parse_codes(text: str) -> tuple[list[tuple[str, str | None]], int]:
    """(unique (code, pin) rows in file order, duplicates within the file)."""
    rows: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    duplicates = 0
    for number, record in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [cell.strip() for cell in record]
        if not cells or not any(cells):
            continue
        if number == 1 and cells[0].lower() == "code":
            continue
        if len(cells) > 2:
            raise InventoryError(f"line {number}: expected code[,pin], got {len(cells)} columns")
        code, pin = cells[0], (cells[1] if len(cells) == 2 and cells[1] else None)
        if not code:
            raise InventoryError(f"line {number}: empty code")
        if len(code) > MAX_CODE or (pin and len(pin) > MAX_PIN) or "\x00" in code + (pin or ""):
            raise InventoryError(f"line {number}: code or PIN too long or not text")
        if code in seen:
            duplicates += 1
            continue
        seen.add(code)
        rows.append((code, pin))
    return rows, duplicates


def _count(conn: Connection, product_id: str) -> int:
    return conn.execute(
        select(func.count()).select_from(inventory_codes).where(inventory_codes.c.product_id == product_id)
    ).scalar_one()


def card_value(product) -> tuple[int, str] | None:
    """The one value (cents, currency) of a product that inventory can serve: a single SKU whose
    minimum is its maximum. A code carries no value of its own, so a product offered over a range
    or in several currencies would hand any reward the next code, whatever it is worth (a 400 EUR
    reward got a 25 USD card); inventory serves none of those."""
    skus = product.skus or []
    if len(skus) == 1 and skus[0]["min_cents"] == skus[0]["max_cents"]:
        return skus[0]["min_cents"], skus[0]["currency_code"]
    return None


def import_codes(conn: Connection, product_id: str, text: str) -> tuple[int, int, str | None]:
    """Load codes for a product in the caller's transaction: (imported, skipped, fulfillment).
    InventoryError for a product without one fixed value (card_value), which no code could fit."""
    product = conn.execute(select(products.c.id, products.c.fulfillment, products.c.skus)
                           .where(products.c.id == product_id)).first()
    if product is None:
        raise InventoryError(f"no product {product_id}")
    rows, duplicates = parse_codes(text)
    if rows and card_value(product) is None:
        offered = ", ".join(f"{amount_in(s['min_cents'], s['currency_code'])}-"
                            f"{amount_in(s['max_cents'], s['currency_code'])} {s['currency_code']}"
                            for s in product.skus or [])
        raise InventoryError(f"{product_id} is offered at {offered or 'no value'}: a code carries no value of its own, "
                             "so inventory serves only a product of one fixed value in one currency (one SKU whose "
                             "min is its max); make a product per card value")
    before = _count(conn, product_id)
    if rows:
        insert = db.upsert_insert(conn)
        now = utcnow()
        conn.execute(
            insert(inventory_codes).on_conflict_do_nothing(
                index_elements=[inventory_codes.c.product_id, inventory_codes.c.code]),
            [{"product_id": product_id, "code": code, "pin": pin, "imported_at": now} for code, pin in rows],
        )
    imported = _count(conn, product_id) - before
    return imported, duplicates + len(rows) - imported, product.fulfillment


def stock(conn: Connection) -> list[dict]:
    """Per product with codes or the inventory provider: total, issued and available codes."""
    issued = func.sum(case((inventory_codes.c.issued_at.is_not(None), 1), else_=0))
    counts = {
        row.product_id: (row.total, int(row.issued or 0))
        for row in conn.execute(
            select(inventory_codes.c.product_id, func.count().label("total"), issued.label("issued"))
            .group_by(inventory_codes.c.product_id)
        )
    }
    listed = conn.execute(
        select(products.c.id, products.c.name, products.c.fulfillment)
        .where((products.c.fulfillment == "inventory") | products.c.id.in_(list(counts) or [""]))
        .order_by(products.c.id)
    ).all()
    out = []
    for row in listed:
        total, used = counts.get(row.id, (0, 0))
        out.append({"product_id": row.id, "name": row.name, "fulfillment": row.fulfillment,
                    "total": total, "issued": used, "available": total - used})
    return out
