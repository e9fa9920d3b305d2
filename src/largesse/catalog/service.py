"""The product catalog: shared by every organization, managed by the operator's CLI."""

from __future__ import annotations

import time
from collections.abc import Iterable
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import Connection, bindparam, select

from largesse import codes
from largesse.catalog.models import products
from largesse.ids import ALPHABET
from largesse.money import MoneyError, amount_in, decimals_for, loads_exact, to_cents, to_wire
from largesse.redemption import recipient
from largesse.timeutil import utcnow

CATEGORIES = {"ach", "charity", "instant_debit_transfer", "merchant_card", "paypal", "venmo", "visa_card",
              "cash_app", "international_bank", "wallet"}
SUBCATEGORIES = {"beauty_and_health", "digital_financial_services", "electronics", "entertainment", "fashion",
                 "food_and_drink", "general_merchandise", "grocery_and_supermarkets", "home_and_living",
                 "mobility_and_fuel", "sports_and_outdoor_gear", "travel_and_hospitality"}
FULFILLMENT_PROVIDERS = {"sandbox", "inventory", None}
# What a recipient must give on the redemption page before the product can be paid
# (redemption.recipient); an "ach" product defaults to a US bank account.
DEFAULT_RECIPIENT_DETAILS = {"ach": recipient.US_BANK_ACCOUNT}  # what an ach product asks, unless it says
IMAGE_TYPES = ("card", "logo")  # API.md §5 ImageType: the wire carries no other value


class CatalogError(ValueError):
    pass


_MANY = select(products).where(products.c.id.in_(bindparam("ids", expanding=True)), products.c.active.is_(True))


def get_many(conn: Connection, ids: Iterable[str]) -> dict[str, object]:
    ids = list(set(ids))
    if not ids:
        return {}
    rows = conn.execute(_MANY, {"ids": ids}).all()
    return {row.id: row for row in rows}


# Products change rarely (operator imports), and every order reads them: orders read them
# through this cache. A miss (a new product) always goes to the database; a change to an
# existing product is seen by every process within CACHE_SECONDS.
CACHE_SECONDS = 30.0
_cache: dict[str, tuple[float, object]] = {}


def get_many_cached(conn: Connection, ids: Iterable[str]) -> dict[str, object]:
    now = time.monotonic()
    found, missing = {}, []
    for pid in set(ids):
        hit = _cache.get(pid)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            found[pid] = hit[1]
        else:
            missing.append(pid)
    if missing:
        fresh = get_many(conn, missing)
        for pid in missing:
            if pid in fresh:
                _cache[pid] = (now, fresh[pid])
            else:
                _cache.pop(pid, None)
        found.update(fresh)
    return found


def get(conn: Connection, product_id: str):
    return conn.execute(
        select(products).where(products.c.id == product_id, products.c.active.is_(True))
    ).first()


def list_active(conn: Connection):
    return conn.execute(select(products).where(products.c.active.is_(True)).order_by(products.c.name)).all()


def fee_free_ids(conn: Connection) -> list[str]:
    return list(conn.execute(
        select(products.c.id).where(products.c.active.is_(True), products.c.fee_free.is_(True))
        .order_by(products.c.name)
    ).scalars())


def active_coverage(conn: Connection) -> tuple[set[str], set[str]]:
    """The countries and the currencies of the active products (auto_add_product_rule filters
    must name only these: 422 otherwise)."""
    countries: set[str] = set()
    currencies: set[str] = set()
    for row in conn.execute(select(products.c.countries, products.c.currency_codes)
                            .where(products.c.active.is_(True))):
        countries.update(row.countries)
        currencies.update(row.currency_codes)
    return countries, currencies


def band_for(product, currency_code: str) -> dict | None:
    for sku in product.skus:
        if sku["currency_code"] == currency_code:
            return sku
    return None


def to_wire_product(row, public_url: str) -> dict:
    images = []
    for image in row.images or []:
        src = image["src"]
        if not src.startswith(("http://", "https://", "data:")):
            src = f"{public_url}/{src.lstrip('/')}"
        out = {"src": src, "type": image.get("type", "card")}
        if image.get("content_type"):
            out["content_type"] = image["content_type"]
        images.append(out)
    product = {
        "id": row.id,
        "name": row.name,
        "description": row.description or "",
        "category": row.category,
        "disclosure": row.disclosure or "",
        "currency_codes": list(row.currency_codes),
        "countries": [{"abbr": c} for c in row.countries],
        "images": images,
        "skus": [
            {"min": to_wire(s["min_cents"]), "max": to_wire(s["max_cents"]), "currency_code": s["currency_code"]}
            for s in row.skus
        ],
        "usage_instructions": row.usage_instructions or "",
    }
    if row.subcategory:
        product["subcategory"] = row.subcategory
    return product


# --- import ------------------------------------------------------------------------------

def parse_catalog(document: dict) -> list[dict]:
    """Validate a catalog document ({"products": [...]}) into rows; CatalogError on any problem."""
    items = document.get("products") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise CatalogError('a catalog is a JSON object {"products": [...]}')
    rows, seen = [], set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise CatalogError(f"products[{index}] must be an object, not {type(item).__name__}")
        try:
            rows.append(_parse_product(item))
        except KeyError as exc:
            raise CatalogError(f"products[{index}]: the key {exc} is missing") from exc
        except (TypeError, MoneyError, CatalogError) as exc:
            raise CatalogError(f"products[{index}]: {exc}") from exc
        if rows[-1]["id"] in seen:
            raise CatalogError(f"products[{index}]: duplicate id {rows[-1]['id']}")
        seen.add(rows[-1]["id"])
    return rows


def _parse_product(item: dict) -> dict:
    pid = str(item["id"])
    if not (12 <= len(pid) <= 20 and all(c in ALPHABET for c in pid)):
        raise CatalogError("id must be 12-20 characters of A-Z and 0-9")
    category = item["category"]
    if not isinstance(category, str) or category not in CATEGORIES:
        raise CatalogError(f"unknown category {category!r}")
    subcategory = item.get("subcategory")
    if subcategory is not None and (not isinstance(subcategory, str) or subcategory not in SUBCATEGORIES):
        raise CatalogError(f"unknown subcategory {subcategory!r}")
    skus = []
    if not isinstance(item["skus"], list):
        raise CatalogError("skus must be a list")
    for sku in item["skus"]:
        if not isinstance(sku, dict) or not isinstance(sku.get("currency_code"), str):
            raise CatalogError("each sku needs a currency_code")
        currency = codes.currency(sku["currency_code"])
        if currency is None:
            raise CatalogError(f"{sku['currency_code']!r} is not an ISO 4217 currency code Largesse supports")
        if not all(isinstance(sku.get(k), (int, Decimal)) and not isinstance(sku.get(k), bool)
                   for k in ("min", "max")):
            raise CatalogError("each sku's min and max must be numbers (not strings)")
        decimals = decimals_for(currency)  # whole units for JPY: a band of 10.5 yen is no band
        low, high = to_cents(sku["min"], decimals=decimals), to_cents(sku["max"], decimals=decimals)
        if not 0 < low <= high:
            raise CatalogError("each sku needs 0 < min <= max")
        skus.append({"min_cents": low, "max_cents": high, "currency_code": currency})
    currencies = sorted({s["currency_code"] for s in skus})
    if not skus:
        raise CatalogError("at least one sku (denomination band) is required")
    countries = [codes.country(c) if isinstance(c, str) else None for c in item["countries"]] \
        if isinstance(item["countries"], list) else [None]
    if None in countries:
        raise CatalogError("countries must be a list of ISO 3166 alpha-2 codes")
    if not countries:
        raise CatalogError("at least one country is required")
    images = item.get("images") or []
    if not isinstance(images, list) or not all(
            isinstance(i, dict) and isinstance(i.get("src"), str) and i["src"]
            and i.get("type", "card") in IMAGE_TYPES and isinstance(i.get("content_type") or "", str)
            for i in images):
        raise CatalogError('images must be a list of {"src": str, "type": "card"|"logo"} objects')
    if not isinstance(item["name"], str) or not item["name"].strip() or not 1 <= len(item["name"]) <= 200:
        raise CatalogError("name must be a string of 1-200 characters, not blank")
    for key in ("description", "disclosure", "usage_instructions"):
        if not isinstance(item.get(key) or "", str):
            raise CatalogError(f"{key} must be a string")
    for key in ("fee_free", "active"):  # bool("false") is True: a string would flip the flag
        if not isinstance(item.get(key, True), bool):
            raise CatalogError(f"{key} must be true or false")
    fulfillment = item.get("fulfillment", "sandbox")
    if not isinstance(fulfillment, (str, type(None))) or fulfillment not in FULFILLMENT_PROVIDERS:
        raise CatalogError(f"fulfillment must be one of sandbox, inventory or null, not {fulfillment!r}")
    recipient_details = item.get("recipient_details", DEFAULT_RECIPIENT_DETAILS.get(category))
    if recipient_details is not None and recipient_details not in recipient.KINDS:
        raise CatalogError(f"recipient_details must be {' or '.join(sorted(recipient.KINDS))} or null, "
                           f"not {recipient_details!r}")
    if fulfillment == "inventory" and not (len(skus) == 1 and skus[0]["min_cents"] == skus[0]["max_cents"]):
        # What redemption.inventory.card_value serves: `inventory import` refused the codes of a
        # product this import had taken, and every reward of it waited for codes that never came.
        offered = ", ".join(f"{amount_in(s['min_cents'], s['currency_code'])}-"
                            f"{amount_in(s['max_cents'], s['currency_code'])} {s['currency_code']}" for s in skus)
        raise CatalogError(f"product {pid} has fulfillment inventory but is offered at {offered}: a code carries "
                           "no value of its own, so inventory serves only a product of one fixed value in one "
                           "currency (one SKU whose min is its max); make a product per card value")
    return {
        "id": pid,
        "name": str(item["name"]),
        "description": str(item.get("description") or ""),
        "category": category,
        "subcategory": subcategory,
        "disclosure": str(item.get("disclosure") or ""),
        "usage_instructions": item.get("usage_instructions"),
        "currency_codes": currencies,
        "countries": countries,
        "images": images,
        "skus": skus,
        "fee_free": bool(item.get("fee_free", True)),
        "fulfillment": fulfillment,
        "recipient_details": recipient_details,
        "active": bool(item.get("active", True)),
    }


class ImportResult(NamedTuple):
    created: int
    updated: int
    activated: int  # products new and active, or inactive before and active now
    auto_added: int  # (campaign, product) pairs added by campaigns' auto_add_product_rule
    campaigns: int  # campaigns that received products


def import_catalog(conn: Connection, rows: list[dict]) -> ImportResult:
    """Insert new products and update existing ones by id. The products this activates (new and
    active, or inactive until now and active) are added, in the same transaction, to the campaigns
    whose auto_add_product_rule matches them (campaigns.service.auto_add_products)."""
    from largesse.campaigns import service as campaigns_service  # campaigns.service imports this module

    _cache.clear()
    existing = {pid: active for pid, active in conn.execute(select(products.c.id, products.c.active))}
    now = utcnow()
    created = updated = 0
    activated = []
    for row in rows:
        if row["active"] and not existing.get(row["id"], False):
            activated.append(row)
        if row["id"] in existing:
            conn.execute(products.update().where(products.c.id == row["id"]).values(**row, updated_at=now))
            updated += 1
        else:
            conn.execute(products.insert().values(**row, created_at=now, updated_at=now))
            created += 1
    auto_added, touched = campaigns_service.auto_add_products(conn, activated)
    return ImportResult(created, updated, len(activated), auto_added, touched)


def import_rows(conn: Connection, rows: list[dict]) -> tuple[int, int]:
    """import_catalog; returns (created, updated)."""
    result = import_catalog(conn, rows)
    return result.created, result.updated


def load_file(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8-sig") as handle:  # a UTF-8 BOM (Excel, Notepad) is no error
        text = handle.read()
    try:
        document = loads_exact(text)  # denomination bands exactly as written
    except RecursionError:
        raise CatalogError("the file nests too deeply to be a catalog") from None
    return parse_catalog(document)


def default_catalog() -> list[dict]:
    text = resources.files("largesse.catalog").joinpath("default_catalog.json").read_text(encoding="utf-8")
    return parse_catalog(loads_exact(text))


def ensure_default_catalog(conn: Connection) -> int:
    """Load the shipped catalog into an empty products table (first start); returns rows added."""
    if conn.execute(select(products.c.id).limit(1)).first() is not None:
        return 0
    created, _ = import_rows(conn, default_catalog())
    return created
