"""Fulfillment providers: what a recipient actually receives for the product they chose.

A product's `fulfillment` column names its provider. Each provider answers two questions,
both inside the caller's transaction so that the redemption stays one transaction:
- why_unavailable(): a reason to show the option as unavailable, or None;
- issue(): the payout for one reward (a code and PIN, or a confirmation), or OutOfStock.
  `details` is what the recipient gave for a product that needs it (its recipient_details,
  redemption.recipient: a BankAccount for "us_bank_account"), None for the others. A provider
  must never log it nor return the full numbers in what it issues: the payout row keeps
  only what the page shows ("the checking account ending 6789").

Providers:
- "inventory": codes an operator loaded with `largesse inventory import`. A code is claimed
  with one UPDATE of one row picked by a sub-select; on PostgreSQL the sub-select takes the
  row with FOR UPDATE SKIP LOCKED so concurrent claims pick different rows without waiting,
  on SQLite the transaction already holds the write lock (BEGIN IMMEDIATE). The outer
  `reward_id IS NULL` condition and the unique reward_id column make a double issue impossible.
- "sandbox": generated codes marked TEST-..., worth nothing; only in the sandbox
  environment (in production it would hand out codes that look real and are not).

Inventory in the sandbox: a database that also serves production organizations (docs/api.md,
"Environments") holds its codes for them, so there the sandbox shows inventory products as
unavailable: a sandbox organization's free pre-loaded balance must never take real codes. A
sandbox-only database (a laptop trying `largesse inventory import`) issues its codes as ever.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import Connection, select, update

from largesse.config import Settings
from largesse.money import format_money
from largesse.orgs.models import organizations
from largesse.redemption import inventory
from largesse.redemption.models import inventory_codes
from largesse.timeutil import utcnow

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I to misread
CASH_CATEGORIES = {"ach", "paypal", "venmo", "cash_app", "instant_debit_transfer", "international_bank", "wallet"}


class OutOfStock(Exception):
    """The provider has nothing left to issue; the redemption transaction rolls back."""


class DetailsRequired(Exception):
    """The product pays to details the recipient gives (a bank account) and none were given:
    nothing is paid, the transaction rolls back."""


@dataclass(frozen=True)
class Issued:
    code: str | None = None
    pin: str | None = None
    url: str | None = None
    confirmation: str | None = None


def _group(length: int) -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(length))


class InventoryProvider:
    name = "inventory"

    def why_unavailable(self, conn: Connection, product, settings: Settings) -> str | None:
        if settings.sandbox and _serves_production(conn):
            return "Not available in the sandbox"
        if inventory.card_value(product) is None:  # codes loaded before the import refused them
            return "Not available at the moment"
        available = conn.execute(
            select(inventory_codes.c.id)
            .where(inventory_codes.c.product_id == product.id, inventory_codes.c.issued_at.is_(None))
            .limit(1)
        ).first()
        return None if available else "Out of stock right now"

    def issue(self, conn: Connection, *, reward, product, settings: Settings, details=None) -> Issued:
        if settings.sandbox and _serves_production(conn):
            raise OutOfStock(product.id)
        if inventory.card_value(product) != (reward.denomination_cents, reward.currency_code):
            raise OutOfStock(product.id)  # a code is worth the card's one value, never another (card_value)
        pick = (
            select(inventory_codes.c.id)
            .where(inventory_codes.c.product_id == product.id, inventory_codes.c.issued_at.is_(None))
            .order_by(inventory_codes.c.id)
            .limit(1)
        )
        if conn.dialect.name == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        claimed = conn.execute(
            update(inventory_codes)
            .where(inventory_codes.c.id == pick.scalar_subquery(), inventory_codes.c.reward_id.is_(None))
            .values(reward_id=reward.id, issued_at=utcnow())
            .returning(inventory_codes.c.code, inventory_codes.c.pin)
        ).first()
        if claimed is None:
            raise OutOfStock(product.id)
        return Issued(code=claimed.code, pin=claimed.pin)


class SandboxProvider:
    name = "sandbox"

    def why_unavailable(self, conn: Connection, product, settings: Settings) -> str | None:
        return None if settings.sandbox else "Not available at the moment"

    def issue(self, conn: Connection, *, reward, product, settings: Settings, details=None) -> Issued:
        if not settings.sandbox:
            raise OutOfStock(product.id)
        amount = format_money(reward.denomination_cents, reward.currency_code)
        if product.category == "charity":
            return Issued(confirmation=(
                f"Donation of {amount} to {product.name} made on your behalf; "
                f"confirmation DON-TEST-{_group(4)}-{_group(4)}"))
        if product.category in CASH_CATEGORIES:
            to = f" to {details.describe()}" if details is not None else ""  # the last 4 digits only
            return Issued(confirmation=(
                f"Transfer of {amount} via {product.name}{to} recorded; reference TRF-TEST-{_group(4)}-{_group(4)}"))
        # A virtual prepaid card's number and its 3-digit security code, as its instructions say.
        pin = f"{secrets.randbelow(1_000):03d}" if product.category == "visa_card" else None
        return Issued(code=f"TEST-{_group(4)}-{_group(4)}-{_group(4)}", pin=pin)


PROVIDERS = {provider.name: provider for provider in (InventoryProvider(), SandboxProvider())}


def provider_for(product):
    """The product's provider, or None when it has none (shown as unavailable)."""
    return PROVIDERS.get(product.fulfillment or "")


def _serves_production(conn: Connection) -> bool:
    """Whether the database holds a production organization (its inventory is real)."""
    return conn.execute(select(organizations.c.id).where(organizations.c.environment == "production")
                        .limit(1)).first() is not None
