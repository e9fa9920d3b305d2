from sqlalchemy import JSON, Boolean, Column, DateTime, String, Table, Text

from largesse.db import metadata

products = Table(
    "products", metadata,
    Column("id", String(20), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("category", String(40), nullable=False),
    Column("subcategory", String(40), nullable=True),
    Column("disclosure", Text, nullable=False, default=""),
    Column("usage_instructions", Text, nullable=True),
    Column("currency_codes", JSON, nullable=False),
    Column("countries", JSON, nullable=False),
    Column("images", JSON, nullable=False),
    # [{"min_cents": int, "max_cents": int, "currency_code": str}]
    Column("skus", JSON, nullable=False),
    Column("fee_free", Boolean, nullable=False, default=True),
    # Fulfillment provider: "sandbox" | "inventory" | None (shown as unavailable).
    Column("fulfillment", String(20), nullable=True),
    # What the recipient must give before the payout (redemption.recipient): "us_bank_account"
    # or None. Migration 0027.
    Column("recipient_details", String(40), nullable=True),
    Column("active", Boolean, nullable=False, default=True),
    Column("created_at", DateTime, nullable=False),
    Column("updated_at", DateTime, nullable=False),
)
