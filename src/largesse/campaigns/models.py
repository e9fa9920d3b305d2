from sqlalchemy import JSON, Column, DateTime, ForeignKey, Index, Integer, String, Table, Text

from largesse.db import metadata

campaigns = Table(
    "campaigns", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("description", Text, nullable=True),
    Column("products", JSON, nullable=False),
    Column("fee_charged_to", String(20), nullable=False, default="SENDER"),
    # None is SQL NULL (not the JSON `null`), in every insert and update, copies included: the
    # catalog import reads and locks the rules that are IS NOT NULL (service.auto_add_products).
    Column("auto_add_product_rule", JSON(none_as_null=True), nullable=True),
    Column("webpage_style", JSON, nullable=True),
    Column("email_style", JSON, nullable=True),
    Column("reward_expiry_days", Integer, nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("updated_at", DateTime, nullable=False),
    Index("ix_campaigns_org_created", "organization_id", "created_at"),
)
