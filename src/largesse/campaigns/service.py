"""Campaigns: reusable templates of products, copy and design."""

from __future__ import annotations

import unicodedata

from sqlalchemy import Connection, select

from largesse import codes, db
from largesse.campaigns.models import campaigns
from largesse.catalog import service as catalog
from largesse.errors import Unprocessable
from largesse.ids import new_id
from largesse.timeutil import utcnow

ALL_FEE_FREE = "ALL_FEE_FREE"
FEE_CHARGED_TO = ("SENDER", "RECIPIENT")
REQUIRED = ("name", "products")
NULLABLE = ("description", "auto_add_product_rule", "webpage_style", "email_style", "reward_expiry_days")


def get(conn: Connection, organization_id: str, campaign_id: str):
    return conn.execute(
        select(campaigns).where(campaigns.c.organization_id == organization_id, campaigns.c.id == campaign_id)
    ).first()


def get_or_404(conn: Connection, organization_id: str, campaign_id: str, *, for_update: bool = False):
    return db.owned_or_404(conn, campaigns, organization_id, campaign_id, "Campaign", for_update=for_update)


def get_many(conn: Connection, organization_id: str, ids) -> dict:
    ids = list(set(ids))
    if not ids:
        return {}
    rows = conn.execute(
        select(campaigns).where(campaigns.c.organization_id == organization_id, campaigns.c.id.in_(ids))
    ).all()
    return {row.id: row for row in rows}


def list_for(conn: Connection, organization_id: str):
    return conn.execute(
        select(campaigns).where(campaigns.c.organization_id == organization_id)
        .order_by(campaigns.c.created_at, campaigns.c.id)
    ).all()


def resolve_products(conn: Connection, product_ids: list[str]) -> tuple[list[str], dict]:
    """Expand ALL_FEE_FREE, drop duplicates (keeping order), 422 for unknown products (an ID
    inside the body points at the property; 404 is for the resource in the path). 422, not 400:
    create_campaign and update_campaign's client decodes the error body of 422 only (API.md §1).
    Returns the IDs and their catalog rows."""
    resolved: list[str] = []
    for pid in product_ids:
        expanded = catalog.fee_free_ids(conn) if pid == ALL_FEE_FREE else [pid]
        resolved.extend(p for p in expanded if p not in resolved)
    known = catalog.get_many(conn, resolved)
    missing = [pid for pid in resolved if pid not in known]
    if missing:
        raise Unprocessable(f"Unknown product {missing[0]}",
                            {"products": [f"unknown product {p}" for p in missing]})
    return resolved, known


def _check_rule(conn: Connection, changes: dict) -> None:
    """fee_charged_to from its list; auto_add_product_rule's countries and currencies known codes
    (API.md §2.2: an unknown one gives 422), stored upper case, each covered by an active product
    (the client's AutoAddProductRule: "requests filtering on a country we don't currently sell
    into are rejected with a 422"). Both checks apply whatever `enabled` says; then a rule with
    `enabled: false` is replaced by None, which clears it (as `null` does): only enabled rules
    are stored, as {"enabled": true} plus the filters given."""
    if changes.get("fee_charged_to") not in (None, *FEE_CHARGED_TO):
        raise Unprocessable("fee_charged_to must be SENDER or RECIPIENT", {"fee_charged_to": ["is not included"]})
    rule = changes.get("auto_add_product_rule")
    if rule is None:  # absent (kept on PUT), or null (cleared)
        return
    coverage = None
    stored = {"enabled": True}
    for key, known, what, where in (("countries", codes.country, "an ISO 3166-1 alpha-2 country code", 0),
                                    ("currencies", codes.currency, "a known currency code", 1)):
        values = rule.get(key)
        if values is None:  # absent or null: the rule matches every value
            continue
        checked = [known(v) for v in values]
        bad = [f"{v!r} is not {what}" for v, code in zip(values, checked, strict=True) if code is None]
        if not bad:
            coverage = coverage or catalog.active_coverage(conn)
            bad = [f"{code!r} is not covered by any active product" for code in dict.fromkeys(checked)
                   if code not in coverage[where]]
        if bad:
            raise Unprocessable(f"auto_add_product_rule.{key}: {bad[0]}", {"auto_add_product_rule": {key: bad}})
        stored[key] = list(dict.fromkeys(checked))
    changes["auto_add_product_rule"] = stored if rule.get("enabled") else None


def _check_fee_free(fee_charged_to: str, products: dict) -> None:
    """API.md §2.2: a RECIPIENT campaign needs at least one fee-free product, checked on the
    campaign as it is saved (a create, or a PUT with the current values of the keys it omits).
    `products`: the campaign's catalog rows by ID."""
    if fee_charged_to != "RECIPIENT":
        return
    if not any(product.fee_free for product in products.values()):
        raise Unprocessable("A campaign with fee_charged_to RECIPIENT needs at least one fee-free product",
                            {"products": ["must include a fee-free product when fee_charged_to is RECIPIENT"]})


def _check_name(values: dict) -> None:
    """A name of spaces, line breaks or invisible format characters (U+200B) names nothing in a
    list or a picker (422, as null)."""
    name = values.get("name")
    if isinstance(name, str) and all(c.isspace() or unicodedata.category(c) == "Cf" for c in name):
        raise Unprocessable("name can't be blank", {"name": ["can't be blank"]})


def create(conn: Connection, organization_id: str, values: dict):
    _check_name(values)
    _check_rule(conn, values)
    products, known = resolve_products(conn, values["products"])
    fee_charged_to = values.get("fee_charged_to") or "SENDER"
    _check_fee_free(fee_charged_to, known)
    now = utcnow()
    row = {
        "id": new_id(), "organization_id": organization_id, "name": values["name"],
        "description": values.get("description"),
        "products": products,
        "fee_charged_to": fee_charged_to,
        "auto_add_product_rule": values.get("auto_add_product_rule"),
        "webpage_style": values.get("webpage_style"), "email_style": values.get("email_style"),
        "reward_expiry_days": values.get("reward_expiry_days"),
        "created_at": now, "updated_at": now,
    }
    conn.execute(campaigns.insert().values(**row))
    return row


def update(conn: Connection, organization_id: str, campaign_id: str, changes: dict):
    """Change the keys given; an absent key keeps its value. `null` clears a nullable key
    (NULLABLE); name and products cannot be null (422, as on create); a null fee_charged_to
    keeps the current value, as a null one on create means the default: the official client
    sends it as null from every UpdateCampaignRequest.from_dict(). The row is locked while it
    is merged (styles keep the keys a concurrent update set)."""
    current = get_or_404(conn, organization_id, campaign_id, for_update=True)
    for key in REQUIRED:
        if key in changes and changes[key] is None:
            raise Unprocessable(f"{key} can't be null", {key: ["can't be null"]})
    changes = {k: v for k, v in changes.items() if v is not None or k in NULLABLE}
    _check_name(changes)
    _check_rule(conn, changes)
    values = {k: v for k, v in changes.items() if k in campaigns.c}
    if "products" in values:
        values["products"], known = resolve_products(conn, values["products"])
        _check_fee_free(values.get("fee_charged_to", current.fee_charged_to), known)
    elif "fee_charged_to" in values:
        _check_fee_free(values["fee_charged_to"], catalog.get_many(conn, current.products))
    for style in ("webpage_style", "email_style"):
        # A style object updates the keys it names and keeps the others.
        if style in values and values[style] is not None:
            values[style] = {**(getattr(current, style) or {}), **values[style]}
    values["updated_at"] = utcnow()
    conn.execute(campaigns.update().where(campaigns.c.id == campaign_id).values(**values))
    return get(conn, organization_id, campaign_id)


def to_wire(row) -> dict:
    get_ = row.get if isinstance(row, dict) else row._mapping.get
    out = {
        "id": get_("id"),
        "name": get_("name"),
        "description": get_("description"),
        "products": list(get_("products") or []),
        "fee_charged_to": get_("fee_charged_to"),
    }
    rule = get_("auto_add_product_rule")
    if rule and rule.get("enabled"):  # a configured rule reads `enabled: true`; a filter not given is left out
        out["auto_add_product_rule"] = {"enabled": True, **{k: rule[k] for k in ("countries", "currencies")
                                                            if rule.get(k) is not None}}
    for key in ("webpage_style", "email_style"):
        if get_(key):
            out[key] = get_(key)
    if get_("reward_expiry_days") is not None:
        out["reward_expiry_days"] = get_("reward_expiry_days")
    return out


# --- auto_add_product_rule -----------------------------------------------------------------

GIFT_CARD_CATEGORY = "merchant_card"


def is_gift_card(product) -> bool:
    """A gift card for auto_add_product_rule: a merchant card without vendor fees (fee_free).
    The client's AutoAddProductRule excludes prepaid cards (visa_card), merchant cards with
    vendor fees and premium options; cash, bank, wallet and charity products are not gift cards."""
    return product["category"] == GIFT_CARD_CATEGORY and bool(product["fee_free"])


def rule_matches(rule, product) -> bool:
    """An enabled rule whose filters (absent: every value) intersect the product's countries
    and currencies."""
    if not rule or not rule.get("enabled"):
        return False
    countries, currencies = rule.get("countries"), rule.get("currencies")
    return ((not countries or not set(countries).isdisjoint(product["countries"]))
            and (not currencies or not set(currencies).isdisjoint(product["currency_codes"])))


def auto_add_products(conn: Connection, activated: list) -> tuple[int, int]:
    """Append the gift cards among `activated` (products the catalog import has just made
    active: mappings with id, category, fee_free, countries, currency_codes) to the products of
    every campaign, of any organization, whose auto_add_product_rule matches them: after the
    products it has, in the order given, never twice; nothing is removed. Reads only the
    campaigns that have a rule (NULL otherwise), locking them against a concurrent PUT.
    Returns (products added, counted per campaign; campaigns changed)."""
    gift_cards = [p for p in activated if is_gift_card(p)]
    if not gift_cards:
        return 0, 0
    rows = conn.execute(
        select(campaigns.c.id, campaigns.c.products, campaigns.c.auto_add_product_rule)
        .where(campaigns.c.auto_add_product_rule.is_not(None)).order_by(campaigns.c.id).with_for_update()
    ).all()
    now = utcnow()
    added = changed = 0
    for row in rows:
        current = list(row.products or [])
        new = [p["id"] for p in gift_cards if p["id"] not in current and rule_matches(row.auto_add_product_rule, p)]
        if new:
            conn.execute(campaigns.update().where(campaigns.c.id == row.id)
                         .values(products=current + new, updated_at=now))
            added += len(new)
            changed += 1
    return added, changed
